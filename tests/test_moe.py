"""Mixture-of-experts models (issue 20): specs, terms, the step and the CLI."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from steptime.calibration import Constants
from steptime.errors import (InputError, MemoryFitError, ModelConfigError, SteptimeError, UnsupportedError,
                             UnsupportedModelError)
from steptime.specs import get_gpu, get_model, model_keys, moe_model_keys
from steptime.specs.engines import get_engine
from steptime.step import PROJ_TERMS as PROJ, predict_step, predict_steps
from steptime.terms import moe as M

FIXTURE = Path(__file__).parent / "fixtures" / "dense_predictions_pre_moe.json"


# --------------------------------------------------------------------------- dense untouched
def _same(a, b, rel: float = 1e-12) -> bool:
    """Equal structure, equal labels, and numbers equal to the last few bits: the overlap law (terms.gemm.smax)
    became the one function of every term after the fixture was written, and its algebraically equal form
    rounds differently in the last bit or two (1e-16 relative), nothing more."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and type(a) is not bool
                and abs(a - b) <= rel * max(abs(a), abs(b)))
    return a == b


def test_dense_predictions_unchanged():
    """Every dense prediction is bit-for-bit what the code before MoE support gave (fixture written by the
    pre-MoE commit 58ad966 over 4 models x 4 GPUs x 3 TP x 2 dtypes x 3 batches), with the constants that
    commit shipped (tests/fixtures/constants_58ad966: the settled constants have been re-shipped since, so the
    shipped ones would compare code and constants at once)."""
    fix = Path(__file__).parent / "fixtures" / "constants_58ad966"
    constants = Constants.load(fix / "defaults.yaml", fix / "engine_constants.yaml")
    cases = json.loads(FIXTURE.read_text())
    assert len(cases) > 200
    for c in cases:
        model, gpu, tp, dtype, dec, pre = c["args"]
        if "error" in c:
            with pytest.raises(Exception) as e:
                predict_step(model, gpu, decode=dec, prefill=pre, tp=tp, dtype=dtype, check_memory=False,
                             constants=constants)
            assert type(e.value).__name__ == c["error"]
            continue
        # at TP > 1 the default vLLM profile now fuses the residual add + RMSNorm into the all-reduce (issue 19,
        # vLLM >= 0.18): the fixture's era is the profile without that fusion, vllm-v1-unfused (same fields else)
        engine = "vllm" if tp == 1 else "vllm-v1-unfused"
        # fp8: the fixture's era priced no activation-quantise kernels before the fp8 GEMMs (issue 19, engines.yaml
        # precision.fp8_act_quant_passes): the same profile without that field (every other field and fit kept)
        eng = get_engine(engine, fitted=constants.engines)
        # and none fused the residual add into the RMSNorm kernel (issue 19, engines.yaml fusion.add_rmsnorm)
        eng = dataclasses.replace(eng, values={k: v for k, v in eng.values.items()
                                               if k not in ("fp8_act_quant_passes", "fuse_add_rmsnorm",
                                                            "light_floor_law")})  # nor the row floor law
        r = predict_step(model, gpu, decode=[tuple(x) for x in dec], prefill=[tuple(x) for x in pre], tp=tp,
                         dtype=dtype, check_memory=False, constants=constants, engine=eng).to_dict()
        r.pop("uncalibrated")  # a label added since (issue 21), not a prediction
        for fs in r["factors"].values():  # the per-CTA stream, a factor added since (issue 19, wave 9): the
            assert fs.pop("t_cta", 0.0) == 0.0  # pinned constants carry no cta_stream_us_mb, so it is off
        assert r.pop("engine") == engine
        # the qk_norm light term, added since (issue 19): zero for these models (none has models.yaml qk_norm)
        assert r["terms_ms"].pop("qk_norm") == 0.0 and r["bound"].pop("qk_norm") == "memory"
        want = json.loads(json.dumps(c["result"]))
        assert want.pop("engine") == "vllm"
        got = json.loads(json.dumps(r, sort_keys=True))
        # two laws changed on purpose since (issue 19, wave 23), each leaving every other number bit-for-bit: the
        # prefill attention's SM fill follows the critical path (terms/attention.py prefill_tiles), and vLLM's fp8
        # projections run vLLM's own CUTLASS tile dispatch (terms/precision.py fp8_launch). Those terms, their
        # factors, their bound labels and the total are left out; everything else must still equal the pre-MoE fixture
        moved = (["attn_prefill"] if pre else []) + (list(PROJ) if dtype == "fp8" else [])
        for d in (got, want):
            d.pop("total_ms")
            for t in moved:
                d["terms_ms"].pop(t)
                d["factors"].pop(t, None)
                d["bound"].pop(t)
        assert _same(got, want), c["args"]
    assert "deepseek-v3" not in model_keys()  # dense listings unchanged: MoE models have their own


# --------------------------------------------------------------------------- specs
@pytest.mark.parametrize("key,total,active", [("deepseek-v3", 671e9, 37e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9),
                                              ("qwen3-235b-a22b", 235e9, 22e9), ("mixtral-8x7b", 46.7e9, 12.9e9),
                                              ("gpt-oss-120b", 117e9, None), ("kimi-k2", 1.03e12, 32e9)])
def test_published_parameter_counts(key, total, active):
    m = get_model(key)
    assert m.n_params() == pytest.approx(total, rel=0.01)
    if active:
        assert m.n_active_params() == pytest.approx(active, rel=0.04)


def test_aliases_and_listing():
    assert get_model("deepseek-ai/DeepSeek-R1").key == "deepseek-v3"
    assert get_model("Qwen/Qwen3-30B-A3B-FP8").key == "qwen3-30b-a3b"
    assert set(moe_model_keys()) >= {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
                                     "gpt-oss-120b", "mixtral-8x7b"}
    m = get_model("gpt-oss-20b")
    assert (m.sliding_window, m.sliding_layers_every, m.attention) == (128, 2, "gqa")
    d = get_model("deepseek-v3")
    assert d.attention == "mla" and d.kv_elems_per_token_layer(8) == 576 and d.n_moe_layers == 58


def _qwen_cfg(**kw):
    m = get_model("qwen3-30b-a3b")
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": m.hidden_size,
           "num_hidden_layers": m.num_hidden_layers, "num_attention_heads": m.num_attention_heads,
           "num_key_value_heads": m.num_key_value_heads, "head_dim": m.head_dim,
           "intermediate_size": m.intermediate_size, "moe_intermediate_size": m.moe_intermediate_size,
           "num_experts": m.num_experts, "num_experts_per_tok": m.num_experts_per_tok, "mlp_only_layers": [],
           "decoder_sparse_step": 1, "vocab_size": m.vocab_size, "max_position_embeddings": 40960,
           "tie_word_embeddings": False}
    cfg.update(kw)
    return cfg


def test_moe_config_path_accepted(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_qwen_cfg()))
    m = get_model(str(p))
    assert m.is_moe and m.n_params() == get_model("qwen3-30b-a3b").n_params()


@pytest.mark.parametrize("kw,needle", [
    ({"layer_types": ["linear_attention", "full_attention"]}, "linear-attention layers"),
    ({"decoder_sparse_step": 0.5}, "MoE layer step"),
    ({"mlp_only_layers": [3]}, "dense layers at arbitrary positions"),
    ({"index_topk": 2048}, "sparse-indexer attention"),
    ({"architectures": ["JambaForCausalLM"]}, "'JambaForCausalLM': steptime cannot represent"),
    ({"num_experts_per_tok": 500}, "between 1 and num_experts"),
])
def test_unrepresentable_moe_refused_naming_what(tmp_path, kw, needle):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_qwen_cfg(**kw)))
    with pytest.raises(ModelConfigError) as e:
        get_model(str(p))
    assert needle in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- terms
def test_experts_touched():
    assert M.experts_touched(1, 128, 8) == pytest.approx(8)
    assert M.experts_touched(10000, 128, 8) == pytest.approx(128)
    assert M.experts_touched(16, 128, 8) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 16))
    assert M.experts_touched(16, 128, 8, "balanced") == 128 and M.experts_touched(4, 128, 8, "balanced") == 32
    with pytest.raises(ValueError):
        M.experts_touched(4, 128, 8, "zipf")


def test_routed_experts_law_shape():
    from steptime.specs import get_gpu

    mc = M.MoEConstants.default()
    g = get_gpu("h100")
    T = np.array([1, 4, 16, 64, 256, 4096, 16384])
    r = M.routed_experts_time(T, 4096, 1536, 8, 128, g, mc, dtype="bf16")
    assert np.all(np.diff(r["t"]) > 0)
    assert not r["compute_bound"][0] and r["compute_bound"][-1]
    # EP shards the experts: fewer weight bytes per GPU, less time at small batches
    r8 = M.routed_experts_time(T, 4096, 1536, 8, 128, g, mc, ep=8, dtype="bf16")
    assert np.all(r8["weight_bytes"] < r["weight_bytes"]) and r8["t"][2] < r["t"][2]


