"""TensorRT-LLM's own fused-MoE tables (issue 20, wave 38): vendored beside vLLM's in the same tidy table (column
framework), their kernel sources mapped to kernel families, E3.1's cells taken per engine, and the second engine's
claims added to E3.1's document without touching vLLM's."""
from __future__ import annotations

import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab import data
from steptime_lab.experiments import moe as E

TRT_GPUS = {"a100-sxm": "1.0.0", "h100-sxm": "1.3.0rc20", "h200-sxm": "1.3.0rc20", "l40s": "1.3.0rc20",
            "b200": "1.3.0rc20", "gb200": "1.3.0rc20", "b300": "1.3.0rc20", "gb300": "1.3.0rc20",
            "rtx-pro-6000": "1.3.0rc20"}


def test_trtllm_tables_in_the_moe_table():
    d = data.load_aic_moe()
    t = d[d.framework == "trtllm"]
    # one TensorRT-LLM version per GPU (query_versions.yaml's current), every GPU vLLM has
    assert t.groupby("gpu")["framework_version"].agg(lambda v: tuple(sorted(set(v)))).to_dict() == {
        g: (v,) for g, v in TRT_GPUS.items()}
    assert set(d.loc[d.framework == "vllm", "gpu"]) == set(TRT_GPUS)
    # every kernel source is one the family map knows or a non-gated source
    assert set(t.kernel_source) <= set(M.TRTLLM_KERNEL_FAMILIES) | set(M.NONGATED_SOURCES)
    assert {"moe_torch_flow_cutlass", "deepgemm", "moe_torch_flow_min_latency"} <= set(t.kernel_source)
    # the A100's 1.0.0 table holds power-law rows only
    assert set(t.loc[t.gpu == "a100-sxm", "distribution"]) == {"power_law_1.01", "power_law_1.2"}


def test_trtllm_kernel_families():
    h100, b200 = get_gpu("h100-sxm"), get_gpu("b200")
    assert M.kernel_family("moe_torch_flow_cutlass", h100, "trtllm") == "cutlass_sm90"
    assert M.kernel_family("moe_torch_flow_cutlass", b200, "trtllm") == "cutlass_sm100"
    assert M.kernel_family("moe_torch_flow_min_latency", b200, "trtllm") == "trtllm"
    assert M.kernel_family("deepgemm", b200, "trtllm") == "deepgemm"
    assert M.kernel_family("moe_torch_flow", h100, "trtllm") == "torch_flow_sm90"   # per architecture (wave 40)
    assert M.kernel_family("moe_torch_flow", b200, "trtllm") == "torch_flow_sm100"
    # the vLLM name matching is unchanged (a TRT-LLM name read as vLLM's falls to its default, triton)
    assert M.kernel_family("deepgemm", b200) == "triton"
    with pytest.raises(ValueError, match="moe_torch_flow_nongated.*has no family"):
        M.kernel_family("moe_torch_flow_nongated", b200, "trtllm")
    with pytest.raises(ValueError, match="unknown fused-MoE kernel framework 'tgi'"):   # an engine without a kernel-family map
        M.kernel_family("moe_torch_flow_cutlass", b200, "tgi")


def one_cell(gpu: str, rows: list) -> pd.DataFrame:
    """One Qwen3-235B-A22B bf16 balanced cell at 16 tokens on `gpu`, one row per (framework, kernel_source,
    latency_ms) of `rows`."""
    base = {"gpu": gpu, "dtype": "bfloat16", "distribution": "balanced", "hidden_size": 4096,
            "inter_size": 1536, "topk": 8, "num_experts": 128, "moe_tp": 1, "moe_ep": 1, "num_tokens": 16}
    return pd.DataFrame([{**base, "framework": f, "kernel_source": k, "latency_ms": ms} for f, k, ms in rows])


