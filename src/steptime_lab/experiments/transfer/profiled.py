"""The profiled baselines of E2.1: Vidur's random forest and polynomial regression fitted
on one home GPU's table (a seeded 80 % split), and their predictions on any GPU."""

from __future__ import annotations

import time

import numpy as np

from steptime_lab.baselines import REGISTRY as PEERS  # the product's peers + the Vidur-style ones
from steptime_lab.baselines.vidur_rf import OperatorModels
from steptime_lab.experiments.cells import DATASETS, STEP_OPS

TEST_FRACTION = 0.2
FAST_MAX_ROWS = 8000     # fast mode: training rows per estimator are subsampled above this


def split_home(cells, dataset: str, seed: int, test_fraction: float = TEST_FRACTION):
    """Seeded train/test split of one GPU's cells: boolean mask of test cells."""
    rng = np.random.default_rng(seed)
    return rng.random(len(cells)) < test_fraction


def _long_step(cells):
    """Wide step cells -> long per-operator rows (model, tp, op, num_tokens, latency_ms)."""
    import pandas as pd

    parts = []
    for op in STEP_OPS:
        p = cells[["model", "tp", "num_tokens"]].copy()
        p["op"] = op
        p["latency_ms"] = cells[op].to_numpy()
        p["cell"] = np.arange(len(cells))
        parts.append(p[p["latency_ms"].notna()])
    return pd.concat(parts, ignore_index=True)


ATTN_FEATURES = {
    # Vidur's features, plus the head counts: Vidur fits one model per LLM (heads fixed),
    # the AIC tables sweep head configurations in one table.
    "decode": ["batch_size", "kv_cache_size", "num_heads", "num_kv_heads"],
    "prefill": ["kv_cache_size", "prefill_chunk_size_squared", "num_heads", "num_kv_heads"],
}


def fit_home(dataset: str, cells, home_gpu: str, *, full_grid: bool = False, seed: int = 0, n_jobs: int = 1,
             fast: bool = True, progress: bool = False) -> dict:
    """Fit Vidur's RF and polynomial variants on the home GPU's training split.

    Returns a bundle {models, test_mask, meta, fit_seconds} that `predict_profiled` uses.
    `fit_seconds` is wall time on this machine (not deterministic; kept out of results).
    """
    home = cells[cells["gpu"] == home_gpu].reset_index(drop=True)
    if home.empty:
        raise ValueError(f"{dataset}: no cells for home GPU {home_gpu}")
    test = split_home(home, dataset, seed)
    train = home[~test]
    max_rows = FAST_MAX_ROWS if fast and not full_grid else None
    models, secs, meta = {}, {}, {}
    for kind, tag in (("vidur_rf", "rf"), ("vidur_poly", "poly")):
        t0 = time.perf_counter()
        if dataset == "vidur_step":
            om = OperatorModels(kind=kind, key_cols=("model", "tp", "op"), features=("num_tokens",),
                                full_grid=full_grid, n_jobs=1, seed=seed, max_rows=max_rows, progress=progress)
            models[tag] = om.fit(_long_step(train))
            meta[tag] = om.describe()
        elif dataset == "aic_gemm":
            est = PEERS.make(kind, features=["m", "n", "k"], full_grid=full_grid, n_jobs=n_jobs, seed=seed,
                                max_rows=max_rows)
            models[tag] = est.fit(train, train["latency_ms"])
            meta[tag] = est.describe()
        elif dataset == "aic_attention":
            per = {}
            for phase, feats in ATTN_FEATURES.items():
                sub = train[train["phase"] == phase]
                est = PEERS.make(kind, features=feats, full_grid=full_grid, n_jobs=n_jobs, seed=seed,
                                    max_rows=max_rows)
                per[phase] = est.fit(sub, sub["latency_ms"])
                meta[f"{tag}_{phase}"] = est.describe()
            models[tag] = per
        else:
            raise ValueError(f"unknown dataset {dataset!r} (known: {', '.join(DATASETS)})")
        secs[tag] = time.perf_counter() - t0
    return {"dataset": dataset, "home_gpu": home_gpu, "models": models, "test_mask": test,
            "train_rows": int((~test).sum()), "profiled_rows": int(len(home)), "meta": meta,
            "fit_seconds": secs, "full_grid": bool(full_grid), "fast": bool(fast), "seed": int(seed)}


def predict_profiled(bundle: dict, tag: str, cells, per_op: bool = False):
    """The home model's prediction (ms) on `cells` (any GPU: verbatim). With per_op the
    step dataset returns {op: array} instead of the sum."""
    ds = bundle["dataset"]
    model = bundle["models"][tag]
    if ds == "vidur_step":
        long = _long_step(cells)
        pred = model.predict(long)
        ops = {}
        for op in STEP_OPS:
            sel = (long["op"] == op).to_numpy()
            ops[op] = np.bincount(long["cell"].to_numpy()[sel], weights=pred[sel], minlength=len(cells))
        return ops if per_op else sum(ops.values())
    if ds == "aic_gemm":
        return model.predict(cells)
    out = np.full(len(cells), np.nan)
    for phase, est in model.items():
        mask = (cells["phase"] == phase).to_numpy()
        if mask.any():
            out[mask] = est.predict(cells[mask])
    return out


def bundle_summary(bundle: dict) -> dict:
    """The deterministic part of a fitted bundle (no wall seconds, no estimators)."""
    return {"home_gpu": bundle["home_gpu"], "dataset": bundle["dataset"], "profiled_rows": bundle["profiled_rows"],
            "train_rows": bundle["train_rows"], "test_cells": int(np.sum(bundle["test_mask"])),
            "full_grid": bundle["full_grid"], "fast": bundle["fast"], "seed": bundle["seed"],
            "estimators": bundle["meta"]}
