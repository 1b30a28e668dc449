"""The Gated DeltaNet hybrid (Qwen3.6-35B-A3B, issue 20 wave 12): its spec read from the vendored config, the GDN
term's work on a hand-checkable shape, the step's breakdown, the memory check, and what is still refused."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.errors import SteptimeError, UnsupportedModelError
from steptime.moe_step import BLOCK_TERMS, GDN_TERMS, kv_layer_bytes, memory_bytes
from steptime.specs import get_gpu, get_model
from steptime.specs.moe import moe_from_config
from steptime.step import predict_steps
from steptime.terms import gdn

CONFIG = "raw/aiconfigurator/model_configs/nvidia--Qwen3.6-35B-A3B-NVFP4_config.json"


def test_hybrid_spec_read_from_the_vendored_multimodal_config(repo_root):
    m = get_model(str(repo_root / CONFIG))  # the file's text_config; the vision tower is not represented
    assert m.is_moe and m.n_linear_layers == 30 and m.n_full_layers == 10 and m.full_attention_interval == 4
    assert (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim, m.linear_value_head_dim,
            m.linear_conv_kernel_dim) == (16, 32, 128, 128, 4)
    assert m.attn_output_gate and m.mamba_ssm_dtype == "float32" and m.weights_dtype == "bf16"
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size, m.shared_inter) == (256, 8, 512, 512)
    spec = get_model("Qwen/Qwen3.6-35B-A3B")
    assert spec.key == "qwen3.6-35b-a3b" and spec.n_linear_layers == 30
    # 35B total, 3B active: the name's figures
    assert 34e9 < spec.n_params() < 36e9 and 3.0e9 < spec.n_active_params() < 3.6e9


def test_gated_attention_doubles_q_proj():
    m = get_model("qwen3.6-35b-a3b")
    h, q, kv = m.hidden_size, m.num_attention_heads * m.head_dim, m.num_key_value_heads * m.head_dim
    assert m.attention_params() == h * (2 * q + 2 * kv) + q * h


def _tiny(ssm="float32"):
    return SimpleNamespace(linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=4,
                           linear_value_head_dim=4, linear_conv_kernel_dim=4, mamba_ssm_dtype=ssm)


def test_gdn_work_by_hand():
    """hk 1, hv 2, dk = dv = 4, kernel 4, fp32 state: C = 2*4 + 2*4 = 16 conv channels, state 2*4*4*4 = 128 B."""
    w = gdn.gdn_work(np.array([1.0, 64.0]), _tiny())
    # decode: conv 2*(2*16 + 2*16*3) = 256; rule 2*(16 + 4 + 8) + 2*128 = 312; norm 2*3*8 = 48
    assert w["bytes"][0] == pytest.approx(616)
    assert w["flops"][0] == pytest.approx(2 * 7 * 16)
    # one 64-token chunk: conv 2*(2*64*16 + 96) = 4288; rule 2*64*28 + 256 + 2*1*(2*16)*2 = 3968; norm 2*3*64*8 = 3072
    assert w["bytes"][1] == pytest.approx(4288 + 3968 + 3072)
    assert w["flops"][1] == pytest.approx(2 * 64 * (6 * 16 + 2 * 64 * (3 * 4 + 2 * 4)))
    assert w["state_bytes"][0] == 128 and gdn.gdn_work(np.array([1.0]), _tiny("bfloat16"))["state_bytes"][0] == 64


def test_gdn_time_is_a_floor_plus_a_roofline_per_step():
    c, g = Constants.default(), get_gpu("b300")
    m = get_model("qwen3.6-35b-a3b")
    t = gdn.gdn_time(np.array([1.0] * 8 + [512.0]), m, g, c, group=np.array([0] * 8 + [1]), n_groups=2)
    assert np.all(t["t"] > t["floor"]) and np.all(t["t"] == t["floor"] + np.maximum(t["t_compute"], t["t_memory"]))
    assert not t["compute_bound"][0]  # decode: the state read and written dominates
    half = gdn.gdn_time(np.ones(8), m, g, c, tp=2)
    assert half["t_memory"][0] == pytest.approx(t["t_memory"][0] / 2, rel=0.01)


@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 1), (4, 4), (2, 4)])
def test_hybrid_breakdown_sums_to_the_total(tp, ep):
    sid = np.array([0] * 16 + [1] + [2] * 16 + [2])
    new = np.array([1] * 16 + [1024] + [1] * 16 + [600])
    kv = np.array([800] * 16 + [0] + [800] * 16 + [0])
    r = predict_steps("qwen3.6-35b-a3b", "b300", sid, new, kv, 3, tp=tp, ep=ep, engine="vllm")
    total = sum(np.asarray(v) for v in r["terms_ms"].values())
    assert np.allclose(total, r["total_ms"])
    assert all(np.all(r["terms_ms"][t] > 0) for t in GDN_TERMS) and set(GDN_TERMS) <= set(BLOCK_TERMS)
    dense_moe = predict_steps("qwen3-30b-a3b", "b300", sid, new, kv, 3, tp=tp, ep=ep, engine="vllm")
    assert np.all(dense_moe["terms_ms"]["gdn_kernel"] == 0) and np.all(dense_moe["terms_ms"]["gdn_proj"] == 0)


def test_linear_layers_hold_a_state_not_a_kv_cache():
    m = get_model("qwen3.6-35b-a3b")
    w = memory_bytes(m, 0.0)
    assert memory_bytes(m, 1000.0) - w == pytest.approx(1000 * 10 * kv_layer_bytes(m))  # 10 full layers only
    assert memory_bytes(m, 0.0, requests=3) - w == pytest.approx(3 * 30 * m.gdn_state_bytes())
    assert m.gdn_state_bytes() == 32 * 128 * 128 * 4 + (2 * 2048 + 4096) * 3 * 2


def test_unrepresentable_models_are_still_refused_with_one_line(tmp_path):
    base = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "vision_config": {"depth": 2}, "text_config": json.loads(
                (__import__("pathlib").Path(__file__).parents[1] / CONFIG).read_text())["text_config"]}
    irregular = json.loads(json.dumps(base))
    irregular["text_config"]["layer_types"][0] = "full_attention"
    no_dims = json.loads(json.dumps(base))
    del no_dims["text_config"]["linear_num_value_heads"]
    other_vlm = {**base, "architectures": ["SomeOtherMoeForConditionalGeneration"]}
    sparse = {"architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048, "n_routed_experts": 256,
              "num_experts_per_tok": 8, "hidden_size": 7168}
    for cfg, needle in ((irregular, "pattern other than"), (no_dims, "without the Gated DeltaNet dims"),
                        (other_vlm, "vision tower"), (sparse, "sparse-indexer attention")):
        with pytest.raises(UnsupportedModelError) as e:
            moe_from_config(cfg, tmp_path / "config.json")
        assert needle in str(e.value) and "\n" not in str(e.value)


def test_serving_timer_refuses_the_hybrid_with_one_line():
    from steptime.serve import StepTimer

    with pytest.raises(SteptimeError) as e:
        StepTimer("qwen3.6-35b-a3b", "b300", engine="vllm")
    assert "Gated DeltaNet" in str(e.value) and "\n" not in str(e.value)


# ---- the GDN op's eager launches in the launch floor (issue 20, wave 13)
def test_gdn_eager_launch_count_is_the_sources():
    """14 launches per layer on the FLA prefill path (vLLM 0.20.1 gdn_attention_core), 6 of them autotuned FLA
    kernels; 2 on the packed decode path."""
    assert gdn.eager_launches(prefill=True) == 14
    assert gdn.eager_launches(prefill=False) == 2
    fla = ("chunk_local_cumsum", "chunk_scaled_dot_kkt_fwd", "solve_tril", "recompute_w_u_fwd",
           "chunk_gated_delta_rule_fwd_h", "chunk_fwd_o")
    assert set(fla) <= set(gdn.PREFILL_EAGER_LAUNCHES)


def test_gdn_eager_floor_scales_with_layers_and_launch_cost():
    from steptime.specs.engines import get_engine
    from steptime.terms.host import engine_dispatch_floor

    g, c, e = get_gpu("b300"), Constants.default(), get_engine("vllm")
    t_gdn = e.get("gdn_eager_launch_us", g, c) * 1e-6
    T = np.array([1.0, 128.0, 496.0, 2048.0])
    dec = np.array([True, False, False, False])
    dense = engine_dispatch_floor(40, T, dec, g, e, c, tp=2)
    for n_gdn in (10, 30):
        hyb = engine_dispatch_floor(40, T, dec, g, e, c, tp=2, gdn_layers=n_gdn)
        assert hyb[0] == pytest.approx(dense[0])  # a decode-only step in a full graph: no GDN launch on the host
        # a step with a prefill below the captured size: the GDN op's launches replace its attention op's eager pair
        pe, t_l = e.get("piecewise_eager_per_layer", g, c), e.get("t_launch_us", g, c) * 1e-6
        extra = n_gdn * (14 * t_gdn - pe * t_l)
        assert hyb[1:3] == pytest.approx(dense[1:3] + extra)
        # above it: the whole step eager, plus the op, plus the hybrid's host time per layer outside the graphs
        t_hyb = e.get_or("hybrid_eager_layer_us", g, c) * 1e-6
        assert hyb[3] == pytest.approx(dense[3] + n_gdn * 14 * t_gdn + 40 * t_hyb)
    # linear in the launch cost: an engine without the field prices a GDN launch as any eager launch
    sg = get_engine("sglang")
    if "gdn_eager_launch_us" not in sg.values:
        a = engine_dispatch_floor(40, T, dec, g, sg, c, gdn_layers=30) - engine_dispatch_floor(40, T, dec, g, sg, c)
        t_l = sg.get("t_launch_us", g, c) * 1e-6
        assert np.all(a[1:] >= 0) and a[3] == pytest.approx(30 * 14 * t_l)


def test_gdn_eager_floor_refuses_a_bad_layer_count():
    from steptime.specs.engines import get_engine
    from steptime.terms.host import engine_dispatch_floor

    g, e = get_gpu("b300"), get_engine("vllm")
    for bad in (-1, 41):
        with pytest.raises(ValueError, match="gdn_layers must be in"):
            engine_dispatch_floor(40, np.array([128.0]), np.array([False]), g, e, gdn_layers=bad)


def test_hybrid_prefill_step_is_max_of_gpu_and_host():
    """A small prefill of the hybrid is host-bound (the GDN op's launches outlast the GPU work): the step carries
    the floor's excess as dispatch_floor; a dense MoE model of the same engine carries none of it."""
    r = predict_steps("qwen3.6-35b-a3b", "b300", np.array([0]), np.array([128]), np.array([0]), 1, tp=4, ep=4,
                      engine="vllm")
    assert r["terms_ms"]["dispatch_floor"][0] > 0
    assert r["blocks_ms"][0] + r["terms_ms"]["dispatch_floor"][0] >= 30 * 14 * 36.0e-3 * 0.99
    d = predict_steps("qwen3-30b-a3b", "b300", np.array([0]), np.array([128]), np.array([0]), 1, tp=4, ep=4,
                      engine="vllm")
    assert d["terms_ms"]["dispatch_floor"][0] == 0


def test_shipped_gdn_eager_launch_cost_is_the_results_all_layout_fit(repo_root):
    """engines.yaml's FITTED launch.gdn_eager_launch_us is the value E3.4's committed result fits on all layouts."""
    import json

    from steptime.specs.engines import get_engine

    fit = json.loads((repo_root / "results/E3_4.json").read_text())["metrics"]["fpm_gdn_eager_fit"]
    shipped = get_engine("vllm").get("gdn_eager_launch_us", get_gpu("b300"), Constants.default())
    assert [v["all_layouts_us"] for v in fit.values()] == [pytest.approx(shipped)]


def test_hybrid_eager_layer_cost_only_in_a_hybrids_eager_steps():
    """launch.hybrid_eager_layer_us adds n_layers x its value to a hybrid's step run outside the graphs (above
    graph_max_tokens), nothing to its graph-run steps, and nothing to a dense model's steps at any size."""
    from steptime.specs.engines import get_engine
    from steptime.terms.host import engine_dispatch_floor

    g, c, e = get_gpu("b300"), Constants.default(), get_engine("vllm")
    t_hyb = e.get("hybrid_eager_layer_us", g, c)
    assert t_hyb > 0
    cap = e.get("graph_max_tokens", g, c)
    T = np.array([1.0, cap, cap + 1.0, 8192.0])
    dec = np.array([True, False, False, False])
    base = engine_dispatch_floor(40, T, dec, g, e, c, tp=4, gdn_layers=30)
    off = e.with_fitted(g.key, {"hybrid_eager_layer_us": 0.0}, source="test")
    without = engine_dispatch_floor(40, T, dec, g, off, c, tp=4, gdn_layers=30)
    assert base[:2] == pytest.approx(without[:2])  # captured: nothing added
    assert base[2:] - without[2:] == pytest.approx([40 * t_hyb * 1e-6] * 2)  # eager: one cost per layer
    dense_on = engine_dispatch_floor(40, T, dec, g, e, c, tp=4)
    dense_off = engine_dispatch_floor(40, T, dec, g, off, c, tp=4)
    assert dense_on == pytest.approx(dense_off)  # a dense model never reads it
    # doubling it doubles what it adds (linear in the field)
    twice = e.with_fitted(g.key, {"hybrid_eager_layer_us": 2 * t_hyb}, source="test")
    b2 = engine_dispatch_floor(40, T, dec, g, twice, c, tp=4, gdn_layers=30)
    assert b2[3] - without[3] == pytest.approx(2 * (base[3] - without[3]))


def test_shipped_hybrid_eager_layer_cost_is_the_results_all_layout_fit(repo_root):
    """engines.yaml's FITTED launch.hybrid_eager_layer_us is the value E3.4's committed result fits on all layouts,
    and the held-out values of the layouts are reported beside it."""
    import json

    from steptime.specs.engines import get_engine

    fit = json.loads((repo_root / "results/E3_4.json").read_text())["metrics"]["fpm_hybrid_eager_fit"]
    shipped = get_engine("vllm").get("hybrid_eager_layer_us", get_gpu("b300"), Constants.default())
    assert [v["all_layouts_us"] for v in fit.values()] == [pytest.approx(shipped)]
    for v in fit.values():
        assert len(v["held_out_us"]) == len(v["fit_rows_per_layout"]) >= 2
