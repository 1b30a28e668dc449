"""E3.1 wave 28: the expert width per TP rank padded to the law's width tile (terms.moe `tile_n`), a discrete choice of
E3.1's fit (steptime_lab.experiments.moe WIDTH_TILE_CHOICES)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law  # tests/fit_law_steps.py

LAW = {"eta_c": 0.3, "eta_mem_max": 0.5, "x_half": 0.3, "floor_us": 25.0, "token_passes": 0.5,
       "local_token_passes": 2.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 8.0, "overlap_p": 2.0, "tile_m": 64.0,
       "unpadded_rows": 0.0}


def _r(T, tp, **extra):
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in {**LAW, **extra}.items()})
    return M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("h100-sxm"), mc, tp=tp, dtype="fp8",
                                 routing="balanced", regime="resident", family="")


def test_width_per_tp_rank_is_padded_to_the_law_width_tile():
    T = np.array([1, 64, 4096])
    # TP 32: 48 columns per rank, padded to 128: the work and the weight stream of a 128-wide expert (TP 12)
    padded, wide = _r(T, 32, tile_n=128.0), _r(T, 12, tile_n=128.0)
    for k in ("t_compute", "t_memory", "weight_bytes", "t"):
        np.testing.assert_allclose(padded[k], wide[k], rtol=1e-12)
    plain = _r(T, 32)
    np.testing.assert_allclose(padded["weight_bytes"], plain["weight_bytes"] * 128 / 48, rtol=1e-12)
    np.testing.assert_allclose(padded["t_compute"], plain["t_compute"] * 128 / 48, rtol=1e-12)
    np.testing.assert_allclose(padded["flops"], plain["flops"], rtol=0)   # the FLOPs reported are the real ones
    # a width already a multiple of the tile is unchanged; tile_n 0 is no padding
    np.testing.assert_array_equal(_r(T, 4, tile_n=128.0)["t"], _r(T, 4)["t"])
    np.testing.assert_array_equal(_r(T, 32, tile_n=0.0)["t"], plain["t"])


def _cells(tile_n):
    rows = [(T, tp, ep) for T in (1, 4, 32, 256, 2048, 16384) for tp in (1, 4, 8, 16, 32) for ep in (1, 8)]
    d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "fp8", "distribution": "balanced", "family": "cutlass_sm90",
                      "num_tokens": [r[0] for r in rows], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                      "num_experts": 128, "moe_tp": [r[1] for r in rows], "moe_ep": [r[2] for r in rows]})
    extra = {"tile_n": float(tile_n)} if tile_n else {}
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in {**LAW, **extra}.items()})
    d["latency_ms"] = [float(M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("h100-sxm"), mc, tp=tp, ep=ep,
                                                   dtype="fp8", routing="balanced", regime="resident",
                                                   family="")["t"]) * 1e3 for T, tp, ep in rows]
    return d


def test_fit_law_carries_the_width_tile_bit_for_bit():
    d = _cells(128)
    names, p0, lo, hi = E.law_params("fp8")
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "fp8", names, {"unpadded_rows": 0.0, "tile_m": 64.0, "tile_n": 128.0})
    rng = np.random.default_rng(2)
    x = np.asarray(lo) + rng.random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "fp8", x)
    # and the padding is not a no-op on these cells (TP 8-32: 192, 96, 48 columns per rank)
    plain = E._FitLaw(groups, len(d), "fp8", names, {"unpadded_rows": 0.0, "tile_m": 64.0})
    assert not np.array_equal(plain.predict(x), law.predict(x))


@pytest.mark.parametrize("tile_n", [128, 0])
def test_fit_chooses_the_width_tile_the_cells_were_made_with(tile_n):
    fit = E.fit_dtype(_cells(tile_n), "fp8")
    assert fit.get("tile_n", 0.0) == float(tile_n)
    assert set(E.WIDTH_TILE_CHOICES) >= {128} and 0 not in E.WIDTH_TILE_CHOICES


def test_width_tile_is_kept_only_where_it_at_least_halves_the_training_cost(monkeypatch):
    """WIDTH_TILE_MIN_GAIN: on cells a 128-column tile made (with 5% deterministic noise, so no fit is exact) the tile
    cuts the cost far below half and is kept; with the bar lowered below the cut it is not."""
    d = _cells(128)
    d["latency_ms"] *= 1.0 + 0.05 * np.sin(np.arange(len(d)) * 1.7)
    assert E.fit_dtype(d, "fp8").get("tile_n") == 128.0
    monkeypatch.setattr(E, "WIDTH_TILE_MIN_GAIN", 1e-3)
    assert "tile_n" not in E.fit_dtype(d, "fp8")


def test_width_tile_choice_skips_a_tile_that_moves_no_width(monkeypatch):
    """Widths already a multiple of every choice (TP 1-4 of 1536: 1536, 768, 384): no padded law is fitted or kept;
    with TP 8 (192 columns) the 128 tile is tried (64 still moves nothing)."""
    tried = []
    real = E._FitLaw

    def spy(groups, n, dt, names, flag):
        tried.append(flag.get("tile_n"))
        return real(groups, n, dt, names, flag)

    monkeypatch.setattr(E, "_FitLaw", spy)
    d = _cells(0)
    assert "tile_n" not in E.fit_dtype(d[d.moe_tp <= 4], "fp8")
    assert set(tried) == {None}
    tried.clear()
    E.fit_dtype(d[d.moe_tp <= 8], "fp8")
    assert set(tried) == {None, 128.0}
