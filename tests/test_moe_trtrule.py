"""TensorRT-LLM's MoE kernel mapping by architecture (issue 20, wave 40, trtrule): its W4A8 MXFP4 / MXFP8 rows are
their own E3.1 dtype, its torch_flow family is split by architecture, a TensorRT-LLM engine prices an MXFP4
checkpoint on Blackwell with the W4A8 law, and the profile's moe.kernels field follows the list in E3.4's metrics."""
from __future__ import annotations

import copy
import json
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


def test_w4a8_mxfp4_mxfp8_is_trtllms_own_dtype_half_byte_weights_on_fp8_math():
    assert M.aic_dtype("trtllm")["w4a8_mxfp4_mxfp8"] == "mxfp4_mxfp8"
    assert "w4a8_mxfp4_mxfp8" not in M.aic_dtype("vllm") and "w4a8_mxfp4_mxfp8" not in M.aic_dtype("sglang")
    assert {k: v for k, v in M.aic_dtype("trtllm").items() if k != "w4a8_mxfp4_mxfp8"} == dict(M.AIC_DTYPE)
    assert M.WEIGHT_BYTES["mxfp4_mxfp8"] == 0.5 and M.MATH["mxfp4_mxfp8"] == "fp8"
    b200 = get_gpu("b200")
    assert M.math_peak(b200, "mxfp4_mxfp8") == b200.fp8_dense_tflops * 1e12
    assert M.math_peak(b200, "mxfp4_mxfp8") == M.math_peak(b200, "nvfp4") / 2.0
    assert "mxfp4_mxfp8" in X.QUANT_DTYPES and "quant_passes" in X.law_params("mxfp4_mxfp8")[0]
    assert M.check_moe_dtype(b200, "mxfp4_mxfp8") == "mxfp4_mxfp8"
    with pytest.raises(UnsupportedError) as exc:
        M.check_moe_dtype(get_gpu("h200"), "mxfp4_mxfp8")
    assert "\n" not in str(exc.value) and "MXFP8" in str(exc.value) and "h200" in str(exc.value)
    with pytest.raises(ValueError, match="unknown fused-MoE kernel framework 'tgi'"):
        M.aic_dtype("tgi")


def _w4a8_cell(framework, source):
    return {"framework": framework, "kernel_source": source, "gpu": "b200", "dtype": "w4a8_mxfp4_mxfp8",
            "distribution": "balanced", "hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 128,
            "moe_tp": 1, "moe_ep": 1, "num_tokens": 16, "latency_ms": 0.1}


def test_e31_takes_trtllms_w4a8_rows_and_leaves_the_other_engines_out():
    df = pd.DataFrame([_w4a8_cell("trtllm", "moe_torch_flow"),
                       _w4a8_cell("vllm", "vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8_trtllmmxfp4expertsmodular"),
                       _w4a8_cell("sglang", "sglang_mxfp4_flashinfer_trtllm_moe")])
    t = X.cells(df, framework="trtllm")
    assert len(t) == 1 and t.sdtype.iloc[0] == "mxfp4_mxfp8" and t.family.iloc[0] == "torch_flow_sm100"
    assert t.model.iloc[0] == "gpt-oss-120b"
    assert len(X.cells(df, framework="vllm")) == 0 and len(X.cells(df, framework="sglang")) == 0
    assert X.DEFAULT_SOURCES["trtllm"]["mxfp4_mxfp8"] == ("moe_torch_flow",)


def test_torch_flow_is_split_by_architecture():
    fam = {g: M.kernel_family("moe_torch_flow", get_gpu(g), "trtllm")
           for g in ("h100-sxm", "h200-sxm", "b200", "gb200", "b300", "gb300")}
    assert fam == {"h100-sxm": "torch_flow_sm90", "h200-sxm": "torch_flow_sm90", "b200": "torch_flow_sm100",
                   "gb200": "torch_flow_sm100", "b300": "torch_flow_sm100", "gb300": "torch_flow_sm100"}
    # the CUTLASS family stays per SM version (sm 103 is not folded into sm 100 there)
    assert M.kernel_family("moe_torch_flow_cutlass", get_gpu("b300"), "trtllm") == "cutlass_sm103"
    # a held-out GPU's law comes from its own architecture's GPUs only
    rows = pd.DataFrame({"gpu": ["h100-sxm", "h200-sxm", "b200", "b300", "gb300"], "sdtype": "mxfp4",
                         "family": ["torch_flow_sm90", "torch_flow_sm90", "torch_flow_sm100", "torch_flow_sm100",
                                    "torch_flow_sm100"], "latency_ms": 1.0})
    t, what = X.training_cells(rows, "b200", "mxfp4", "torch_flow_sm100", rows)
    assert sorted(t.gpu) == ["b300", "gb300"] and "torch_flow_sm100" in what
    t, _ = X.training_cells(rows, "h100-sxm", "mxfp4", "torch_flow_sm90", rows)
    assert list(t.gpu) == ["h200-sxm"]
    fams = X.default_families(rows.assign(kernel_source="moe_torch_flow"), "trtllm")
    assert fams["h200-sxm"] == {"mxfp4": "torch_flow_sm90"} and fams["b300"] == {"mxfp4": "torch_flow_sm100"}


