"""E3.1 wave 18: the fixed EP > 1 cost of the kernel families whose expert parallelism is vLLM's own remap of the
top-k ids (Triton, Marlin)."""
from __future__ import annotations

import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 1.0,
       "local_token_passes": 1.0, "l2_fit": 0.8, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 4.0}


def _t(ep, **extra):
    mc = M.MoEConstants(values={**{f"{k}:bf16": v for k, v in {**LAW, **extra}.items()}})
    return float(M.routed_experts_time(64, 4096, 1536, 8, 128, get_gpu("h100-sxm"), mc, ep=ep, routing="balanced",
                                       family="")["t"][()])


def test_ep_floor_is_paid_only_with_expert_parallelism():
    for ep in (2, 8):
        assert _t(ep, ep_floor_us=12.0) - _t(ep) == pytest.approx(12e-6)
    assert _t(1, ep_floor_us=12.0) == _t(1)          # EP 1: no remap, no cost
    assert _t(8, ep_floor_us=0.0) == _t(8)           # a law without the constant (or 0) is unchanged


def test_ep_floor_is_fitted_for_remapping_families_only():
    cells = pd.DataFrame({"sdtype": ["bf16", "bf16", "fp8"], "family": ["triton", "marlin", "cutlass_sm90"]})
    assert E.ep_remap(cells, "bf16") and not E.ep_remap(cells, "fp8") and not E.ep_remap(cells, "nvfp4")
    assert not E.ep_remap(cells.assign(family=["triton", "trtllm", "x"]), "bf16")   # a mixed training set: no
    names, p0, lo, hi = E.law_params("fp8_block", ep_floor=True)
    assert "ep_floor_us" in names and names[-1] == "quant_passes" and len(names) == len(p0) == len(lo) == len(hi)
    assert "ep_floor_us" not in E.law_params("bf16")[0]