def test_routed_experts_row_tile_from_the_law():
    """Each touched expert's rows are padded to the law's `tile_m` (TILE_M where the law has none): at 20 rows per
    expert a 128-row tile computes 128 padded rows, a 16-row tile 32; E3.1's fit picks the tiling among its
    choices."""
    from steptime.specs import get_gpu
    from steptime_lab.experiments import moe as E

    g = get_gpu("h100")
    base = M.MoEConstants.default()
    T = 20 * 128 // 8  # balanced routing: 20 rows on each of 128 experts

    def t_c(tile):
        mc = dataclasses.replace(base, values={**base.values, "tile_m:bf16": float(tile)}) if tile else base
        return M.routed_experts_time(T, 4096, 1536, 8, 128, g, mc, dtype="bf16", routing="balanced",
                                     family="")["t_compute"]

    assert t_c(128) / t_c(16) == pytest.approx(128 / 32)
    assert t_c(None) == pytest.approx(t_c(M.TILE_M))
    # the small-batch path: at or below `unpadded_rows` rows per expert the rows are not padded
    P, Et, R = M.routed_load(np.array([8 * 16, 10 * 16]), 128, 8, routing="balanced", tile=64, unpadded_rows=8)
    assert list(R / Et) == [8.0, 64.0] and list(P / Et) == [8.0, 10.0]
    assert list(M.routed_load(np.array([8 * 16]), 128, 8, routing="balanced", tile=64)[2] / 128) == [64.0]
    d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "bf16", "distribution": "balanced", "family": "triton",
                      "num_tokens": np.unique(np.geomspace(1, 16384, 60).astype(int)), "hidden_size": 4096,
                      "inter_size": 1536,
                      "topk": 8, "num_experts": 128, "moe_tp": 1, "moe_ep": 1})
    mc = dataclasses.replace(base, values={**base.values, "tile_m:bf16": 128.0})
    d["latency_ms"] = M.routed_experts_time(d.num_tokens, 4096, 1536, 8, 128, g, mc, dtype="bf16",
                                            routing="balanced", regime="resident", family="")["t"] * 1e3
    fit = E.fit_dtype(d, "bf16")
    assert fit["tile_m"] == 128.0 and fit["unpadded_rows"] == 0.0  # the generating tiling fits best


def test_fp_formats_refused_where_missing():
    from steptime.specs import get_gpu

    with pytest.raises(UnsupportedError, match="no fp4 tensor cores: NVFP4 needs Blackwell"):
        M.check_moe_dtype(get_gpu("h100"), "fp4")
    with pytest.raises(UnsupportedError, match="no fp8 tensor cores"):
        M.check_moe_dtype(get_gpu("a100"), "fp8_block")
    assert M.check_moe_dtype(get_gpu("h100"), "mxfp4") == "mxfp4"  # w4a16: bf16 math on Hopper
    assert M.check_moe_dtype(get_gpu("b200"), "fp4") == "fp4"


def test_shipped_constants_are_the_settled_ones():
    root = Path(__file__).resolve().parents[1]
    shipped = yaml.safe_load((root / "src/steptime/calibration/moe.yaml").read_text())
    settled = yaml.safe_load((root / "results/calibration/moe.yaml").read_text())
    assert shipped == settled
    fws = shipped["constants"].get("frameworks", {})
    for scope in (shipped["constants"]["global"], *shipped["constants"]["gpu"].values(),
                  *(f["global"] for f in fws.values()), *(t for f in fws.values() for t in f["gpu"].values())):
        for name, c in scope.items():
            # sm_stream is a structural flag of a kernel family (E3.1), derived from the cells, not fitted; another
            # framework's family per GPU is its default backend's (DERIVED from its source, wave 39); vLLM's family
            # by EP (family_ep:<dtype>, and family:<dtype> beside it) is its source's default (wave 41, vhop)
            # the tactic flag of TensorRT-LLM's CUTLASS laws is set from source (wave 41), and the row tiling such a law
            # carries is unused by it (its tile list prices the padding): DERIVED; so is its pair_overlap flag (wave 41,
            # tacticeta: the per-pair passes' place in the roofline, set from the kernel's structure)
            law = name.partition(":")[2]
            by_ep = name.startswith("family_ep:") or (name.startswith("family:")
                                                      and f"family_ep:{name.split(':', 1)[1]}" in scope)
            derived = name.startswith(("sm_stream:", "tactic:", "pair_overlap:")) or by_ep or (name.startswith("family:") and scope not in (
                shipped["constants"]["global"], *shipped["constants"]["gpu"].values())) or (
                name.startswith(("tile_m:", "unpadded_rows:")) and f"tactic:{law}" in scope)
            allowed = ("DERIVED",) if derived else ("FITTED", "MEASURED")
            assert c["provenance"] in allowed and c["source"], name


# --------------------------------------------------------------------------- the step
def test_moe_step_breakdown_sums_and_names_moe_terms():
    r = predict_step("gpt-oss-120b", "b200", decode=[(64, 2048)], ep=8, dtype="fp4")
    assert r.moe and r.ep == 8
    assert sum(r.terms_ms.values()) == pytest.approx(r.total_ms, rel=1e-12)
    for t in ("router", "moe_experts", "moe_permute_combine", "moe_a2a"):
        assert r.terms_ms[t] > 0, t
    assert r.terms_ms["shared_experts"] == 0 and r.terms_ms["mla_absorb"] == 0
    d = predict_step("deepseek-v3", "h200", decode=[(16, 1024)], tp=8, dtype="fp8_block")
    assert d.terms_ms["mla_absorb"] > 0 and d.terms_ms["shared_experts"] > 0 and d.terms_ms["dense_mlp"] > 0
    assert d.terms_ms["moe_a2a"] == 0  # no EP


def test_mla_step_terms_follow_the_engine_paths():
    """MLA decode reads the latent KV once (moe_step.mla_decode_time, the serving timer's function too); decode
    tokens run the absorbed GEMMs, prefill rows (new + context) the kv_b up-projection."""
    from steptime import moe_step

    m, g = get_model("deepseek-v3"), get_gpu("b200")
    dec = predict_step(m, g, decode=[(16, 4096)], ep=8, dtype="fp8")
    lat = moe_step.mla_decode_time(m, g, 1, np.array([16.0]), np.array([16 * 4096.0]), kv_dtype="bf16",
                                   mc=M.MoEConstants.default())
    assert dec.terms_ms["attn_decode"] == pytest.approx(m.num_hidden_layers * lat[0] * 1e3, rel=1e-12)
    longer = predict_step(m, g, decode=[(16, 8192)], ep=8, dtype="fp8").terms_ms["attn_decode"]
    assert dec.terms_ms["attn_decode"] < longer < 2.2 * dec.terms_ms["attn_decode"]
    assert dec.terms_ms["mla_absorb"] > 0 and dec.terms_ms["mla_kv_up"] == 0
    pre = predict_step(m, g, prefill=[(1, 2048)], ep=8, dtype="fp8")
    assert pre.terms_ms["mla_kv_up"] > 0 and pre.terms_ms["mla_absorb"] == 0
    ctx = predict_step(m, g, prefill=[(1, 2048, 8192)], ep=8, dtype="fp8")
    assert ctx.terms_ms["mla_kv_up"] > 2 * pre.terms_ms["mla_kv_up"]  # the context is up-projected too
    for r in (dec, pre, ctx):
        assert sum(r.terms_ms.values()) == pytest.approx(r.total_ms, rel=1e-12)


def test_mla_bmm_is_bound_by_activation_bytes():
    """The absorbed BMMs: a launch floor when small; at many tokens x heads their time follows the activations
    (T H (d_in + d_out)), not the heads' weights (E3.3's mla_bmm finding)."""
    g, mc = get_gpu("h200"), M.MoEConstants.default()
    floor = 2 * mc.get("mla_bmm_floor_us") * 1e-6
    assert M.mla_bmm_time(1, 1, 128, 512, 128, g, mc) == pytest.approx(floor)
    big = M.mla_bmm_time(8192, 128, 128, 512, 128, g, mc)
    act = 2.0 * 8192 * 128 * (128 + 512) * 2 / (g.mem_bw * mc.get("mla_bmm_eta_mem"))
    assert act < big < 1.02 * act  # the weights (H x 128 x 512 each) add little
    assert M.mla_bmm_time(16384, 128, 128, 512, 128, g, mc) == pytest.approx(2 * big, rel=0.02)
    assert M.mla_bmm_time(0, 128, 128, 512, 128, g, mc) == 0