def test_trtllm_runs_mxfp4_experts_as_w4a8_on_sm100_and_103_only():
    for g in ("b200", "gb200", "b300", "gb300"):
        assert M.kernel_dtype("trtllm", "mxfp4", get_gpu(g)) == "mxfp4_mxfp8", g
    for g in ("h100", "h200", "rtx-pro-6000"):   # Hopper: W4A16; sm 120: no established default, kept
        assert M.kernel_dtype("trtllm", "mxfp4", get_gpu(g)) == "mxfp4", g
    for fw in ("vllm", "sglang"):
        assert M.kernel_dtype(fw, "mxfp4", get_gpu("b200")) == "mxfp4"
    assert M.kernel_dtype("trtllm", "nvfp4", get_gpu("b200")) == "nvfp4"
    with pytest.raises(UnsupportedError, match="unknown fused-MoE kernel framework 'tgi'"):
        M.kernel_dtype("tgi", "mxfp4", get_gpu("b200"))


def _law_ms(consts, model, gpu, tp, dtype, n):
    m, g = get_model(model), get_gpu(gpu)
    x = M.routed_experts_time(np.array([float(n)]), m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok,
                              m.num_experts, g, consts, tp=tp, ep=1, dtype=dtype,
                              routing=f"power_law_{float(m.router_alpha):g}")
    return float(m.n_moe_layers * (x["t"] - x["t_tokens"])[0] * 1e3)


def test_a_trtllm_engine_prices_gpt_oss_on_blackwell_with_the_w4a8_law_and_on_hopper_with_the_sm90_law():
    mc = M.MoEConstants.default()
    t = mc.for_kernels("trtllm")
    assert t.per_gpu["b200"]["family:mxfp4_mxfp8"] == "torch_flow_sm100"
    assert t.per_gpu["h200-sxm"]["family:mxfp4"] == "torch_flow_sm90"
    assert t.per_gpu["b200"]["family:mxfp4"] == "torch_flow_sm100"
    own = E.get_engine("trtllm").with_moe_kernels("trtllm")
    n = 16
    b = predict_step("gpt-oss-120b", "b200", decode=[(n, 2048)], tp=4, dtype="mxfp4", engine=own)
    w4a8 = _law_ms(t, "gpt-oss-120b", "b200", 4, "mxfp4_mxfp8", n)
    assert b.terms_ms["moe_experts"] == pytest.approx(w4a8, rel=1e-12)
    assert abs(_law_ms(t, "gpt-oss-120b", "b200", 4, "mxfp4", n) / w4a8 - 1.0) > 1e-3  # not the W4A16 law
    h = predict_step("gpt-oss-120b", "h200", decode=[(n, 2048)], tp=4, dtype="mxfp4", engine=own)
    assert h.terms_ms["moe_experts"] == pytest.approx(_law_ms(t, "gpt-oss-120b", "h200", 4, "mxfp4", n), rel=1e-12)
    hopper_law = {k: v for k, v in t.values.items() if k.endswith("mxfp4@torch_flow_sm90")}
    assert hopper_law and all(t.values[k.replace("torch_flow_sm90", "torch_flow_sm100")] != v
                              for k, v in hopper_law.items() if k.startswith("eta_c:"))
    # vLLM's kernels and the shipped trtllm profile (its field vllm) keep vLLM's mxfp4 law
    v = predict_step("gpt-oss-120b", "b200", decode=[(n, 2048)], tp=4, dtype="mxfp4", engine="vllm")
    d = predict_step("gpt-oss-120b", "b200", decode=[(n, 2048)], tp=4, dtype="mxfp4", engine="trtllm")
    assert v.terms_ms["moe_experts"] == pytest.approx(_law_ms(mc, "gpt-oss-120b", "b200", 4, "mxfp4", n), rel=1e-12)
    assert d.terms_ms["moe_experts"] == v.terms_ms["moe_experts"]


def test_a_family_with_no_law_is_refused_in_one_line():
    doc = yaml.safe_load((ROOT / "src/steptime/calibration/moe.yaml").read_text())["constants"]
    M.MoEConstants.from_doc(doc)   # the shipped constants name only families they hold laws for
    bad = copy.deepcopy(doc)
    bad["frameworks"]["trtllm"]["gpu"]["h200-sxm"]["family:mxfp4"]["value"] = "torch_flow"  # the pooled name
    with pytest.raises(ValueError) as exc:
        M.MoEConstants.from_doc(bad)
    msg = str(exc.value)
    assert "\n" not in msg and "frameworks.trtllm gpu h200-sxm family:mxfp4 names kernel family 'torch_flow'" in msg
    assert "torch_flow_sm90" in msg
    bad = copy.deepcopy(doc)
    g = next(iter(bad["gpu"]))
    bad["gpu"][g]["family:bf16"] = {"value": "nosuchfamily", "provenance": "DERIVED", "source": "x"}
    with pytest.raises(ValueError, match=f"constants gpu {g} family:bf16 names kernel family 'nosuchfamily'"):
        M.MoEConstants.from_doc(bad)


