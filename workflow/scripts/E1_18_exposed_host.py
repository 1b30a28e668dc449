"""E1.18: how much host time each engine exposes, from the small steps where it dominates: FPM decode
steps of a few requests (vLLM V1 on B300) and token times at a small mean batch (ML.ENERGY, silicon)."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
st = p.settings
steps = W.fpm_steps(pd.read_parquet(snakemake.input.fpm))
fpm_ex = W.exposed_host_fpm(steps, st["small_requests"], constants=constants)  # each engine's own GPU part
prompts = {(d, t): v for d, per in st["prompt_tokens"].items() for t, v in per.items()}
rows, _ = W.tpot_table(pd.read_parquet(snakemake.input.mlenergy_v2), pd.read_parquet(snakemake.input.mlenergy_v3),
                       pd.read_parquet(snakemake.input.silicon), prompt_tokens=prompts)
tok = W.run_tpot(W.smallest_batch_rows(rows, st["small_batch"]), n_boot=10, seed=p.seed, constants=constants)
doc = R.exposed_host_document(fpm_ex, R.exposed_host_tokens(tok["pred"]), st["small_requests"], st["small_batch"])
logging.info("E1.18: %d small FPM decode groups, %d token rows at a small batch", len(fpm_ex), len(tok["pred"]))
prov = rule_provenance(snakemake, script="workflow/scripts/E1_18_exposed_host.py")
write_result(snakemake.output.result, id="E1.18", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=prov, extra={"settings": st})
logging.info("E1.18: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
R.plot_exposed_host(doc, splitext(snakemake.output.fig)[0],
             "E1.18: measured wall clock minus the GPU-work part of the engine profile's own prediction of the same "
             "step (exposed host), on the smallest steps "
             "(FPM decode steps of few requests; token times at a small mean batch), per engine, GPU and TP.")
