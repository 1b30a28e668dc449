"""E1.24: attention held out per GPU; the shipped constants ride along for settle_step_constants."""
import json
import logging
from os.path import splitext

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.data import write_parquet
from steptime_lab.experiments import attention as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
cells = E.tidy_cells(pd.read_parquet(snakemake.input.generation), pd.read_parquet(snakemake.input.context))
logging.info("attention cells: %d; fit sample %d per GPU and phase", len(cells), P.fit_sample)
with open(snakemake.input.gemm_constants) as fh:
    gemm_doc = json.load(fh)
r = E.run(cells, gemm_doc, seed=P.seed, n_boot=P.n_boot, fit_sample=P.fit_sample, constants=constants)
doc = E.document(r, cells, P.targets)
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_24_attention.py")
write_result(snakemake.output.result, id="E1.24", question=P.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov,
             extra={"defaults_updates": E.defaults_updates(r["shipped"], cells)})
logging.info("E1.24: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
pred = r["pred"].drop(columns=["cell"])
write_parquet(pred, snakemake.output.pred)
E.plot_accuracy(r, splitext(snakemake.output.fig_acc)[0],
                "E1.24: held-out MAPE of attention per GPU on Llama-like configs (32/64 query heads, 8 KV heads, "
                "head dim 128): bare roofline, calibrated roofline with a floor (three attention deploy cells), steptime with "
                "its per-GPU constants from the GEMM's three readings, and the same with three attention cells instead. "
                "Dashed: target.", targets=P.targets)
E.plot_factors(r, splitext(snakemake.output.fig_fac)[0], "h100-sxm",
               "E1.24: decode attention on h100-sxm (held out): measured vs steptime and the calibrated roofline over "
               "KV length, and steptime's named branches (floor, per-unit cost, KV stream, L2 hit) at 64 requests.")
