"""One grey-box fit for E2.1 and E2.2: the pipeline's `greybox_fit` rule builds E2.1's grey box for one
table (`greybox_for`), fits every target (`GreyBox.fit_all`) and caches it (results/cache/greybox/
<dataset>.joblib); E2.1 and E2.2 `adopt` the cache, which refuses it unless their own training data
hash to the same fingerprint. Kept out of the package's __init__ so only that rule's code reads it."""

from __future__ import annotations

from steptime_lab.evaluate.held_out import HeldOut
from steptime_lab.experiments.cells import VIDUR_GPUS, load_cells, step_tps
from steptime_lab.experiments.transfer.greybox import GreyBox
from steptime_lab.experiments.transfer.stack import VidurStack


def attention_reading_ids(attn_doc: dict):
    """A GPU -> the attention cells E1.24 kept out of its scoring (its deploy readings' cells)."""
    reads = {g: [tuple(c) for c in v["scoring_excludes"].values()] for g, v in attn_doc["metrics"]["per_gpu"].items()}
    return lambda gpu: reads.get(gpu, [])


def greybox_for(dataset: str, tables: dict, *, constants, gemm_doc: dict, attn_doc: dict, fast: bool,
                full_grid: bool = False, seed: int = 0, cv_sizes=None) -> GreyBox:
    """E2.1's grey box for one table, built as its script builds it: the cells (`load_cells`, Vidur's
    TP grid from fast / full_grid), each GPU's held-out constants (`HeldOut` for the dataset) and its
    readings; the Vidur step's physics under Vidur's stack factor (`transfer.stack`). The pipeline's `greybox_fit` rule fits every target of it once (results/cache/greybox/
    <dataset>.joblib); E2.1 and E2.2 adopt that cache (`GreyBox.adopt` checks it fits their data). `cv_sizes`: the
    nested CV's tree sizes (config `sizes: greybox_cv`; `GreyBox`)."""
    cells = load_cells(dataset, step_tps(fast, full_grid), tables=tables)
    if dataset == "vidur_step":
        hook = HeldOut.for_dataset(dataset, vidur=tables["vidur_mlp"], light_gpus=VIDUR_GPUS, gemm_doc=gemm_doc,
                                   base=constants)
    else:
        hook = HeldOut.for_dataset(dataset, gemm_doc=gemm_doc, attn_doc=attn_doc, base=constants)
    reading_ids = attention_reading_ids(attn_doc) if dataset == "aic_attention" else (lambda gpu: [])
    stack = VidurStack(tables["vidur_mlp"], VIDUR_GPUS, gemm_doc, constants) if dataset == "vidur_step" else None
    return GreyBox(dataset, cells, hook, fast=fast, seed=seed, reading_ids=reading_ids, stack=stack, cv_sizes=cv_sizes)
