"""The residual add fused into the RMSNorm kernel after it (engines.yaml fusion.add_rmsnorm, issue 19): one launch of
4 T h + h bf16 values in place of an add and a norm, for the engines whose source runs it so; the per-operator
tables' bare kernels keep the two; an all-reduce fused with both (fuse_norm_max_bytes) takes them first."""
import numpy as np
import pytest

from steptime.specs import engines as E
from steptime.specs import get_gpu, get_model
from steptime.step import TERMS, predict_steps
from steptime.terms import host
from steptime.terms import light as L

SID = np.array([0, 1, 1, 2, 2, 2])
NEW = np.array([1, 1, 512, 1, 1, 2048])
KV = np.array([100, 4000, 0, 30, 900, 0])


def _without(name: str, field: str = "add_rmsnorm") -> E.Engine:
    """The profile `name` with one fusion field removed (absent = not fused)."""
    doc = E._doc()["engines"][name]
    return E._parse_engine(name, {**doc, "fusion": {k: v for k, v in (doc.get("fusion") or {}).items() if k != field}})


def test_which_profiles_fuse_and_why():
    for name in ("vllm", "vllm-v1-unfused", "vllm-v1-sync", "vllm-no-p2p", "sglang", "trtllm"):
        assert E.get_engine(name).fuses_add_rmsnorm(), name
        assert E.get_engine(name).lookup("fuse_add_rmsnorm").provenance == "DERIVED", name
    assert E.get_engine("vllm-v0").fuses_add_rmsnorm()
    assert E.get_engine("vllm-v0").lookup("fuse_add_rmsnorm").provenance == "ASSUMED"  # 0.4-0.6 not re-read
    assert not E.get_engine("kernels").fuses_add_rmsnorm()  # the tables time the add and the norm apart
    assert not _without("vllm").fuses_add_rmsnorm()


def test_the_fused_launch_is_the_norm_plus_the_adds_traffic_without_its_floor():
    m, g = get_model("llama-3.1-8b"), get_gpu("b300")
    T = np.array([1.0, 64.0, 2048.0, 32768.0])
    h = m.hidden_size
    t = L.add_rmsnorm_time(T, m, g)  # the flat floor law by default, as light_time is given here
    norm = L.light_time("rmsnorm", L.light_bytes("rmsnorm", T, m), g, floor_law="flat")
    add_stream = L.light_time("add", 2.0 * 2 * T * h, g, floor_law="flat") - L.light_time("add", 0.0 * T, g,
                                                                                          floor_law="flat")
    np.testing.assert_allclose(t, norm + add_stream, rtol=1e-12)
    assert np.all(t < norm + L.light_time("add", L.light_bytes("add", T, m), g, floor_law="flat"))  # below two launches
    assert np.all(t > norm)  # but it moves more than the norm alone
    # under the row floor law the norm's floor is a row of the fused kernel: 10 h bytes, not the plain norm's 6 h
    row = L.add_rmsnorm_time(T, m, g, floor_law="row")
    add_row = L.light_time("add", 2.0 * 2 * T * h, g, floor_law="row") - L.light_time("add", 0.0 * T, g,
                                                                                      floor_law="row")
    np.testing.assert_allclose(row, L.light_time("rmsnorm", L.light_bytes("rmsnorm", T, m), g,
                                                 row_bytes=2.0 * 5 * h) + add_row, rtol=1e-12)
    with pytest.raises(ValueError):
        L.add_rmsnorm_time(T, m, g, floor_law="steep")


def test_the_fused_kernel_moves_what_the_two_moved_less_the_sum_it_does_not_reread():
    m = get_model("llama-3.1-8b")
    T = np.array([1.0, 64.0, 2048.0])
    h = m.hidden_size
    np.testing.assert_array_equal(L.add_rmsnorm_bytes(T, m), 2.0 * (4 * T * h + h))
    np.testing.assert_array_equal(L.add_rmsnorm_bytes(T, m),
                                  L.light_bytes("rmsnorm", T, m) + L.light_bytes("add", T, m) - 2.0 * T * h)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_tp1_runs_one_norm_launch_per_add(engine):
    m, g = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    on = predict_steps(m, g, SID, NEW, KV, 3, tp=1, engine=engine)
    off = predict_steps(m, g, SID, NEW, KV, 3, tp=1, engine=_without(engine))
    n_layers = m.num_hidden_layers
    T = np.array([1.0, 513.0, 2050.0])
    assert np.all(on["terms_ms"]["add"] == 0.0) and np.all(off["terms_ms"]["add"] > 0)
    law = L.add_rmsnorm_time(T, m, g, floor_law=E.get_engine(engine).light_floor_law()) * 1e3
    np.testing.assert_allclose(on["terms_ms"]["rmsnorm"], n_layers * L.PER_LAYER["rmsnorm"] * law, rtol=1e-12)
    # one kernel is cheaper than the two it replaces, at every size
    assert np.all(on["terms_ms"]["rmsnorm"] < off["terms_ms"]["rmsnorm"] + off["terms_ms"]["add"])
    assert np.all(on["total_ms"] < off["total_ms"])
    for t in TERMS:  # nothing else moves but the launch floor (and the host time it exposes)
        if t not in ("rmsnorm", "add", "dispatch_floor", "host"):
            np.testing.assert_array_equal(on["terms_ms"][t], off["terms_ms"][t], err_msg=t)
    # the launch count loses the adds: an eager step (no graphs) of the profile pays exactly that many fewer launches
    eng = E.get_engine(engine)
    d_on = host.engine_dispatch_floor(n_layers, T, np.zeros(3, bool), g, eng, fused_kernels=n_layers * 2)
    d_off = host.engine_dispatch_floor(n_layers, T, np.zeros(3, bool), g, eng, fused_kernels=0)
    assert np.all(d_on < d_off)


