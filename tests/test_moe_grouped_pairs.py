"""E3.1, issue 20, wave 42 (helper sglfp4): the local per-pair passes on the timed rank's own pairs under a
group-limited router (terms.moe.local_pair_bytes, switch GROUPED_LOCAL_PAIRS: scored, not adopted, off)."""
import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M

LAW = {"eta_c": 0.6, "l2_bytes_per_clk_sm": 40.0, "eta_mem_max": 0.8, "x_half": 2.0, "token_passes": 1.0,
       "local_token_passes": 3.0, "floor_us": 10.0}
GROUPED = f"{M.GROUPED_PREFIX}8_4"


def _t(routing, ep, law=LAW):
    mc = M.MoEConstants(values={f"{k}:nvfp4": v for k, v in law.items()})
    return M.routed_experts_time(np.array([16384.0]), 7168, 2048, 8, 256, get_gpu("b200"), mc, ep=ep,
                                 dtype="nvfp4", routing=routing, family="")


def _shape(routing, ep):
    return M.routed_shape(np.array([64.0, 16384.0]), 7168, 2048, 8, 256, get_gpu("b200"), ep=ep, dtype="nvfp4",
                          routing=routing)


def test_with_the_switch_a_group_limited_router_prices_the_local_passes_on_the_timed_ranks_pairs(monkeypatch):
    """DeepSeek-V3's shape, 16,384 tokens, EP 32: the rank holding the grouped router's hot experts has 69,632 pairs
    (not T k / ep = 4,096); its local passes cost local_token_passes x 2 h P at HBM bandwidth."""
    monkeypatch.setattr(M, "GROUPED_LOCAL_PAIRS", True)
    P = M.routed_load(16384, 256, 8, 32, GROUPED)[0][0]
    assert P == 69632.0
    no_loc = _t(GROUPED, 32, {**LAW, "local_token_passes": 0.0})["t"][0]
    extra = _t(GROUPED, 32)["t"][0] - no_loc
    assert extra == pytest.approx(3.0 * 2.0 * 7168 * P / get_gpu("b200").mem_bw, rel=1e-9)
    g = _shape(GROUPED, 4)
    assert np.allclose(g["A_loc"], 2.0 * 7168 * g["P"]) and (g["A_loc"] > g["A"] / 4).all()
    assert _shape("balanced", 4)["A_loc"] is None   # the balanced router keeps A / ep (P = T k / ep)


def test_the_switch_is_off_and_off_prices_every_router_on_the_uniform_share(monkeypatch):
    assert M.GROUPED_LOCAL_PAIRS is False   # not adopted by its pre-registered test (DESIGN.md, wave 42)
    assert _shape(GROUPED, 8)["A_loc"] is None
    off = _t(GROUPED, 8)["t"][0]
    extra = off - _t(GROUPED, 8, {**LAW, "local_token_passes": 0.0})["t"][0]
    assert extra == pytest.approx(3.0 / 8 * 2.0 * 7168 * 16384 * 8 / get_gpu("b200").mem_bw, rel=1e-9)
    monkeypatch.setattr(M, "GROUPED_LOCAL_PAIRS", True)
    assert _t(GROUPED, 8)["t"][0] > off
