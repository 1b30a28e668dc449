"""E2.1's Vidur step under Vidur's measurement-stack factor (issue 24, wave 33, grey4): each arm's factor held out as
the arm allows; no factor reads the target's rows."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Calibration, Constants
from steptime.specs import get_gpu
from steptime.step import VIDUR_GEMM, vidur_layer_ops
from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.transfer import greybox as G
from steptime_lab.experiments.transfer import stack as S

SLOW = {"a100-sxm": 1.1, "h100-sxm": 1.2, "a40": 1.3}
GPUS = sorted(SLOW)


def _toy(slow=SLOW):
    """Toy Vidur rows whose GEMM ops run `slow[gpu]` times the default prediction (light ops as predicted)."""
    rows = []
    for g in GPUS:
        for tp in (1, 2):
            for t in (8, 1024, 2048, 4096):
                for op, v in vidur_layer_ops("llama-2-7b", g, np.array([t]), tp=tp).items():
                    rows.append(dict(gpu=g, model="llama-2-7b", tp=tp, num_tokens=t, op=op,
                                     latency_ms=float(v[0]) * (slow[g] if op in VIDUR_GEMM else 1.0)))
    return pd.DataFrame(rows)


def test_each_factor_is_fitted_without_its_gpu_and_without_the_target():
    C = Constants.default()
    st = S.VidurStack(_toy(), GPUS, None, C)
    assert st.factor("a40")["factor"] == pytest.approx(1.15, abs=1e-3)  # E1.1's: a100 + h100
    assert st.factor("a40")["fitted_on"] == ["a100-sxm", "h100-sxm"]
    assert st.record("a40")["gpus"] == ["a100-sxm", "h100-sxm"]  # a fitted_on entry: the contract test reads "gpus"
    assert st.record("a40")["factor"] == st.factor("a40")["factor"]
    assert st.factor("a100-sxm", "a40") == dict(st.factor("a100-sxm", "a40"), fitted_on=["h100-sxm"])
    assert st.factor("a100-sxm", "a40")["factor"] == pytest.approx(1.2, abs=1e-3)
    assert st.factor("a40", "a40") == st.factor("a40")
    bad = S.VidurStack(_toy(dict(SLOW, a40=9.0)), GPUS, None, C)  # the target's rows set nothing
    assert bad.factor("a40") == st.factor("a40") and bad.factor("h100-sxm", "a40") == st.factor("h100-sxm", "a40")
    assert bad.factor("h100-sxm")["factor"] != st.factor("h100-sxm")["factor"]  # a40 is a fitting GPU there
    c = st.constants(C, "a40")
    a40 = get_gpu("a40")
    assert c.get("eta_active", a40) == pytest.approx(C.get("eta_active", a40) / st.factor("a40")["factor"])


def test_steptime_runs_under_the_targets_factor_and_the_profile_ratio_does_not():
    C = Constants.default()
    v = _toy()
    cells = T.step_cells(v, tps=(1, 2))
    tc = cells[cells["gpu"] == "a40"].reset_index(drop=True)
    st = S.VidurStack(v, GPUS, None, C)
    cal = Calibration.from_constants(C)
    plain = T.records.target_part("vidur_step", tc, "a40", C, cal)
    stacked = T.records.target_part("vidur_step", tc, "a40", C, cal, stack=st)
    for op in plain["st_pred"]:
        np.testing.assert_array_equal(plain["st_pred"][op], stacked["st_pred"][op])
    tc = stacked["tc"]
    big = tc["num_tokens"].to_numpy() == 4096
    r = stacked["steptime"][big] / plain["steptime"][big]
    assert np.all(r > 1.05) and np.all(r < 1.15)  # the projections slowed by ~1.15, the light ops not
    small = tc["num_tokens"].to_numpy() == 8
    assert np.all(stacked["steptime"][small] / plain["steptime"][small] < 1.03)  # memory-bound: barely moves


def test_greybox_training_gpus_run_under_factors_fitted_without_the_target():
    C = Constants.default()
    v = _toy()
    cells = T.step_cells(v, tps=(1, 2))
    hook = lambda g: (C, Calibration.from_constants(C))  # noqa: E731
    st = S.VidurStack(v, GPUS, None, C)
    grey = G.GreyBox("vidur_step", cells, hook, stack=st)
    plain = G.GreyBox("vidur_step", cells, hook)
    assert grey.settings()["vidur_stack"] is True and "vidur_stack" not in plain.settings()
    op = next(iter(VIDUR_GEMM))
    for target in ("a40", "h100-sxm"):
        b = grey._training("a100-sxm", target)[op]["base"] / plain._training("a100-sxm")[op]["base"]
        f = st.factor("a100-sxm", target)["factor"]
        assert f == pytest.approx(SLOW["h100-sxm" if target == "a40" else "a40"], abs=1e-3)
        assert b.max() == pytest.approx(f, rel=0.02)  # the compute-bound cells carry the factor
    assert grey.fingerprint() != plain.fingerprint()
    with pytest.raises(ValueError, match="vidur_step"):
        G.GreyBox("aic_gemm", cells, hook, stack=st)


def test_the_document_records_the_factors_and_the_disclosure():
    recs = [{"dataset": "vidur_step", "home_gpu": "a100-sxm", "target_gpu": "a40", "predictor": "steptime",
             "fitted_on": {"vidur_stack": {"factor": 1.137}}},
            {"dataset": "vidur_step", "home_gpu": "a100-sxm", "target_gpu": "a40", "predictor": "steptime_home_only",
             "fitted_on": {"vidur_stack": {"factor": 1.13}}},
            {"dataset": "vidur_step", "home_gpu": "a100-sxm", "target_gpu": "a40", "predictor": "steptime_residual",
             "fitted_on": {"vidur_stack": {"a40": {"factor": 1.137}, "h100-sxm": {"factor": 1.13}}}},
            {"dataset": "aic_gemm", "home_gpu": "a100-sxm", "target_gpu": "a40", "predictor": "steptime",
             "fitted_on": {}}]
    s = S.summary(recs)
    assert s == {"steptime": {"a40": 1.137}, "steptime_home_only": {"a100-sxm": 1.13},
                 "steptime_residual": {"a40": {"a40": 1.137, "h100-sxm": 1.13}}}
    assert S.summary(recs[3:]) == {}
    assert "after seeing" in S.DISCLOSED and "ml_loo" in S.DISCLOSED
