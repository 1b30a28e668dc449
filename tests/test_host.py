"""Host floor (E1.4): S(N) = a + b (N-1), sampler and Ray parts; the step wiring."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments.host import floor as E
from steptime.specs import get_gpu
from steptime.terms import host as H


def _toy():
    rows = []
    for g in ("a100-sxm", "a40"):
        for model, tp in (("llama-2-7b", 1), ("llama-2-70b", 4), ("phi-2", 1)):
            for n in (8, 16, 32, 64, 128):
                r = dict(gpu=g, model=model, model_source=model, tp=tp, batch_size=n,
                         schedule_median_ms=0.1 + 0.01 * (n - 1), prepare_inputs_e2e_median_ms=0.2 + 0.01 * (n - 1),
                         process_model_outputs_median_ms=0.1 + 0.02 * (n - 1), sampler_e2e_median_ms=0.5 + 0.005 * (n - 1),
                         ray_comm_time_mean_ms=0.3 if tp == 1 else 6.0)
                rows.append(r)
    return E.tidy(pd.DataFrame(rows))


def test_two_deploy_rows_recover_an_exact_line_and_score_held_out_rows():
    x = _toy()
    r = E.run(x, n_boot=20)
    c = r["per_gpu"]["a100-sxm"]["deploy"]
    assert c["host_a_ms"] == pytest.approx(0.4)
    assert c["host_b_ms"] == pytest.approx(0.04)
    rec = next(v for v in r["records"] if v["gpu"] == "a100-sxm" and v["predictor"] == "steptime" and v["subset"] == "all")
    assert rec["mape"] < 1e-9
    assert rec["cells"] == 15 - 3


def test_scheduler_floor_linear_in_requests_and_zero_for_empty_steps():
    g = get_gpu("a100-sxm")
    s = H.scheduler_floor(np.array([0, 1, 2, 101]), g)
    assert s[0] == 0.0
    assert s[3] - s[1] == pytest.approx(100 * (s[2] - s[1]))
    from steptime.calibration import Constants

    c = Constants.default().with_overrides({"host_ray_ms": 0.5, "host_ray_tp_ms": 7.0}, scope="gpu.a100-sxm")
    assert H.scheduler_floor(1, g, c, tp=2) - H.scheduler_floor(1, g, c, tp=1) == pytest.approx(6.5e-3)


def test_host_and_sampling_in_the_step_breakdown():
    from steptime.step import predict_step

    p = predict_step("llama-2-7b", "a100-sxm", decode=[(32, 1024)], engine="vllm-v0")  # synchronous: all exposed
    assert p.terms_ms["host"] > 0 and p.terms_ms["sampling"] > 0
    assert sum(p.terms_ms.values()) == pytest.approx(p.total_ms)
