"""The grey box's donor-jackknife shrink (issue 24, wave 42, helper grey12): after the nested CV has chosen a target's
setting, its trees are refitted once per donor left out, and the log correction g at each cell is multiplied by
g^2 / (g^2 + v), v the jackknife variance of those refits there: a correction resting on one donor is shrunk toward
the physics, one every donor agrees on is kept; the shared box, the Vidur step and bad options are handled."""
import math

import numpy as np
import pytest

from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.transfer import greybox as G

from greybox_cells import default_constants as _defaults, gemm_cells as _cells  # tests/greybox_cells.py

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "b300", "gb200")
TARGET = "h200-sxm"


def _shared_law(m, g):
    """Every GPU has the same m-shaped residual: each donor alone would teach the target the same correction."""
    return 0.8 + 0.8 * np.log2(m) / 12.0


def _one_donor_law(m, g):
    """The donors share the residual's sign, but A100's is twelve times the others': what the target is taught depends
    on whether A100 is among its donors."""
    amp = 1.2 if g == "a100-sxm" else 0.1
    return 1.0 - amp / 2 + amp * np.log2(m) / 12.0


def _fit(law, jackknife):
    cells = _cells(GPUS, law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    data = {g: box._training(g)["gemm"] for g in GPUS if g != TARGET}
    tc = cells[cells["gpu"] == TARGET].reset_index(drop=True)
    m, cv = G.fit_term(data, TARGET, bandwidths=(math.inf,), jackknife=jackknife)
    return m, cv, box._features(tc, TARGET)["gemm"]


def test_the_factor_is_g_squared_over_g_squared_plus_the_jackknife_variance():
    g = np.array([0.2, -0.1, 0.0, 0.0, 0.3])
    loo = np.array([[0.2, -0.1, 0.0, 0.1, 0.3], [0.1, -0.1, 0.0, -0.1, 0.3], [0.3, 0.1, 0.0, 0.0, 0.3]])
    n = 3
    v = (n - 1) / n * ((loo - loo.mean(0)) ** 2).sum(0)
    want = np.where(g * g + v > 0, g * g / np.where(g * g + v > 0, g * g + v, 1), 1.0)
    got = G.jackknife_factor(g, loo)
    assert np.allclose(got, want)
    assert got[2] == 1.0 and got[3] == 0.0 and got[4] == 1.0  # 0/0 -> 1; no correction but spread -> 0; agreed -> 1
    assert np.all((got >= 0) & (got <= 1))
    for bad in (loo[:1], loo[:, :3], loo[0]):
        with pytest.raises(ValueError, match="jackknife factor"):
            G.jackknife_factor(g, bad)


def test_a_correction_every_donor_agrees_on_is_kept_and_one_resting_on_one_donor_is_shrunk():
    m0, cv0, F = _fit(_shared_law, False)
    m1, cv1, _ = _fit(_shared_law, True)
    assert m1.name == m0.name != "none" and cv1 == cv0  # the setting's choice does not see the rule
    assert len(m1.jackknife) == len(GPUS) - 1 and not m0.jackknife
    g0, g1 = m0.log_correction(F), m1.log_correction(F)
    assert np.abs(g1).mean() > 0.9 * np.abs(g0).mean()  # every donor teaches the same: kept
    kept = np.abs(g1).mean() / np.abs(g0).mean()
    m0, _, F = _fit(_one_donor_law, False)
    m1, _, _ = _fit(_one_donor_law, True)
    g0, g1 = m0.log_correction(F), m1.log_correction(F)
    assert m0.name != "none" and np.abs(g0).mean() > 0.01
    shrunk = np.abs(g1).mean() / np.abs(g0).mean()
    assert shrunk < 0.9 and shrunk < kept - 0.05  # the donors disagree: shrunk toward the physics
    assert np.all(np.abs(g1) <= np.abs(g0) + 1e-12)  # a shrink, never a growth


def test_the_default_is_on_for_the_full_aic_boxes_only_recorded_and_refused_across():
    cells = _cells(GPUS[:4], _shared_law)
    on = T.GreyBox("aic_gemm", cells, _defaults, jackknife=True)
    off = T.GreyBox("aic_gemm", cells, _defaults, jackknife=False)
    assert on.settings()["jackknife"] is True and "jackknife" not in off.settings()
    doc = {"settings": on.settings(), "fingerprint": on.fingerprint(), "fits": {}}
    with pytest.raises(ValueError, match="settings"):
        off.adopt(doc)
    assert T.GreyBox("aic_gemm", cells, _defaults).jackknife == ("aic_gemm" in G.JACKKNIFE_TABLES)
    assert T.GreyBox("aic_gemm", cells, _defaults, shared=True).jackknife is False
    with pytest.raises(ValueError, match="shared"):
        T.GreyBox("aic_gemm", cells, _defaults, shared=True, jackknife=True)
    with pytest.raises(ValueError, match="jackknife"):
        T.GreyBox("aic_gemm", cells, _defaults, jackknife="yes")
    assert "vidur_step" not in G.JACKKNIFE_TABLES
    _, info = on.fit("h200-sxm")
    assert info["jackknife"]["terms"] in ([], ["gemm"]) and info["jackknife"]["donors_left_out_one_at_a_time"] == 3


def test_two_donors_get_no_jackknife():
    cells = _cells(GPUS[:3], _shared_law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    data = {g: box._training(g)["gemm"] for g in GPUS[:2]}
    m, _ = G.fit_term(data, GPUS[2], bandwidths=(math.inf,), jackknife=True)
    assert m.jackknife == ()
