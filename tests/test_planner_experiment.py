"""E2.13's reductions: curve MAPE and the planner's pick against the measured best."""

import pandas as pd
import pytest

from steptime_lab.experiments.planner import curve_scores, picks


def _pts():
    rows = []
    for tp, c, tm, ts in [(1, 8, 0.010, 0.011), (1, 32, 0.020, 0.018), (2, 8, 0.008, 0.008), (2, 32, 0.015, 0.016)]:
        per = c * 128 / (0.1 + 127 * tm) / tp
        rows.append({"id": f"{tp}-{c}", "gpu": "h100-sxm", "engine": "trtllm", "precision": "fp8", "tp": tp,
                     "isl": 1024, "osl": 128, "concurrency": c, "tpot_s_measured": tm, "tpot_s_sim": ts,
                     "per_gpu_measured": per, "per_gpu_sim": per * ts / tm, "per_user_measured": 1 / tm,
                     "per_user_sim": 1 / ts})
    return pd.DataFrame(rows)


def test_curve_mape():
    cur = curve_scores(_pts())
    assert len(cur) == 2 and list(cur["points"]) == [2, 2]
    tp1 = cur[cur["tp"] == 1].iloc[0]
    assert tp1["mape_per_gpu"] == pytest.approx((0.1 + 0.1) / 2)


def test_pick_against_measured_best():
    pk = picks(_pts(), [0.0155, 0.05]).set_index("slo_tpot_s")
    # measured under the SLO: 1-8, 2-8, 2-32 (best per GPU: 2-32); predicted under it: 1-8, 2-8 (pick: 1-8)
    tight = pk.loc[0.0155]
    assert tight["best_id"] == "2-32" and tight["pick_id"] == "1-8" and not tight["top1"]
    assert tight["pick_meets_measured"] and not tight["within_10pct"]  # 747 vs 1021 tok/s/GPU
    loose = pk.loc[0.05]
    assert loose["best_id"] == loose["pick_id"]


def test_pick_keeps_the_headroom_under_the_slo():
    # at 0.0155 s the plain pick is 1-8 (simulated 0.011); with 50 % headroom 0.011 x 1.5 > 0.0155, so only 2-8
    # (0.008 x 1.5 = 0.012) stays a candidate
    plain = picks(_pts(), [0.0155]).iloc[0]
    room = picks(_pts(), [0.0155], headroom=0.5).iloc[0]
    assert plain["pick_id"] == "1-8" and plain["predicted_feasible"] == 2
    assert room["pick_id"] == "2-8" and room["predicted_feasible"] == 1
    # a headroom no point keeps: no pick (and no verdict on the case)
    none = picks(_pts(), [0.0155], headroom=0.99).iloc[0]
    assert none["predicted_feasible"] == 0 and pd.isna(none.get("top1"))


def test_pick_refuses_a_bad_headroom():
    from steptime.plan import PlanError

    with pytest.raises(PlanError, match="headroom must be a fraction"):
        picks(_pts(), [0.02], headroom=-0.1)


def test_fractions_count_only_cases_with_a_pick_and_a_measured_best():
    from steptime_lab.experiments.planner import _fractions

    f = _fractions(picks(_pts(), [0.0155, 0.05, 0.001]))
    assert f["cases"] == 2 and f["top1"] == 0.5 and f["pick_meets_measured"] == 1.0 and f["within_10pct"] == 0.5


@pytest.mark.parametrize("engines, msg", [
    ([], "name at least one other engine"),
    (["sglang", "trtllm"], "trtllm is the scored group"),
])
def test_band_never_reads_the_scored_group(engines, msg):
    from steptime_lab.experiments.planner import band_errors

    with pytest.raises(ValueError, match=msg):
        band_errors(pd.DataFrame(), model="qwen3-32b", gpu="h100-sxm", engines=engines, scored_engine="trtllm",
                    budget=8192, per_concurrency=1, min_requests=1, seed=0, constants=object())


@pytest.mark.parametrize("band", [None, {"headroom": 0.05, "quantile": 0.8, "engines": ["sglang", "vllm"]}])
def test_document_discloses_the_closed_loop_join(band):
    """E2.13's band simulates the other engines' closed loops with engine_policy, which carries the profiles'
    schedule.join_steps since wave 28: the result says so and when it was chosen, with or without a band."""
    from steptime_lab.experiments.planner import document
    from steptime_lab.experiments.serving.replay import CLOSED_JOIN_DISCLOSED

    pts = curve_scores(_pts())
    pk = pd.DataFrame({"top1": [True], "within_10pct": [True], "pick_meets_measured": [True]})
    t = {"curve_mape_per_gpu_median_max": 0.2, "curve_mape_per_user_median_max": 0.2, "pick_top1_min": 0.5,
         "pick_within_10pct_min": 0.5}
    r = {"targets": t, "curves": pts, "picks": pk, "band": band, "settings": {}, "points": _pts(),
         "calibrated_curves": pts, "costs": pd.DataFrame({"x": [1.0]})}
    d = document(r)["metrics"]["disclosed"]
    assert CLOSED_JOIN_DISCLOSED in d and "wave 28" in d.lower() and "E3.4" in d