def test_mla_decode_split_kv_tiles_and_head_padding():
    """One request cannot draw the whole bandwidth (split-KV gives it mla_split_ctas CTAs); the head tiles run in
    waves over the SMs; heads are padded to the kernel's 64-head tile (1 and 64 heads cost the same scores)."""
    g, mc = get_gpu("h200"), M.MoEConstants.default()
    kw = dict(kv_lora_rank=512, rope_dim=64, gpu=g, mc=mc)
    one = M.mla_decode_latent_time(1, 131072, 16, **kw)
    many = M.mla_decode_latent_time(64, 64 * 131072, 16, **kw)
    par = min(1.0, mc.get("mla_split_ctas") / g.sms)
    assert one["t_memory"] == pytest.approx(many["t_memory"] / 64 / par, rel=1e-9)
    assert M.mla_decode_latent_time(1, 4096, 1, **kw)["t_compute"] == pytest.approx(
        M.mla_decode_latent_time(1, 4096, 64, **kw)["t_compute"])
    assert M.mla_decode_latent_time(1, 4096, 65, **kw)["t_compute"] == pytest.approx(
        2 * M.mla_decode_latent_time(1, 4096, 64, **kw)["t_compute"])
    w = M.mla_decode_latent_time(np.array([g.sms, g.sms + 1.0]), 1.0, 128, **kw)["t_tiles"]
    assert w[1] - w[0] > mc.get("mla_tile_us") * 1e-6  # a third wave of (request, head tile) CTAs
    assert M.mla_decode_latent_time(0, 0, 128, **kw)["t"] == 0


def test_mla_decode_triton_head_tile_and_kv_reread():
    """vLLM runs Triton MLA (16 heads per CTA) on NVIDIA parts without FlashMLA / FlashInfer-MLA (L40S sm 89, RTX
    PRO 6000 sm 120, A100 sm 80), 64-head kernels on Hopper and datacenter Blackwell; each head tile beyond the
    first re-reads mla_kv_reread of the request's latent (0: the old single read)."""
    for g, tile in (("l40s", 16), ("rtx-pro-6000", 16), ("a100-sxm", 16), ("h100-sxm", 64), ("b200", 64),
                    ("gb300", 64), ("mi300x", 64)):
        assert M.mla_decode_head_tile(get_gpu(g)) == tile, g
    g = get_gpu("l40s")
    mc = M.MoEConstants.default().with_values({"mla_kv_reread": 0.25})
    kw = dict(kv_lora_rank=512, rope_dim=64, gpu=g)
    one = M.mla_decode_latent_time(8, 8 * 65536, 16, mc=mc, **kw)
    eight = M.mla_decode_latent_time(8, 8 * 65536, 128, mc=mc, **kw)   # 8 tiles of 16 heads: 7 re-read a quarter
    assert eight["bytes"] == pytest.approx(one["bytes"] * (1 + 0.25 * 7))
    assert eight["t_memory"] == pytest.approx(one["t_memory"] * (1 + 0.25 * 7))
    # the head padding follows the tile: 1 and 16 heads cost the same scores on Triton, 17 two tiles
    c = [M.mla_decode_latent_time(1, 4096, h, mc=mc, **kw)["t_compute"] for h in (1, 16, 17)]
    assert c[0] == pytest.approx(c[1]) and c[2] == pytest.approx(2 * c[1])
    off = mc.with_values({"mla_kv_reread": 0.0})
    assert M.mla_decode_latent_time(8, 8 * 65536, 128, mc=off, **kw)["bytes"] == pytest.approx(one["bytes"])
    # an explicit head_tile (E3.3 passes one per cell) overrides the GPU's
    assert M.mla_decode_latent_time(8, 8 * 65536, 128, mc=mc, head_tile=64, **kw)["bytes"] == pytest.approx(
        one["bytes"] * 1.25)


def test_mla_decode_head_issue_roofline():
    """The decode path's per-(request, head) cost is the larger of the activation passes at datasheet bandwidth and
    mla_head_cycles SM cycles per request-head at the boost clock (E3.3: ~1,500-1,750 cycles per added
    request-head on every HBM GPU); unset (the shipped calibration before its next settle) it is 0 and the law is the
    passes alone."""
    g = get_gpu("b200")
    mc = M.MoEConstants.default().with_values({"mla_head_cycles": 800.0, "mla_decode_passes": 5.0})
    t = M.mla_head_issue_time(1024, 128, g, mc)
    assert t == pytest.approx(1024 * 128 * 800.0 / (g.sms * g.boost_mhz * 1e6))
    assert M.mla_head_issue_time(2048, 128, g, mc) == pytest.approx(2 * t)
    kw = dict(kv_lora_rank=512, rope_dim=64, gpu=g)
    big = M.mla_decode_latent_time(1024, 2048, 128, mc=mc, **kw)
    passes = 5.0 * 1024 * 128 * 576 * 2.0 / g.mem_bw
    assert big["t_issue"] == pytest.approx(t) and big["t_act"] == pytest.approx(max(t, passes))
    assert t > passes  # on an 8 TB/s part the issue cost binds
    slow = get_gpu("l40s")  # on a GDDR part the passes bind
    low = M.mla_decode_latent_time(1024, 2048, 128, mc=mc, kv_lora_rank=512, rope_dim=64, gpu=slow)
    assert low["t_act"] == pytest.approx(5.0 * 1024 * 128 * 576 * 2.0 / slow.mem_bw)
    off = mc.with_values({"mla_head_cycles": 0.0})
    assert M.mla_head_issue_time(1024, 128, g, off) == 0
    assert M.mla_decode_latent_time(1024, 2048, 128, mc=off, **kw)["t_act"] == pytest.approx(passes)


def test_mla_triton_split_walk():
    """Triton MLA's split walk: linear in the request's cache up to mla_triton_walk_cap tokens, flat beyond, times
    mla_triton_walk_h1 for one head (the non-grouped kernel), only on the Triton backend (16-head tiles)."""
    cap = 400.0
    mc = M.MoEConstants.default().with_values({"mla_triton_walk_us": 20.0, "mla_triton_walk_h1": 3.0,
                                               "mla_triton_walk_cap": cap})
    w = M.mla_triton_walk_time(np.array([1.0, 1.0, 1.0, 4.0]), np.array([cap / 4, cap, 64 * cap, 4 * cap / 2]), 16,
                               16, mc)
    assert w == pytest.approx(np.array([5.0, 20.0, 20.0, 10.0]) * 1e-6)
    assert M.mla_triton_walk_time(1, cap, 1, 16, mc) == pytest.approx(60e-6)
    assert M.mla_triton_walk_time(1, cap, 16, 64, mc) == 0  # FlashMLA / FlashInfer: no walk term
    assert M.mla_triton_walk_time(0, 0, 16, 16, mc) == 0
    d = M.MoEConstants.default()  # a constants file without the cap or the one-head multiplier: the defaults
    unset = dataclasses.replace(d, values={k: v for k, v in d.values.items()
                                           if k not in ("mla_triton_walk_cap", "mla_triton_walk_h1")}
                                ).with_values({"mla_triton_walk_us": 20.0})
    assert M.mla_triton_walk_time(1, M.MLA_TRITON_WALK_CAP / 2, 1, 16, unset) == pytest.approx(10e-6)
    kw = dict(kv_lora_rank=512, rope_dim=64, gpu=get_gpu("l40s"))
    a = M.mla_decode_latent_time(2, 2 * cap, 32, mc=mc, **kw)
    assert a["t_walk"] == pytest.approx(20e-6)
    b = M.mla_decode_latent_time(2, 2 * cap, 32, mc=mc.with_values({"mla_triton_walk_us": 0.0}), **kw)
    assert a["t"] - b["t"] == pytest.approx(20e-6)
    assert M.mla_decode_latent_time(2, 2 * cap, 32, mc=mc, gpu=get_gpu("h200"), kv_lora_rank=512,
                                    rope_dim=64)["t_walk"] == 0


def test_mla_triton_tile_separation_rereads_the_whole_latent():
    """Triton MLA's grid runs the requests fastest: a request's head tiles run side by side (partial re-read,
    mla_kv_reread) while the requests fit in mla_triton_tile_slots CTAs per SM, apart beyond that (1 - slots /
    requests of them re-read the whole latent); not on the 64-head backends, nor where the constant is unset."""
    g = get_gpu("l40s")
    mc = M.MoEConstants.default().with_values({"mla_kv_reread": 0.25, "mla_triton_tile_slots": 0.5})
    slots = 0.5 * g.sms
    sep = M.mla_triton_tile_separation(np.array([1.0, slots, 2 * slots, 8 * slots]), 16, g, mc)
    assert sep == pytest.approx([0.0, 0.0, 0.5, 0.875])
    assert M.mla_triton_tile_separation(8 * slots, 64, g, mc) == 0
    assert M.mla_triton_tile_separation(8 * slots, 16, g, mc.with_values({"mla_triton_tile_slots": 0.0})) == 0
    kw = dict(kv_lora_rank=512, rope_dim=64, gpu=g, mc=mc)
    n = 2 * slots
    one = M.mla_decode_latent_time(n, n * 4096, 16, **kw)["bytes"]
    eight = M.mla_decode_latent_time(n, n * 4096, 128, **kw)["bytes"]   # 7 more tiles re-read 0.25 + 0.75 x 0.5
    assert eight == pytest.approx(one * (1 + 7 * (0.25 + 0.75 * 0.5)))
    near = M.mla_decode_latent_time(slots, slots * 4096, 128, **kw)["bytes"]
    assert near == pytest.approx(M.mla_decode_latent_time(slots, slots * 4096, 16, **kw)["bytes"] * (1 + 7 * 0.25))


