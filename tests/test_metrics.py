"""Bootstrap intervals: the fast path (int32 draws, blocks of rows) gives the plain path's numbers exactly."""
import numpy as np
import pytest

from steptime_lab.metrics import bootstrap_ci, score


def _plain(v, stat, n_boot, seed):
    idx = np.random.default_rng(seed).integers(0, v.size, size=(n_boot, v.size))
    s = v[idx].mean(axis=1) if stat is np.mean else np.median(v[idx], axis=1)
    return [float(x) for x in np.quantile(s, [(1 - 0.95) / 2, 1 - (1 - 0.95) / 2])]


@pytest.mark.parametrize("n", [1, 2, 7, 333, 4097])
@pytest.mark.parametrize("stat", [np.mean, np.median])
def test_bootstrap_interval_equals_the_plain_resampling(n, stat):
    v = np.random.default_rng(n).lognormal(size=n)
    for n_boot, seed in ((1000, 0), (257, 3)):
        assert bootstrap_ci(v, stat=stat, n_boot=n_boot, seed=seed) == _plain(v, stat, n_boot, seed)


def test_bootstrap_other_statistics_and_empty_input():
    v = np.arange(1.0, 50.0)
    lo, hi = bootstrap_ci(v, stat=np.max, n_boot=200, seed=1)
    assert lo <= hi <= 49.0
    assert all(np.isnan(bootstrap_ci([])))
    assert score([], [])["mape"] is None
