"""E2.12 serving peers: AIConfigurator's adapter (when installed), the side-by-side table, status."""
import numpy as np
import pandas as pd
import pytest

from steptime.errors import ServeError
from steptime_lab.experiments import serving_peers as peers
from steptime.serve import aic
from distserve_table import coefficients  # tests/distserve_table.py

needs_aic = pytest.mark.skipif(not aic.available(), reason="aiconfigurator-core not installed (pip install -e '.[peers]')")


@pytest.fixture(scope="module")
def est():
    if not aic.available():
        pytest.skip("aiconfigurator-core not installed")
    return aic.AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "vllm", tp=2)


@needs_aic
def test_aic_estimate_grows_with_load_and_prompt(est):
    a = est.estimate(1024, 256, 8)
    assert 0 < a["tpot_s"] < 1 and 0 < a["ttft_s"] < 10
    assert est.estimate(1024, 256, 64)["tpot_s"] > a["tpot_s"]
    assert est.estimate(4096, 256, 8)["ttft_s"] > a["ttft_s"]


@needs_aic
def test_aic_refuses_bad_input(est):
    with pytest.raises(ServeError):
        est.estimate(0, 256, 8)
    with pytest.raises(ServeError, match="reserved"):
        aic.AICEstimator("meta-llama/Meta-Llama-3.1-8B", "h100-sxm", "vllm")
    with pytest.raises(ServeError, match="no system"):
        aic.AICEstimator("Qwen/Qwen3-32B", "rtx-4090", "vllm")
    with pytest.raises(ServeError, match="backend"):
        aic.AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "tgi")
    with pytest.raises(ServeError, match="quant"):
        aic.AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "vllm", quant="int3")


def test_aic_missing_package_is_one_clear_line(monkeypatch):
    monkeypatch.setattr(aic, "available", lambda: False)
    with pytest.raises(ServeError, match=r"pip install -e '\.\[peers\]'"):
        aic.AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "vllm")


def _silicon():
    base = {"gpu": "h100-sxm", "model": "qwen3-32b", "mode": "agg", "engine": "vllm", "engine_version": "0.12.0",
            "pp": 1, "attention_dp": np.nan, "ttft_ms": 300.0, "tpot_ms": 20.0}
    rows = [dict(base, id="a", tp=2, isl=1024, osl=64, concurrency=4, precision=None, gemm_quant_mode=None),
            dict(base, id="b", tp=2, isl=1024, osl=64, concurrency=16, precision="fp8", gemm_quant_mode="fp8"),
            dict(base, id="c", tp=np.nan, isl=1024, osl=64, concurrency=4, precision=None, gemm_quant_mode=None),
            dict(base, id="d", tp=2, pp=2, isl=1024, osl=64, concurrency=4, precision=None, gemm_quant_mode=None),
            dict(base, id="e", tp=2, mode="disagg", isl=1024, osl=64, concurrency=4, precision=None,
                 gemm_quant_mode=None)]
    return pd.DataFrame(rows)


def test_silicon_workloads_keeps_aggregated_tp_rows_and_fills_bf16():
    d = peers.silicon_workloads(_silicon(), model="qwen3-32b", gpu="h100-sxm")
    assert list(d["id"]) == ["a", "b"]
    assert list(d["precision"]) == ["bf16", "fp8"] and list(d["gemm_quant_mode"]) == ["bfloat16", "fp8"]
    with pytest.raises(ValueError, match="reserved"):
        peers.silicon_workloads(_silicon(), model="llama-3.1-8b", gpu="h100-sxm")
    with pytest.raises(ValueError, match="no aggregated"):
        peers.silicon_workloads(_silicon(), model="qwen3-32b", gpu="a100-sxm")


def _ds_inputs():
    rng = np.random.default_rng(0)
    n = 200
    traces = pd.DataFrame({"trace": "splitwise_conv", "request_id": np.arange(n), "arrived_at_s": np.arange(n) * 0.1,
                           "num_prefill_tokens": rng.integers(64, 1500, n), "num_decode_tokens": rng.integers(16, 300, n)})
    tokens = pd.DataFrame([{"model": "opt-13b", "tp": 1, "pp": 1, "max_num_tokens": 60000}])
    case = dict(model="opt-13b", gpu="a100-sxm", tp=1, trace="splitwise_conv", n=40, rate=1.0, prefill_instances=1,
                decode_instances=1, max_len=2048, block_size=16)
    return traces, coefficients(), tokens, case