def test_replay_l2_holds_weights_that_fit_its_partition():
    """A replayed module's weights skip DRAM (credit x their stream time) while they fit the L2 one partition holds:
    half the datasheet L2 on the two-partition parts (A100, H100 / H200, the two-die Blackwells), all of it on
    AD102 / GB202 (L40S, RTX PRO 6000); nothing once they do not fit."""
    mib = 1024 * 1024
    assert M.replay_l2_bytes(get_gpu("l40s")) == pytest.approx(96 * mib)
    assert M.replay_l2_bytes(get_gpu("rtx-pro-6000")) == pytest.approx(128 * mib)
    assert M.replay_l2_bytes(get_gpu("h100-sxm")) == pytest.approx(25 * mib)
    assert M.replay_l2_bytes(get_gpu("b200")) == pytest.approx(126.5 * mib / 2)
    assert M.replay_l2_bytes(get_gpu("a100-sxm")) == pytest.approx(get_gpu("a100-sxm").l2_mb * mib / 2)
    c = M.mla_replay_weight_credit(np.array([50e6, 100e6, 101e6]), 100e6, 1e12, 0.5)
    assert c == pytest.approx([25e-6 * (1 - 0.5 ** M.MLA_REPLAY_HIT_EXP), 0.0, 0.0])
    assert M.mla_replay_weight_credit(50e6, 100e6, 1e12, 0.0) == 0


def test_replay_l2_share_held_falls_as_the_weights_fill_the_cache():
    """The share of the weights the L2 still holds at the next replay is 1 - (W / C)^MLA_REPLAY_HIT_EXP: nearly all
    of a small module's, none at or beyond the cache; the credit (seconds) peaks inside (0, C) and is continuous at C;
    a non-positive cache is refused."""
    C, bw = 100e6, 1e12
    W = np.linspace(0.0, 1.2 * C, 121)
    c = M.mla_replay_weight_credit(W, C, bw, 1.0)
    assert c[0] == 0 and np.all(c >= 0) and np.all(c[W >= C] == 0)
    assert M.mla_replay_weight_credit(1e6, C, bw, 1.0) == pytest.approx(1e6 / bw, rel=1e-3)
    k = int(np.argmax(c))
    assert 0 < W[k] < C and np.all(np.diff(c[: k + 1]) >= 0) and np.all(np.diff(c[k:]) <= 0)
    assert M.mla_replay_weight_credit(0.999 * C, C, bw, 1.0) < 0.01 * C / bw
    with pytest.raises(ValueError, match="l2_bytes"):
        M.mla_replay_weight_credit(1e6, 0.0, bw, 1.0)


def test_mla_prefill_attention_counts_causal_flops_and_copies():
    g, mc = get_gpu("b200"), M.MoEConstants.default()
    t = M.mla_prefill_attention_time(4096, 0, 128, 192, 128, g, mc)
    assert t == pytest.approx(2 * 128 * 320 * 4096 * 4097 / 2 / (g.peak_flops * mc.get("mla_eta_fa")))
    assert M.mla_prefill_attention_time(1024, 3072, 128, 192, 128, g, mc) > M.mla_prefill_attention_time(
        1024, 0, 128, 192, 128, g, mc)
    c = M.mla_prefill_copy_time(1000, 128, 192, 128, g, mc)
    assert M.mla_prefill_copy_time(2000, 128, 192, 128, g, mc) == pytest.approx(2 * c)
    assert M.mla_prefill_copy_time(1000, 128, 192, 128, g, mc, tokens=1000, hidden=7168) > c


def test_mla_constants_are_shipped():
    mc = M.MoEConstants.default()
    for name in M.MLA_CONSTANTS:
        assert mc.provenance[name]["provenance"] == "FITTED" and "E3.3" in mc.provenance[name]["source"], name


def test_mla_prefill_and_decode_paths_agree_with_the_serving_timer():
    """predict_steps and the serving timer time MLA steps with the same functions (one prefill with context, a
    decode batch, a mixed step)."""
    from steptime.serve.timer import StepTimer

    m, g = get_model("deepseek-v3"), get_gpu("h200")
    tm = StepTimer(m, g, tp=8, dtype="fp8_block", check=False)
    for new, kv in (([2048], [4096]), ([1] * 32, [1000] * 32), ([512, 1, 1], [0, 300, 5000])):
        new, kv = np.array(new), np.array(kv)
        r = predict_steps(m, g, np.zeros(len(new), dtype=np.int64), new, kv, 1, tp=8, dtype="fp8_block")
        assert tm.step(new.tolist(), kv.tolist()) == pytest.approx(r["total_ms"][0] * 1e-3, rel=1e-6)


def test_cli_predict_mla_moe_names_its_terms(capsys):
    from steptime.cli import main

    assert main(["predict", "--model", "deepseek-v3", "--gpu", "b200", "--ep", "8", "--dtype", "fp8",
                 "--decode", "64x2048", "--prefill", "1x1024@2048", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert sum(d["terms_ms"].values()) == pytest.approx(d["total_ms"], rel=1e-5)
    for t in ("mla_absorb", "mla_kv_up", "attn_decode", "moe_experts", "moe_a2a", "router", "shared_experts"):
        assert d["terms_ms"][t] > 0, t


def test_sliding_window_layers_cost_less_at_long_context():
    full = predict_step("gpt-oss-20b", "h100", decode=[(8, 100000)], dtype="mxfp4").terms_ms["attn_decode"]
    short = predict_step("gpt-oss-20b", "h100", decode=[(8, 128)], dtype="mxfp4").terms_ms["attn_decode"]
    # half the layers see only 128 tokens: far less than twice a 100k-token all-full model would cost
    assert short < full < 100000 / 128 * short


def test_moe_layout_and_memory_checks():
    with pytest.raises(InputError, match="must divide deepseek-v3's 256 experts"):
        predict_step("deepseek-v3", "h200", decode=[(1, 10)], tp=1, ep=3, dtype="fp8_block")
    with pytest.raises(InputError, match="multiple of the tensor-parallel degree"):
        predict_step("qwen3-30b-a3b", "h100", decode=[(1, 10)], tp=4, ep=2)
    with pytest.raises(InputError, match="applies to mixture-of-experts models"):
        predict_step("llama-3.1-8b", "h100", decode=[(1, 10)], ep=2)
    with pytest.raises(MemoryFitError, match="deepseek-v3 .* needs .* GB per GPU .*tp=1, ep=1"):
        predict_step("deepseek-v3", "h200", decode=[(1, 10)], dtype="fp8_block")
    predict_step("deepseek-v3", "h200", decode=[(1, 10)], tp=8, ep=8, dtype="fp8_block")  # fits on 8 x 141 GB
    with pytest.raises(UnsupportedError, match="unknown dtype 'int3' for an MoE model"):
        predict_step("qwen3-30b-a3b", "h100", decode=[(1, 10)], dtype="int3")
    from steptime.moe_step import memory_bytes

    m = get_model("qwen3-235b-a22b")
    assert memory_bytes(m, 0, 1, 8) < memory_bytes(m, 0, 1, 1) / 4


def test_predict_steps_vectorised_matches_predict_step():
    r = predict_steps("qwen3-30b-a3b", "h100", np.array([0, 0, 1]), np.array([1, 1, 512]),
                      np.array([100, 200, 0]), tp=2)
    one = predict_step("qwen3-30b-a3b", "h100", requests=[(512, 0)], tp=2)
    assert r["total_ms"][1] == pytest.approx(one.total_ms, rel=1e-12)


def test_cli_predict_and_models(capsys):
    from steptime.cli import main

    assert main(["predict", "--model", "gpt-oss-120b", "--gpu", "b200", "--ep", "8", "--dtype", "fp4",
                 "--decode", "32x1024"]) == 0
    out = capsys.readouterr().out
    assert "ep=8" in out and "moe_experts" in out and "moe_a2a" in out and "total" in out
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("gpt-oss-120b"))
    assert "5.71" in line and "116.79" in line
    assert main(["predict", "--model", "gpt-oss-120b", "--gpu", "h100", "--dtype", "fp4", "--decode", "1x1"]) == 2
    assert "NVFP4 needs Blackwell" in capsys.readouterr().err


# --------------------------------------------------------------------------- E3.1's reading step
def _reading_cells_with_known_scales():
    """E3.1's three reading cells on one GPU, timed by the law itself with known GPU scales."""
    from steptime_lab.experiments import moe as E

    law = {"bf16": dict(zip(E.PARAMS, (0.4, 0.8, 0.3, 20.0, 2.0, 1.0, 0.5, 16.0, 4.0)))}
    h, i, k, n = E.READING_SHAPE
    rows = [(T, tp, ep) for T, tp, ep in E.READINGS.values()]
    d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "bf16", "distribution": "balanced", "hidden_size": h,
                      "inter_size": i, "topk": k, "num_experts": n, "moe_tp": [r[1] for r in rows],
                      "moe_ep": [r[2] for r in rows], "num_tokens": [r[0] for r in rows]})
    d["latency_ms"] = E.predict(d, law, {"h100-sxm": {"s_c": 0.8, "s_mem": 1.2, "d_floor_us": 7.0}})
    return E, law, d


