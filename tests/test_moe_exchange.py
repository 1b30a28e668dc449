"""The engine's default expert exchange between attention data-parallel ranks and expert-parallel MoE layers
(specs/engines.yaml moe.exchange; moe_step.block_terms / agrs_time)."""
import dataclasses

import numpy as np
import pytest

from steptime import moe_step
from steptime.calibration import Constants
from steptime.errors import UnsupportedError
from steptime.specs import get_gpu, get_model
from steptime.specs import engines as E
from steptime.step import predict_steps
from steptime.terms import comm
from steptime.terms import moe as M

MODEL, GPU = "qwen3.6-35b-a3b", "b300"


def _with_exchange(engine: str, kind: str) -> E.Engine:
    """A profile configured with another exchange (as a deployment passing --all2all-backend would be)."""
    e = E.get_engine(engine)
    v = E.EngineValue(name="moe_exchange", value=kind, provenance="ASSUMED", source="test: configured")
    return dataclasses.replace(e, values={**e.values, "moe_exchange": v})


def _decode(n, kv=1000.0):
    return np.zeros(n, dtype=np.int64), np.ones(n), np.full(n, kv)


def test_profiles_name_their_default_exchange_with_provenance():
    for name in ("vllm", "vllm-v1-unfused", "vllm-v1-sync"):
        e = E.get_engine(name)
        assert e.moe_exchange() == "allgather_reducescatter", name
        v = e.lookup("moe_exchange")
        assert v.provenance == "DERIVED" and "all2all_backend" in v.source and "parallel.py" in v.source
    for name in ("trtllm", "sglang"):
        assert E.get_engine(name).moe_exchange() == "deepep"
        assert E.get_engine(name).lookup("moe_exchange").provenance == "ASSUMED"
    assert E.get_engine("kernels").moe_exchange() == E.MOE_EXCHANGE_DEFAULT == "deepep"  # absent: today's pricing


