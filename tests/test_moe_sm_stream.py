"""E3.1's SM-bound weight stream (terms.moe sm_stream): a flagged kernel family's weight-streaming time follows
the SMs' issue rate, not HBM bandwidth, and takes no HBM reading."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 1.0,
       "local_token_passes": 1.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 4.0}


def _t(gpu, flag, per_gpu=None, tokens=1):
    vals = {f"{k}:fp8": v for k, v in LAW.items()}
    if flag:
        vals["sm_stream:fp8"] = 1.0
    mc = M.MoEConstants(values=vals, per_gpu=per_gpu or {})
    return M.routed_experts_time(tokens, 4096, 1536, 8, 128, gpu, mc, dtype="fp8", regime="evicted", family="")


def test_sm_stream_ignores_hbm_bandwidth_and_the_memory_reading():
    h100 = get_gpu("h100-sxm")
    fast_hbm = dataclasses.replace(h100, mem_bw_gbps=h100.mem_bw_gbps * 1.43)
    # HBM-bound (no flag): more HBM bandwidth, less weight-streaming time; a memory reading scales it
    assert _t(fast_hbm, False)["t_memory"] < _t(h100, False)["t_memory"]
    assert _t(h100, False, {"h100-sxm": {"s_mem": 2.0}})["t_memory"] < _t(h100, False)["t_memory"]
    # SM-bound: the same time whatever HBM does, and the HBM reading does not apply
    assert _t(fast_hbm, True)["t_memory"] == pytest.approx(float(_t(h100, True)["t_memory"]))
    assert _t(h100, True, {"h100-sxm": {"s_mem": 2.0}})["t_memory"] == pytest.approx(float(_t(h100, True)["t_memory"]))
    # ... and follows the SMs' issue rate (half the SMs: twice the streaming time; the ramp's fixed latency,
    # x_half x RAMP_REF_S / eta_max, stays)
    half = dataclasses.replace(h100, sms=h100.sms // 2)
    lat = LAW["x_half"] * M.RAMP_REF_S / LAW["eta_mem_max"]
    assert float(_t(half, True)["t_memory"]) - lat == pytest.approx(2 * (float(_t(h100, True)["t_memory"]) - lat))


def test_fit_flags_only_the_listed_families():
    cells = pd.DataFrame({"sdtype": ["fp8", "fp8", "bf16"], "family": ["cutlass_sm90", "cutlass_sm90", "triton"]})
    assert E.sm_stream(cells, "fp8") and not E.sm_stream(cells, "bf16")
    mixed = pd.DataFrame({"sdtype": ["fp8", "fp8"], "family": ["cutlass_sm90", "trtllm"]})
    assert not E.sm_stream(mixed, "fp8")  # a law fitted across families keeps the HBM stream