def test_gpu_scales_recover_known_scales():
    """Cells generated by the law itself with known GPU scales: three readings recover them."""
    E, law, d = _reading_cells_with_known_scales()
    sc, used = E.gpu_scales(d, "h100-sxm", law)
    assert sc["s_c"] == pytest.approx(0.8, rel=1e-3) and sc["s_mem"] == pytest.approx(1.2, rel=1e-3)
    assert sc["d_floor_us"] == pytest.approx(7.0, abs=0.05) and len(used) == 3


def test_l2_resident_regime_only_speeds_up_sets_that_fit_l2():
    """The collector's back-to-back regime reads an L2-sized weight set from L2; a serving step (evicted) never
    does; weight sets far above L2 cost the same in both."""
    from steptime.specs import get_gpu

    mc = M.MoEConstants.default()
    g = get_gpu("l40s")
    small = dict(tokens=1, hidden=4096, inter=1536, topk=8, num_experts=128, gpu=g, mc=mc, tp=8, dtype="bf16")
    ev, res = (M.routed_experts_time(**small, regime=r)["t"] for r in ("evicted", "resident"))
    assert res < ev
    big = dict(small, tp=1, tokens=64)
    ev, res = (M.routed_experts_time(**big, regime=r)["t"] for r in ("evicted", "resident"))
    assert res == pytest.approx(ev, rel=0.02)
    with pytest.raises(ValueError):
        M.routed_experts_time(**small, regime="warm")


def test_power_law_routing_loads_the_busiest_rank_more():
    """The collector's power-law router: the measured (busiest) EP rank gets at least its balanced share of the
    token-expert pairs, more as the exponent grows; the counts are deterministic."""
    P_bal, _, _ = M.routed_load(4096, 256, 8, 8, "balanced")
    P_a, _, _ = M.routed_load(4096, 256, 8, 8, "power_law_1.01")
    P_b, _, _ = M.routed_load(4096, 256, 8, 8, "power_law_1.2")
    assert P_bal[0] == pytest.approx(4096 * 8 / 8) and P_a[0] >= P_bal[0] and P_b[0] >= P_a[0] * 0.99
    c1 = M.power_law_counts(512, 128, 8, 4, 1.2)
    assert np.array_equal(c1, M.power_law_counts(512, 128, 8, 4, 1.2)) and c1.shape[1] == 32


@pytest.mark.parametrize("T", [1, 2, 5, 32, 700])
def test_power_law_counts_cap_each_expert_at_the_tokens(T):
    """A token picks an expert at most once (the collector caps each expert at T pairs and deals the excess to the
    least-loaded experts): at one rank every pair is counted, no expert holds more than T, a step touches at least k."""
    c = M.power_law_counts(T, 256, 8, 1, 1.2)
    assert (c <= T).all() and (c.sum(axis=1) == T * 8).all() and ((c > 0).sum(axis=1) >= 8).all()


def test_power_law_counts_many_token_counts_at_once_equal_one_at_a_time():
    """The serving timer's batched path (every token count of a block together) gives each count's own counts, and
    routed_load reads them across block boundaries."""
    Ts = [1, 7, 127, 128, 129, 700]
    many = M.power_law_counts_many(Ts, 128, 8, 4, 1.2)
    for i, T in enumerate(Ts):
        assert np.array_equal(many[i], M.power_law_counts(T, 128, 8, 4, 1.2))
    P, Et, R = M.routed_load(np.array(Ts, dtype=float), 128, 8, 4, "power_law_1.2", tile=16)
    for i, T in enumerate(Ts):
        c = M.power_law_counts(T, 128, 8, 4, 1.2)
        assert P[i] == pytest.approx(c.sum(1).mean()) and Et[i] == pytest.approx(max((c > 0).sum(1).mean(), 1.0))
    dense = np.arange(100, 140)  # a block's many counts (computed together) equal the same counts asked alone
    np.testing.assert_array_equal(M._power_law_loads(dense, 128, 8, 4, 1.2, 16),
                                  np.array([M._power_law_one(int(t), 128, 8, 4, 1.2, 16) for t in dense]).T)
    with pytest.raises(ValueError, match="at least one token"):
        M._power_law_loads([0], 128, 8, 4, 1.2, 16)


def test_fill_lowest_is_the_one_at_a_time_least_loaded_deal():
    rng = np.random.default_rng(3)
    for _ in range(50):
        c = rng.integers(0, 9, 12).astype(float)
        units, cap = int(rng.integers(0, 40)), 8.0
        slow = c.copy()
        for _ in range(units):
            ok = np.flatnonzero(slow < cap)
            if not len(ok):
                break
            slow[ok[np.argmin(slow[ok])]] += 1
        M._fill_lowest(c, units, cap)
        assert np.array_equal(c, slow)
    # every row at once (one EP rank's counts a row) equals row by row
    rows, units = rng.integers(0, 9, (20, 12)).astype(float), rng.integers(0, 60, 20)
    one = rows.copy()
    for i in range(len(one)):
        M._fill_lowest(one[i], int(units[i]), 8.0)
    M._fill_lowest(rows, units, 8.0)
    assert np.array_equal(rows, one)


def test_take_highest_is_the_one_at_a_time_most_loaded_take():
    rng = np.random.default_rng(4)
    for _ in range(200):
        c = rng.integers(0, 9, 12).astype(float)
        units = int(rng.integers(0, 120))
        slow = c.copy()
        for _ in range(units):
            j = int(np.argmax(slow))
            if slow[j] <= 0:
                break
            slow[j] -= 1
        M._take_highest(c, units)
        assert np.array_equal(c, slow)
    rows, units = rng.integers(0, 9, (30, 12)).astype(float), rng.integers(0, 120, 30)
    one = rows.copy()
    for i in range(len(one)):
        M._take_highest(one[i], int(units[i]))
    M._take_highest(rows, units)
    assert np.array_equal(rows, one)


def test_a2a_bytes_per_mode():
    """Low-latency mode sends a copy per remote expert, normal mode one per remote rank touched (fewer)."""
    ll = M.a2a_bytes(128, 7168, 8, 8, "ll")
    ht = M.a2a_bytes(128, 7168, 8, 8, "ht")
    assert ll == pytest.approx(128 * 8 * 7168 * 2 * 7 / 8) and 0 < ht < ll
    assert M.a2a_bytes(128, 7168, 8, 1, "ht") == 0


def test_serve_times_moe_and_refuses_an_unrepresentable_layout_with_one_line():
    from steptime.errors import SteptimeError
    from steptime.serve.timer import StepTimer

    assert StepTimer("qwen3-30b-a3b", "h100", max_tokens=64, max_requests=16).moe  # tests/test_moe_serve.py
    with pytest.raises(SteptimeError, match="must divide qwen3-30b-a3b's 128 experts"):
        StepTimer("qwen3-30b-a3b", "h100", ep=3)


def test_mla_module_terms_grow_with_context_and_heads():
    from steptime_lab.experiments import moe as E

    gen = pd.DataFrame({"gpu": "h100-sxm", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16",
                        "num_heads": [16, 16, 128], "batch_size": 8, "isl": 1, "step": [1024, 65536, 65536],
                        "latency_ms": 1.0})
    gen["kv_len"] = gen["step"] + 1
    ctx = pd.DataFrame({"gpu": "h100-sxm", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16", "num_heads": 16,
                        "batch_size": 1, "isl": [1, 1024, 8192], "step": 0, "latency_ms": 1.0})
    d = E.mla_frame(pd.concat([gen, gen.assign(gpu="a100-sxm", kv_cache_dtype="fp8")], ignore_index=True), ctx)
    assert set(d["gpu"]) == {"h100-sxm"}  # no fp8 KV on Ampere: not predicted, not scored
    assert list(d["path"]) == ["decode"] * 3 + ["decode", "prefill", "prefill"]  # a one-token 'prefill' decodes
    t = E.mla_predict(d, M.MoEConstants.default())
    assert np.all(np.isfinite(t)) and t[0] < t[1] < t[2] and t[4] < t[5]



