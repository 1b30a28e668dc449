"""E3.1 wave 42 (helper `ctawidth`): the tactic law's compute efficiency by expert width, a fixed work of tile_k_extra K
tiles on every CTA tile (terms.moe.cta_width_work; steptime_lab.experiments.moe CTA_WIDTH), an option."""
from __future__ import annotations

import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

from fit_law_steps import assert_fit_law_matches_the_law  # tests/fit_law_steps.py
from test_moe_tactic import LAW, _cells, _rows   # tests/test_moe_tactic.py


def test_per_k_tile_work_by_hand():
    """Qwen3-235B-A22B's layer (h 4096, i 1536) on B200 (148 SMs), 2,048 tokens at its 128x128 tile (128 rows per
    expert, one row tile each of 128 experts): GEMM1 128 x 24 feature tiles, GEMM2 128 x 32, each in whole waves,
    each tile 2 x 128 x 128 x 64 FLOPs per bf16 K tile (128 bytes)."""
    b200 = get_gpu("b200")
    T = np.array([2048.0])
    work, fm, fn, per_k1, per_k2 = M.tactic_parts(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), "padding")
    assert (fm[0], fn[0]) == (128.0, 128.0)
    g1, g2 = np.ceil(128 * 24 / 148) * 148, np.ceil(128 * 32 / 148) * 148
    assert (per_k1[0], per_k2[0]) == (g1 * 2 * 128 * 128 * 64, g2 * 2 * 128 * 128 * 64)
    assert work[0] == g1 * 2 * 128 * 128 * 4096 + g2 * 2 * 128 * 128 * 1536
    assert M.tactic_compute(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), "padding")[0][0] == work[0]


def _shape(i: float, T=16384.0):
    return M.routed_shape(np.array([T]), 4096.0, i, 8, 128, get_gpu("b200"), dtype="bf16", routing="balanced",
                          tactic=2)


def test_efficiency_grows_with_width_saturates_and_is_bounded():
    """The compute term's efficiency c_num / cta_width_work: 1 without the constant, in (0, 1] with it, rising with the
    expert width (GEMM2's K) toward GEMM1's own K-bound share, falling as the extra grows."""
    v = {"tile_k_extra": 4.0}
    effs = []
    for i in (128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 16384.0):
        s = _shape(i)
        assert M.cta_width_work(s, {}) is s["c_num"]
        effs.append(float((s["c_num"] / M.cta_width_work(s, v)).item()))
    assert all(0.0 < e < 1.0 for e in effs)
    assert all(b > a for a, b in zip(effs, effs[1:]))
    # between the two GEMMs' own K-loop shares at i 16,384: GEMM1 K h = 64 tiles (64 / 68), GEMM2 K 256 (256 / 260)
    assert 64 / 68 < effs[-1] < 256 / 260
    s = _shape(512.0)
    e = [float((s["c_num"] / M.cta_width_work(s, {"tile_k_extra": x})).item()) for x in (0.0, 1.0, 4.0, 16.0)]
    assert e[0] == 1.0 and all(b < a for a, b in zip(e, e[1:]))


def test_hand_value_and_refusals():
    s = _shape(1536.0, 2048.0)
    c1, c2 = s["c_tile"]
    np.testing.assert_array_equal(M.cta_width_work(s, {"tile_k_extra": 3.0}), s["c_num"] + 3.0 * (c1 + c2))
    np.testing.assert_array_equal(M.cta_width_work(s, {"width_k_extra": 3.0}), s["c_num"] + 3.0 * c2)
    for name in ("tile_k_extra", "width_k_extra"):
        with pytest.raises(ValueError, match=f"{name} must be >= 0"):
            M.cta_width_work(s, {name: -1.0})
    plain = M.routed_shape(np.array([64.0]), 4096.0, 1536.0, 8, 128, get_gpu("b200"), dtype="bf16", routing="balanced")
    assert plain["c_tile"] is None
    for name in ("tile_k_extra", "width_k_extra"):
        with pytest.raises(ValueError, match="needs the tactic law's CTA tiles"):
            M.cta_width_work(plain, {name: 1.0})


def test_the_law_prices_the_extra_in_routed_experts_time():
    b200 = get_gpu("b200")
    T = np.array([1.0, 64.0, 3072.0, 16384.0])
    mc = lambda **x: M.MoEConstants(values={f"{k}:bf16": v for k, v in {**LAW, "tactic": 2.0, **x}.items()})  # noqa
    base = M.routed_experts_time(T, 4096, 1536, 8, 128, b200, mc(), dtype="bf16", routing="balanced")
    ext = M.routed_experts_time(T, 4096, 1536, 8, 128, b200, mc(tile_k_extra=2.0), dtype="bf16", routing="balanced")
    work, _, _, per_k1, per_k2 = M.tactic_parts(T, 4096.0, 1536.0, 8, 128, 1, b200, "bf16", _rows(T), "padding")
    np.testing.assert_allclose(ext["t_compute"], (work + 2.0 * (per_k1 + per_k2)) / (M.math_peak(b200, "bf16") * 0.5),
                               rtol=1e-12)
    wid = M.routed_experts_time(T, 4096, 1536, 8, 128, b200, mc(width_k_extra=2.0), dtype="bf16", routing="balanced")
    np.testing.assert_allclose(wid["t_compute"], (work + 2.0 * per_k2) / (M.math_peak(b200, "bf16") * 0.5), rtol=1e-12)
    assert np.all(ext["t_compute"] > base["t_compute"]) and np.array_equal(ext["t_memory"], base["t_memory"])


@pytest.mark.parametrize("form", ["tiles", "width"])
def test_fit_law_carries_the_extra_bit_for_bit_and_the_switch_adds_it_to_the_fit(monkeypatch, form):
    d = _cells(2.0)
    name = E.CTA_WIDTH_NAMES[form]
    names, p0, lo, hi = E.law_params("bf16", k_extra=form)
    assert names[-1] == name and (p0[-1], lo[-1], hi[-1]) == (E.K_EXTRA_P0, E.K_EXTRA_LO, E.K_EXTRA_HI)
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "bf16", names, {"unpadded_rows": 0.0, "tile_m": 16.0, "tactic": 2.0})
    x = np.asarray(lo) + np.random.default_rng(5).random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    assert_fit_law_matches_the_law(law, groups, len(d), "bf16", x)
    monkeypatch.setattr(E, "CTA_WIDTH", form)
    assert name in E.fit_dtype(E.with_tactic(d, True), "bf16")
    assert name not in E.fit_dtype(E.with_tactic(d, False), "bf16")   # only the tactic law takes it
    monkeypatch.setattr(E, "CTA_WIDTH", False)
    assert name not in E.fit_dtype(E.with_tactic(d, True), "bf16")


def test_the_width_form_is_adopted_and_reaches_the_tactic_laws_only():
    """The rule's verdict (DESIGN.md, wave 42): the second form, GEMM2's tiles alone, is the default; a law fitted on
    non-tactic cells never takes it."""
    assert E.CTA_WIDTH == "width" and E.CTA_WIDTH_NAMES[E.CTA_WIDTH] == "width_k_extra"
    assert "width_k_extra" in M.ROUTED_LAW_OPTIONAL and "tile_k_extra" in M.ROUTED_LAW_OPTIONAL
