"""An engine's MoE step reads the fused-MoE laws of the kernels it runs (specs/engines.yaml moe.kernels;
calibration/moe.yaml constants.frameworks; MoEConstants.for_kernels; issue 20 step 3, wave 39, trtstep)."""
import copy
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from steptime.errors import UnsupportedError
from steptime.specs import engines as E
from steptime.specs import get_gpu, get_model
from steptime.step import predict_step
from steptime.terms import moe as M
from steptime_lab.experiments import moe as X

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src/steptime/calibration/moe.yaml"


def _doc():
    return yaml.safe_load(SHIPPED.read_text())["constants"]


def test_each_profile_names_the_kernels_its_moe_term_reads():
    assert E.get_engine("trtllm").moe_kernels() == "trtllm"
    assert E.get_engine("trtllm").lookup("moe_kernels").provenance == "DERIVED"
    for name in ("vllm", "vllm-v1-unfused", "vllm-v1-sync", "vllm-no-p2p"):
        assert E.get_engine(name).moe_kernels() == "vllm", name
        assert E.get_engine(name).lookup("moe_kernels").provenance == "DERIVED", name
    sg = E.get_engine("sglang")  # its own tables are not vendored yet: vLLM's law, said so
    assert sg.moe_kernels() == "vllm" and sg.lookup("moe_kernels").provenance == "ASSUMED"
    assert "no SGLang fused-MoE table is vendored" in sg.lookup("moe_kernels").source
    assert E.get_engine("kernels").moe_kernels() == E.MOE_KERNELS_DEFAULT == "vllm"  # absent: today's pricing
    assert set(E.MOE_KERNELS) <= set(M.MOE_FRAMEWORKS)


def test_an_unknown_kernels_value_is_refused_in_one_line_naming_engine_and_value():
    doc = {"host_terms": False, "moe": {"kernels": {"value": "flashinfer", "provenance": "ASSUMED", "source": "x"}},
           "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}},
           "backend": "none"}
    with pytest.raises(ValueError) as exc:
        E._parse_engine("myengine", doc)
    msg = str(exc.value)
    assert "\n" not in msg and "engine myengine" in msg and "moe.kernels 'flashinfer'" in msg
    ok = copy.deepcopy(doc)
    ok["moe"]["kernels"]["value"] = "trtllm"
    assert E._parse_engine("myengine", ok).moe_kernels() == "trtllm"
    with pytest.raises(UnsupportedError, match="unknown fused-MoE kernel framework 'flashinfer'"):
        M.MoEConstants.default().for_kernels("flashinfer")


def test_a_framework_without_shipped_laws_is_refused():
    doc = _doc()
    doc.pop("frameworks", None)
    mc = M.MoEConstants.from_doc(doc)
    with pytest.raises(UnsupportedError, match="no fused-MoE laws of framework 'trtllm'"):
        mc.for_kernels("trtllm")
    with pytest.raises(UnsupportedError, match="no fused-MoE laws of framework 'trtllm'"):
        predict_step("gpt-oss-120b", "h200", decode=[(16, 2048)], tp=2, dtype="mxfp4", engine="trtllm",
                     moe_constants=mc)
    bad = {**doc, "frameworks": {"trtllm": {"global": {"a2a_floor_us:ll:dispatch": {
        "value": 1.0, "provenance": "FITTED", "source": "x"}}}}}
    with pytest.raises(ValueError, match="not a fused-MoE kernel constant"):
        M.MoEConstants.from_doc(bad)
    with pytest.raises(ValueError, match="frameworks.sglang is not a framework"):
        M.MoEConstants.from_doc({**doc, "frameworks": {"sglang": {}}})


def test_kernel_keys_are_the_law_family_and_readings_only():
    for k in ("eta_c:bf16", "floor_us:nvfp4@cutlass_sm100", "family:fp8_block", "s_c", "s_mem", "d_floor_us",
              "batch_us:bf16@trtllm"):
        assert M.is_kernel_key(k), k
    for k in ("a2a_floor_us:ll:dispatch", "a2a_s_floor:ll:combine", "mla_eta_kv", "mla_head_cycles"):
        assert not M.is_kernel_key(k), k


def test_the_trtllm_set_holds_only_trtllm_kernel_laws_and_keeps_the_rest():
    mc = M.MoEConstants.default()
    t = mc.for_kernels("trtllm")
    own = mc.frameworks["trtllm"]
    assert mc.for_kernels("vllm") is mc
    assert mc.for_kernels("trtllm") is t  # built once per framework and constants object
    # every kernel law is TRT-LLM's own: none of vLLM's leaks in (e.g. vLLM's FlashInfer "trtllm" family laws)
    assert {k for k in t.values if M.is_kernel_key(k)} == set(own["values"])
    assert all(t.values[k] == v for k, v in own["values"].items())
    # the all-to-all and MLA constants are vLLM's set's, unchanged
    rest = {k: v for k, v in mc.values.items() if not M.is_kernel_key(k)}
    assert rest and all(t.values[k] == v for k, v in rest.items())
    for g in ("b200", "h200-sxm"):
        assert t.per_gpu[g]["family:bf16"] == own["per_gpu"][g]["family:bf16"]
        assert t.per_gpu[g]["s_c"] == own["per_gpu"][g]["s_c"]
        assert t.per_gpu[g]["a2a_s_slope:ht"] == mc.per_gpu[g]["a2a_s_slope:ht"]
    # the default families (DEFAULT_SOURCES): TensorRT-LLM's CUTLASS MoE, DeepGEMM for Blackwell's fp8_block
    assert t.per_gpu["b200"]["family:nvfp4"] == "cutlass_sm100"
    assert t.per_gpu["b200"]["family:fp8_block"] == "deepgemm"
    assert t.per_gpu["h200-sxm"]["family:fp8_block"] == "cutlass_sm90"
    assert t.per_gpu["h200-sxm"]["family:mxfp4"] == "torch_flow"


