"""E3.1 wave 15: the block-scaled dtypes' activation-quantization pass (terms.moe quant_passes: every token's bf16
input on every EP rank, independent of top-k) and the rule that leaves shapes contradicting the balanced router out
of the law's fit."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 1.0,
       "local_token_passes": 1.0, "l2_fit": 0.8, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 4.0}


def _t(dt, tokens, topk, ep, **extra):
    mc = M.MoEConstants(values={**{f"{k}:{dt}": v for k, v in {**LAW, **extra}.items()}})
    r = M.routed_experts_time(tokens, 4096, 1536, topk, 128, get_gpu("b200"), mc, ep=ep, dtype=dt,
                              routing="balanced", family="")
    return float(r["t"]), float(r["t_tokens"])


@pytest.mark.parametrize("topk,ep", [(1, 1), (8, 1), (8, 8), (1, 32)])
def test_quant_pass_is_every_token_bf16_input_over_hbm(topk, ep):
    T, h, passes = 16384, 4096, 30.0
    t0, tok0 = _t("fp8_block", T, topk, ep)
    t1, tok1 = _t("fp8_block", T, topk, ep, quant_passes=passes)
    want = passes * 2.0 * h * T / get_gpu("b200").mem_bw   # independent of top-k and of the EP degree
    assert tok1 - tok0 == pytest.approx(want, rel=1e-9)
    assert t1 - t0 == pytest.approx(want, rel=1e-9)


def test_no_quant_constant_no_term():
    # a law without quant_passes (the shipped calibration before the lead re-settles it) is unchanged
    assert _t("nvfp4", 4096, 8, 4) == _t("nvfp4", 4096, 8, 4, quant_passes=0.0)


def test_quant_pass_is_fitted_for_block_scaled_dtypes_only():
    for dt in ("fp8_block", "nvfp4"):
        names, p0, lo, hi = E.law_params(dt)
        assert names[-1] == "quant_passes" and len(names) == len(p0) == len(lo) == len(hi) == len(E.PARAMS) + 1
        assert lo[-1] == 0.0 and lo[-1] <= p0[-1] <= hi[-1]
    for dt in ("bf16", "fp8", "mxfp4"):
        assert E.law_params(dt)[0] == E.PARAMS


def _cells(ratio_of):
    rows = []
    for shape, ratio in ratio_of.items():
        h, i, k, n = shape
        for g in ("b200", "b300"):
            for T in (16, 64, 256, 1024, 4096):
                t1 = 1e-4 * T
                for ep, t in ((1, t1), (2, t1 * ratio), (4, t1 * ratio / 2)):
                    rows.append({"gpu": g, "sdtype": "fp8_block", "distribution": "balanced", "hidden_size": h,
                                 "inter_size": i, "topk": k, "num_experts": n, "moe_tp": 1, "moe_ep": ep,
                                 "num_tokens": T, "latency_ms": t})
    return pd.DataFrame(rows)


def test_unbalanced_shapes_are_those_not_faster_at_ep2():
    ok, bad = (4096, 1536, 8, 128), (7168, 2048, 8, 256)
    d = _cells({ok: 0.52, bad: 1.0})
    assert E.unbalanced_shapes(d) == {bad}
    assert E.unbalanced_shapes(_cells({ok: 0.6})) == set()
    # tokens below BALANCE_MIN_TOKENS do not count (a floor-bound cell is as slow at EP 2)
    small = d[(d.num_tokens < E.BALANCE_MIN_TOKENS) | (d.hidden_size == ok[0])]
    assert E.unbalanced_shapes(small) == set()
    assert E.unbalanced_shapes(d[d.moe_ep != 2]) == set()   # no EP 2 cells: nothing to judge
