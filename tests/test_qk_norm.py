"""Qwen3's per-head q/k RMSNorm (issue 19): a named light term, zero and inert for every other model."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model
from steptime.step import LIGHT_TERMS, QK_NORM_LAUNCHES, TERMS, predict_steps
from steptime.terms import light as L

from engine_edits import without_values

SID = np.array([0, 1, 1, 2, 2, 2])
NEW = np.array([1, 1, 512, 1, 1, 2048])
KV = np.array([100, 4000, 0, 30, 900, 0])

# predict_steps' totals at commit 87f8dbb (before this term existed) under the pinned constants of
# tests/fixtures/constants_58ad966 (so a re-settle of the shipped constants does not move them), as float.hex: a
# Llama step must not move. Compared to 1e-12 relative: the overlap law became one function (terms.gemm.smax) after
# 87f8dbb and its algebraically equal form rounds differently in the last bit. The two steps with a prefill were
# re-pinned in wave 23 (helper attnpre) when the prefill attention's SM fill began counting causal work in units of
# the longest query tile (terms.attention.prefill_tiles): +0.002% (A100) to +0.19% (H100) under the same constants;
# the decode-only step did not move.
LLAMA_BEFORE = {
    ("llama-3.1-8b", "h100-sxm", 1): ["0x1.b6ec75119d973p+2", "0x1.f30414866c5acp+3", "0x1.854944ebe2cabp+5"],
    ("llama-3.1-70b", "h100-sxm", 4): ["0x1.f04d1f3d18b7ap+3", "0x1.614f2a2a59b36p+5", "0x1.17c15367ea661p+7"],
    ("llama-3.1-8b", "a100-sxm", 2): ["0x1.b9f7e549d5579p+2", "0x1.a964cb3132fbbp+4", "0x1.51e923e56489ep+6"],
}
PINNED = Path(__file__).parent / "fixtures" / "constants_58ad966"


def test_the_spec_reads_qk_norm():
    assert get_model("qwen3-32b").qk_norm and get_model("qwen3-8b").qk_norm and get_model("qwen3-14b").qk_norm
    assert not get_model("llama-3.1-8b").qk_norm
    assert "qk_norm" in LIGHT_TERMS and "qk_norm" in TERMS


def _flat_floor_vllm(fitted):
    """The default profile (vllm) as it was before engines.yaml light.floor_law (issue 19): E1.1c's flat floors
    (and before fusion.add_rmsnorm: the add and the norm apart)."""
    from steptime.specs.engines import get_engine
    return without_values(get_engine("vllm", fitted=fitted), "light_floor_law", "fuse_add_rmsnorm")


@pytest.mark.parametrize("case", sorted(LLAMA_BEFORE))
def test_a_llama_step_is_bit_identical_to_before(case):
    m, g, tp = case
    assert _flat_floor_vllm(None).light_floor_law() == "flat"
    pinned = Constants.load(PINNED / "defaults.yaml", PINNED / "engine_constants.yaml")  # the pinned file predates
    # the seal line get_engine(fitted=path) requires (wave 42): its fits reach the profile through Constants.load
    r = predict_steps(m, g, SID, NEW, KV, 3, tp=tp, engine=_flat_floor_vllm(pinned.engines), constants=pinned)
    np.testing.assert_allclose(r["total_ms"], [float.fromhex(x) for x in LLAMA_BEFORE[case]], rtol=1e-12, atol=0)
    assert np.all(r["terms_ms"]["qk_norm"] == 0.0)


@pytest.mark.parametrize("tp,engine", [(1, "vllm"), (2, "vllm"), (4, "vllm"), (2, "sglang")])
def test_a_qwen3_step_gains_exactly_the_new_term(tp, engine):
    q = get_model("qwen3-32b")
    off = dataclasses.replace(q, qk_norm=False)
    on_r = predict_steps(q, "h100-sxm", SID, NEW, KV, 3, tp=tp, engine=engine)
    off_r = predict_steps(off, "h100-sxm", SID, NEW, KV, 3, tp=tp, engine=engine)
    assert np.all(off_r["terms_ms"]["qk_norm"] == 0.0)
    # every GPU term is unchanged; qk_norm is the new one; the host-side launch floor counts its 2 launches per layer
    for t in TERMS:
        if t not in ("qk_norm", "dispatch_floor", "host"):
            np.testing.assert_array_equal(on_r["terms_ms"][t], off_r["terms_ms"][t], err_msg=t)
    T = np.bincount(SID, weights=NEW)
    from steptime.specs.engines import get_engine
    law = get_engine(engine).light_floor_law()  # the engine's floor law (engines.yaml light.floor_law)
    expected = q.num_hidden_layers * L.qk_norm_time(T, q, get_gpu("h100-sxm"), tp, floor_law=law) * 1e3
    np.testing.assert_allclose(on_r["terms_ms"]["qk_norm"], expected, rtol=1e-12)
    assert np.all(on_r["terms_ms"]["qk_norm"] > 0)
    np.testing.assert_allclose(on_r["blocks_ms"] - off_r["blocks_ms"], expected, rtol=1e-9)
    # the terms still sum to the total
    np.testing.assert_allclose(sum(on_r["terms_ms"][t] for t in TERMS), on_r["total_ms"], rtol=1e-12)
    # the launch count grows by two per layer: the exposed + hidden dispatch floor never shrinks
    d_on = on_r["terms_ms"]["dispatch_floor"] + on_r["hidden_ms"]["dispatch_floor"]
    d_off = off_r["terms_ms"]["dispatch_floor"] + off_r["hidden_ms"]["dispatch_floor"]
    assert np.all(d_on >= d_off)


def test_the_bytes_are_q_and_k_read_and_written_per_rank():
    q = get_model("qwen3-32b")  # 64 q heads, 8 kv heads, head_dim 128
    bq, bk = L.qk_norm_bytes(100, q, 2)
    assert bq == 2.0 * (2 * 100 * 32 * 128 + 128)
    assert bk == 2.0 * (2 * 100 * 4 * 128 + 128)
    bq16, bk16 = L.qk_norm_bytes(100, q, 16)  # kv heads replicate below one per rank
    assert bk16 == 2.0 * (2 * 100 * 1 * 128 + 128)
    # two launches, each priced with the rmsnorm law
    g = get_gpu("h100-sxm")
    t = L.qk_norm_time(np.array([100.0]), q, g, 2)
    assert t[0] == pytest.approx(L.light_time("rmsnorm", bq, g, floor_law="flat")[()]
                                 + L.light_time("rmsnorm", bk, g, floor_law="flat")[()], rel=1e-12)
    assert QK_NORM_LAUNCHES == 2


def test_a_qwen3_config_json_gets_qk_norm(tmp_path):
    import json
    from steptime.specs import get_model as gm
    cfg = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
           "vocab_size": 151936, "max_position_embeddings": 40960}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert gm(str(p)).qk_norm
    cfg["architectures"] = ["LlamaForCausalLM"]
    p.write_text(json.dumps(cfg))
    assert not gm(str(p)).qk_norm


def test_trtllm_fuses_the_qk_norms_into_its_rope_kernel():
    """engines.yaml fusion.qk_norm_rope (issue 19, trtp): TensorRT-LLM's Qwen3 runs the q/k RMSNorms and RoPE as one
    kernel (fused_qk_norm_rope), so its step has no qk_norm term and no extra launches, every other term as vLLM's
    pricing of the same GPU work; the other profiles keep the two launches; a bad value or field is refused."""
    from steptime.specs import engines as E

    assert E.get_engine("trtllm").fuses_qk_norm_rope()
    assert E.get_engine("trtllm").lookup("fuse_qk_norm_rope").provenance == "DERIVED"
    for name in ("vllm", "vllm-v0", "vllm-v1-sync", "sglang", "kernels"):
        assert not E.get_engine(name).fuses_qk_norm_rope()
    q = get_model("qwen3-32b")
    off = dataclasses.replace(q, qk_norm=False)
    for tp in (1, 2, 8):
        on_r = predict_steps(q, "h100-sxm", SID, NEW, KV, 3, tp=tp, engine="trtllm", dtype="fp8")
        off_r = predict_steps(off, "h100-sxm", SID, NEW, KV, 3, tp=tp, engine="trtllm", dtype="fp8")
        assert np.all(on_r["terms_ms"]["qk_norm"] == 0.0)
        np.testing.assert_array_equal(on_r["total_ms"], off_r["total_ms"])  # as a model without the norms
        np.testing.assert_allclose(on_r["terms_ms"]["rope"], off_r["terms_ms"]["rope"], rtol=0)
        assert np.all(on_r["terms_ms"]["rope"] > 0)  # the fused kernel is still priced, by the rope term
    # vLLM on the same step keeps the two launches (its term > 0)
    v = predict_steps(q, "h100-sxm", SID, NEW, KV, 3, tp=2, engine="vllm")
    assert np.all(v["terms_ms"]["qk_norm"] > 0)
    base = E._doc()["engines"]["trtllm"]
    with pytest.raises(ValueError, match="true or false"):
        E._parse_engine("x", {**base, "fusion": {"qk_norm_rope": {"value": 1, "provenance": "ASSUMED", "source": "t"}}})
    with pytest.raises(ValueError, match="unknown field fusion.qk_rope"):
        E._parse_engine("x", {**base, "fusion": {"qk_rope": {"value": True, "provenance": "ASSUMED", "source": "t"}}})
