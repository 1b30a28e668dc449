"""vLLM's Hopper block-fp8 fused-MoE kernel by EP (issue 20, wave 41, helper vhop): vLLM 0.24.0 runs Triton at EP 1 and
FlashInfer CUTLASS at EP > 1 for a block-fp8 checkpoint on sm 90 (DEFAULT_SOURCES_BY_EP). E3.1 picks that kernel per
cell (its row, priced by its family's law alone); the shipped constants carry it as family:<dtype> (EP 1) and
family_ep:<dtype> (EP > 1), and the product's routed-expert law reads family_ep at ep > 1."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

QWEN = {"hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128}        # qwen3-235b-a22b
CUT, TRI = "vllm_fp8moe_flashinfer_cutlass_flashinferexperts", "vllm_fp8moe_triton_tritonexperts"


def _rows(gpu, sources_by_ep, dtype="fp8_block", tokens=(1, 16, 256)):
    """vLLM rows of Qwen3-235B's shape: per moe_ep, {kernel source: latency at 16 tokens}."""
    return pd.DataFrame([{"framework": "vllm", "gpu": gpu, "dtype": dtype, "distribution": "balanced", **QWEN,
                          "moe_tp": 1, "moe_ep": ep, "num_tokens": T, "kernel_source": k,
                          "latency_ms": ms * (1 + T / 64)}
                         for ep, sources in sources_by_ep.items() for T in tokens for k, ms in sources.items()])


def test_the_default_by_ep_is_vllms_hopper_fp8_block_only():
    assert set(E.DEFAULT_SOURCES_BY_EP) == {"vllm"} and set(E.DEFAULT_SOURCES_BY_EP["vllm"]) == {("fp8_block", 90)}
    one, many, why = E.DEFAULT_SOURCES_BY_EP["vllm"][("fp8_block", 90)]
    h100 = get_gpu("h100-sxm")
    assert (M.kernel_family(one, h100, "vllm"), M.kernel_family(many, h100, "vllm")) == ("triton", "cutlass_sm90")
    assert "0.24.0" in why and "_get_priority_backends" in why


def test_hopper_fp8_block_cells_hold_the_eps_default_row_even_where_the_other_was_faster():
    # EP 1: CUTLASS faster, Triton is vLLM's pick; EP 4: Triton faster, CUTLASS is vLLM's pick
    df = _rows("h200-sxm", {1: {CUT: 0.1, TRI: 0.2}, 4: {CUT: 0.3, TRI: 0.1}})
    c = E.cells(df)
    assert c.groupby("moe_ep")["pick"].agg(set).to_dict() == {1: {"triton"}, 4: {"cutlass_sm90"}}
    assert c.groupby("moe_ep")["kernel_source"].agg(set).to_dict() == {1: {TRI}, 4: {CUT}}
    want = np.where(c.moe_ep > 1, 0.3, 0.2) * (1 + c.num_tokens / 64)
    assert np.allclose(c.latency_ms, want)
    # a cell without its EP's source row (the shape timed by both families elsewhere) stays undetermined, the fastest
    c = E.cells(_rows("h100-sxm", {1: {CUT: 0.1, TRI: 0.2}, 4: {TRI: 0.1}}))
    assert c.groupby("moe_ep")["pick"].agg(set).to_dict() == {1: {"triton"}, 4: {""}}


def test_other_sms_and_dtypes_keep_the_fastest():
    # sm 89 (L40S) and sm 100 (B200) have no default by EP: two families timed, no pick, the faster kept
    for g in ("l40s", "b200"):
        c = E.cells(_rows(g, {1: {CUT: 0.2, TRI: 0.1}, 4: {CUT: 0.1, TRI: 0.2}}))
        assert set(c.pick) == {""}
        assert np.allclose(c.latency_ms, 0.1 * (1 + c.num_tokens / 64))


