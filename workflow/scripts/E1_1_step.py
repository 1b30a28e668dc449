"""E1.1 / E1.1b / E1.20: the whole per-layer Vidur step held out per GPU, residual by term, ablation ladder."""
import json
import logging
from os.path import splitext
from pathlib import Path

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.data import write_parquet
from steptime_lab.experiments import light as LX
from steptime_lab.experiments import step as E
from steptime_lab.regimes import DECODE_MAX_TOKENS, PREFILL_MIN_TOKENS
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
v = pd.read_parquet(snakemake.input.data)
logging.info("Vidur operator table: %d rows, GPUs %s", len(v), sorted(v["gpu"].unique()))
gemm_doc = json.loads(Path(snakemake.input.gemm_constants).read_text())
cells = LX.tidy_cells(v)
r = E.run(v, cells, seed=P.seed, n_boot=P.n_boot, gemm_doc=gemm_doc, constants=constants, gemm_reading="aic",
          stack=True)  # Vidur's measurement-stack factor, fitted on the other Vidur GPUs (wave 32, e11h)
# beyond the three-reading contract (eta_active from the GPU's own Vidur GEMM cells), kept beside in E1.1 as context
r_alt = E.run(v, cells, seed=P.seed, n_boot=P.n_boot, gemm_doc=gemm_doc, constants=constants,
              gemm_reading="vidur_rule")
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_1_step.py")
for key, eid, q in (("e1_1", "E1.1", P.q1), ("e1_1b", "E1.1b", P.q1b), ("e1_20", "E1.20", P.q20)):
    doc = E.document(r, eid, P.targets if eid == "E1.1" else None, alternative=r_alt if eid == "E1.1" else None)
    write_result(getattr(snakemake.output, key), id=eid, question=q, metrics=doc["metrics"], claims=doc["claims"],
                 provenance=prov)
    logging.info("%s: %d claims, %d met", eid, len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
write_parquet(r["pred"].drop(columns=["cell"]), snakemake.output.pred)
E.plot_step(r, splitext(snakemake.output.fig1)[0],
            "E1.1: held-out MAPE of one layer's non-attention operators (Vidur) per model x TP and GPU, "
            f"decode-sized (<= {DECODE_MAX_TOKENS} tokens) and prefill-sized (>= {PREFILL_MIN_TOKENS} tokens) cells; "
            "dashed: targets "
            f"{P.targets['decode']:.0%} / {P.targets['prefill']:.0%}.", targets=P.targets)
E.plot_residual(r, splitext(snakemake.output.fig1b)[0],
                "E1.1b: where the residual lives: each Vidur operator's share of the layer time and its signed "
                "residual (predicted - measured), summed over the cells, per GPU and token split.")
E.plot_ladder(r, splitext(snakemake.output.fig20)[0],
              "E1.20: ablation ladder from a bare roofline, switching on one term at a time (GEMM compute "
              "efficiency, GEMM memory efficiency, GEMM floor, light-kernel bandwidths, light-kernel floors).")
