"""E2.2 / E2.6: rank GPUs per workload from predictions vs measured tables, tie-aware."""
import json
import logging

import joblib
import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.evaluate.held_out import HeldOut
from steptime_lab.experiments import ranking, transfer
from steptime_lab.results import rule_provenance, write_result


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P, inp = snakemake.params, snakemake.input
g, a, wls, meas = ranking.ranking_inputs(pd.read_parquet(inp.gemm), pd.read_parquet(inp.attention_context),
                                         pd.read_parquet(inp.attention_generation))
logging.info("%d workloads over GPUs %s", len(wls), ranking.GPUS)
gb, ab = joblib.load(inp.gemm_rf), joblib.load(inp.attn_rf)
with open(inp.gemm_constants) as fh, open(inp.attention) as fa:
    attn_doc = json.load(fa)
    hook = HeldOut.for_dataset("ranking", gemm_doc=json.load(fh), attn_doc=attn_doc, base=constants)
attn_reads = {gpu: [tuple(c) for c in v["scoring_excludes"].values()]
              for gpu, v in attn_doc["metrics"]["per_gpu"].items()}
# the grey box per term: corrections fitted on the other GPUs' tables (each GPU held out in turn),
# anchored (where its nested CV says so) on each GPU's readings
grey = (transfer.GreyBox("aic_gemm", g, hook, fast=P.fast, seed=P.seed, cv_sizes=P.cv_sizes),
        transfer.GreyBox("aic_attention", a, hook, fast=P.fast, seed=P.seed, cv_sizes=P.cv_sizes,
                         reading_ids=lambda gpu: attn_reads.get(gpu, [])))
# E2.1's fits (the greybox_fit rule: the same cells, GEMM / attention constants and readings); `adopt`
# refuses them unless this run's training data hash to the same fingerprint
fitted = {d["settings"]["dataset"]: d for d in map(joblib.load, inp.greybox)}
for gbox in grey:
    gbox.adopt(fitted[gbox.dataset])
# the same with shape-only corrections (the same cell gets nearly the same factor on every GPU), set a priori
grey_shared = (transfer.GreyBox("aic_gemm", g, hook, fast=P.fast, seed=P.seed, shared=True, cv_sizes=P.cv_sizes),
               transfer.GreyBox("aic_attention", a, hook, fast=P.fast, seed=P.seed, shared=True, cv_sizes=P.cv_sizes,
                                reading_ids=lambda gpu: attn_reads.get(gpu, [])))
res = ranking.run(g, a, wls, meas, gb, ab, constants_for=hook, grey=grey, grey_shared=grey_shared)
cal_log = {f"ranking|{gpu}": transfer.calibration_summary(hook(gpu)[1], gpu) for gpu in ranking.GPUS}
prov = rule_provenance(snakemake, calibration=cal_log, exclude=("code", "gemm_rf", "attn_rf", "greybox"),
                       script="workflow/scripts/E2_2_ranking.py")
d2 = ranking.ranking_document(res, wls, meas, gb["home_gpu"], P.targets)
write_result(snakemake.output.e2_2, id="E2.2", question=P.q2, metrics=d2["metrics"], claims=d2["claims"],
             provenance=prov)
d6 = ranking.tie_document(res)
write_result(snakemake.output.e2_6, id="E2.6", question=P.q6, metrics=d6["metrics"], claims=d6["claims"],
             provenance=prov)
for eid, d in (("E2.2", d2), ("E2.6", d6)):
    logging.info("%s: %d claims, %d met", eid, len(d["claims"]), sum(bool(c.get("met")) for c in d["claims"]))
ranking.plot_ranking(res, stem(snakemake.output.fig2))
ranking.plot_ties(res, stem(snakemake.output.fig6))