def test_an_unknown_exchange_is_refused():
    doc = {"host_terms": False, "moe": {"exchange": {"value": "pplx", "provenance": "ASSUMED", "source": "x"}},
           "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}}}
    with pytest.raises(ValueError, match="moe.exchange 'pplx'"):
        E._parse_engine("bad", doc)
    with pytest.raises(ValueError, match="unknown field moe.backend"):
        E._parse_engine("bad", {**doc, "moe": {"backend": doc["moe"]["exchange"]}})
    with pytest.raises(UnsupportedError, match="unknown MoE expert exchange 'pplx'"):
        predict_steps(MODEL, GPU, *_decode(8), 1, ep=2, engine=_with_exchange("vllm", "pplx"))


def test_agrs_is_an_nccl_allgather_and_reducescatter_on_the_measured_curve():
    g, c, m = get_gpu(GPU), Constants.default(), get_model(MODEL)
    h, E_ = m.hidden_size, m.num_experts
    T = np.array([1.0, 32.0, 512.0, 4096.0])
    for dp in (2, 4, 8):
        got = moe_step.agrs_time(T, h, E_, dp, g, c)
        # each collective at the bus bytes of an all-reduce of half its message, on the GPU's NCCL curve
        want = (comm.allreduce_time(dp * T * (h + E_) * 2 / 2, dp, g, c, impl="nccl")
                + comm.allreduce_time(dp * T * h * 2 / 2, dp, g, c, impl="nccl"))
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert np.all(np.diff(got) > 0)  # grows with the tokens per rank
    assert moe_step.agrs_time(T, h, E_, 1, g, c).tolist() == [0.0] * 4
    # grows with dp at the same tokens per rank: more ranks' states gathered
    t = [float(moe_step.agrs_time(np.array([512.0]), h, E_, dp, g, c)[0]) for dp in (2, 4, 8)]
    assert t[0] < t[1] < t[2]
    # the measured curve, not the datasheet ring law: B300 has its own allreduce_curve
    assert comm._curve(c, g) is not None


def test_vllm_prices_dp_moe_with_agrs_and_a_deepep_profile_keeps_the_a2a():
    g, c, m = get_gpu(GPU), Constants.default(), get_model(MODEL)
    mc = M.MoEConstants.default()
    sid, new, kv = _decode(32)
    for ep in (2, 4, 8):  # tp 1: dp = ep
        r = predict_steps(MODEL, GPU, sid, new, kv, 1, ep=ep, engine="vllm")
        want = m.n_moe_layers * moe_step.agrs_time(np.array([32.0]), m.hidden_size, m.num_experts, ep, g, c)
        assert r["terms_ms"]["moe_a2a"][0] == pytest.approx(want[0] * 1e3, rel=1e-12)
        d = predict_steps(MODEL, GPU, sid, new, kv, 1, ep=ep, engine=_with_exchange("vllm", "deepep"))
        ll = M.a2a_time(np.array([32.0]), m.hidden_size, m.num_experts_per_tok, ep, g, mc, mode="ll")
        assert d["terms_ms"]["moe_a2a"][0] == pytest.approx(m.n_moe_layers * ll[0] * 1e3, rel=1e-12)
        s = predict_steps(MODEL, GPU, sid, new, kv, 1, ep=ep, engine="sglang")
        assert s["terms_ms"]["moe_a2a"][0] == pytest.approx(d["terms_ms"]["moe_a2a"][0], rel=1e-12)
        # nothing else moves with the exchange
        for t in moe_step.BLOCK_TERMS:
            if t != "moe_a2a":
                assert r["terms_ms"][t][0] == d["terms_ms"][t][0], t
    # tp 2, ep 4 (dp 2): sequence-parallel MoE (vLLM ParallelConfig.use_sequence_parallel_moe): each TP rank keeps
    # ceil(T / tp) tokens and the all-gather / reduce-scatter runs over the 4 EP ranks, not the 2-rank DP group
    for T in (32, 33):
        sid, new, kv = _decode(T)
        r = predict_steps(MODEL, GPU, sid, new, kv, 1, tp=2, ep=4, engine="vllm")
        want = m.n_moe_layers * moe_step.agrs_time(np.array([float(-(-T // 2))]), m.hidden_size, m.num_experts, 4,
                                                   g, c)
        assert r["terms_ms"]["moe_a2a"][0] == pytest.approx(want[0] * 1e3, rel=1e-12)
        dp_group = m.n_moe_layers * moe_step.agrs_time(np.array([float(T)]), m.hidden_size, m.num_experts, 2, g, c)
        assert r["terms_ms"]["moe_a2a"][0] > dp_group[0] * 1e3  # a small decode step: latency-bound, more ranks
    sid, new, kv = _decode(32)
    # ep = tp (dp 1): no exchange under either kind
    for eng in ("vllm", _with_exchange("vllm", "deepep")):
        assert predict_steps(MODEL, GPU, sid, new, kv, 1, tp=4, ep=4, engine=eng)["terms_ms"]["moe_a2a"][0] == 0.0


def test_a_host_without_peer_to_peer_prices_the_exchange_on_its_host_path():
    """vllm-no-p2p (PCIe GPUs without peer-to-peer): the all-gather / reduce-scatter are NCCL too, so they take
    the profile's host-memory path (comm.host_path_time at the same bus bytes), slower than the P2P curve; the
    experts and every other term are the same as under vllm."""
    model, gpu = "qwen3-30b-a3b", "rtx-pro-6000"
    g, c, m = get_gpu(gpu), Constants.default(), get_model(model)
    eng = E.get_engine("vllm-no-p2p")
    assert eng.allreduce_impl == "nccl_host"
    h, E_ = m.hidden_size, m.num_experts
    T = np.array([1.0, 64.0, 2048.0])
    got = moe_step.agrs_time(T, h, E_, 2, g, c, eng)
    want = (comm.host_path_time(2 * T * (h + E_) * 2 / 2, 2, g, eng, c)
            + comm.host_path_time(2 * T * h * 2 / 2, 2, g, eng, c))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(got > moe_step.agrs_time(T, h, E_, 2, g, c))
    np.testing.assert_array_equal(moe_step.agrs_time(T, h, E_, 2, g, c, E.get_engine("vllm")),
                                  moe_step.agrs_time(T, h, E_, 2, g, c))
    sid, new, kv = _decode(64)
    a = predict_steps(model, gpu, sid, new, kv, 1, ep=2, engine="vllm")
    b = predict_steps(model, gpu, sid, new, kv, 1, ep=2, engine="vllm-no-p2p")
    assert b["terms_ms"]["moe_a2a"][0] == pytest.approx(m.n_moe_layers * got[1] * 1e3, rel=1e-12)
    assert b["terms_ms"]["moe_a2a"][0] > a["terms_ms"]["moe_a2a"][0]
    for t in moe_step.BLOCK_TERMS:
        if t != "moe_a2a":
            assert a["terms_ms"][t][0] == b["terms_ms"][t][0], t


def test_deepep_prices_a_group_limited_models_normal_mode_at_its_chosen_groups_ranks():
    """moe_step passes the model's n_group / topk_group to terms.moe.a2a_time (E3.2: DeepEP's normal mode sends a
    token once per rank of its chosen groups): DeepSeek-V3's prefill step is priced with them, its decode step (the
    low-latency mode, a copy per expert) as without."""
    m, g = get_model("deepseek-v3"), get_gpu("b200")
    assert (m.n_group, m.topk_group) == (8, 4)
    mc = M.MoEConstants.default()
    for new_tokens, mode in ((512.0, "ht"), (1.0, "ll")):
        sid, new, kv = np.zeros(8, dtype=np.int64), np.full(8, new_tokens), np.full(8, 1000.0)
        r = predict_steps("deepseek-v3", "b200", sid, new, kv, 1, ep=8, engine="sglang")
        T = np.array([8 * new_tokens])
        want = M.a2a_time(T, m.hidden_size, m.num_experts_per_tok, 8, g, mc, mode=mode, n_group=8, topk_group=4)
        assert r["terms_ms"]["moe_a2a"][0] == pytest.approx(m.n_moe_layers * want[0] * 1e3, rel=1e-12), mode
        plain = M.a2a_time(T, m.hidden_size, m.num_experts_per_tok, 8, g, mc, mode=mode)
        assert (want[0] < plain[0]) if mode == "ht" else (want[0] == plain[0])
