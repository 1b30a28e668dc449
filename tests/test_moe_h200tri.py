"""E3.1's readings relative to the law's training GPUs' own (issue 20, wave 41, helper h200tri; DESIGN.md "H200's
Triton MoE law is fast because its memory reading carries the law's few-token shape error")."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments import moe as E

LAW = {"bf16": dict(zip(E.PARAMS, (0.4, 0.8, 0.3, 20.0, 2.0, 1.0, 0.5, 16.0, 4.0)))}


def _readings(scales: dict) -> pd.DataFrame:
    """E3.1's three reading cells on each GPU of `scales`, timed by LAW with that GPU's scales."""
    h, i, k, n = E.READING_SHAPE
    frames = []
    for g, sc in scales.items():
        rows = list(E.READINGS.values())
        d = pd.DataFrame({"gpu": g, "sdtype": "bf16", "distribution": "balanced", "hidden_size": h,
                          "inter_size": i, "topk": k, "num_experts": n, "moe_tp": [r[1] for r in rows],
                          "moe_ep": [r[2] for r in rows], "num_tokens": [r[0] for r in rows]})
        d["latency_ms"] = E.predict(d, LAW, {g: sc})
        frames.append(d)
    return pd.concat(frames, ignore_index=True)


def test_relative_scales_divide_out_the_training_gpus_own_reading():
    """The held-out GPU's scales over the geometric mean of its law's training GPUs' (d_floor_us: less their mean)."""
    d = _readings({"h200-sxm": {"s_c": 0.8, "s_mem": 1.2, "d_floor_us": 7.0},
                   "h100-sxm": {"s_c": 0.9, "s_mem": 1.1, "d_floor_us": 3.0},
                   "l40s": {"s_c": 1.0, "s_mem": 1.3, "d_floor_us": -1.0}})
    sc, used = E.relative_scales(d, "h200-sxm", LAW, ["h100-sxm", "l40s"])
    assert len(used) == 3
    assert sc["s_c"] == pytest.approx(0.8 / np.sqrt(0.9 * 1.0), rel=1e-6)
    assert sc["s_mem"] == pytest.approx(1.2 / np.sqrt(1.1 * 1.3), rel=1e-6)
    assert sc["d_floor_us"] == pytest.approx(7.0 - 1.0, abs=1e-4)


def test_an_error_the_training_gpus_share_is_not_a_gpu_level():
    """Where the law is off at the reading cells by the same factor on the held-out GPU and on its training GPUs
    (the law's own shape error there), the relative scales are neutral, where gpu_scales' are not."""
    same = {"s_c": 0.85, "s_mem": 1.19, "d_floor_us": 5.0}
    d = _readings({"h200-sxm": same, "h100-sxm": same})
    plain, _ = E.gpu_scales(d, "h200-sxm", LAW)
    assert plain["s_mem"] == pytest.approx(1.19, rel=1e-6)
    sc, _ = E.relative_scales(d, "h200-sxm", LAW, ["h100-sxm"])
    assert sc["s_c"] == pytest.approx(1.0, rel=1e-6) and sc["s_mem"] == pytest.approx(1.0, rel=1e-6)
    assert sc["d_floor_us"] == pytest.approx(0.0, abs=1e-4)


def test_relative_scales_skip_a_reference_without_readings_and_fall_back_to_gpu_scales():
    d = _readings({"h200-sxm": {"s_c": 0.8, "s_mem": 1.2, "d_floor_us": 7.0},
                   "h100-sxm": {"s_c": 0.9, "s_mem": 1.1, "d_floor_us": 3.0}})
    plain, used = E.gpu_scales(d, "h200-sxm", LAW)
    # a reference GPU with no reading cells ("b200" has none here) is skipped
    sc, _ = E.relative_scales(d, "h200-sxm", LAW, ["h100-sxm", "b200"])
    assert sc["s_mem"] == pytest.approx(1.2 / 1.1, rel=1e-6)
    # no reference left, or none given: gpu_scales' own
    for refs in (["b200"], []):
        sc, u = E.relative_scales(d, "h200-sxm", LAW, refs)
        assert u == used and all(sc[k] == pytest.approx(plain[k], rel=1e-9) for k in plain)
    # the held-out GPU without readings: neutral, as gpu_scales
    sc, u = E.relative_scales(d, "b300", LAW, ["h100-sxm"])
    assert u == [] and sc == {"s_c": 1.0, "s_mem": 1.0, "d_floor_us": 0.0}