def test_mla_prefill_token_scale_reading_recovers_scale_and_floor():
    """E3.3's prefill readings: two cells give the GPU's per-token scale and module floor exactly when the cells
    follow measured = rest + scale x per_token + floor; a faster-than-zero slope clips to no per-token cost."""
    from steptime_lab.experiments import moe as E

    rest, tok = np.array([0.01, 0.03]), np.array([0.02, 0.40])
    s, f = E.mla_prefill_token_scale_reading(rest + 1.7 * tok + 0.05, rest, tok)
    assert s == pytest.approx(1.7) and f == pytest.approx(0.05)
    s, f = E.mla_prefill_token_scale_reading(rest + 0.6 * tok + 0.03, rest, tok)   # B200-like: below the laws
    assert s == pytest.approx(0.6) and f == pytest.approx(0.03)
    y = np.array([0.10, 0.05])   # the long cell faster than the floor cell: no negative per-token cost
    s, f = E.mla_prefill_token_scale_reading(y, rest, tok)
    assert s == 0.0 and f == pytest.approx(0.10 - 0.01)
    with pytest.raises(ValueError):
        E.mla_prefill_token_scale_reading(y, rest, tok[::-1])
    with pytest.raises(ValueError):
        E.mla_prefill_token_scale_reading([1.0], [0.0], [1.0])


def test_mla_prefill_readings_are_the_floor_cell_and_the_long_one_head_prefill():
    from steptime_lab.experiments import moe as E

    gen = pd.DataFrame({"gpu": "h100-sxm", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16", "num_heads": 1,
                        "batch_size": 1, "isl": 1, "step": [2, 64], "latency_ms": 0.1})
    ctx = pd.DataFrame({"gpu": "h100-sxm", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16",
                        "num_heads": [1, 1, 1, 4, 1], "batch_size": [1, 1, 1, 1, 2],
                        "isl": [16, E.MLA_TOKEN_READING_ISL, 2 * E.MLA_TOKEN_READING_ISL, E.MLA_TOKEN_READING_ISL,
                                E.MLA_TOKEN_READING_ISL], "step": 0, "latency_ms": 0.1})
    d = E.mla_frame(gen, ctx)
    rd = E.mla_readings(d)["h100-sxm"]
    assert d.loc[rd["prefill"], ["num_heads", "batch_size", "isl"]].tolist() == [1, 1, 16]
    assert d.loc[rd["prefill_tokens"], ["num_heads", "batch_size", "isl"]].tolist() == [1, 1, E.MLA_TOKEN_READING_ISL]
    with pytest.raises(SteptimeError, match="no one-head batch-1"):
        E.mla_readings(E.mla_frame(gen, ctx[ctx["isl"] != E.MLA_TOKEN_READING_ISL]))

def test_mla_decode_readings_fp8_floor_and_batch_cost_scale():
    """E3.3's decode readings: fp8-KV decode rows take the GPU's fp8-KV floor cell (the smallest fp8-KV generation
    cell), bf16 rows the bf16 floor cell; the per-doubling batch cost scales with the bf16 floor cell's time less
    the module's weights at datasheet bandwidth, over MLA_LATENCY_REF_US."""
    from steptime.specs import get_gpu
    from steptime_lab.experiments import moe as E

    gen = pd.DataFrame({"gpu": "h100-sxm", "gemm_type": "bfloat16", "num_heads": [1, 1, 1, 1, 16, 16],
                        "kv_cache_dtype": ["bfloat16", "bfloat16", "fp8", "fp8", "bfloat16", "fp8"],
                        "batch_size": [1, 8, 1, 8, 8, 8], "isl": 1, "step": [2, 64, 2, 64, 64, 64],
                        "latency_ms": [0.072, 0.09, 0.086, 0.1, 0.12, 0.13]})
    ctx = pd.DataFrame({"gpu": "h100-sxm", "kv_cache_dtype": ["bfloat16", "bfloat16", "fp8"],
                        "gemm_type": "bfloat16", "num_heads": 1, "batch_size": [1, 1, 4],
                        "isl": [16, E.MLA_TOKEN_READING_ISL, 1], "step": 0, "latency_ms": 0.1})
    d = E.mla_frame(gen, ctx)
    rd = E.mla_readings(d)
    r = rd["h100-sxm"]
    assert d.loc[r["decode"], ["kv_cache_dtype", "batch_size", "step"]].tolist() == ["bfloat16", 1, 2]
    assert d.loc[r["decode_fp8"], ["kv_cache_dtype", "batch_size", "step"]].tolist() == ["fp8", 1, 2]
    dec = d[d["path"] == "decode"]
    cells = E.mla_decode_floor_cells(dec, rd, "h100-sxm")
    fp8 = (dec["kv_cache_dtype"] == "fp8").to_numpy()
    assert set(cells[fp8]) == {r["decode_fp8"]} and set(cells[~fp8]) == {r["decode"]}  # the one-token fp8 prefill too
    no8 = {"h100-sxm": {"decode": r["decode"]}}   # a GPU without fp8-KV rows: every row its bf16 floor
    assert set(E.mla_decode_floor_cells(dec, no8, "h100-sxm")) == {r["decode"]}
    bw = get_gpu("h100-sxm").mem_bw
    w_us = float(E.mla_weight_bytes(1)) / bw * 1e6
    assert 5.0 < w_us < 15.0   # ~33 MB of weights (the fused q_a + kv_a projection most of it) at 3.35 TB/s
    assert E.mla_decode_latency_us(0.072, 1, bw) == pytest.approx(72.0 - w_us)
    assert E.mla_decode_latency_us(0.001, 1, bw) == 0.0   # clipped: no negative latency
    assert E.mla_batch_log_scale(d, rd, "h100-sxm") == pytest.approx((72.0 - w_us) / E.MLA_LATENCY_REF_US)
    assert float(E.mla_weight_bytes(128)) > float(E.mla_weight_bytes(1))


# --------------------------------------------------------------------------- specs held to their vendored configs
STRUCTURE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "num_experts",
             "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
             "first_k_dense_replace", "attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
             "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "linear_conv_kernel_dim", "attn_output_gate", "mamba_ssm_dtype",
             "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_layers_every", "attention_chunk_size",
             "global_layers_every", "moe_layer_step", "router_alpha")


@pytest.mark.parametrize("key", moe_model_keys())
def test_moe_spec_equals_its_vendored_config(key, repo_root):
    """Every MoE spec's structure is what steptime's config reader reads from the config.json it cites (vendored
    byte for byte under raw/aiconfigurator/model_configs/ with a manifest entry); a multimodal config's text model."""
    import re

    from steptime.specs.moe import moe_from_config

    m = get_model(key)
    name = re.search(r"model_configs/(\S+_config\.json)", m.config).group(1)
    path = repo_root / "raw/aiconfigurator/model_configs" / name
    manifest = yaml.safe_load((repo_root / "raw/MANIFEST.yaml").read_text())
    assert any(e["path"] == f"raw/aiconfigurator/model_configs/{name}" for e in manifest["files"])
    cfg = json.loads(path.read_text())
    cfg = cfg.get("text_config", cfg)
    got = moe_from_config(cfg, path)
    assert {f: getattr(m, f) for f in STRUCTURE} == {f: getattr(got, f) for f in STRUCTURE}


def test_unrepresentable_vendored_configs_are_refused_with_the_reason(repo_root):
    from steptime.specs.moe import moe_from_config

    root = repo_root / "raw/aiconfigurator/model_configs"
    for name, what in (("zai-org--GLM-5_config.json", "sparse-indexer attention"),):
        with pytest.raises(UnsupportedModelError, match=what):
            moe_from_config(json.loads((root / name).read_text()), root / name)
    # wave 12: Qwen3.5's multimodal config is read as its text model, a Gated DeltaNet hybrid
    name = "Qwen--Qwen3.5-397B-A17B_config.json"
    m = moe_from_config(json.loads((root / name).read_text()), root / name)
    assert m.n_linear_layers == 45 and m.n_full_layers == 15 and m.num_experts == 512


def test_cutlass_kernel_family_is_per_sm_generation():
    src = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
    assert M.kernel_family(src, get_gpu("h100")) == "cutlass_sm90"
    assert M.kernel_family(src, get_gpu("rtx-pro-6000")) == "cutlass_sm120"
    assert M.kernel_family(src) == "cutlass"
    assert M.kernel_family("vllm_fp8moe_triton_tritonexperts", get_gpu("h100")) == "triton"


