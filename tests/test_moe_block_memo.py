"""moe_step.reuse_block_terms: a grid fit of a host-only engine field reuses the block terms; every number the
same as computing them afresh (speed only)."""
import numpy as np
import pytest

from steptime import moe_step
from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model
from steptime.specs.engines import get_engine
from steptime.step import predict_steps
from steptime.terms.moe import MoEConstants

MODEL, GPU = "qwen3.6-35b-a3b", "b300"


def _steps():
    sid = np.array([0, 0, 1, 1, 1, 2], dtype=np.int64)
    new = np.array([1.0, 300.0, 1.0, 1.0, 700.0, 1.0])
    kv = np.array([900.0, 0.0, 40.0, 2000.0, 100.0, 5.0])
    return sid, new, kv


def _run(engine, c):
    sid, new, kv = _steps()
    return predict_steps(MODEL, GPU, sid, new, kv, 3, tp=2, ep=4, constants=c, engine=engine)


def _same(a, b):
    assert a["total_ms"].tobytes() == b["total_ms"].tobytes()
    assert set(a["terms_ms"]) == set(b["terms_ms"])
    for k in a["terms_ms"]:
        assert np.asarray(a["terms_ms"][k]).tobytes() == np.asarray(b["terms_ms"][k]).tobytes(), k


@pytest.mark.parametrize("field", moe_step.HOST_ONLY_FIELDS)
def test_memo_equals_direct_over_a_host_field_grid(field):
    c = Constants.default()
    base = get_engine("vllm")
    engines = [base.with_fitted(GPU, {field: v}, source="test") for v in (0.0, 17.5, 900.0)]
    direct = [_run(e, c) for e in engines]
    calls = []
    orig = moe_step._block_terms
    try:
        moe_step._block_terms = lambda *a, **k: calls.append(1) or orig(*a, **k)
        with moe_step.reuse_block_terms():
            memo = [_run(e, c) for e in engines]
    finally:
        moe_step._block_terms = orig
    assert len(calls) == 1  # computed once, reused for the other two values
    for d, m in zip(direct, memo):
        _same(d, m)
    assert moe_step._BLOCK_MEMO is None  # the memo ends with the block


def test_memo_does_not_reuse_across_block_inputs():
    """An engine field block_terms reads, or other steps, are not the same call: recomputed, and still equal."""
    c = Constants.default()
    base = get_engine("vllm")
    other = base.with_fitted(GPU, {"t_launch_us": 3.0}, source="test")
    assert moe_step._engine_signature(base) != moe_step._engine_signature(other)
    assert (moe_step._engine_signature(base.with_fitted(GPU, {"hybrid_eager_layer_us": 5.0}, source="t"))
            == moe_step._engine_signature(base.with_fitted(GPU, {"hybrid_eager_layer_us": 9.0}, source="t")))
    sid, new, kv = _steps()
    with moe_step.reuse_block_terms():
        a = _run(base, c)
        b = predict_steps(MODEL, GPU, sid, new * 2, kv, 3, tp=2, ep=4, constants=c, engine=base)
        assert len(moe_step._BLOCK_MEMO) == 2
    _same(a, _run(base, c))
    _same(b, predict_steps(MODEL, GPU, sid, new * 2, kv, 3, tp=2, ep=4, constants=c, engine=base))


def test_memoised_arrays_are_read_only():
    c = Constants.default()
    sid, new, kv = _steps()
    with moe_step.reuse_block_terms():
        out, _, _ = moe_step.block_terms(get_model(MODEL), get_gpu(GPU), sid, new, kv, np.bincount(sid, weights=new),
                                         3, tp=2, ep=4, dtype="bf16", kv_dtype="bf16", constants=c,
                                         mc=MoEConstants.default(), f_clk=None, engine=get_engine("vllm"))
        with pytest.raises(ValueError):
            out["router"][0] = 1.0
