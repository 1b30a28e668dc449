"""The grey box (steptime_residual): per-term bounded corrections fitted on the other GPUs only."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Calibration, Constants
from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.ratios import predict_steptime
from steptime_lab.experiments.transfer import greybox as G

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "l40s")


def _cells(gpus, law):
    """GEMM cells whose latency is steptime's default prediction times law(m, n, k, gpu)."""
    m, n, k = np.meshgrid(2.0 ** np.arange(0, 13, 2), 2.0 ** np.arange(10, 15), 2.0 ** np.arange(10, 15))
    base = pd.DataFrame({"m": m.ravel(), "n": n.ravel(), "k": k.ravel()})
    out = []
    for g in gpus:
        d = base.copy()
        d["gpu"] = g
        d["latency_ms"] = predict_steptime("aic_gemm", d, g) * law(d["m"].to_numpy(), g)
        d["tokens"] = d["m"]
        out.append(d)
    return pd.concat(out, ignore_index=True)


def _defaults(gpu):
    c = Constants.default()
    return c, Calibration.from_constants(c)


def _mape(p, m):
    return float(np.mean(np.abs(p - m) / m))


def test_greybox_learns_a_shared_shape_bias_and_keeps_the_terms_summing():
    # physics is 30% slow at m = 1 and right at m = 4096, on every GPU
    law = lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0  # noqa: E731
    cells = _cells(GPUS, law)
    gb = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    r = gb.predict_terms(tc, "h200-sxm")
    meas = tc["latency_ms"].to_numpy()
    assert _mape(r["total"], meas) < 0.25 * _mape(r["physics"]["gemm"], meas)
    assert np.allclose(sum(r["terms"].values()), r["total"])
    assert np.allclose(r["terms"]["gemm"], r["physics"]["gemm"] * r["correction"]["gemm"])
    assert "h200-sxm" not in gb.fitted_on("h200-sxm")["gpus"]


def test_greybox_never_reads_the_target_and_stays_bounded():
    law = lambda m, g: np.full(len(m), 5.0 if g == "h200-sxm" else 1.0)  # noqa: E731
    cells = _cells(GPUS, law)
    gb = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    r = gb.predict_terms(tc, "h200-sxm")
    # the target's 5x is nowhere in the training GPUs: the correction stays near 1, within [1/2, 2]
    assert np.all(r["correction"]["gemm"] <= 2.0) and np.all(r["correction"]["gemm"] >= 0.5)
    assert np.allclose(r["correction"]["gemm"], 1.0, atol=0.05)
    # changing the target's measurements changes nothing
    c2 = cells.copy()
    c2.loc[c2["gpu"] == "h200-sxm", "latency_ms"] *= 3.0
    r2 = T.GreyBox("aic_gemm", c2, _defaults).predict_terms(tc, "h200-sxm")
    assert np.array_equal(r["total"], r2["total"])


def test_fit_term_falls_back_to_physics_when_the_correction_does_not_carry():
    rng = np.random.default_rng(0)
    data = {}
    for i in range(4):  # each GPU its own unrelated offset: no correction generalises across GPUs
        F = rng.normal(size=(200, 3 + 6))
        b = np.ones(200)
        data[f"g{i}"] = (F, b, b * (1.6 if i % 2 else 0.6))
    model, cv = G.fit_term(data)
    assert "none" in cv and model.lam is None
    assert np.allclose(model.log_correction(rng.normal(size=(5, 9))), 0.0)


def test_ml_loo_tuned_picks_its_setting_on_the_training_gpus_only():
    cells = _cells(GPUS, lambda m, g: np.ones(len(m)))
    ml = T.MLLeaveOneOut("aic_gemm", cells, fast=True, seed=0, tuned=True)
    info = ml.fitted_on("b200")
    assert "b200" not in info["gpus"]
    assert info["tuning"] is not None and len(info["tuning"]["inner_cv_mape"]) == len(T.fair_ground.ML_GRID[True])
    assert info["settings"]["rows_per_gpu_cap"] == T.fair_ground.ML_TUNED_ROWS_PER_GPU[True]


def test_two_training_gpus_give_no_correction():
    rng = np.random.default_rng(1)
    data = {g: (rng.normal(size=(50, 9)), np.ones(50), np.full(50, 1.3)) for g in ("g0", "g1")}
    model, cv = G.fit_term(data)
    assert model.w is None and "note" in cv
