"""E3.1 wave 23: the fused-MoE law's batch cost, saturating in the batch's tokens (terms.moe batch_us,
batch_tokens)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 15.0, "token_passes": 1.0,
       "local_token_passes": 1.0, "l2_fit": 0.8, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 4.0}


def _t(T, ep=8, **extra):
    mc = M.MoEConstants(values={f"{k}:nvfp4": v for k, v in {**LAW, **extra}.items()})
    return M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("b200"), mc, ep=ep, dtype="nvfp4",
                                 routing="balanced", family="")["t"]


def test_batch_cost_saturates_in_the_tokens():
    T = np.array([1.0, 32.0, 1024.0, 16384.0])
    extra = _t(T, batch_us=10.0, batch_tokens=32.0) - _t(T)
    assert extra == pytest.approx(10e-6 * T / (T + 32.0))
    assert extra[1] == pytest.approx(5e-6)                   # half the cost at batch_tokens
    assert 9.9e-6 < extra[-1] < 10e-6                        # the whole cost at a large batch, never more
    assert np.all(np.diff(extra) > 0)
    assert (_t(T, ep=1, batch_us=10.0, batch_tokens=32.0) - _t(T, ep=1)) == pytest.approx(extra)  # EP-independent


def test_batch_cost_absent_or_zero_leaves_the_law_and_bad_scale_is_refused():
    T = np.array([1.0, 256.0])
    assert np.array_equal(_t(T, batch_us=0.0, batch_tokens=8.0), _t(T))
    with pytest.raises(ValueError, match="batch_tokens"):
        _t(T, batch_us=5.0, batch_tokens=0.0)


def test_batch_cost_is_fitted_for_the_trtllm_family_only():
    cells = pd.DataFrame({"sdtype": ["nvfp4", "bf16", "bf16", "fp8"], "family": ["trtllm", "trtllm", "triton",
                                                                                  "cutlass_sm90"]})
    assert E.batch_cost(cells, "nvfp4") and not E.batch_cost(cells, "bf16") and not E.batch_cost(cells, "fp8")
    assert not E.batch_cost(cells, "mxfp4")                                  # no training cells: no
    for dt in ("bf16", "nvfp4", "fp8_block"):
        names, p0, lo, hi = E.law_params(dt, batch=True)
        i, j = names.index("batch_us"), names.index("batch_tokens")
        assert lo[i] == 0.0 and lo[j] >= 1.0 and p0[j] > 0 and len(names) == len(p0) == len(lo) == len(hi)
        assert "batch_us" not in E.law_params(dt)[0]
    assert E.law_params("nvfp4", batch=True)[0][-1] == "quant_passes"