def test_gpt_oss_triton_kernel_is_its_own_family():
    # wave 27: the gpt-oss MXFP4 path runs OpenAI's triton_kernels MoE, other code than vLLM's Triton fused-MoE kernel
    # (whose name it shares the "triton" substring with): its own family, so the bf16 readings do not scale it
    from steptime_lab.experiments import moe as E

    oai = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
    assert M.kernel_family(oai, get_gpu("h100")) == "oaitriton"
    assert M.kernel_family("vllm_unquantizedfusedmoe_triton_tritonexperts", get_gpu("h100")) == "triton"
    assert M.kernel_family("vllm_gptossmxfp4moe_marlin_marlinexperts", get_gpu("l40s")) == "marlin"
    assert not E.readings_apply(M.kernel_family(oai), "triton")
    assert ("mxfp4", "oaitriton") in E.SM_STREAM and "oaitriton" in E.EP_REMAP_FAMILIES
    g = get_gpu("h100-sxm")
    mc = M.MoEConstants(values={f"{k}:mxfp4": v for k, v in {
        "eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 1.0,
        "local_token_passes": 1.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 16.0}.items()},
        per_gpu={g.key: {"s_c": 0.5, "s_mem": 0.5, "d_floor_us": -10.0, "family:bf16": "triton"}})
    t = lambda fam: float(M.routed_experts_time(64, 2880, 2880, 4, 128, g, mc, dtype="mxfp4", routing="balanced",  # noqa: E731
                                                family=fam)["t"])
    neutral = M.MoEConstants(values=mc.values)
    assert t("oaitriton") == float(M.routed_experts_time(64, 2880, 2880, 4, 128, g, neutral, dtype="mxfp4",
                                                         routing="balanced", family="oaitriton")["t"])
    assert t("triton") != t("oaitriton")


# --------------------------------------------------------------------------- Llama 4 (wave 13)
@pytest.mark.parametrize("key,total_b,active_b,moe,dense", [
    # model cards: Scout 109B total (with its vision tower, not represented here) and 17B active; Maverick 400B / 17B
    ("llama-4-scout", 109, 17, 48, 0), ("llama-4-maverick", 400, 17, 24, 24)])
def test_llama4_structure_and_parameters(key, total_b, active_b, moe, dense):
    m = get_model(key)
    assert (m.n_moe_layers, m.n_dense_layers) == (moe, dense)
    assert m.attention_window == 8192 and m.n_window_layers == 36  # chunked on 3 of every 4 layers
    assert m.n_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.n_active_params() / 1e9 == pytest.approx(active_b, rel=0.02)


def test_interleaved_moe_layers_from_a_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_qwen_cfg(decoder_sparse_step=2)))
    m, full = get_model(str(p)), get_model("qwen3-30b-a3b")
    assert (m.n_moe_layers, m.n_dense_layers) == (24, 24)
    # half the layers trade the routed experts and router for a dense MLP of intermediate_size
    h = m.hidden_size
    moe_layer = h * m.num_experts + m.num_experts * m.expert_params()
    assert full.n_params() - m.n_params() == 24 * (moe_layer - 3 * h * m.intermediate_size)


def test_llama4_nope_layers_in_another_pattern_refused(tmp_path, repo_root):
    cfg = json.loads((repo_root / "raw/aiconfigurator/model_configs/"
                      "meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json").read_text())
    cfg["text_config"]["no_rope_layers"] = [1, 0] * 24
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match="NoPE") as e:
        get_model(str(p))
    assert "\n" not in str(e.value)


def test_chunked_layers_attend_at_most_one_chunk():
    """Past the chunk, only the 12 global layers' decode attention still grows with the context."""
    from steptime import predict_step

    m = get_model("llama-4-scout")
    t = {kv: predict_step(m, "h100", decode=[(1, kv)], tp=4, ep=4).terms_ms["attn_decode"]
         for kv in (4096, 8192, 16384, 32768)}
    below, above = t[8192] - t[4096], t[32768] - t[16384]
    assert above > 0
    # per added KV token every layer grows below the chunk, 12 of 48 above it
    assert above / 16384 == pytest.approx(below / 4096 * 12 / 48, rel=0.05)


# --------------------------------------------------------------------------- the serving step's router skew
@pytest.mark.parametrize("key,alpha", [("qwen3.6-35b-a3b", 1.2), ("qwen3-235b-a22b", 1.2), ("gpt-oss-120b", 1.2),
                                       ("minimax-m2.5", 1.2), ("deepseek-v3", 1.01), ("kimi-k2.5", 1.01),
                                       ("llama-4-scout", 1.01)])
def test_router_alpha_is_aiconfigurators_family_exponent(key, alpha):
    from steptime import moe_step
    m = get_model(key)
    assert m.router_alpha == alpha
    assert moe_step.serving_routing(m) == f"power_law_{alpha:g}"


def test_router_alpha_from_a_config_follows_its_architecture(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_qwen_cfg()))
    assert get_model(str(p)).router_alpha == 1.2
    with pytest.raises(ModelConfigError, match="router_alpha"):
        dataclasses.replace(get_model("qwen3-30b-a3b"), router_alpha=0.9)


def test_serving_step_prices_the_experts_at_the_skewed_router():
    """A decode step's routed experts are the power-law router's busiest rank (fewer experts touched than uniform
    random routing at decode batch sizes), the weights from HBM."""
    from steptime.specs import get_gpu as gg
    m, g = get_model("qwen3.6-35b-a3b"), gg("b300")
    mc = M.MoEConstants.default()
    r = predict_step(m, "b300", decode=[(32, 2048)], moe_constants=mc)
    x = M.routed_experts_time(32, m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts, g,
                              mc, routing="power_law_1.2")
    u = M.routed_experts_time(32, m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts, g,
                              mc, routing="uniform")
    assert r.terms_ms["moe_experts"] == pytest.approx(m.n_moe_layers * (x["t"] - x["t_tokens"]) * 1e3, rel=1e-9)
    assert x["experts_touched"] < u["experts_touched"] and x["t"] < u["t"]



def test_gpu_scales_without_a_regime_keep_its_neutral_scale_and_unknown_regimes_are_refused():
    """A regime read as None sets nothing (its scale stays neutral); the others are still recovered."""
    E, law, d = _reading_cells_with_known_scales()
    sc, used = E.gpu_scales(d, "h100-sxm", law, {**E.READINGS, "compute": None})
    assert sc["s_c"] == 1.0 and len(used) == 2 and {u["term"] for u in used} == {"floor", "memory"}
    assert len(E.reading_cells(d, "h100-sxm", {**E.READINGS, "compute": None})) == 2
    with pytest.raises(ValueError, match="unknown reading regimes"):
        E.reading_cells(d, "h100-sxm", {"bogus": (1, 1, 1)})


def test_choose_readings_avoids_a_cell_the_law_misses_on_every_training_gpu():
    """Two training GPUs generated by one law; at 16,384 tokens (the default compute cell) both run 40% slower than
    the law: the inner leave-one-out must not read the compute scale there. Non-bf16 training cells are refused."""
    from steptime_lab.experiments import moe as E

    law = {"bf16": dict(zip(E.PARAMS, (0.4, 0.8, 0.3, 20.0, 2.0, 1.0, 0.5, 16.0, 4.0)))}
    h, i, k, n = E.READING_SHAPE
    grid = [(T, 1, ep) for ep in (1, 4, 8, 16) for T in (1, 2, 4, 16, 64, 256, 1024, 4096, 8192, 16384)]
    frames = []
    for g in ("h100-sxm", "h200-sxm"):
        frames.append(pd.DataFrame({"gpu": g, "sdtype": "bf16", "distribution": "balanced", "family": "triton",
                                    "hidden_size": h, "inter_size": i, "topk": k, "num_experts": n,
                                    "moe_tp": [r[1] for r in grid], "moe_ep": [r[2] for r in grid],
                                    "num_tokens": [r[0] for r in grid]}))
    d = pd.concat(frames, ignore_index=True)
    d["latency_ms"] = E.predict(d, law) * np.where(d.num_tokens == 16384, 1.4, 1.0)
    choice, table = E.choose_readings(d, d)
    assert choice["compute"] != (16384, 1, 1)
    assert table["compute"][str((16384, 1, 1))] > min(table["compute"].values())
    with pytest.raises(ValueError, match="bf16 cells only"):
        E.choose_readings(d.assign(sdtype="fp8"), d)


def test_routed_experts_time_load_cache_gives_the_same_times_and_is_keyed_by_tiling():
    g = get_gpu("h100-sxm")
    base = M.MoEConstants.default()
    T = np.array([1.0, 7.0, 64.0, 300.0, 4096.0])
    args = (T, 4096, 1536, 8, 128, g)
    cache = {}
    for tile in (16.0, 128.0):   # two tilings on the same cells: one cache entry each, never mixed up
        mc = dataclasses.replace(base, values={**base.values, "tile_m:bf16": tile})
        plain = M.routed_experts_time(*args, mc, dtype="bf16", routing="balanced", regime="resident", family="")
        for _ in range(2):   # first call fills the cache, the second reads it
            cached = M.routed_experts_time(*args, mc, dtype="bf16", routing="balanced", regime="resident",
                                           family="", load_cache=cache)
            assert np.array_equal(cached["t"], plain["t"])
    assert sorted(k[1] for k in cache) == [16, 128]
    assert not next(iter(cache.values()))[0].flags.writeable   # shared arrays cannot be changed by a caller