@pytest.mark.parametrize("model,gpu,tp,ep,dtype", [("gpt-oss-120b", "h200", 4, 1, "mxfp4"),
                                                   ("deepseek-v3", "b200", 8, 1, "fp8_block"),
                                                   ("qwen3-235b-a22b", "b200", 4, 1, "nvfp4")])
def test_a_trtllm_step_and_a_vllm_step_differ_by_their_laws_ratio(model, gpu, tp, ep, dtype):
    """The same MoE shape on the two engines: the routed-expert term of each is routed_experts_time (one law) on
    that engine's constants, so their ratio is the laws' ratio; vLLM's is the top-level law, as before."""
    mc = M.MoEConstants.default()
    m, g = get_model(model), get_gpu(gpu)
    n = 16
    steps = {eng: predict_step(model, gpu, decode=[(n, 2048)], tp=tp, ep=ep, dtype=dtype, engine=eng)
             for eng in ("vllm", "trtllm")}

    def law_ms(consts):
        x = M.routed_experts_time(np.array([float(n)]), m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok,
                                  m.num_experts, g, consts, tp=tp, ep=ep, dtype=dtype,
                                  routing=f"power_law_{float(m.router_alpha):g}")
        return float(m.n_moe_layers * (x["t"] - x["t_tokens"])[0] * 1e3)

    v, t = law_ms(mc), law_ms(mc.for_kernels("trtllm"))
    assert steps["vllm"].terms_ms["moe_experts"] == pytest.approx(v, rel=1e-12)
    assert steps["trtllm"].terms_ms["moe_experts"] == pytest.approx(t, rel=1e-12)
    assert steps["trtllm"].terms_ms["moe_experts"] / steps["vllm"].terms_ms["moe_experts"] == pytest.approx(
        t / v, rel=1e-12)
    assert abs(t / v - 1.0) > 1e-3  # the two engines' kernels are priced apart


def test_vllms_numbers_do_not_depend_on_another_frameworks_laws():
    doc = _doc()
    bare = {k: v for k, v in doc.items() if k != "frameworks"}
    with_, without = M.MoEConstants.from_doc(doc), M.MoEConstants.from_doc(bare)
    for eng in ("vllm", "vllm-v1-sync", "sglang"):
        a = predict_step("qwen3-235b-a22b", "h200", decode=[(32, 1024)], tp=4, dtype="fp8_block", engine=eng,
                         moe_constants=with_)
        b = predict_step("qwen3-235b-a22b", "h200", decode=[(32, 1024)], tp=4, dtype="fp8_block", engine=eng,
                         moe_constants=without)
        assert a.terms_ms == b.terms_ms, eng


def test_settle_appends_the_framework_section_after_vllms():
    k = {"global": {"eta_c:bf16": {"value": 0.5, "provenance": "FITTED", "source": "x"}}, "gpu": {}}
    a = {"global": {}, "gpu": {}}
    plain = X.settle(k, a, a)
    assert "frameworks" not in plain["constants"]
    fw = {"trtllm": {"global": {"eta_c:bf16": {"value": 0.4, "provenance": "FITTED", "source": "y"}}, "gpu": {}}}
    both = X.settle({**k, "frameworks": fw}, a, a)
    assert list(both["constants"]) == ["global", "gpu", "frameworks"]
    assert both["constants"]["global"] == plain["constants"]["global"]
    assert both["constants"]["frameworks"] == fw


def test_default_families_follow_trtllms_default_backend_not_the_fastest():
    rows = pd.DataFrame({"gpu": ["b200"] * 4 + ["h200-sxm"] * 2,
                         "sdtype": ["nvfp4", "nvfp4", "fp8_block", "bf16", "fp8_block", "mxfp4"],
                         "kernel_source": ["moe_torch_flow_min_latency", "moe_torch_flow_cutlass", "deepgemm",
                                           "moe_torch_flow_cutlass", "moe_torch_flow_cutlass", "moe_torch_flow"],
                         "latency_ms": [0.1, 0.5, 1.0, 1.0, 1.0, 1.0]})
    fam = X.default_families(rows, "trtllm")
    assert fam == {"b200": {"nvfp4": "cutlass_sm100", "fp8_block": "deepgemm", "bf16": "cutlass_sm100"},
                   "h200-sxm": {"fp8_block": "cutlass_sm90", "mxfp4": "torch_flow"}}
    assert X.default_families(rows, "vllm") == {}  # vLLM ships its fastest backend's family
