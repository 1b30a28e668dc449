"""The grey box's per-target fits for one table (every GPU held out in turn), fitted once and cached
for E2.1 and E2.2 (results/cache/greybox/<dataset>.joblib; each adopts it after checking it was fitted
on exactly its own data and settings)."""
import json
import logging
import time

import joblib
import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime.io import atomic_path
from steptime_lab.experiments.transfer import greybox_cache

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs)
P, inp, ds = snakemake.params, snakemake.input, snakemake.wildcards.dataset
tables = {name: pd.read_parquet(path) for name, path in inp.items()
          if name in ("gemm", "attention_context", "attention_generation", "vidur_mlp")}
with open(inp.gemm_constants) as fh, open(inp.attention) as fa:
    gemm_doc, attn_doc = json.load(fh), json.load(fa)
t0 = time.perf_counter()
grey = greybox_cache.greybox_for(ds, tables, constants=constants, gemm_doc=gemm_doc, attn_doc=attn_doc, fast=P.fast,
                           full_grid=P.full_grid, seed=P.seed, cv_sizes=P.cv_sizes)
doc = grey.fit_all()
for target, (_, info) in sorted(doc["fits"].items()):
    logging.info("%s, target %s: setting %s", ds, target, info["setting"])
logging.info("%s: %d targets fitted in %.1f s", ds, len(doc["fits"]), time.perf_counter() - t0)
with atomic_path(snakemake.output.fits) as tmp:
    joblib.dump(doc, tmp)
