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
