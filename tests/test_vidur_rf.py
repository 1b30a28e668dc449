"""The Vidur-style profiled baselines: grid, features, fit/predict, coverage."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.baselines import REGISTRY as peers  # the product's peers + the lab's baselines
from steptime_lab.baselines.vidur_rf import FEATURES, GRID_FULL, OperatorModels, vidur_mape


def _table(n=120, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.integers(1, 4096, n)).astype(float)
    return pd.DataFrame({"num_tokens": x, "latency_ms": 0.05 + 1e-4 * x})


def test_full_grid_is_vidurs():
    est = peers.make("vidur_rf", full_grid=True)
    assert est.grid_name == "vidur_full"
    assert est.param_grid() == GRID_FULL
    n = np.prod([len(v) for v in GRID_FULL.values()])
    assert n == 27 and est._cv() == 10
    assert peers.make("vidur_rf").grid_name == "fast"


def test_vidur_features():
    assert FEATURES["linear"] == ["num_tokens"]
    assert FEATURES["attn_decode"] == ["batch_size", "kv_cache_size"]
    assert FEATURES["attn_prefill"] == ["kv_cache_size", "prefill_chunk_size_squared"]


def test_vidur_mape_handles_zero_targets():
    assert vidur_mape([0.0, 2.0], [0.0, 1.0]) == pytest.approx(25.0)
    assert vidur_mape([0.0], [0.1]) == pytest.approx(100.0)


@pytest.mark.parametrize("kind", ["vidur_rf", "vidur_poly"])
def test_fit_predict_interpolates_and_is_seeded(kind):
    d = _table()
    a = peers.make(kind, features=["num_tokens"], seed=3).fit(d, d["latency_ms"])
    b = peers.make(kind, features=["num_tokens"], seed=3).fit(d, d["latency_ms"])
    q = pd.DataFrame({"num_tokens": [100.0, 1000.0, 3000.0]})
    pa, pb = a.predict(q), b.predict(q)
    np.testing.assert_array_equal(pa, pb)
    truth = 0.05 + 1e-4 * q["num_tokens"].to_numpy()
    assert np.max(np.abs(pa - truth) / truth) < 0.1
    assert a.describe()["rows"] == len(d)


def test_rf_cannot_extrapolate_across_scale():
    """A forest predicts within the range it saw: far outside it, it plateaus."""
    d = _table()
    est = peers.make("vidur_rf", features=["num_tokens"], seed=0).fit(d, d["latency_ms"])
    far = est.predict(pd.DataFrame({"num_tokens": [40000.0]}))[0]
    assert far <= d["latency_ms"].max() * 1.0001


def test_errors():
    est = peers.make("vidur_rf", features=["num_tokens"])
    with pytest.raises(RuntimeError):
        est.predict(pd.DataFrame({"num_tokens": [1.0]}))
    d = _table()
    with pytest.raises(KeyError):
        est.fit(d.rename(columns={"num_tokens": "tokens"}), d["latency_ms"])


def test_operator_models_route_and_refuse_unprofiled():
    d = _table()
    long = pd.concat([d.assign(op="a"), d.assign(op="b", latency_ms=d["latency_ms"] * 10)], ignore_index=True)
    om = OperatorModels(kind="vidur_poly", key_cols=("op",), features=("num_tokens",), seed=0).fit(long)
    q = pd.DataFrame({"op": ["a", "b"], "num_tokens": [500.0, 500.0]})
    p = om.predict(q)
    assert p[1] == pytest.approx(10 * p[0], rel=0.05)
    with pytest.raises(KeyError, match="profiled"):
        om.predict(pd.DataFrame({"op": ["c"], "num_tokens": [1.0]}))
    assert om.covers(q).all()