def _run(silicon, aic_on=False):
    traces, coef, tokens, case = _ds_inputs()
    return peers.side_by_side(silicon, traces, coef, tokens, cases=[{"model": "qwen3-32b", "gpu": "h100-sxm",
                                                             "aic_model": "Qwen/Qwen3-32B"}],
                       budget=2048, per_concurrency=2, min_requests=8, seed=1, distserve_case=case, aic=aic_on,
                       targets={"tpot_s_p50_abs_error_max": 0.1, "ttft_s_p50_abs_error_max": 0.2,
                                "distserve_agreement_max": 0.2})


def test_e2_12_scores_against_the_measured_rows_and_is_deterministic():
    r = _run(_silicon())
    t = r["table"]
    assert len(t) == 2 and (t["requests_simulated"] == [8, 32]).all()
    # a "measured" table equal to steptime's own predictions scores zero error and meets the targets
    exact = _silicon()
    exact.loc[:1, "ttft_ms"] = t["ttft_s_steptime"].to_numpy() * 1e3
    exact.loc[:1, "tpot_ms"] = t["tpot_s_steptime"].to_numpy() * 1e3
    doc = peers.document(_run(exact))
    st = [c for c in doc["claims"] if c["claim"].startswith("steptime:")]
    assert len(st) == 2 and all(c["met"] and abs(c["value"]) < 1e-9 for c in st)
    # the unchanged (300 ms / 20 ms) table is far from the predictions and misses
    doc2 = peers.document(r)
    assert doc2["metrics"]["rows"] == peers.document(_run(_silicon()))["metrics"]["rows"]
    ds = doc2["metrics"]["distserve"]
    assert set(ds) >= {"steptime", "distserve", "steptime_vs_distserve", "workload"}
    assert ds["steptime"]["tpot_s_mean"] > 0 and ds["distserve"]["tpot_s_mean"] > 0
    speed = peers.timing_document(r)["speed"]
    assert speed["steptime"]["requests"] == 40 and speed["distserve"]["requests"] == 40


@needs_aic
def test_e2_12_with_aic_adds_its_columns():
    r = _run(_silicon(), aic_on=True)
    assert {"ttft_s_aiconfigurator", "tpot_s_err_aiconfigurator"} <= set(r["table"].columns)
    assert r["speed"]["aiconfigurator"]["workload_points"] == 2


def test_status_says_what_to_install(monkeypatch, capsys):
    from steptime_lab import status

    monkeypatch.setattr(status, "_absent_modules", lambda names: list(names))
    status.status()
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("E2.12")][0]
    assert "optional packages not installed (aiconfigurator_core)" in line and ".[peers]" in line


def _servingsim(model="qwen3-32b", n=40):
    rng = np.random.default_rng(3)
    arr = np.sort(rng.uniform(0, 10, n))
    out = rng.integers(5, 200, n)
    req = pd.DataFrame({"run": "R", "gpu": "rtx-pro-6000", "model": model, "tp": 2, "moe": False,
                        "engine_version": "0.19.0", "max_num_seqs": 64, "max_num_batched_tokens": 2048,
                        "request_id": [f"r{i}" for i in range(n)], "arrival_s": arr, "input_tokens": rng.integers(50, 1500, n),
                        "output_tokens": out, "ttft_s": rng.uniform(0.05, 0.5, n), "tpot_s": rng.uniform(0.02, 0.05, n)})
    ts = pd.DataFrame({"run": "R", "t_s": np.arange(12.0), "running": [0] + [8] * 10 + [0]})
    return req, ts


def test_servingsim_rows_replay_the_trace_and_refuse_reserved_models():
    req, ts = _servingsim()
    d = peers.servingsim_rows(req, ts, runs=[{"run": "R", "aic_model": "Qwen/Qwen3-32B"}], aic=False)
    row = d.iloc[0]
    # the measured running count averages only the busy seconds
    assert row["running_mean_measured"] == 8.0 and row["requests"] == 40
    assert row["tpot_s_steptime"] > 0 and row["tpot_s_err_steptime"] == pytest.approx(
        (row["tpot_s_steptime"] - req["tpot_s"].mean()) / req["tpot_s"].mean())
    req8, ts8 = _servingsim(model="llama-3.1-8b")
    with pytest.raises(ValueError, match="reserved"):
        peers.servingsim_rows(req8, ts8, runs=[{"run": "R", "aic_model": "x"}], aic=False)
    with pytest.raises(ValueError, match="no LLMServingSim run"):
        peers.servingsim_rows(req, ts, runs=[{"run": "Q", "aic_model": "x"}], aic=False)