def test_ep_default_families_and_the_shipped_family_keys():
    df = _rows("h100-sxm", {1: {TRI: 0.2}, 4: {CUT: 0.3}})
    rows = E.cells(df, per_family=True)
    assert sorted(E.ep_default_families(rows, "vllm")) == [("cutlass_sm90", "fp8_block", True),
                                                         ("triton", "fp8_block", False)]
    assert E.ep_default_families(rows, "trtllm") == []
    doc = E.moe_constants_doc({"ship": {}, "ship_scales": {}, "families": {"h100-sxm": {"fp8_block": "triton"}},
                               "families_ep": {"h100-sxm": {"fp8_block": "cutlass_sm90"}}})
    g = doc["gpu"]["h100-sxm"]
    assert g["family:fp8_block"]["value"] == "triton" and g["family:fp8_block"]["provenance"] == "DERIVED"
    assert g["family_ep:fp8_block"] == {**g["family_ep:fp8_block"], "value": "cutlass_sm90", "provenance": "DERIVED"}
    assert "DEFAULT_SOURCES_BY_EP" in g["family_ep:fp8_block"]["source"]
    # a run without families_ep (every other GPU / dtype): the measured mode, as before
    doc = E.moe_constants_doc({"ship": {}, "ship_scales": {}, "families": {"l40s": {"fp8_block": "triton"}}})
    assert doc["gpu"]["l40s"] == {"family:fp8_block": {**doc["gpu"]["l40s"]["family:fp8_block"],
                                                       "provenance": "MEASURED"}}


def _hopper_constants(family="triton", family_ep="cutlass_sm90"):
    mc = M.MoEConstants.default()
    g = dict(mc.per_gpu.get("h100-sxm", {}))
    g.pop("family_ep:fp8_block", None)
    g["family:fp8_block"] = family
    if family_ep:
        g["family_ep:fp8_block"] = family_ep
    return mc.with_values(per_gpu={"h100-sxm": g})


def test_the_product_prices_ep_above_one_with_family_ep():
    h100 = get_gpu("h100-sxm")
    mc = _hopper_constants()
    T = np.array([1.0, 16.0, 256.0, 4096.0])
    args = (T, 4096, 1536, 8, 128, h100, mc)

    def t(ep, family=None):
        return M.routed_experts_time(*args, tp=1, ep=ep, dtype="fp8_block", routing="balanced", family=family)["t"]

    tri1, cut1, tri8, cut8 = t(1, "triton"), t(1, "cutlass_sm90"), t(8, "triton"), t(8, "cutlass_sm90")
    assert not np.allclose(tri1, cut1) and not np.allclose(tri8, cut8)   # the two laws differ here
    assert np.array_equal(t(1), tri1) and np.array_equal(t(8), cut8)
    # an array of EPs mixing 1 and > 1: each cell by its own EP's family
    ep = np.array([1, 8, 1, 8])
    mixed = t(ep)
    assert np.array_equal(mixed, np.where(ep > 1, t(ep, "cutlass_sm90"), t(ep, "triton")))
    # without family_ep every EP reads family:<dtype>, as before
    assert np.array_equal(M.routed_experts_time(*args[:-1], _hopper_constants(family_ep=None), ep=8, dtype="fp8_block",
                                                routing="balanced")["t"], tri8)


def test_a_family_ep_without_a_law_is_refused_in_one_line():
    doc = {"global": {"eta_c:fp8_block@triton": {"value": 0.5, "provenance": "FITTED"}},
           "gpu": {"h100-sxm": {"family:fp8_block": {"value": "triton", "provenance": "DERIVED"},
                                "family_ep:fp8_block": {"value": "cutlass_sm90", "provenance": "DERIVED"}}}}
    with pytest.raises(ValueError, match=r"family_ep:fp8_block names kernel family 'cutlass_sm90'") as e:
        M.MoEConstants.from_doc(doc)
    assert "\n" not in str(e.value)
    assert M.is_kernel_key("family_ep:fp8_block")   # replaced with another framework's own (for_kernels)
