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


@pytest.mark.parametrize("n", [1, 7, 4097])
def test_shared_bootstrap_indices_give_the_same_interval(n):
    """idx drawn once (bootstrap_indices) and passed in: the interval of drawing them inside, to the bit."""
    from steptime_lab.metrics import bootstrap_indices

    rng = np.random.default_rng(n)
    idx = bootstrap_indices(n, 300, 5)
    for _ in range(3):  # several value sets of one size share one draw
        v = rng.lognormal(size=n)
        assert bootstrap_ci(v, n_boot=300, seed=5, idx=idx) == bootstrap_ci(v, n_boot=300, seed=5)
        m = rng.lognormal(size=n) + 0.1
        assert score(v, m, n_boot=300, seed=5, idx=idx) == score(v, m, n_boot=300, seed=5)
    with pytest.raises(ValueError, match="shape"):
        bootstrap_ci(np.ones(n + 1), n_boot=300, seed=5, idx=idx)
    with pytest.raises(ValueError):
        bootstrap_indices(0, 300, 5)


def test_gemm_records_share_draws_and_keep_order():
    """gemm scoring.records (indices drawn once per size) equals scoring every (gpu, predictor, subset) alone."""
    import pandas as pd

    from steptime_lab.experiments.gemm.scoring import records

    rng = np.random.default_rng(0)
    preds = {}
    for g, n in (("a", 50), ("b", 50), ("c", 31)):
        y = rng.lognormal(size=n) + 0.5
        masks = {"all": np.ones(n, bool), "half": np.arange(n) % 2 == 0, "none": np.zeros(n, bool)}
        preds[g] = {"df": pd.DataFrame({"latency_ms": y}), "masks": masks,
                    "pred": {"p1": y * rng.uniform(0.5, 1.5, n), "p2": {"half": y[masks["half"]] * 1.1}}}
    got = records(preds, n_boot=200, seed=9)
    want = []
    for g, d in preds.items():
        y = d["df"]["latency_ms"].to_numpy(float)
        for pr, p in d["pred"].items():
            for s, mk in d["masks"].items():
                if isinstance(p, dict) and s not in p:
                    continue
                sc = score(p[s] if isinstance(p, dict) else p[mk], y[mk], n_boot=200, seed=9)
                want.append({"family": "gemm", "gpu": g, "predictor": pr, "subset": s, **sc})
    assert got == want


def test_shared_indices_draw_once_per_size_and_match_the_direct_draw():
    from steptime_lab.metrics import bootstrap_indices, shared_indices

    cache = {}
    a = shared_indices(cache, 40, 100, 3)
    assert shared_indices(cache, 40, 100, 3) is a  # the second call reuses the draw
    assert np.array_equal(a, bootstrap_indices(40, 100, 3))
    assert not np.array_equal(shared_indices(cache, 40, 100, 4), a)  # another seed is another draw
    assert shared_indices(cache, 0, 100, 3) is None and len(cache) == 2
    v = np.random.default_rng(1).lognormal(size=40)
    assert bootstrap_ci(v, n_boot=100, seed=3, idx=a) == bootstrap_ci(v, n_boot=100, seed=3)


def test_percentage_errors_are_relative_to_the_measured_value():
    """APE = |pred - meas| / meas (the measured value is the denominator, so a 10% over- and under-prediction
    score the same). Dividing by the prediction survived every test before (mutation review, wave 39)."""
    from steptime_lab.metrics import ape, mape, median_ape, signed_error

    np.testing.assert_allclose(ape([110.0, 90.0, 200.0], [100.0, 100.0, 100.0]), [0.1, 0.1, 1.0], rtol=1e-12)
    assert mape([50.0, 150.0, 100.0], [100.0, 100.0, 100.0]) == pytest.approx(1.0 / 3.0, rel=1e-12)
    assert median_ape([50.0, 130.0, 101.0], [100.0, 100.0, 100.0]) == pytest.approx(0.3, rel=1e-12)
    np.testing.assert_allclose(signed_error([90.0, 120.0], [100.0, 100.0]), [-0.1, 0.2], rtol=1e-12)
    assert score([110.0, 90.0], [100.0, 100.0], n_boot=10)["mape"] == pytest.approx(0.1, rel=1e-12)
    with pytest.raises(ValueError, match="measured values must be > 0"):
        ape([1.0], [0.0])