def test_fit_dtype_once_fits_each_distinct_training_set_once(monkeypatch):
    from steptime_lab.experiments import moe as E

    calls = []
    monkeypatch.setattr(E, "fit_dtype", lambda t, dt: calls.append(len(t)) or {"eta_c": float(len(t))})
    d = pd.DataFrame({"gpu": ["a", "b", "c"], "latency_ms": [1.0, 2.0, 3.0]})
    memo = {}
    first = E.fit_dtype_once(d[d.gpu != "a"], "bf16", memo)
    first["eta_c"] = -1.0   # the caller's copy: the memo keeps its own
    assert E.fit_dtype_once(d[d.gpu != "a"].copy(), "bf16", memo) == {"eta_c": 2.0}
    assert E.fit_dtype_once(d[d.gpu != "b"], "bf16", memo) == {"eta_c": 2.0}   # other cells: fitted again
    assert E.fit_dtype_once(d[d.gpu != "a"], "fp8", memo) == {"eta_c": 2.0}    # other dtype: fitted again
    assert calls == [2, 2, 2]
    assert E.frame_key(d) != E.frame_key(d.assign(latency_ms=[1.0, 2.0, 3.5]))
    assert E.fit_dtype_once(d, "bf16", None) == {"eta_c": 3.0} and calls == [2, 2, 2, 3]


# --------------------------------------------------------------------------- E3.1's fit evaluator
def _fit_cells():
    """Cells on two GPUs (one L2-partitioned) and two routings, every EP, for the fit evaluator's tests."""
    rows = [(g, ds, T, ep) for g in ("h100-sxm", "b200") for ds in ("balanced", "power_law_1.2")
            for T in (1, 3, 16, 200, 4096) for ep in (1, 2, 8)]
    return pd.DataFrame({"gpu": [r[0] for r in rows], "sdtype": "fp8_block", "distribution": [r[1] for r in rows],
                         "num_tokens": [r[2] for r in rows], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                         "num_experts": 128, "moe_tp": 1, "moe_ep": [r[3] for r in rows]})


@pytest.mark.parametrize("ep_floor,batch,stream", [(False, False, False), (True, False, True), (False, True, False)])
def test_fit_law_is_bit_identical_to_the_law_at_every_jacobian_step(ep_floor, batch, stream):
    """_FitLaw (fit_dtype's cached residual evaluator) gives routed_experts_time's numbers bit for bit, also where a
    step moves one parameter and its cached parts come back (a finite-difference Jacobian's columns)."""
    from fit_law_steps import assert_fit_law_matches_the_law  # tests/fit_law_steps.py
    from steptime_lab.experiments import moe as E

    d = _fit_cells()
    names, p0, lo, hi = E.law_params("fp8_block", ep_floor, batch)
    flag = {"sm_stream": 1.0} if stream else {}
    rng = np.random.default_rng(0)
    for small, tile in ((0, 64), (8, 16)):
        flag.update(unpadded_rows=float(small), tile_m=float(tile))
        groups = E._groups(d)
        law = E._FitLaw(groups, len(d), "fp8_block", names, flag)
        for _ in range(3):
            x = np.asarray(lo) + rng.random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
            assert_fit_law_matches_the_law(law, groups, len(d), "fp8_block", x)


def test_fit_law_refuses_groups_of_another_dtype():
    from steptime_lab.experiments import moe as E

    d = _fit_cells()
    names, _, _, _ = E.law_params("fp8_block")
    with pytest.raises(ValueError, match="dtype 'bf16'"):
        E._FitLaw(E._groups(d), len(d), "bf16", names, {"unpadded_rows": 0.0, "tile_m": 64.0})


def test_the_routed_law_is_its_shape_part_and_its_constants_part_and_each_part_keys_what_it_reads():
    """routed_experts_time = routed_law_time(routed_shape(...)) (wave 32, helper tidy: E3.1's fit evaluator calls the
    two, no copy of the law); a memo sees every parameter part once, keyed by the numbers it reads: moving one
    constant changes the keys of the parts that read it and no other."""
    import struct

    from steptime.specs import get_gpu
    from steptime.terms import moe as M

    law = {"eta_c": 0.6, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 40.0, "eta_mem_max": 0.8, "x_half": 2.0,
           "token_passes": 1.0, "local_token_passes": 0.5, "floor_us": 10.0, "overlap_p": 4.0, "ep_floor_us": 3.0,
           "tile_m": 16.0}
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in law.items()})
    T, gpu = np.array([1.0, 16.0, 300.0, 4096.0]), get_gpu("h100-sxm")
    full = M.routed_experts_time(T, 4096, 1536, 8, 128, gpu, mc, ep=2, dtype="fp8", routing="balanced",
                                 regime="resident", family="")
    shape = M.routed_shape(T, 4096, 1536, 8, 128, gpu, ep=2, dtype="fp8", routing="balanced", tile=16)
    seen = {}

    def memo(what, vals, fn):
        seen[what] = struct.pack(f"{len(vals)}d", *vals)   # the exact bits, as E3.1's memo keys them
        return fn()

    parts = M.routed_law_time(shape, law, regime="resident", dtype="fp8", memo=memo)
    assert parts["t"].tobytes() == full["t"].tobytes() and parts["t_memory"].tobytes() == full["t_memory"].tobytes()
    assert set(seen) == {"c", "m", "both", "tok", "fix"}
    before = dict(seen)
    M.routed_law_time(shape, {**law, "x_half": 3.0}, regime="resident", dtype="fp8", memo=memo)
    assert [k for k in seen if seen[k] != before[k]] == ["m", "both"]
    with pytest.raises(KeyError):
        M.routed_law_time(shape, {k: v for k, v in law.items() if k != "eta_c"})


def test_fit_starts_start_the_sm_bound_per_pair_law_from_each_pass_value_and_others_from_p0():
    """fit_starts: p0 alone for a law without tok_bytes_per_clk_sm; with it, p0 with both per-pair passes at each
    TOKEN_PASS_STARTS value (the first is P0's own, so a fit whose first start is best is unchanged); a start of
    another length than the names is refused."""
    from steptime_lab.experiments import moe as E

    names, p0, _, _ = E.law_params("bf16")
    (only,) = E.fit_starts(names, p0)
    assert only.tolist() == list(p0)
    names, p0, _, _ = E.law_params("bf16", ep_floor=True, tok_sm=True)
    starts = E.fit_starts(names, p0)
    assert len(starts) == len(E.TOKEN_PASS_STARTS) == 2
    assert starts[0].tolist() == list(p0)   # TOKEN_PASS_STARTS[0] is P0's token passes
    for v, x in zip(E.TOKEN_PASS_STARTS, starts):
        for j, k in enumerate(names):
            want = v if k in ("token_passes", "local_token_passes") else p0[j]
            assert x[j] == want
    with pytest.raises(ValueError, match="starting values"):
        E.fit_starts(names, p0[:-1])


def test_fit_dtype_keeps_the_lowest_cost_start(monkeypatch):
    """fit_dtype runs the least-squares fit from every start of fit_starts and keeps the one with the lowest training
    cost, whichever order the starts come in (a stand-in solver whose cost is the start's token passes, 0.3 < 1.0)."""
    import types

    import scipy.optimize

    from steptime_lab.experiments import moe as E

    d = _fit_cells().assign(family="triton")
    d["latency_ms"] = 1.0
    starts = []

    def fake(resid, x0, **_):
        starts.append(float(x0[0]))
        names = E.law_params("fp8_block", True, False, True)[0]
        return types.SimpleNamespace(x=np.asarray(x0, dtype=float), cost=float(x0[names.index("token_passes")]))

    monkeypatch.setattr(scipy.optimize, "least_squares", fake)
    monkeypatch.setattr(E, "TILE_CHOICES", (64,))
    monkeypatch.setattr(E, "UNPADDED_CHOICES", (0,))
    for order in (E.TOKEN_PASS_STARTS, tuple(reversed(E.TOKEN_PASS_STARTS))):
        monkeypatch.setattr(E, "TOKEN_PASS_STARTS", order)
        law = E.fit_dtype(d, "fp8_block")
        assert "tok_bytes_per_clk_sm" in law and law["token_passes"] == min(order) == law["local_token_passes"]
        assert "full_tile_stream" not in law   # its try ties the law without it (same stand-in cost): not kept
    # two orders x two starts, at the one tiling and (cells that fill whole row tiles) at the full-tile try (wave 30)
    assert E.full_tile_cells(d, 64.0) and len(starts) == 8
