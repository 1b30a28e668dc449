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


def test_server_tp_part_is_priced_per_extra_rank_and_sums_in_the_breakdown():
    """engines.yaml host.server_tp_ms: s_tp (TP - 1) per non-empty step beside s_a + s_b N (none at TP 1, none in an
    empty step); in predict_step it is part of the host term, and the terms still sum to the step."""
    from steptime.calibration import Constants
    from steptime.specs.engines import get_engine
    from steptime.step import predict_step

    g = get_gpu("h100-sxm")
    c = Constants.default()
    v0 = get_engine("vllm-v0")
    assert "server_tp_ms" in v0.values and "server_tp_ms" not in get_engine("vllm-v1-sync").values
    off = v0.with_fitted("h100-sxm", {"server_tp_ms": 0.0}, source="test")
    on = v0.with_fitted("h100-sxm", {"server_tp_ms": 3.0}, source="test")
    n = np.array([0, 1, 10])
    for tp, want in ((1, 0.0), (2, 3.0e-3), (4, 9.0e-3), (8, 21.0e-3)):
        d = H.scheduler_floor(n, g, c, tp, engine=on) - H.scheduler_floor(n, g, c, tp, engine=off)
        assert np.allclose(d, [0.0, want, want]), tp
    p_on = predict_step("llama-3.1-70b", "h100-sxm", tp=4, decode=[(32, 1024)], engine=on)
    p_off = predict_step("llama-3.1-70b", "h100-sxm", tp=4, decode=[(32, 1024)], engine=off)
    assert p_on.terms_ms["host"] - p_off.terms_ms["host"] == pytest.approx(9.0)  # synchronous: all exposed
    assert p_on.total_ms - p_off.total_ms == pytest.approx(9.0)
    assert sum(p_on.terms_ms.values()) == pytest.approx(p_on.total_ms)
