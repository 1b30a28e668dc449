"""The serial eager host wait at world size 1 (engines.yaml host.eager_inline_ms; issue 19 items 3 and
6, wave 33, helper eager): priced in an eager step at world size 1 only, moved into the row before by the row
reading where the step is launched early, and read by R2.3 from one eager reading (reading_rule eager_tokens)."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import engines as E
from steptime.specs import get_gpu, get_model
from steptime.step import predict_steps
from steptime.terms import host
from steptime_lab.experiments import wallclock as W

from test_wallclock import _steps


def _vllm(w):
    e = E.get_engine("vllm")
    return e.with_fitted("b300", {"eager_inline_ms": w}, source="test")


def test_eager_inline_time_is_priced_only_above_the_graph_size_at_world_size_1():
    g, c = get_gpu("b300"), Constants.default()
    e = _vllm(7.0)
    cap = e.get("graph_max_tokens", g, c)
    t = host.eager_inline_time([cap, cap + 1, 8192], g, e, c, tp=1)
    assert np.allclose(t, [0.0, 7e-3, 7e-3])
    assert np.allclose(host.eager_inline_time([cap + 1, 8192], g, e, c, tp=2), 0.0)  # workers launch at TP > 1
    # shipped: 0 on a GPU without an eager reading; b300's wall-clock readings (engine_constants.yaml) give it one
    assert np.allclose(host.eager_inline_time([8192], get_gpu("h100-sxm"), E.get_engine("vllm"), c, tp=1), 0.0)
    assert host.eager_inline_time([8192], g, E.get_engine("vllm"), c, tp=1)[0] > 1e-3
    assert np.allclose(host.eager_inline_time([8192], g, E.get_engine("kernels"), c, tp=1), 0.0)  # no host terms
    # an engine without the inline launch (vllm-v1-sync: step() executes then waits) never prices it
    sync = E.get_engine("vllm-v1-sync").with_fitted("b300", {"eager_inline_ms": 7.0}, source="test")
    assert np.allclose(host.eager_inline_time([8192], g, sync, c, tp=1), 0.0)


def test_the_step_adds_the_wait_to_its_host_term_at_tp1_only():
    m, g, c = get_model("qwen3-32b"), get_gpu("b300"), Constants.default()
    sid, new, kv = np.array([0, 1]), np.array([1.0, 1024.0]), np.array([100.0, 0.0])
    for tp, extra in ((1, 9.0), (2, 0.0)):
        a = predict_steps(m, g, sid, new, kv, 2, tp=tp, constants=c, engine=_vllm(0.0))
        b = predict_steps(m, g, sid, new, kv, 2, tp=tp, constants=c, engine=_vllm(9.0))
        assert np.allclose(b["total_ms"] - a["total_ms"], [0.0, extra])
        assert np.allclose(b["terms_ms"]["host"] - a["terms_ms"]["host"], [0.0, extra])
        assert np.allclose(b["eager_inline_ms"], [0.0, extra])


def test_a_hybrid_with_its_fitted_eager_host_time_does_not_price_the_wait_twice():
    """wave 34 (e34w): launch.hybrid_eager_layer_us is fitted on the hybrid's own eager steps at world size > 1, whose
    rows hold the step's whole per-step host time; the world-size-1 wait is not priced on top of it."""
    g, c = get_gpu("b300"), Constants.default()
    e = _vllm(7.0)
    cap = e.get("graph_max_tokens", g, c)
    hyb = e.with_fitted("b300", {"eager_inline_ms": 7.0, "hybrid_eager_layer_us": 500.0}, source="test")
    assert np.allclose(host.eager_inline_time([cap + 1], g, hyb, c, tp=1, gdn_layers=30), 0.0)
    assert np.allclose(host.eager_inline_time([cap + 1], g, hyb, c, tp=1), 7e-3)  # a dense model keeps it
    # a hybrid without the fitted field (its eager floor is counted launches only) keeps the wait
    bare = e.with_fitted("b300", {"eager_inline_ms": 7.0, "hybrid_eager_layer_us": 0.0}, source="test")
    assert np.allclose(host.eager_inline_time([cap + 1], g, bare, c, tp=1, gdn_layers=30), 7e-3)
    # through the step: Qwen3.6-35B-A3B (GDN hybrid) at TP 1, an eager prefill
    m = get_model("qwen3.6-35b-a3b")
    sid, new, kv = np.array([0]), np.array([1024.0]), np.array([0.0])
    a = predict_steps(m, g, sid, new, kv, 1, tp=1, constants=c, engine=hyb)
    b = predict_steps(m, g, sid, new, kv, 1, tp=1, constants=c,
                      engine=hyb.with_fitted("b300", {"eager_inline_ms": 0.0}, source="test"))
    assert np.allclose(a["eager_inline_ms"], 0.0) and np.allclose(a["total_ms"], b["total_ms"])
    d = predict_steps(m, g, sid, new, kv, 1, tp=1, constants=c, engine=bare)
    assert np.allclose(d["eager_inline_ms"], 7.0)


