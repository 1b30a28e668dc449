"""E3.1 wave 41 (helper `tacticeta`): the tactic law's local per-pair passes on the memory side of its roofline,
overlapped with the grouped GEMMs' math (terms.moe.pair_overlap_split; law flag `pair_overlap`)."""
from __future__ import annotations

import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime.terms.gemm import smax
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law  # tests/fit_law_steps.py
from test_moe_tactic import LAW, _cells

T = np.array([1.0, 64.0, 3072.0, 16384.0])


def _time(**extra):
    mc = M.MoEConstants(values={f"{k}:bf16": v for k, v in {**LAW, "tactic": 2.0, **extra}.items()})
    return M.routed_experts_time(T, 4096, 1536, 8, 128, get_gpu("b200"), mc, ep=2, dtype="bf16", routing="balanced")


def test_the_local_passes_join_the_weight_stream_under_the_overlap():
    b200 = get_gpu("b200")
    plain, lap = _time(), _time(pair_overlap=1.0)
    A = 2.0 * 4096 * T * 8
    loc = LAW["local_token_passes"] / 2 * A / b200.mem_bw
    glob = LAW["token_passes"] * A / b200.mem_bw
    np.testing.assert_allclose(plain["t_tokens"], loc + glob, rtol=1e-12)
    np.testing.assert_allclose(lap["t_tokens"], glob, rtol=1e-12)
    np.testing.assert_array_equal(lap["t_compute"], plain["t_compute"])
    np.testing.assert_array_equal(lap["t_memory"], plain["t_memory"])
    t0 = plain["t"] - smax(plain["t_compute"], plain["t_memory"], LAW["overlap_p"]) - plain["t_tokens"]
    want = t0 + smax(lap["t_compute"], lap["t_memory"] + loc, LAW["overlap_p"]) + glob
    np.testing.assert_allclose(lap["t"], want, rtol=1e-12)
    assert (lap["t"] < plain["t"]).all()   # overlapped, never slower
    np.testing.assert_array_equal(_time(pair_overlap=0.0)["t"], plain["t"])   # 0: the flag off


def test_a_law_pricing_the_passes_twice_is_refused():
    with pytest.raises(ValueError, match="pair_overlap cannot also have tok_bytes_per_clk_sm"):
        _time(pair_overlap=1.0, tok_bytes_per_clk_sm=16.0)


def test_fit_law_carries_the_flag_bit_for_bit():
    d = _cells(2.0)
    names, p0, lo, hi = E.law_params("bf16")
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "bf16", names, {"unpadded_rows": 0.0, "tile_m": 16.0, "tactic": 2.0,
                                                     "pair_overlap": 1.0})
    x = np.asarray(lo) + np.random.default_rng(5).random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "bf16", x)


@pytest.mark.parametrize("on", [True, False])
def test_the_fit_marks_the_tactic_law_alone(monkeypatch, on):
    monkeypatch.setattr(E, "PAIR_OVERLAP", on)
    d = _cells(2.0)
    assert ("pair_overlap" in E.fit_dtype(E.with_tactic(d, True), "bf16")) is on
    assert "pair_overlap" not in E.fit_dtype(E.with_tactic(d, False), "bf16")


def test_a_pooled_fold_with_the_sm_issue_branch_keeps_its_passes_added(monkeypatch):
    """A tactic law whose cells are marked for the per-pair passes' SM-issue branch (a pooled fold, wsmoe) is fitted
    without pair_overlap (the two would price the same passes twice): it has tok_bytes_per_clk_sm instead."""
    monkeypatch.setattr(E, "PAIR_OVERLAP", True)
    fit = E.fit_dtype(E.with_tactic(_cells(2.0), True).assign(tok_sm=True), "bf16")
    assert "tok_bytes_per_clk_sm" in fit and "pair_overlap" not in fit and fit["tactic"] == 2.0


def test_the_option_is_adopted():
    assert E.PAIR_OVERLAP is True and E.TACTIC_DEFAULT is True
