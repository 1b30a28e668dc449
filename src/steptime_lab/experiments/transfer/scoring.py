"""The calibration contract for E2.1's steptime rows: which cells set a constant for a
target (excluded from its scoring) and the compact record the result keeps."""

from __future__ import annotations

import numpy as np

from steptime_lab.experiments.cells import DECODE_MAX_TOKENS, cell_ids
from steptime.specs import get_gpu

def calibration_summary(cal, target: str) -> dict:
    """Compact calibration record for one scored GPU: the target's own cells that set a
    constant (excluded from scoring), a count of the other cells, and the fold notes."""
    key = get_gpu(target).key
    own, other = {}, 0
    for name, cells in sorted(cal.used.items()):
        mine = sorted(([str(x) for x in c] for c in cells if isinstance(c, tuple) and c and c[0] == key), key=str)
        if mine:
            own[name] = mine
        other += len(cells) - len(mine)
    folds = {k: v for k, v in cal.notes.items() if "@" in k or k.endswith("_constants")}
    return {"target_cells": own, "n_target_cells": sum(len(v) for v in own.values()),
            "n_other_cells": int(other), "held_out": folds}


def _calibration_mask(dataset, cells, gpu, cal):
    """True for cells that set a constant (matched on the full id or on its shape tail)."""
    used = cal.all_cells()
    if not used:
        return np.zeros(len(cells), dtype=bool)
    ids = cell_ids(dataset, cells, gpu)
    tails = {c[1:] for c in used if isinstance(c, tuple) and len(c) > 1 and c[0] == gpu}
    if dataset == "vidur_step":
        # a light-kernel or layer deploy cell (gpu, kind, model, tp, tokens[, op]) takes its step cell out
        tails |= {("vidur_step",) + tuple(c[2:5]) for c in used if isinstance(c, tuple) and len(c) >= 5
                  and c[0] == gpu and c[1] in ("light", "vidur_layer", "vidur_step")}
    return np.array([c in used or c[1:] in tails for c in ids], dtype=bool)


# resample counts kept by a `draws` cache (bytes, all keys together); the oldest key goes first
DRAWS_BUDGET_BYTES = 320_000_000


def _resample_counts(n: int, n_boot: int, seed: int):
    """The bootstrap's resample counts per cell, chunk by chunk ((c x n) arrays, `n_boot` rows in
    all): what `_ci_paired` draws for `n` cells. They depend on (n, n_boot, seed) alone."""
    rng = np.random.default_rng(seed)
    chunk = max(1, int(2_000_000 // n))
    left = n_boot
    while left > 0:
        c = min(chunk, left)
        idx = rng.integers(0, n, size=(c, n))
        yield np.bincount((idx + (np.arange(c) * n)[:, None]).ravel(), minlength=c * n).reshape(c, n)
        left -= c


def _cached_counts(draws: dict, n: int, n_boot: int, seed: int) -> list:
    """`_resample_counts` kept in `draws` (as the smallest unsigned type that holds them exactly),
    within DRAWS_BUDGET_BYTES (least recently used dropped first)."""
    key = (int(n), int(n_boot), int(seed))
    if key in draws:
        draws[key] = draws.pop(key)  # most recently used last
        return draws[key]
    out = []
    for counts in _resample_counts(n, n_boot, seed):
        top = int(counts.max())
        dt = np.uint8 if top <= np.iinfo(np.uint8).max else np.uint16 if top <= np.iinfo(np.uint16).max else counts.dtype
        out.append(counts.astype(dt))
    draws[key] = out
    while sum(a.nbytes for v in draws.values() for a in v) > DRAWS_BUDGET_BYTES and len(draws) > 1:
        draws.pop(next(iter(draws)))
    return out


def _ci_paired(errs: dict, n_boot: int, seed: int, draws: dict | None = None) -> dict:
    """Percentile bootstrap 95 % intervals of the mean APE of several predictors on the SAME
    cells, drawn with the same resamples (paired; seeded; chunked to bound memory). `draws`: a dict
    the caller keeps to reuse the resample counts of every (cells, n_boot, seed) seen before (the
    same numbers: the counts are exact integers in any type, cast to float64 for the product as before)."""
    n = len(next(iter(errs.values()))) if errs else 0
    if n == 0:
        return {k: [None, None] for k in errs}
    keys = list(errs)
    E = np.column_stack([np.asarray(errs[k], dtype=float) for k in keys])  # (n, predictors)
    means = []
    chunks = _cached_counts(draws, n, n_boot, seed) if draws is not None else _resample_counts(n, n_boot, seed)
    for counts in chunks:
        # resample counts per cell (c x n), then every predictor's resampled mean in one product
        means.append(counts @ E / n)
    M = np.vstack(means)
    lo, hi = np.quantile(M, [0.025, 0.975], axis=0)
    return {k: [float(lo[i]), float(hi[i])] for i, k in enumerate(keys)}


def _ci(e, n_boot: int, seed: int):
    """Percentile bootstrap 95 % interval of the mean APE (chunked, seeded)."""
    return _ci_paired({"e": e}, n_boot, seed)["e"]


def score_many(preds: dict, meas, tokens, phase=None, n_boot: int = 1000, seed: int = 0, llm=None,
               draws: dict | None = None) -> dict:
    """MAPE of several predictors over all cells, decode-sized and prefill-sized cells (and
    LLM-shaped cells where `llm` is given), with paired bootstrap intervals (`draws`: see `_ci_paired`)."""
    meas = np.asarray(meas, dtype=float)
    errs = {k: np.abs(np.asarray(p, dtype=float) - meas) / meas for k, p in preds.items()}
    if phase is not None:
        dec = np.asarray(phase) == "decode"
    else:
        dec = np.asarray(tokens, dtype=float) <= DECODE_MAX_TOKENS
    base = {"cells": int(meas.size), "cells_decode": int(dec.sum()), "cells_prefill": int((~dec).sum())}
    subsets = [("all", np.ones_like(dec)), ("decode", dec), ("prefill", ~dec)]
    if llm is not None:
        subsets.append(("llm", np.asarray(llm, dtype=bool)))
        base["cells_llm"] = int(np.sum(llm))
    out = {k: dict(base) for k in preds}
    for name, m in subsets:
        sub = {k: e[m] for k, e in errs.items()}
        cis = _ci_paired(sub, n_boot, seed, draws=draws)
        for k, e in sub.items():
            out[k][f"mape_{name}"] = float(e.mean()) if e.size else None
            out[k][f"mape_{name}_ci"] = cis[k]
            out[k][f"median_ape_{name}"] = float(np.median(e)) if e.size else None
    return out


def score_cells(pred, meas, tokens, phase=None, n_boot: int = 1000, seed: int = 0, llm=None) -> dict:
    """`score_many` for one predictor."""
    return score_many({"p": pred}, meas, tokens, phase, n_boot=n_boot, seed=seed, llm=llm)["p"]