def _two_engines() -> pd.DataFrame:
    """The cell on H100 measured by both engines (TRT-LLM faster), and a non-gated TRT-LLM row."""
    return one_cell("h100-sxm", [("vllm", "vllm_unquantizedfusedmoe_triton_tritonexperts", 0.5),
                                 ("trtllm", "moe_torch_flow_cutlass", 0.3),
                                 ("trtllm", "moe_torch_flow_nongated", 0.1)])


def test_cells_per_engine():
    df = _two_engines()
    v = E.cells(df)                        # vLLM's by default: the TRT-LLM rows take no part
    assert len(v) == 1 and v.latency_ms.iloc[0] == 0.5 and v.family.iloc[0] == "triton"
    t = E.cells(df, framework="trtllm")    # TRT-LLM's: its gated row, not the non-gated one
    assert len(t) == 1 and t.latency_ms.iloc[0] == 0.3 and t.family.iloc[0] == "cutlass_sm90"
    assert len(E.cells(df.drop(columns="framework"))) == 1          # no column: vLLM's table
    assert len(E.cells(df.drop(columns="framework"), framework="trtllm")) == 0
    with pytest.raises(ValueError, match="unknown fused-MoE kernel framework 'tgi'"):
        E.cells(df, framework="tgi")


def _run(framework, mape):
    per = pd.DataFrame({"gpu": ["b200"], "sdtype": ["bf16"], "n": [10], "mape": [mape], "p90": [mape],
                        "mape_evicted": [mape], "mape_noread": [mape], "mape_baseline": [0.5],
                        "mape_balanced_routing": [mape]})
    fits = {"b200": {"per_dtype": {}, "trained_on": {"bf16": "x"}, "unscaled": []}}
    return {"per": per, "per_skew": per.iloc[:0], "eval": per, "eval_skew": per.iloc[:0], "fits": fits,
            "readings": {"b200": []}, "cells": pd.DataFrame({"sdtype": []}), "families": {"b200": {"bf16": "x"}},
            "framework": framework}


def test_document_engines_adds_the_second_engines_claims_only():
    v, t = _run("vllm", 0.10), _run("trtllm", 0.20)
    alone = E.document(v, 12.0)
    both = E.document_engines(v, [t], 12.0)
    n = len(alone["claims"])
    assert both["claims"][:n] == alone["claims"]            # vLLM's claims unchanged
    added = both["claims"][n:]
    assert len(added) == 1 and added[0]["claim"].startswith("TensorRT-LLM's own fused MoE on b200 (bf16)")
    assert added[0]["value"] == 20.0 and added[0]["met"] is False
    assert both["metrics"]["trtllm"]["mape_pct"] == {"b200/bf16": 20.0}
    assert both["metrics"]["met"] == alone["metrics"]["met"] and both["metrics"]["groups"] == 1
    with pytest.raises(ValueError, match="another engine than vLLM"):
        E.document_engines(v, [v], 12.0)


def test_trtllms_triton_path_is_not_vllms_triton_family():
    """TensorRT-LLM's Triton fp8-block MoE is other code than vLLM's Triton fused MoE, so it is a family of its own:
    a law or rule keyed on vLLM's `triton` family (the EP-remap floor, the bf16 readings' scaling) must not reach it
    (wave 40, review10: mapping it to `triton` survived every test)."""
    h100 = get_gpu("h100-sxm")
    fam = M.kernel_family("moe_torch_flow_triton_fp8_block", h100, "trtllm")
    assert fam == "trt_triton" and fam not in M.KERNEL_FAMILIES
    # every TensorRT-LLM source that is not vLLM-shared code (CUTLASS, TRT-LLM-gen) names a family vLLM's map lacks
    shared = {"moe_torch_flow_cutlass", "moe_torch_flow_min_latency"}
    for src, f in M.TRTLLM_KERNEL_FAMILIES.items():
        assert (f in M.KERNEL_FAMILIES) == (src in shared), (src, f)
