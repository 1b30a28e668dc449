"""E3.1's kernel families (wave 11): a partitioned L2 holds half the weight set, the training cells of a held-out
GPU's family (its every measured cell, the sibling dtype, the same architecture), the fastest of several families,
and the bf16 readings scaling only the bf16 family's laws."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 1.0,
       "local_token_passes": 1.0, "l2_fit": 0.8, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 4.0}


def _mc(dt="bf16", per_gpu=None, **extra):
    return M.MoEConstants(values={**{f"{k}:{dt}": v for k, v in LAW.items()}, **extra}, per_gpu=per_gpu or {})


def test_partitioned_l2_holds_half_the_weight_set():
    h100, l40s, b200 = get_gpu("h100-sxm"), get_gpu("l40s"), get_gpu("b200")
    assert M.l2_effective_bytes(h100) == pytest.approx(h100.l2_mb * 2**20 / 2)   # GH100: two partitions
    assert M.l2_effective_bytes(get_gpu("a100-sxm")) == pytest.approx(get_gpu("a100-sxm").l2_mb * 2**20 / 2)
    assert M.l2_effective_bytes(l40s) == pytest.approx(l40s.l2_mb * 2**20)       # AD102: one L2
    assert M.l2_effective_bytes(b200) == pytest.approx(b200.l2_mb * 2**20)
    # a weight set of 0.6 x the L2 (0.75 x l2_fit): mostly resident on L40S, mostly evicted on H100 (1.2 x its half)
    def share(gpu):
        h, i = 4096, 1536
        tokens = 0.6 * gpu.l2_mb * 2**20 / (3 * h * i * 2)   # experts touched at top-1 of many, balanced
        return float(M.routed_experts_time(tokens, h, i, 1, 10_000, gpu, _mc(), routing="balanced",
                                           regime="resident", family="")["l2_resident_share"])
    assert share(l40s) > 0.7 and share(h100) < 0.3


def _cells():
    rows = []
    for g, dt, fam in [("h100-sxm", "fp8_block", "triton"), ("h100-sxm", "fp8_block", "cutlass_sm90"),
                       ("h200-sxm", "fp8_block", "triton"), ("h200-sxm", "fp8_block", "cutlass_sm90"),
                       ("l40s", "fp8", "triton"), ("b200", "fp8", "trtllm"), ("h200-sxm", "fp8", "cutlass_sm90"),
                       ("rtx-pro-6000", "fp8", "cutlass_sm120")]:
        rows.append({"gpu": g, "sdtype": dt, "family": fam, "num_tokens": 1})
    return pd.DataFrame(rows)


def test_training_cells_follow_the_family_then_sibling_then_architecture():
    rows = _cells()
    winners = rows.drop(index=[0, 2])  # cutlass won Hopper's fp8_block cells; triton's rows are still measured
    # the family's every measured cell on the other GPUs, also where another family won
    t, what = E.training_cells(winners, "h100-sxm", "fp8_block", "triton", rows)
    assert list(t.gpu) == ["h200-sxm"] and "every cell" in what
    # a family no other GPU ran in the dtype: its cells in the sibling dtype (fp8_block for fp8), relabelled
    t, what = E.training_cells(rows, "l40s", "fp8", "triton", rows)
    assert set(t.gpu) == {"h100-sxm", "h200-sxm"} and set(t.sdtype) == {"fp8"} and "sibling" in what
    # a family no other GPU ran at all: the same architecture's cells of the dtype (Blackwell), not Hopper's
    t, what = E.training_cells(rows, "rtx-pro-6000", "fp8", "cutlass_sm120", rows)
    assert list(t.gpu) == ["b200"] and what.startswith("blackwell")
    # no rows frame: the old rule (the family's winning cells, else every family)
    t, what = E.training_cells(winners, "rtx-pro-6000", "fp8", "cutlass_sm120")
    assert list(t.gpu) == ["b200"]


def test_several_families_predict_the_fastest():
    d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "fp8_block", "distribution": "balanced",
                      "num_tokens": [1.0, 4096.0], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                      "num_experts": 128, "moe_tp": 1, "moe_ep": 1})
    slow_floor = {**LAW, "floor_us": 200.0}
    slow_compute = {**LAW, "eta_c": 0.05}
    a = E.predict(d, {"fp8_block@x": slow_floor})
    b = E.predict(d, {"fp8_block@y": slow_compute})
    both = E.predict(d, {"fp8_block@x": slow_floor, "fp8_block@y": slow_compute})
    assert np.allclose(both, np.minimum(a, b)) and b[0] < a[0] and a[1] < b[1]


def test_bf16_readings_scale_only_the_bf16_family():
    g = get_gpu("l40s")
    reads = {"s_c": 0.5, "s_mem": 0.5, "d_floor_us": 30.0}

    def t(fam_dt, fam_bf16, per=True):
        per_gpu = {g.key: {**(reads if per else {}), "family:bf16": fam_bf16, "family:mxfp4": fam_dt}}
        return float(M.routed_experts_time(64, 4096, 1536, 8, 128, g, _mc("mxfp4", per_gpu), dtype="mxfp4",
                                           routing="balanced")["t"])

    assert t("triton", "triton") > t("triton", "triton", per=False)        # same family: the readings apply
    assert t("marlin", "triton") == pytest.approx(t("marlin", "triton", per=False))   # other code: they do not
    assert E.readings_apply("triton", "triton") and not E.readings_apply("marlin", "triton")


def test_memory_ramp_is_a_fixed_latency_not_an_l2_fraction():
    import dataclasses

    h100 = get_gpu("h100-sxm")
    big_l2 = dataclasses.replace(h100, l2_mb=h100.l2_mb * 4)
    mc = _mc()

    def t_m(gpu, tokens):
        return float(M.routed_experts_time(tokens, 4096, 1536, 8, 128, gpu, mc, routing="balanced",
                                           regime="evicted", family="")["t_memory"])

    # evicted: t_m = (W + x_half x BW x RAMP_REF_S) / (BW eta_max): the offset is x_half x RAMP_REF_S / eta_max,
    # whatever the L2 size
    W = 8 * 3 * 4096 * 1536 * 2.0   # one token, eight experts touched
    offset = LAW["x_half"] * M.RAMP_REF_S / LAW["eta_mem_max"]
    assert t_m(h100, 1) == pytest.approx(W / (h100.mem_bw * LAW["eta_mem_max"]) + offset)
    assert t_m(big_l2, 1) == pytest.approx(t_m(h100, 1))
