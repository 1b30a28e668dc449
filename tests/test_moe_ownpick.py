"""Which law prices an E3.1 cell (issue 20, wave 40 rule by helper ownfam, landed wave 41 by helper ownland): a cell
whose kernel the engine's choice determines (one kernel family timed for its model shape and dtype on the GPU, or a
source-established default kernel) is priced with that family's law alone; a cell timed by several families with no
established default (TensorRT-LLM's B200 / GB200 nvfp4 gap) stays the fastest backend, priced with the faster of the
GPU's laws (fmin), as before; vLLM's Hopper fp8_block has its default by EP since wave 41 (tests/test_moe_vhop.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from steptime_lab.experiments import moe as E

QWEN = {"hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128}        # qwen3-235b-a22b
MINI = {"hidden_size": 3072, "inter_size": 1536, "topk": 8, "num_experts": 256}        # minimax-m2.5
Q30 = {"hidden_size": 2048, "inter_size": 768, "topk": 8, "num_experts": 128}          # qwen3-30b-a3b


def _rows(framework, gpu, dtype, shape, sources, tokens=(1, 16, 256)):
    """One row per (tokens, kernel source) of `sources` {source: latency at 16 tokens, scaled with the tokens}."""
    return [{"framework": framework, "gpu": gpu, "dtype": dtype, "distribution": "balanced", **shape, "moe_tp": 1,
             "moe_ep": 1, "num_tokens": T, "kernel_source": k, "latency_ms": ms * (1 + T / 64)}
            for T in tokens for k, ms in sources.items()]


def _law(scale: float) -> dict:
    """A bf16 law: P0's constants with the efficiencies times `scale` and the floor over it (scale < 1: a law
    slower on every cell)."""
    names, p0, _, _ = E.law_params("bf16")
    law = {**dict(zip(names, p0)), "tile_m": 64.0, "unpadded_rows": 0.0}
    law["eta_c"] *= scale
    law["eta_mem_max"] *= scale
    law["floor_us"] = (law["floor_us"] + 5.0) / scale
    return law


def test_cells_name_the_engines_pick_per_model_shape():
    tri, gen = "sglang_fused_moe_triton", "sglang_flashinfer_trtllm_moe"
    df = pd.DataFrame(_rows("sglang", "b200", "bfloat16", QWEN, {tri: 0.3})            # one family: Triton
                      + _rows("sglang", "b200", "bfloat16", MINI, {gen: 0.2})          # one family: TRT-LLM-gen
                      + _rows("sglang", "b200", "bfloat16", Q30, {tri: 0.1, gen: 0.15}))   # both timed
    c = E.cells(df, framework="sglang")
    pick = c.groupby("num_experts")["pick"].agg(set).to_dict()
    assert pick == {128: {"", "triton"}, 256: {"trtllm"}}
    assert set(c[c.hidden_size == 4096].pick) == {"triton"} and set(c[c.hidden_size == 2048].pick) == {""}
    # an undetermined cell stays the fastest backend (Triton, 0.1 x)
    assert set(c[c.hidden_size == 2048].family) == {"triton"}
    # per-family rows (what a law is fitted on) carry no pick
    assert "pick" not in E.cells(df, framework="sglang", per_family=True)


def test_a_picked_cell_is_priced_by_its_own_family_law_alone():
    # the cells as cells() gives them (built here so the pricing is tested alone): Qwen3-235B's shape timed by Triton
    # only, MiniMax-M2.5's by TRT-LLM-gen only, Qwen3-30B's by both (undetermined, the fastest kept)
    c = pd.DataFrame([{"gpu": "b200", "sdtype": "bf16", "distribution": "balanced", **shape, "moe_tp": 1,
                       "moe_ep": ep, "num_tokens": T, "pick": pick}
                      for shape, pick in ((QWEN, "triton"), (MINI, "trtllm"), (Q30, ""))
                      for T in (1, 16, 256, 4096) for ep in (1, 4)])
    fast, slow = _law(1.0), _law(0.5)          # the Triton law is the slower one: fmin would never take it
    per_dtype = {"bf16@triton": slow, "bf16@trtllm": fast}
    got = E.predict(c, per_dtype)
    t_tri, t_gen = E.predict(c.drop(columns="pick"), {"bf16": slow}), E.predict(c.drop(columns="pick"), {"bf16": fast})
    assert np.isfinite(got).all() and (t_tri > t_gen).all()   # the two laws differ on every cell
    p = c.pick.to_numpy()
    assert np.array_equal(got[p == "triton"], t_tri[p == "triton"])    # Triton's shape: Triton's law, the slower
    assert np.array_equal(got[p == "trtllm"], t_gen[p == "trtllm"])
    assert np.array_equal(got[p == ""], np.fmin(t_tri, t_gen)[p == ""])   # both timed: the faster law, as before
    # a frame without `pick` (or one law for the dtype) is priced as before: the fastest of the laws
    assert np.array_equal(E.predict(c.drop(columns="pick"), per_dtype), np.fmin(t_tri, t_gen))
    assert np.array_equal(E.predict(c, {"bf16": slow}), t_tri)
    # a family that does not run the cell's shape (max_experts) is no pick there: the cell keeps its candidates' price
    opts = {"bf16@trtllm": {"max_experts": 128}}
    lim = E.predict(c, per_dtype, law_opts=opts)
    assert np.array_equal(lim[p == "trtllm"], t_tri[p == "trtllm"]) and np.array_equal(lim[p == "triton"],
                                                                                         t_tri[p == "triton"])


def test_vllms_two_family_hopper_fp8_block_cells_take_the_default_by_ep():
    # wave 41 (helper vhop): vLLM's Hopper fp8_block default is established by EP (DEFAULT_SOURCES_BY_EP): at EP 1
    # Triton, picked here also where CUTLASS was faster (tests/test_moe_vhop.py has the EP > 1 side)
    cut, tri = "vllm_fp8moe_flashinfer_cutlass_flashinferexperts", "vllm_fp8moe_triton_tritonexperts"
    h100 = E.get_gpu("h100-sxm")
    assert (E.M.kernel_family(cut, h100, "vllm"), E.M.kernel_family(tri, h100, "vllm")) == ("cutlass_sm90", "triton")
    df = pd.DataFrame(_rows("vllm", "h100-sxm", "fp8_block", QWEN, {cut: 0.1, tri: 0.2}))
    c = E.cells(df)
    assert set(c.pick) == {"triton"} and set(c.kernel_source) == {tri}


def test_trtllm_b200_nvfp4_gap_stays_the_fastest_and_an_established_default_keeps_its_row():
    cut, gen, dg = "moe_torch_flow_cutlass", "moe_torch_flow_min_latency", "deepgemm"
    # nvfp4 on sm 100 is a named gap (DEFAULT_ESTABLISHED): two families timed, no pick, the faster kept
    assert E.default_established("trtllm", "nvfp4", E.get_gpu("b200"))[0] is False
    df = pd.DataFrame(_rows("trtllm", "b200", "nvfp4", QWEN, {cut: 0.2, gen: 0.1}))
    c = E.cells(df, framework="trtllm")
    assert set(c.pick) == {""} and set(c.kernel_source) == {gen}
    # the same on Hopper fp8_block (established: CUTLASS, rule (b)): the default's row is kept though DeepGEMM was
    # faster, and its family is the pick
    df = pd.DataFrame(_rows("trtllm", "h100-sxm", "fp8_block", QWEN, {cut: 0.2, dg: 0.1}))
    c = E.cells(df, framework="trtllm")
    assert set(c.kernel_source) == {cut} and set(c.pick) == {"cutlass_sm90"}
    assert np.allclose(c.latency_ms, 0.2 * (1 + c.num_tokens / 64))
    # a shape whose only timed family is the other one is (a): that family, whatever the default
    df = pd.DataFrame(_rows("trtllm", "h100-sxm", "fp8_block", QWEN, {dg: 0.1}))
    assert set(E.cells(df, framework="trtllm").pick) == {"deepgemm"}


def test_document_engines_states_the_pricing_rule_and_sglangs_disclosure():
    from test_moe_trtllm import _run
    v, t, s = _run("vllm", 0.10), _run("trtllm", 0.20), _run("sglang", 0.11)
    doc = E.document_engines(v, [t, s], 12.0)
    m = doc["metrics"]
    assert m["cell_pricing"] == E.CELL_PRICING and E.CELL_PRICING in m["sglang"]["law"]
    assert E.CELL_PRICING in m["trtllm"]["law"]
    assert "sglmoe" in m["sglang"]["disclosed"] and "ownfam" in m["sglang"]["disclosed"]
    assert "family_options" not in m["sglang"] and m["trtllm"]["disclosed"] == E.ENGINE_DISCLOSED["trtllm"]
