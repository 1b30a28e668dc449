"""Accuracy metrics with bootstrap intervals (errors as fractions: 0.06 = 6%)."""

from __future__ import annotations

import numpy as np


def ape(pred, meas) -> np.ndarray:
    pred = np.asarray(pred, dtype=float)
    meas = np.asarray(meas, dtype=float)
    if np.any(meas <= 0):
        raise ValueError("measured values must be > 0 for percentage errors")
    return np.abs(pred - meas) / meas


def signed_error(pred, meas) -> np.ndarray:
    return (np.asarray(pred, dtype=float) - np.asarray(meas, dtype=float)) / np.asarray(meas, dtype=float)


def mape(pred, meas) -> float:
    return float(np.mean(ape(pred, meas)))


def median_ape(pred, meas) -> float:
    return float(np.median(ape(pred, meas)))


def bootstrap_indices(size: int, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """The (n_boot, size) resample indices bootstrap_ci draws for `size` values under `seed`: every set of `size`
    values scored with the same seed resamples the same positions, so callers scoring many predictors on the same
    cells may draw them once and pass them as bootstrap_ci(..., idx=)."""
    if int(size) < 1 or int(n_boot) < 1:
        raise ValueError(f"bootstrap_indices: size and n_boot must be >= 1 (got {size}, {n_boot})")
    rng = np.random.default_rng(seed)
    # int32 draws are the same stream as int64 below 2^31 (both take numpy's 32-bit bounded path), 6x faster
    return rng.integers(0, size, size=(n_boot, size), dtype=np.int32 if size < 2 ** 31 else np.int64)


def shared_indices(cache: dict, size: int, n_boot: int = 1000, seed: int = 0) -> np.ndarray | None:
    """bootstrap_indices(size, n_boot, seed), drawn once per key in `cache` (a dict the caller owns and drops):
    for scoring several predictors on the same cells. None for no cells (score returns before drawing)."""
    if int(size) == 0:
        return None
    key = (int(size), int(n_boot), seed)
    if key not in cache:
        cache[key] = bootstrap_indices(size, n_boot, seed)
    return cache[key]


def bootstrap_ci(values, stat=np.mean, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                 idx: np.ndarray | None = None) -> list[float]:
    """Percentile bootstrap interval of `stat` over `values` (seeded, deterministic). `idx`: the resample
    indices bootstrap_indices(len(values), n_boot, seed) already drawn (the same numbers; shape checked)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return [float("nan"), float("nan")]
    if idx is None:
        idx = bootstrap_indices(v.size, n_boot, seed)
    elif idx.shape != (n_boot, v.size):
        raise ValueError(f"bootstrap_ci: idx has shape {idx.shape}, expected ({n_boot}, {v.size})")
    if stat is np.mean or stat is np.median:
        # resamples gathered a block of rows at a time (about 2^20 values): each row's statistic is the same
        step = max(1, (1 << 20) // v.size)
        f = (lambda a: a.mean(axis=1)) if stat is np.mean else (lambda a: np.median(a, axis=1))
        stats = np.concatenate([f(v[idx[i:i + step]]) for i in range(0, n_boot, step)])
    else:
        stats = np.array([stat(v[i]) for i in idx])
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return [float(lo), float(hi)]


def score(pred, meas, n_boot: int = 1000, seed: int = 0, idx: np.ndarray | None = None) -> dict:
    """{cells, mape, median_ape, mape_ci} for one set of cells (`idx`: bootstrap_ci's, drawn beforehand)."""
    e = ape(pred, meas)
    if e.size == 0:
        return {"cells": 0, "mape": None, "median_ape": None, "mape_ci": [None, None]}
    return {"cells": int(e.size), "mape": float(e.mean()), "median_ape": float(np.median(e)),
            "mape_ci": bootstrap_ci(e, n_boot=n_boot, seed=seed, idx=idx)}