def test_an_allreduce_fused_with_the_norm_takes_both_first():
    # vLLM at TP 2 on H100 fuses the all-reduce with the add and the norm up to 64 MiB: the add + norm fusion has
    # nothing left to price, the step is the same with or without the field
    m = get_model("llama-3.1-8b")
    on = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=2, engine="vllm")
    off = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=2, engine=_without("vllm"))
    np.testing.assert_array_equal(on["total_ms"], off["total_ms"])
    assert np.all(on["terms_ms"]["add"] == 0.0) and np.all(on["terms_ms"]["rmsnorm"] == 0.0)
    # SGLang does not fuse its all-reduce by default: at TP 2 the add still rides in the norm kernel
    s = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=2, engine="sglang")
    s_off = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=2, engine=_without("sglang"))
    assert np.all(s["terms_ms"]["add"] == 0.0) and np.all(s["total_ms"] < s_off["total_ms"])


def test_a_moe_step_prices_its_light_kernels_under_the_engines_floor_law():
    m = get_model("qwen3-30b-a3b")
    g = get_gpu("b300")
    eng = E.get_engine("vllm")
    assert eng.light_floor_law() == "row"
    r = predict_steps(m, g, SID, NEW, KV, 3, tp=1, engine="vllm")
    T = np.array([1.0, 513.0, 2050.0])
    want = m.num_hidden_layers * L.PER_LAYER["rmsnorm"] * L.add_rmsnorm_time(T, m, g, floor_law="row") * 1e3
    np.testing.assert_allclose(r["terms_ms"]["rmsnorm"], want, rtol=1e-12)
    flat = E._parse_engine("vllm", {**E._doc()["engines"]["vllm"], "light": {}})  # the same profile, flat floors
    assert flat.light_floor_law() == "flat"
    rf = predict_steps(m, g, SID, NEW, KV, 3, tp=1, engine=flat)
    assert np.all(rf["terms_ms"]["rmsnorm"] != r["terms_ms"]["rmsnorm"])


def test_a_moe_step_fuses_too():
    m = "qwen3-30b-a3b"
    on = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=1, engine="vllm")
    off = predict_steps(m, "h100-sxm", SID, NEW, KV, 3, tp=1, engine=_without("vllm"))
    assert np.all(on["terms_ms"]["add"] == 0.0) and np.all(off["terms_ms"]["add"] > 0)
    assert np.all(on["total_ms"] < off["total_ms"])


def test_bad_fusion_and_backend_entries_are_refused():
    base = E._doc()["engines"]["vllm"]
    with pytest.raises(ValueError, match="fusion.add_rmsnorm must be true or false"):
        E._parse_engine("x", {**base, "fusion": {"add_rmsnorm": {"value": "yes", "provenance": "DERIVED", "source": "t"}}})
    with pytest.raises(ValueError, match="unknown field fusion.add_norm"):
        E._parse_engine("x", {**base, "fusion": {"add_norm": {"value": True, "provenance": "DERIVED", "source": "t"}}})
    with pytest.raises(ValueError, match="backend 'tgi' must be one of"):
        E._parse_engine("x", {**base, "backend": "tgi"})
    with pytest.raises(ValueError, match="backend None must be one of"):
        E._parse_engine("x", {k: v for k, v in base.items() if k != "backend"})
    with pytest.raises(ValueError, match="schedule.join_steps must be a whole number"):
        E._parse_engine("x", {**base, "schedule": {"join_steps": {"value": 0, "provenance": "DERIVED", "source": "t"}}})


def test_every_profile_names_its_framework():
    assert {k: e.backend for k, e in E.engine_table().items()} == {
        "vllm": "vllm", "vllm-v1-unfused": "vllm", "vllm-v1-sync": "vllm", "vllm-no-p2p": "vllm", "vllm-v0": "vllm",
        "trtllm": "trtllm", "sglang": "sglang", "kernels": "none"}
    # a fitted copy keeps it
    assert E.get_engine("vllm").with_fitted("b300", {"t_samp_ms": 0.1}, source="t").backend == "vllm"