def test_a_negative_eager_inline_ms_is_refused():
    base = {"host_terms": False, "backend": "none",
            "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}}}
    doc = {**base, "host": {"eager_inline_ms": {"value": -1.0, "provenance": "FITTED", "source": "x"}}}
    with pytest.raises(ValueError, match="host.eager_inline_ms .*>= 0"):
        E._parse_engine("bad", doc)


def test_row_reading_moves_the_wait_of_an_early_launched_step_into_the_row_before():
    steps = pd.DataFrame({"gpu": "b300", "model": "m", "engine": "vllm", "tp": 1, "segment": "real",
                          "phase": ["decode", "mixed", "decode", "prefill"], "step": [1, 2, 3, 4],
                          "ctx_tokens": [0, 1024, 0, 2048], "ctx_requests": [0, 1, 0, 1], "ctx_kv_tokens": 0,
                          "decode_requests": [8, 8, 8, 0], "mean_decode_kv_tokens": 100, "latency_ms": 10.0})
    pred = pd.DataFrame({f"{k}_ms": 0.0 for k in W.KINDS}, index=steps.index)
    pred["gemm_ms"] = [20.0, 60.0, 20.0, 90.0]
    pred["dispatch_full_ms"] = [0.5, 5.0, 0.5, 5.0]
    pred["eager_inline_ms"] = [0.0, 9.0, 0.0, 9.0]
    pred["host_ms"] = 0.2 + pred["eager_inline_ms"]
    pred["pred_ms"] = pred[[f"{k}_ms" for k in W.KINDS]].sum(axis=1)
    got = W.inline_row_ms(steps, pred).to_numpy()
    without = W.inline_row_ms(steps, pred.drop(columns="eager_inline_ms")).to_numpy()
    # step 2 (a mixed step holding running decodes) is launched inside row 1: its 9 ms wait ends row 1, not row 2;
    # step 4 (a new request's prompt, no running request) is launched in its own row and keeps its wait
    assert np.allclose(got - without, [9.0, -9.0, 0.0, 0.0])
    # at TP 2 (workers launch; a row is its own step) nothing moves
    two = steps.assign(tp=2)
    assert np.allclose(W.inline_row_ms(two, pred).to_numpy(), pred["pred_ms"].to_numpy())


def test_reading_rule_eager_tokens_reads_the_sweep_prefill_at_the_smallest_tp_in_place_of_the_largest_tp_decode():
    s = _steps()
    r = W.reading_rule(s, eager_tokens=1024)
    picked = s.loc[r.rows]
    assert picked["tp"].tolist() == [1, 1, 1]
    assert picked["phase"].tolist() == ["decode", "decode", "prefill"]
    assert picked["decode_requests"].tolist()[:2] == [1, 32] and picked["ctx_tokens"].tolist()[2] == 1024
    assert [c[3:5] for c in r.cells] == [("decode", 1), ("decode", 32), ("prefill", 1024)]
    # every repeat of the read prefill composition is held out; the largest TP's one-request decodes are scored
    ex = s.loc[r.excluded]
    assert len(ex[(ex["phase"] == "prefill")]) == 3 and not (ex["tp"] == 8).any()
    # the median repeat, as for the decode readings
    reps = s[(s["segment"] == "sweep") & (s["tp"] == 1) & (s["ctx_tokens"] == 1024)]["latency_ms"].sort_values()
    assert s.at[r.rows[2], "latency_ms"] == reps.iloc[1]
    assert W.reading_rule(s).rows == W.reading_rule(s, eager_tokens=0).rows  # 0: the decode rule
    with pytest.raises(W.WallclockError, match="no one-request sweep prefill of 777 tokens"):
        W.reading_rule(s, eager_tokens=777)


def test_reading_rule_eager_slot_names_the_decode_reading_replaced():
    s = _steps()
    r = W.reading_rule(s, eager_tokens=1024, eager_slot="most_requests_decode")
    picked = s.loc[r.rows]
    assert picked["tp"].tolist() == [1, 1, 8]
    assert picked["phase"].tolist() == ["decode", "prefill", "decode"]
    assert picked["decode_requests"].tolist()[::2] == [1, 1]
    with pytest.raises(W.WallclockError, match="unknown eager_slot 'middle'"):
        W.reading_rule(s, eager_tokens=1024, eager_slot="middle")
