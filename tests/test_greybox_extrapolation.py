"""The grey box's out-of-range shrink (issue 24, wave 41, helper grey11): a target outside its donors' datasheet box
has its learned log correction times exp(-kappa d), kappa chosen by the nested CV, where only inner folds whose
held-out GPU is an outlier of its own donors tell the rates apart; in-range targets, the default and the shared box
are the grey box as before; bad rates are refused in one line."""
import math

import numpy as np
import pytest

from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.transfer import greybox as G

from greybox_cells import default_constants as _defaults, gemm_cells as _cells  # tests/greybox_cells.py

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "b300", "gb200", "l40s")
OUTLIERS = {"a100-sxm", "l40s"}  # the lowest bandwidth / ridge and the GDDR part: outside the others' box


def _law(m, g):
    """The datacenter parts share an m-shaped residual that the outliers do not have (a correction that does not
    transfer to a GPU outside the donors' range)."""
    return np.ones_like(m) if g in OUTLIERS else 0.8 + 0.8 * np.log2(m) / 12.0


def _box_and_data(target, law=_law):
    cells = _cells(GPUS, law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    data = {x: box._training(x)["gemm"] for x in GPUS if x != target}
    tc = cells[cells["gpu"] == target].reset_index(drop=True)
    return cells, box, data, box._features(tc, target)["gemm"], tc


def test_the_distance_is_the_norm_of_the_excess_over_the_donors_box():
    donors = ["h100-sxm", "h200-sxm", "b200"]
    assert G.extrapolation_distance("h200-sxm", ["a100-sxm", "b200"]) == 0.0  # inside the box
    A = np.array([G.similarity_vector(g) for g in donors])
    z = G.similarity_vector("a100-sxm")
    excess = np.maximum(0, np.maximum(z - A.max(0), A.min(0) - z))
    assert excess.sum() > 0 and G.extrapolation_distance("a100-sxm", donors) == pytest.approx(np.linalg.norm(excess))
    # the nine AIC GPUs: A100, L40S and RTX PRO 6000 are the outliers of the other eight, every other one is inside
    aic = ["a100-sxm", "b200", "b300", "gb200", "gb300", "h100-sxm", "h200-sxm", "l40s", "rtx-pro-6000"]
    out = {g for g in aic if G.extrapolation_distance(g, [x for x in aic if x != g]) > 0}
    assert out == {"a100-sxm", "l40s", "rtx-pro-6000"}
    with pytest.raises(ValueError, match="no donor"):
        G.extrapolation_distance("b200", [])


def test_an_outlier_target_gets_its_correction_shrunk_when_the_outlier_folds_say_it_does_not_carry():
    _, _, data, F, _ = _box_and_data("l40s")
    m0, cv0 = G.fit_term(data, "l40s")  # kappa = 0 only: the grey box as before
    m1, cv1 = G.fit_term(data, "l40s", rates=G.EXTRAPOLATION_RATES)
    d = G.extrapolation_distance("l40s", sorted(data))
    assert d > 0 and G._rate(m1.name) > 0 and m1.name.startswith("x")
    assert m1.extrapolation == {"rate": G._rate(m1.name), "distance": round(d, 6),
                                "factor": round(math.exp(-G._rate(m1.name) * d), 6)}
    assert m1.shrink == pytest.approx(G._parse(m1.name)[2] * math.exp(-G._rate(m1.name) * d))
    # the inner folds holding out the outlier A100 show the datacenter residual does not carry: the chosen setting's
    # CV error is below every kappa = 0 setting's, and the target's correction is much smaller than without the rates
    assert cv1[m1.name] < min(v for k, v in cv0.items())
    assert np.abs(m1.log_correction(F)).mean() < 0.25 * np.abs(m0.log_correction(F)).mean()
    # every kappa = 0 setting scores as before (the rates add candidates, they change none)
    assert {k: v for k, v in cv1.items() if G._rate(k) == 0} == cv0


def test_an_in_range_target_and_the_default_are_the_grey_box_as_before():
    cells, box, data, F, tc = _box_and_data("h200-sxm")
    assert G.extrapolation_distance("h200-sxm", sorted(data)) == 0.0
    m0, cv0 = G.fit_term(data, "h200-sxm")
    m1, cv1 = G.fit_term(data, "h200-sxm", rates=G.EXTRAPOLATION_RATES)
    assert m1.name == m0.name and cv1 == cv0 and m1.extrapolation is None  # kappa may not steer an in-range setting
    assert np.array_equal(m1.log_correction(F), m0.log_correction(F))
    # two training GPUs: each inner fold's donors are one GPU (a point), no rate is tried
    two = {g: data[g] for g in ("a100-sxm", "b200")}
    assert G.fit_term(two, "l40s", rates=G.EXTRAPOLATION_RATES)[1] == G.fit_term(two, "l40s")[1]
    # the GreyBox: (0,) records nothing (today's caches stay valid); the rates are recorded and refused across
    plain = T.GreyBox("aic_gemm", cells, _defaults, extrapolation_rates=(0.0,))
    rated = T.GreyBox("aic_gemm", cells, _defaults, extrapolation_rates=G.EXTRAPOLATION_RATES)
    assert "extrapolation_rates" not in plain.settings()
    assert rated.settings()["extrapolation_rates"] == list(G.EXTRAPOLATION_RATES)
    doc = {"settings": rated.settings(), "fingerprint": rated.fingerprint(), "fits": {}}
    with pytest.raises(ValueError, match="extrapolation_rates"):
        plain.adopt(doc)
    _, info = rated.fit("l40s")
    assert info["extrapolation"]["distance"] > 0 and set(info["extrapolation"]["factor"]) == {"gemm"}
    assert "extrapolation" not in plain.fit("l40s")[1]
    # the shared (shape-only) box and tables outside EXTRAPOLATION_TABLES default to kappa = 0
    assert T.GreyBox("aic_gemm", cells, _defaults, shared=True).extrapolation_rates == (0.0,)
    if "aic_gemm" not in G.EXTRAPOLATION_TABLES:
        assert T.GreyBox("aic_gemm", cells, _defaults).extrapolation_rates == (0.0,)


@pytest.mark.parametrize("bad", [(), (0.5,), (-1.0, 0.0), (0.0, math.inf), (0.0, math.nan), ("0", 1), "0",
                                 (True, 0.0), None, 3])
def test_bad_extrapolation_rates_are_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="extrapolation rates") as e:
        G.extrapolation_rates(bad)
    assert "\n" not in str(e.value)
    if bad is not None:
        cells = _cells(GPUS[:3], _law)
        with pytest.raises(ValueError, match="extrapolation rates"):
            T.GreyBox("aic_gemm", cells, _defaults, extrapolation_rates=bad)


def test_the_shared_box_refuses_rates():
    cells = _cells(GPUS[:3], _law)
    with pytest.raises(ValueError, match="shared"):
        T.GreyBox("aic_gemm", cells, _defaults, shared=True, extrapolation_rates=G.EXTRAPOLATION_RATES)
