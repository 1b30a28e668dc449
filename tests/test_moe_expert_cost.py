"""E3.1 wave 29: the CUTLASS families' cost per touched local expert (terms.moe `expert_us`; steptime_lab.experiments.moe
EXPERT_FAMILIES, fitted at the tiling chosen without it)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law, law_cells  # tests/fit_law_steps.py

LAW = {"eta_c": 0.3, "eta_mem_max": 0.5, "x_half": 0.3, "floor_us": 25.0, "token_passes": 0.5,
       "local_token_passes": 2.0, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 8.0, "overlap_p": 2.0, "tile_m": 64.0,
       "unpadded_rows": 0.0}


def _r(T, ep=1, tp=1, **extra):
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in {**LAW, **extra}.items()})
    return M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("h100-sxm"), mc, tp=tp, ep=ep, dtype="fp8",
                                 routing="balanced", regime="resident", family="")


@pytest.mark.parametrize("ep", [1, 8])
def test_expert_us_is_paid_per_touched_local_expert(ep):
    T = np.array([1.0, 4.0, 16.0, 2048.0])
    plain, with_cost = _r(T, ep), _r(T, ep, expert_us=2.5)
    # balanced router: min(8 T, 128) experts touched over ep ranks, at least one
    touched = np.maximum(np.minimum(8 * T, 128) / ep, 1.0)
    np.testing.assert_allclose(with_cost["experts_touched"], touched)
    np.testing.assert_allclose(with_cost["t"] - plain["t"], 2.5e-6 * touched, rtol=1e-9, atol=1e-15)
    for k in ("t_compute", "t_memory", "t_tokens"):   # a fixed cost: nothing else moves
        np.testing.assert_array_equal(with_cost[k], plain[k])
    np.testing.assert_array_equal(_r(T, ep, expert_us=0.0)["t"], plain["t"])


def _cells(family="cutlass_sm90", **made_with):
    rows = [(T, tp, ep) for T in (1, 4, 32, 256, 2048, 16384) for tp in (1, 4, 8, 16, 32) for ep in (1, 8)]
    return law_cells({**LAW, **made_with}, rows, [(4096, 1536, 8, 128), (2048, 512, 8, 256)], family)


def test_fit_law_carries_the_expert_cost_bit_for_bit():
    d = _cells(expert_us=2.0)
    names, p0, lo, hi = E.law_params("fp8", expert=True)
    assert "expert_us" in names and (lo[names.index("expert_us")], hi[names.index("expert_us")]) == (
        E.EXPERT_LO, E.EXPERT_HI)
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "fp8", names, {"unpadded_rows": 0.0, "tile_m": 64.0})
    rng = np.random.default_rng(3)
    x = np.asarray(lo) + rng.random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "fp8", x)
    # the cost is not a no-op in the fit's evaluator
    x0 = x.copy()
    x0[names.index("expert_us")] = 0.0
    assert np.all(law.predict(x) > law.predict(x0))


def test_expert_cost_scope_is_the_cutlass_families():
    assert E.expert_cost(_cells("cutlass_sm90").head(3), "fp8")
    assert E.expert_cost(_cells("cutlass_sm120").head(3), "fp8")
    assert not E.expert_cost(_cells("triton").head(3), "fp8")
    mixed = pd.concat([_cells("cutlass_sm90").head(3), _cells("triton").head(3)])
    assert not E.expert_cost(mixed, "fp8")
    assert not E.expert_cost(_cells("cutlass_sm90").head(3), "bf16")   # no cells of the dtype


def test_fit_recovers_the_expert_cost_at_the_tiling_chosen_without_it():
    """Cells made with a 128-column width tile and 2 us per expert: the width tile is still chosen (on the law without
    the per-expert cost) and the refit at that tiling recovers the cost; a Triton family's fit has no such constant."""
    fit = E.fit_dtype(_cells(expert_us=2.0, tile_n=128.0), "fp8")
    assert fit["tile_n"] == 128.0
    assert fit["expert_us"] == pytest.approx(2.0, rel=0.05)
    assert "expert_us" not in E.fit_dtype(_cells("triton", expert_us=2.0), "fp8")
