"""Faster bin thresholds for scikit-learn's HistGradientBoostingRegressor fitted WITH sample weights.

With weights, scikit-learn finds a feature's bin edges by calling its weighted-percentile helper
once per edge (254 calls per feature, each re-sorting the column): over half of a grey-box fit's
time. `batched_binning()` swaps, for the duration of a `with` block, the helper the binning module
calls for one that computes every edge of a column in ONE call of the same helper (which accepts a
vector of percentile ranks and runs the same per-rank arithmetic on the same sorted column and
weight CDF), then answers the per-edge calls from it. The thresholds, hence the trees, are
bit-identical (tests/test_hgb_binning.py checks it against the unpatched binning); any call that
does not match the standard edge grid falls through to the original helper. If scikit-learn's
binning module does not have the expected name, nothing is patched.
"""

from __future__ import annotations

import contextlib

import numpy as np


def weighted_percentiles(array, sample_weight, ranks, average: bool = False):
    """scikit-learn's `_weighted_percentile` (1.9) of a 1-D float64 column at a vector of ranks, its per-rank loop
    done as array operations: the same unstable argsort of the column as an (n, 1) array, the same weight CDF, the
    same searchsorted / clip / half-way rule per rank, element for element, so the same floats. None (the caller
    falls back to scikit-learn) for anything else: 2-D, another dtype, NaN, all-zero weights."""
    a = np.asarray(array)
    w = np.asarray(sample_weight)
    r = np.asarray(ranks, dtype=np.float64)
    if (a.ndim != 1 or a.dtype != np.float64 or w.shape != a.shape or w.dtype != np.float64 or r.ndim != 1
            or a.size == 0 or np.isnan(a).any() or np.all(w == 0)):
        return None
    sorted_idx = np.argsort(a.reshape(-1, 1), axis=0)[:, 0]
    cdf = np.cumsum(w[sorted_idx])
    adj = r / 100 * cdf[-1]
    zero = adj == 0
    adj[zero] = np.nextafter(adj[zero], adj[zero] + 1)
    max_idx = a.size - 1
    idx = np.clip(np.searchsorted(cdf, adj), 0, max_idx)
    at = sorted_idx[idx]
    if not average:
        return a[at]
    above = (cdf[idx] - adj) > np.finfo(np.float64).eps
    nxt = np.clip(idx + 1, 0, max_idx)
    at1 = sorted_idx[nxt]
    for j in np.flatnonzero(w[at1] == 0):  # the next value has no weight: the next one that adds to the CDF
        k = np.searchsorted(cdf, cdf[idx[j]], side="right")
        at1[j] = sorted_idx[idx[j] if k > max_idx else k]
    return np.where(above, a[at], (a[at] + a[at1]) / 2)


@contextlib.contextmanager
def batched_binning(max_bins: int = 255):
    """Within the block, scikit-learn's binning takes every weighted edge of a column from one call
    (`weighted_percentiles`, or scikit-learn's helper with the vector of ranks where that one declines)."""
    try:
        from sklearn.ensemble._hist_gradient_boosting import binning
    except ImportError:  # pragma: no cover
        yield
        return
    orig = getattr(binning, "_weighted_percentile", None)
    if orig is None:  # pragma: no cover - another scikit-learn layout: leave it alone
        yield
        return
    grid = np.linspace(0, 100, num=max_bins + 1)[1:-1]
    pos = {float(p): i for i, p in enumerate(grid)}
    memo: dict = {}  # the last column: (array, weights, all edges)

    def batched(array, sample_weight, percentile_rank=50, average=False, xp=None):
        i = pos.get(float(percentile_rank)) if np.ndim(percentile_rank) == 0 else None
        if i is None or xp is not None or np.ndim(array) != 1:
            return orig(array, sample_weight, percentile_rank, average=average, xp=xp)
        hit = memo.get("last")
        if hit is None or hit[0] is not array or hit[1] is not sample_weight or hit[2] != average:
            edges = weighted_percentiles(array, sample_weight, grid, average=average)
            if edges is None:  # a case the vectorised helper does not take: scikit-learn's own, every rank at once
                edges = orig(array, sample_weight, grid, average=average)
            hit = memo["last"] = (array, sample_weight, average, edges)
        return hit[3][i]

    binning._weighted_percentile = batched
    try:
        yield
    finally:
        binning._weighted_percentile = orig
        memo.clear()