def _rows():
    base = {"dataset": "aic-silicon", "model_found": "specs", "engine": "trtllm", "ep": 1, "dp": 1, "mode": "agg",
            "batch": 8.0, "prompt_tokens": 1024.0, "output_tokens": 256.0, "tpot_ms": 6.0, "measure": "tpot_ms"}
    return pd.DataFrame([{**base, "gpu": "b200", "model": "gpt-oss-120b", "tp": 4, "dtype": "nvfp4",
                          "engine_version": "1.0.0", "source_id": "a"},
                         {**base, "gpu": "h200-sxm", "model": "gpt-oss-120b", "tp": 4, "dtype": "mxfp4",
                          "engine_version": "1.1.0", "source_id": "b"},
                         {**base, "gpu": "b200", "model": "deepseek-v3", "tp": 8, "dtype": "fp8_block",
                          "engine_version": "1.0.0", "source_id": "c"},
                         {**base, "gpu": "b200", "model": "qwen3-30b-a3b", "tp": 1, "dtype": "nvfp4",
                          "engine": "vllm", "engine_version": "0.11.0", "source_id": "d"}])


def test_the_own_law_pass_reads_gpt_oss_as_its_mxfp4_checkpoint():
    from steptime_lab.experiments import moe_wallclock as W

    own = W.own_rows(_rows(), "trtllm")
    assert list(own.source_id) == ["a", "b", "c"]   # the TensorRT-LLM rows only
    assert list(own.dtype) == ["mxfp4", "mxfp4", "fp8_block"]   # gpt-oss's nvfp4 label is its MXFP4 checkpoint


def test_the_kernel_list_names_each_pair_and_its_gap():
    from steptime_lab.experiments import moe_wallclock as W

    mc = M.MoEConstants.default()
    lst = W.kernel_list(_rows(), mc, "trtllm")
    pairs = {(p["gpu"], p["kernel_dtype"]): p for p in lst["pairs"]}
    assert set(pairs) == {("b200", "mxfp4_mxfp8"), ("b200", "fp8_block"), ("h200-sxm", "mxfp4")}
    assert pairs["b200", "mxfp4_mxfp8"]["closed"] and pairs["b200", "mxfp4_mxfp8"]["timed_family"] == "torch_flow_sm100"
    assert "get_mxfp4_quant_algo" in pairs["b200", "mxfp4_mxfp8"]["why"]
    assert pairs["h200-sxm", "mxfp4"]["closed"] and pairs["h200-sxm", "mxfp4"]["releases"] == ["1.1.0"]
    assert not pairs["b200", "fp8_block"]["established"] and pairs["b200", "fp8_block"]["why"].startswith("gap:")
    assert lst["closed"] is False and lst["gaps"] == [f"b200 fp8_block: {pairs['b200', 'fp8_block']['why']}"]
    assert lst["field"] == {"trtllm": "vllm"}
    closed = W.kernel_list(_rows().iloc[[0, 1]], mc, "trtllm")
    assert closed["closed"] is True and closed["gaps"] == []
    # a pair established from source but with no timed family in the constants is not closed
    doc = yaml.safe_load((ROOT / "src/steptime/calibration/moe.yaml").read_text())["constants"]
    doc["frameworks"]["trtllm"]["gpu"]["h200-sxm"].pop("family:mxfp4")
    untimed = W.kernel_list(_rows().iloc[[1]], M.MoEConstants.from_doc(doc), "trtllm")
    assert untimed["closed"] is False and untimed["gaps"] == ["h200-sxm mxfp4: not timed"]
    # a pair no entry lists is a gap
    assert X.default_established("trtllm", "bf16", get_gpu("b200"))[0] is False


def test_the_trtllm_profiles_field_follows_e34s_list():
    m = json.loads((ROOT / "results/E3_4.json").read_text())["metrics"]["moe_kernels_rule"]
    want = "trtllm" if m["closed"] else "vllm"
    assert E.get_engine("trtllm").moe_kernels() == want == m["field"]["trtllm"]
    assert all(p["closed"] == (p["established"] and p["timed_family"] is not None) for p in m["pairs"])


def test_w4a8_on_vllms_kernels_is_refused_naming_the_dtypes_it_has():
    with pytest.raises(UnsupportedError) as exc:
        predict_step("gpt-oss-120b", "b200", decode=[(8, 1024)], dtype="mxfp4_mxfp8", engine="vllm")
    msg = str(exc.value)
    assert "\n" not in msg and "no fitted fused-MoE constants of vllm's kernels for dtype 'mxfp4_mxfp8'" in msg
    assert "(calibration/moe.yaml has bf16, fp8, fp8_block, mxfp4, nvfp4)" in msg
    assert "trtllm's kernels have it" in msg  # and whose laws price it (wave 40, docs10)
