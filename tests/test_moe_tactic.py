"""E3.1 wave 41 (helper `tactic`): the tactic law, TensorRT-LLM's CUTLASS grouped GEMM priced by the CTA tile its
autotuner would pick (terms.moe.tactic_compute; steptime_lab.experiments.moe TACTIC_FAMILIES), an option."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law  # tests/fit_law_steps.py

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 25.0, "token_passes": 0.5,
       "local_token_passes": 2.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 2.0, "tile_m": 16.0,
       "unpadded_rows": 0.0}


def test_tile_lists_are_the_sources_and_other_gpus_or_dtypes_are_refused():
    assert M.tactic_tiles(get_gpu("h100-sxm"), "bf16") == ((128, 16), (128, 32), (128, 64), (128, 128), (128, 256),
                                                            (256, 128))
    b200, b300 = get_gpu("b200"), get_gpu("b300")
    assert (128, 16) in M.tactic_tiles(b200, "fp8") and (128, 16) not in M.tactic_tiles(b200, "bf16")
    assert M.tactic_tiles(b200, "nvfp4") == ((128, 128), (128, 256), (128, 64))
    assert M.tactic_tiles(b300, "bf16") == M.tactic_tiles(b200, "bf16")   # sm 103 runs sm 100's list
    for gpu, dt in (("l40s", "bf16"), ("rtx-pro-6000", "bf16"), ("b200", "fp8_block"), ("b200", "mxfp4")):
        with pytest.raises(ValueError, match="no CUTLASS tile list"):
            M.tactic_tiles(get_gpu(gpu), dt)
    with pytest.raises(ValueError, match="tactic choice"):
        M.tactic_compute(np.array([8.0]), 4096.0, 1536.0, 8, 128, 1, b200, "bf16", lambda tN: 1.0, "fastest")


def _rows(T, ep=1, E_=128, k=8):
    return lambda tN: M.routed_load(T, E_, k, ep, "balanced", int(tN))[2] / tN


def test_bucket_tactic_is_held_for_the_next_count_and_priced_in_whole_waves():
    """Qwen3-235B-A22B's layer (h 4096, i 1536, 128 experts, top-8) on B200 (148 SMs), 3,072 tokens: 192 rows per
    expert. 'padding': the 2,048-token bucket (128 rows) picks 128x128 (the largest tile that pads nothing), which
    prices 192 rows as 256; 'waves': its wave tails pick 64x64, which pads nothing at 192."""
    b200 = get_gpu("b200")
    T = np.array([3072.0])
    w, fm, fn = M.tactic_compute(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), "padding")
    assert (fm[0], fn[0]) == (128.0, 128.0)
    rows = 128 * 2   # two 128-row tiles per expert
    g1, g2 = rows * (3072 // 128), rows * (4096 // 128)
    want = (np.ceil(g1 / 148) * 148 * 2 * 128 * 128 * 4096 + np.ceil(g2 / 148) * 148 * 2 * 128 * 128 * 1536)
    assert w[0] == want
    w2, fm2, fn2 = M.tactic_compute(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), "waves")
    assert (fm2[0], fn2[0]) == (64.0, 64.0) and w2[0] < w[0]
    # at the bucket itself neither form pads the rows: the work is the real FLOPs plus the wave tails only
    Tb = np.array([2048.0])
    for choice in M.TACTIC_CHOICES:
        wb = M.tactic_compute(Tb, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(Tb), choice)[0]
        assert 1.0 <= wb[0] / (6 * 4096 * 1536 * 2048 * 8) < 1.02


def test_feature_and_k_tiles_pad_a_narrow_width_per_rank():
    """TP 32 of a 1,536-wide expert: 48 columns per rank. GEMM1's 96 features pad to a 128 tile on H100 and GEMM2's
    K of 48 pads to 64 bf16 elements (128 bytes); with 1,024 rows per expert (no row padding at 128)."""
    h100 = get_gpu("h100-sxm")
    T = np.array([16384.0])
    w, fm, fn = M.tactic_compute(T, 4096.0, 48.0, 8, 128, 1, h100, "bf16", _rows(T), "padding")
    assert fm[0] in (128.0, 256.0)
    real = 6 * 4096 * 48 * 16384 * 8
    padded = 2 * (128 * 4096 + 4096 * 64) * 16384 * 8   # per row: GEMM1 128 x h, GEMM2 h x 64
    assert w[0] >= padded and w[0] / padded < 1.05 and w[0] / real > 1.3   # and the wave tails (132 SMs)


def _law(**extra):
    return M.MoEConstants(values={f"{k}:bf16": v for k, v in {**LAW, **extra}.items()})


def test_the_law_flag_replaces_the_padded_flops_in_routed_experts_time():
    b200 = get_gpu("b200")
    T = np.array([1.0, 64.0, 3072.0, 16384.0])
    plain = M.routed_experts_time(T, 4096, 1536, 8, 128, b200, _law(), dtype="bf16", routing="balanced")
    for flag, choice in ((1.0, "waves"), (2.0, "padding")):
        tac = M.routed_experts_time(T, 4096, 1536, 8, 128, b200, _law(tactic=flag), dtype="bf16", routing="balanced")
        work = M.tactic_compute(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), choice)[0]
        np.testing.assert_allclose(tac["t_compute"], work / (M.math_peak(b200, "bf16") * 0.5), rtol=1e-12)
        np.testing.assert_array_equal(tac["t_memory"], plain["t_memory"])
        assert not np.array_equal(tac["t_compute"], plain["t_compute"])


def _cells(flag: float) -> pd.DataFrame:
    rows = [(T, tp, ep) for T in (1, 16, 48, 256, 768, 3072, 16384) for tp in (1, 8, 32) for ep in (1, 8)]
    mc = _law(tactic=flag)
    d = pd.DataFrame({"gpu": "b200", "sdtype": "bf16", "distribution": "balanced", "family": "cutlass_sm100",
                      "num_tokens": [r[0] for r in rows], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                      "num_experts": 128, "moe_tp": [r[1] for r in rows], "moe_ep": [r[2] for r in rows]})
    d["latency_ms"] = [float(M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("b200"), mc, tp=tp, ep=ep,
                                                   dtype="bf16", routing="balanced", regime="resident",
                                                   family="")["t"]) * 1e3 for T, tp, ep in rows]
    return d


@pytest.mark.parametrize("choice", ["waves", "padding"])
def test_fit_law_carries_the_tactic_bit_for_bit_and_the_fit_takes_it_from_the_mark(monkeypatch, choice):
    flag = float(M.TACTIC_CHOICES.index(choice) + 1)
    d = _cells(flag)
    names, p0, lo, hi = E.law_params("bf16")
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "bf16", names, {"unpadded_rows": 0.0, "tile_m": 16.0, "tactic": flag})
    x = np.asarray(lo) + np.random.default_rng(3).random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "bf16", x)
    monkeypatch.setattr(E, "TACTIC_CHOICE", choice)
    fit = E.fit_dtype(E.with_tactic(d, True), "bf16")
    assert fit["tactic"] == flag and "tile_n" not in fit and "full_tile_stream" not in fit
    assert "tactic" not in E.fit_dtype(E.with_tactic(d, False), "bf16")


def test_the_option_reaches_trtllms_cutlass_families_only_and_is_adopted_in_its_padding_form():
    assert E.TACTIC_DEFAULT is True and E.TACTIC_CHOICE == "padding"
    for fam in ("cutlass_sm90", "cutlass_sm100", "cutlass_sm103"):
        for dt in ("bf16", "fp8", "nvfp4"):
            assert E.tactic_family("trtllm", fam, dt, True)
        assert not E.tactic_family("trtllm", fam, "bf16", False)
        assert not E.tactic_family("trtllm", fam, "fp8_block", True)
        assert not E.tactic_family("vllm", fam, "bf16", True) and not E.tactic_family("sglang", fam, "bf16", True)
    for fam in ("deepgemm", "trtllm", "torch_flow_sm100", "cutlass_sm89", "cutlass_sm120", None):
        assert not E.tactic_family("trtllm", fam, "bf16", True)
    d = _cells(1.0)
    assert not E.tactic_law(d, "bf16") and E.tactic_law(E.with_tactic(d, True), "bf16")
    assert not E.tactic_law(E.with_tactic(d, True), "fp8")   # no cell of the dtype: not marked
