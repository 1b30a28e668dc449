"""E2.1 grid check: the same home profile with the fast grid and Vidur's full grid, side by side."""
import json
import logging

import joblib

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.evaluate.held_out import HeldOut
from steptime_lab.experiments import calibration_cost, transfer
from steptime.io import write_json
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
fast, full = joblib.load(snakemake.input.fast), joblib.load(snakemake.input.full)
ds = fast["dataset"]
cells = transfer.load_cells(ds, tables={"gemm": snakemake.input.gemm})
with open(snakemake.input.gemm_constants) as fh, open(snakemake.input.attention) as fa:
    hook = HeldOut.for_dataset(ds, gemm_doc=json.load(fh), attn_doc=json.load(fa), base=constants)
doc = transfer.grid_check_document(ds, cells, fast, full, transfer.TARGETS[ds], constants_for=hook,
                                   n_boot=P.n_boot, seed=P.seed)
write_result(snakemake.output.result, id="E2.1-grid", question=P.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=rule_provenance(snakemake, exclude=("code", "fast", "full"),
                                                  script="workflow/scripts/E2_1_grid.py"))
logging.info("E2.1 grid check on %s: %d cells; %d claims", ds, len(cells), len(doc["claims"]))
target = cells[cells["gpu"] == "h100-sxm"].reset_index(drop=True)
write_json(snakemake.output.timing, {
    "note": "wall seconds on this machine, measured side by side in this run; NOT deterministic",
    "fit_seconds": {"fast": fast["fit_seconds"], "full": full["fit_seconds"]},
    "prediction_speed": {grid: calibration_cost.prediction_speed(b["models"]["rf"], target, "h100-sxm")
                         for grid, b in (("fast_grid", fast), ("full_grid", full))},
})
