"""SGLang's own fused-MoE tables (issue 20, wave 39): vendored beside vLLM's and TensorRT-LLM's in the same tidy table
(column framework), SGLang's kernel sources mapped to kernel families (an unknown one refused by name), E3.1's cells
taken per engine, and SGLang's claims added to E3.1's document after TensorRT-LLM's without touching either."""
from __future__ import annotations

import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab import data
from steptime_lab.data.manifest import load_manifest
from steptime_lab.experiments import moe as E
from test_moe_trtllm import _run, one_cell  # a stand-in engine run (E3.1's run dict) and one measured cell, shared

# the SGLang version query_versions.yaml names per GPU (aiconfigurator-core 0.12.0): every GPU has a moe_perf table there
SGL_GPUS = {"a100-sxm": "0.5.10", "h100-sxm": "0.5.14", "h200-sxm": "0.5.14", "l40s": "0.5.14", "b200": "0.5.14",
            "gb200": "0.5.14", "b300": "0.5.14", "gb300": "0.5.14", "rtx-pro-6000": "0.5.14"}


def test_sglang_tables_in_the_moe_table():
    # only the plain fused-MoE table is vendored (not the wideep_* DeepEP or dsv4_megamoe_* tables), one per GPU
    ents = [e for e in load_manifest().entries("aic_moe") if e.get("framework") == "sglang"]
    assert sorted(e.rel.rsplit("/", 1)[1] for e in ents) == ["moe_perf.parquet"] * len(SGL_GPUS)
    d = data.load_aic_moe()
    s = d[d.framework == "sglang"]
    assert s.groupby("gpu")["framework_version"].agg(lambda v: tuple(sorted(set(v)))).to_dict() == {
        g: (v,) for g, v in SGL_GPUS.items()}
    # every kernel source is one the family map knows
    assert set(s.kernel_source) <= set(M.SGLANG_KERNEL_FAMILIES)
    assert {"sglang_fused_moe_triton", "sglang_flashinfer_trtllm_moe", "sglang_flashinfer_cutlass_moe",
            "sglang_marlin_moe"} <= set(s.kernel_source)
    # the engine's own balanced cells on the listed shapes: the Triton fused MoE on Hopper, Ada and Ampere
    c = E.cells(s, framework="sglang")
    fams = c.groupby("gpu")["family"].agg(lambda f: set(f)).to_dict()
    assert fams["h100-sxm"] == fams["a100-sxm"] == fams["l40s"] == {"triton"}
    assert fams["b200"] == {"trtllm", "triton"} and fams["rtx-pro-6000"] == {"triton", "marlin", "cutlass_sm120"}


def test_sglang_kernel_families():
    h100, b200, rtx = get_gpu("h100-sxm"), get_gpu("b200"), get_gpu("rtx-pro-6000")
    assert M.kernel_family("sglang_fused_moe_triton", h100, "sglang") == "triton"
    assert M.kernel_family("sglang_fused_moe_triton_situ_as_silu", h100, "sglang") == "triton"
    assert M.kernel_family("sglang_flashinfer_trtllm_moe", b200, "sglang") == "trtllm"
    assert M.kernel_family("sglang_mxfp4_flashinfer_trtllm_moe", b200, "sglang") == "trtllm"
    assert M.kernel_family("sglang_flashinfer_cutlass_moe", rtx, "sglang") == "cutlass_sm120"
    assert M.kernel_family("sglang_flashinfer_cutlass_moe", h100, "sglang") == "cutlass_sm90"
    assert M.kernel_family("sglang_marlin_moe", rtx, "sglang") == "marlin"
    assert M.kernel_family("sglang_marlin_moe_situ_as_silu", rtx, "sglang") == "marlin"
    # an SGLang source the map does not hold is refused by name (SGLang's triton_kernels backend, never vendored)
    with pytest.raises(ValueError, match="SGLang kernel source 'sglang_triton_kernel_moe' has no family"):
        M.kernel_family("sglang_triton_kernel_moe", b200, "sglang")
    # another engine's name is not SGLang's
    with pytest.raises(ValueError, match="SGLang kernel source 'moe_torch_flow_cutlass'"):
        M.kernel_family("moe_torch_flow_cutlass", b200, "sglang")
    assert "sglang" in M.MOE_FRAMEWORKS


def _three_engines() -> pd.DataFrame:
    """The cell on B200 measured by the three engines (SGLang's the fastest)."""
    return one_cell("b200", [("vllm", "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts", 0.5),
                             ("trtllm", "moe_torch_flow_cutlass", 0.4),
                             ("sglang", "sglang_fused_moe_triton", 0.3),
                             ("sglang", "sglang_flashinfer_trtllm_moe", 0.35)])


def test_cells_per_engine_sglang():
    df = _three_engines()
    v = E.cells(df)                          # vLLM's: SGLang's faster rows take no part
    assert len(v) == 1 and v.latency_ms.iloc[0] == 0.5
    t = E.cells(df, framework="trtllm")
    assert len(t) == 1 and t.latency_ms.iloc[0] == 0.4
    s = E.cells(df, framework="sglang")      # SGLang's fastest backend of the cell
    assert len(s) == 1 and s.latency_ms.iloc[0] == 0.3 and s.family.iloc[0] == "triton"
    f = E.cells(df, framework="sglang", per_family=True)
    assert sorted(f.family) == ["triton", "trtllm"]
    bad = pd.concat([df, df.iloc[[3]].assign(kernel_source="sglang_unknown_moe")], ignore_index=True)
    with pytest.raises(ValueError, match="'sglang_unknown_moe' has no family"):
        E.cells(bad, framework="sglang")


def test_document_engines_adds_sglang_after_trtllm():
    v, t, s = _run("vllm", 0.10), _run("trtllm", 0.20), _run("sglang", 0.11)
    two = E.document_engines(v, [t], 12.0)
    three = E.document_engines(v, [t, s], 12.0)
    n = len(two["claims"])
    assert three["claims"][:n] == two["claims"]            # vLLM's and TensorRT-LLM's claims unchanged
    added = three["claims"][n:]
    assert len(added) == 1 and added[0]["claim"].startswith("SGLang's own fused MoE on b200 (bf16), held out")
    assert added[0]["value"] == 11.0 and added[0]["met"] is True and added[0]["target"] == 12.0
    assert three["metrics"]["trtllm"] == two["metrics"]["trtllm"]
    assert three["metrics"]["sglang"]["mape_pct"] == {"b200/bf16": 11.0}
    assert "terms.moe.SGLANG_KERNEL_FAMILIES" in three["metrics"]["sglang"]["law"]
    assert "own SGLang cells" in three["metrics"]["sglang"]["law"]
    assert "terms.moe.TRTLLM_KERNEL_FAMILIES" in three["metrics"]["trtllm"]["law"]
    assert three["metrics"]["met"] == two["metrics"]["met"]
    with pytest.raises(ValueError, match="engine 'sglang' given twice"):
        E.document_engines(v, [s, s], 12.0)


def test_only_vllms_laws_ship():
    # another engine's run fits no all-GPU laws (its `ship` is empty) and moe_constants_doc refuses it by name
    assert E.SHIPPED_FRAMEWORK == "vllm"
    with pytest.raises(ValueError, match="shipped are vllm's; got a run of 'sglang'"):
        E.moe_constants_doc({**_run("sglang", 0.1), "ship": {}, "ship_scales": {}})
    with pytest.raises(ValueError, match="got a run of 'trtllm'"):
        E.moe_constants_doc({**_run("trtllm", 0.1), "ship": {}, "ship_scales": {}})
