"""batched_binning gives the same bin thresholds and the same trees as scikit-learn's own binning."""
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.ensemble._hist_gradient_boosting import binning

from steptime_lab.hgb_binning import batched_binning


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.lognormal(size=n), rng.integers(0, 5, n).astype(float), rng.normal(size=n),
                         np.round(rng.uniform(0, 1000, n))])
    w = rng.uniform(0.0, 2.0, n)
    w[:50] = 0.0
    y = np.log1p(X[:, 0]) + 0.1 * X[:, 1] + rng.normal(scale=0.1, size=n)
    return X, y, w


def test_thresholds_identical():
    X, _, w = _data()
    for j in range(X.shape[1]):
        ref = binning._find_binning_thresholds(X[:, j].copy(), 255, sample_weight=w)
        with batched_binning():
            new = binning._find_binning_thresholds(X[:, j].copy(), 255, sample_weight=w)
        assert np.array_equal(ref, new)
    assert binning._weighted_percentile.__name__ == "_weighted_percentile"  # restored


def test_trees_identical():
    X, y, w = _data(seed=1)
    kw = dict(max_iter=30, max_leaf_nodes=15, min_samples_leaf=20, random_state=3)
    ref = HistGradientBoostingRegressor(**kw).fit(X, y, sample_weight=w).predict(X)
    with batched_binning():
        new = HistGradientBoostingRegressor(**kw).fit(X, y, sample_weight=w).predict(X)
    assert np.array_equal(ref, new)


def test_one_helper_call_per_column(monkeypatch):
    X, _, w = _data(seed=2)
    calls = []
    real = binning._weighted_percentile

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(binning, "_weighted_percentile", counting)
    with batched_binning():
        binning._find_binning_thresholds(X[:, 0].copy(), 255, sample_weight=w)
    assert len(calls) == 0  # not 254: every edge of the column from the vectorised helper


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_percentiles_equal_scikit_learns_per_rank(average, seed):
    from sklearn.utils.stats import _weighted_percentile

    from steptime_lab.hgb_binning import weighted_percentiles

    rng = np.random.default_rng(seed)
    n = 2000
    a = np.round(rng.lognormal(size=n), 1)  # many ties
    w = rng.uniform(0.0, 3.0, n)
    w[rng.integers(0, n, 200)] = 0.0  # zero weights inside tie runs
    ranks = np.concatenate([np.linspace(0, 100, 256)[1:-1], [0.0, 100.0, 50.0]])
    ref = np.array([_weighted_percentile(a, w, p, average=average) for p in ranks])
    got = weighted_percentiles(a, w, ranks, average=average)
    assert np.array_equal(ref, got)
    assert weighted_percentiles(a.astype(np.float32), w, ranks) is None  # declined: scikit-learn's own path
