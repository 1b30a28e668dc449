"""Fit Vidur's RF and polynomial predictors on one home GPU's table; cache them (joblib)."""
import sys

import joblib

from steptime.experiments import transfer
from steptime.io import atomic_path

cfg = snakemake.config
fast = bool(cfg.get("fast", True))
full = bool(snakemake.params.full_grid)
ds, gpu = snakemake.wildcards.dataset, snakemake.wildcards.gpu
with open(snakemake.log[0], "w") as log:
    sys.stderr = log
    cells = transfer.load_cells(ds, transfer.step_tps(fast, full))
    bundle = transfer.fit_home(ds, cells, gpu, full_grid=full, seed=int(cfg["seed"]),
                               n_jobs=int(cfg["rf"].get("n_jobs", 1)), fast=fast, progress=True)
    print(f"{ds} on {gpu}: {bundle['train_rows']} training cells, grid "
          f"{'vidur_full' if full else 'fast'}, fit seconds {bundle['fit_seconds']}", file=log)
with atomic_path(snakemake.output.model) as tmp:  # a killed fit leaves no half-written model
    joblib.dump(bundle, tmp, compress=3)
