"""The grey box's shipped per-term corrections (results/calibration/greybox.npz; `steptime calibration
ship` copies it to src/steptime/calibration/greybox.npz for `steptime predict --explain`)."""
import json
import logging

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime.io import atomic_path
from steptime_lab.evaluate.held_out import HeldOut
from steptime_lab.experiments import transfer
from steptime_lab.experiments.transfer import greybox

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs)
P, inp = snakemake.params, snakemake.input
tables = {name: pd.read_parquet(getattr(inp, name))
          for name in ("gemm", "attention_context", "attention_generation", "vidur_mlp")}
cells = {ds: transfer.load_cells(ds, transfer.step_tps(P.fast, False), tables=tables) for ds in transfer.DATASETS}
with open(inp.gemm_constants) as fh, open(inp.attention) as fa:
    gemm_doc, attn_doc = json.load(fh), json.load(fa)
hooks = {"vidur_step": HeldOut.for_dataset("vidur_step", vidur=tables["vidur_mlp"],
                                           light_gpus=transfer.TARGETS["vidur_step"], gemm_doc=gemm_doc, base=constants),
         "aic_gemm": HeldOut.for_dataset("aic_gemm", gemm_doc=gemm_doc, base=constants),
         "aic_attention": HeldOut.for_dataset("aic_attention", attn_doc=attn_doc, base=constants)}
attn_reads = {g: [tuple(c) for c in v["scoring_excludes"].values()] for g, v in attn_doc["metrics"]["per_gpu"].items()}
reading_ids = {"aic_attention": lambda t: attn_reads.get(t, [])}
greys = {ds: transfer.GreyBox(ds, cells[ds], hooks[ds], fast=P.fast, seed=P.seed, reading_ids=reading_ids.get(ds))
         for ds in transfer.DATASETS}
corr = greybox.shipped_corrections(greys)
for name, m in sorted(corr.meta["models"].items()):
    logging.info("%s (%s): setting %s, LOO CV MAPE %s", name, m["table"], m["setting"], m["loo_cv_mape"])
with atomic_path(snakemake.output.corrections) as tmp:
    corr.save(tmp)
