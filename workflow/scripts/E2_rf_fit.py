"""Fit Vidur's RF and polynomial predictors on one home GPU's table; cache them (joblib)."""
import sys

import joblib

from steptime_lab.experiments import transfer
from steptime.io import atomic_path

P = snakemake.params
ds, gpu = snakemake.wildcards.dataset, snakemake.wildcards.gpu
with open(snakemake.log[0], "w") as log:
    sys.stderr = log
    cells = transfer.load_cells(ds, transfer.step_tps(P.fast, P.full_grid), tables=dict(snakemake.input.items()))
    print(f"{ds} on {gpu}: {len(cells)} cells; grid {'vidur_full' if P.full_grid else 'fast'}, "
          f"{snakemake.threads} threads", file=log)
    bundle = transfer.fit_home(ds, cells, gpu, full_grid=P.full_grid, seed=P.seed, n_jobs=snakemake.threads,
                               fast=P.fast, progress=True)
    print(f"{ds} on {gpu}: {bundle['train_rows']} training cells, fit seconds {bundle['fit_seconds']}", file=log)
with atomic_path(snakemake.output.model) as tmp:  # a killed fit leaves no half-written model
    joblib.dump(bundle, tmp, compress=3)
