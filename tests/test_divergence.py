"""E1.16 (the metric-divergence lesson) is read from R2.3's result: the two metrics' preferences, per arm,
and the sign targets from the registry; a result without the per-operator price is one clear error."""
import json
from pathlib import Path

import pytest

from steptime.errors import SteptimeError
from steptime_lab.experiments import divergence as D

ROOT = Path(__file__).resolve().parents[1]
T = {"per_op_delta_below": 0.0, "wallclock_delta_below": 0.0}


def _r23(wall_fit):
    rows = [{"table": "gemm", "kind": "gemm", "cells": 10, "scale": 1.1, "offset_us": 0.0,
             "mape_per_op_calibrated": 0.05, "mape_wallclock_scaled": 0.09},
            {"table": "attn", "kind": "attention", "cells": 5, "scale": 1.0, "offset_us": 0.0,
             "mape_per_op_calibrated": 0.10, "mape_wallclock_scaled": 0.10}]
    return {"metrics": {"vllm@x": {
        "engine": "vllm", "gpu": "x", "arms": {"vllm": "shipped", "fit": "arm B: ...", "blk": "arm C: ..."},
        "per_op_cost": {"arm_B": rows, "arm_C": rows},
        "gain_by_phase": [{"phase": "decode", "steps": 9, "vllm": 0.12, "fit": wall_fit, "blk": 0.2},
                          {"phase": "prefill", "steps": 3, "vllm": 0.08, "fit": 0.07, "blk": 0.2}]}}}


def test_divergence_is_both_metrics_preferring_their_own_calibration():
    doc = D.document(_r23(0.09), T)
    b_op, b_wall = [x for x in doc["claims"] if x["claim"].startswith("vllm@x arm_B")][:2]
    assert b_op["value"] == {"gemm": -0.04} and b_op["met"] is True  # the unchanged table is not scored
    assert b_wall["value"] == {"decode": -0.03, "prefill": -0.01} and b_wall["met"] is True
    c_wall = [x for x in doc["claims"] if x["claim"].startswith("vllm@x arm_C")][1]
    assert c_wall["met"] is False and c_wall["value"]["decode"] == pytest.approx(0.08)


def test_no_divergence_when_the_wall_clock_prefers_the_per_operator_profile():
    doc = D.document(_r23(0.15), T)
    b_wall = [x for x in doc["claims"] if x["claim"].startswith("vllm@x arm_B")][1]
    assert b_wall["met"] is False and b_wall["value"]["decode"] == pytest.approx(0.03)


def test_missing_target_or_price_is_one_clear_error():
    with pytest.raises(SteptimeError, match="per_op_delta_below"):
        D.document(_r23(0.09), {"wallclock_delta_below": 0.0})
    with pytest.raises(SteptimeError, match="per_op_cost"):
        D.document({"metrics": {"a": {"engine": "vllm", "arms": {}}}}, T)


def test_committed_e1_16_is_read_from_the_committed_r2_3():
    """results/E1_16.json's numbers are R2.3's (a rerun of the library on R2.3's file gives them)."""
    r23 = json.loads((ROOT / "results/R2_3.json").read_text())
    e116 = json.loads((ROOT / "results/E1_16.json").read_text())
    assert D.document(r23, e116["targets"])["claims"] == e116["claims"]
