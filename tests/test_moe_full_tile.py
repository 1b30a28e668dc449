"""E3.1 wave 30: a law's weight stream hidden where every touched expert's rows fill whole row tiles (terms.moe
`full_tile_stream`, `full_tiles`; steptime_lab.experiments.moe fit_dtype keeps it where it lowers the training cost)."""
from __future__ import annotations

import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law, law_cells  # tests/fit_law_steps.py

LAW = {"eta_c": 0.3, "eta_mem_max": 0.1, "x_half": 0.3, "floor_us": 25.0, "token_passes": 0.5,
       "local_token_passes": 2.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 8.0, "overlap_p": 2.0, "tile_m": 64.0,
       "unpadded_rows": 0.0}
SHAPE = (4096, 1536, 8, 128)   # Qwen3-235B-A22B: T x 8 / 128 rows per expert under the balanced router


def _r(T, ep=1, routing="balanced", **extra):
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in {**LAW, **extra}.items()})
    h, i, k, E_ = SHAPE
    return M.routed_experts_time(T, h, i, k, E_, get_gpu("h100-sxm"), mc, ep=ep, dtype="fp8", routing=routing,
                                 regime="resident", family="")


def test_full_tiles_are_whole_multiples_of_the_tile():
    P = np.array([64.0, 128.0, 96.0, 32.0, 640.0, 128.0])
    Et = np.array([1.0, 1.0, 1.0, 1.0, 5.0, 2.0])
    np.testing.assert_array_equal(M.full_tiles(P, Et, 64), [True, True, False, False, True, True])
    # a skewed router: the mean is a whole tile, but some expert is padded
    np.testing.assert_array_equal(M.full_tiles(P, Et, 64, padded=P + np.array([0, 0, 32, 32, 0, 64])),
                                  [True, True, False, False, True, False])
    with pytest.raises(ValueError, match="row tile > 0"):
        M.full_tiles(P, Et, 0)


@pytest.mark.parametrize("ep", [1, 8])
def test_the_stream_is_hidden_only_where_the_rows_fill_whole_tiles(ep):
    # 64, 128, 1024 rows per expert: whole 64-row tiles; 16, 96 rows: a partial tile
    T = np.array([1024.0, 2048.0, 16384.0, 256.0, 1536.0])
    plain, hidden = _r(T, ep), _r(T, ep, full_tile_stream=1.0)
    full = np.array([True, True, True, False, False])
    assert np.all(plain["t_memory"] > 0)
    np.testing.assert_array_equal(hidden["t_memory"][full], 0.0)
    np.testing.assert_array_equal(hidden["t_memory"][~full], plain["t_memory"][~full])
    np.testing.assert_array_equal(hidden["t"][~full], plain["t"][~full])
    assert np.all(hidden["t"][full] < plain["t"][full])
    for k in ("t_compute", "t_tokens", "flops", "weight_bytes"):
        np.testing.assert_array_equal(hidden[k], plain[k])
    np.testing.assert_array_equal(_r(T, ep, full_tile_stream=0.0)["t"], plain["t"])


def test_a_skewed_router_keeps_its_stream():
    # power-law routing pads some expert at every token count: nothing hidden
    T = np.array([1024.0, 2048.0])
    hidden, plain = _r(T, 1, "power_law_1.2", full_tile_stream=1.0), _r(T, 1, "power_law_1.2")
    np.testing.assert_array_equal(hidden["t"], plain["t"])


def _cells(family="cutlass_sm90", **made_with):
    rows = [(T, tp, ep) for T in (1, 16, 256, 1024, 1536, 2048, 3072, 4096, 16384) for tp in (1, 4) for ep in (1, 8)]
    return law_cells({**LAW, **made_with}, rows, (SHAPE, (2048, 768, 8, 128)), family)


def test_fit_law_carries_the_hidden_stream_bit_for_bit():
    d = _cells(full_tile_stream=1.0)
    names, p0, lo, hi = E.law_params("fp8")
    groups = E._groups(d)
    flag = {"unpadded_rows": 0.0, "tile_m": 64.0, "full_tile_stream": 1.0}
    law = E._FitLaw(groups, len(d), "fp8", names, flag)
    rng = np.random.default_rng(5)
    x = np.asarray(lo) + rng.random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "fp8", x)
    # not a no-op in the fit's evaluator
    off = E._FitLaw(groups, len(d), "fp8", names, {"unpadded_rows": 0.0, "tile_m": 64.0})
    assert np.all(law.predict(x) <= off.predict(x)) and np.any(law.predict(x) < off.predict(x))


def test_fit_keeps_the_hidden_stream_only_where_it_lowers_the_training_cost():
    assert E.full_tile_cells(_cells(), 64.0)
    assert not E.full_tile_cells(_cells().query("num_tokens <= 256"), 64.0)
    fit = E.fit_dtype(_cells("other", full_tile_stream=1.0), "fp8")
    assert fit.get("full_tile_stream") == 1.0 and fit["tile_m"] == 64.0
    assert "full_tile_stream" not in E.fit_dtype(_cells("other"), "fp8")
