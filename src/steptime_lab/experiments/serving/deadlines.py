"""A QLM-style deadline queue (earliest first-token deadline first; requests estimated to miss go to the
back) with steptime's waiting-time estimate against a scalar one, under contention (simulated; E2.3)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.serve import ScalarEstimator, StepEstimator, StepTimer, Workload, poisson_arrivals, policy, simulate
from steptime_lab.experiments.serving.common import trace_lengths


def deadline_queue_attainment(traces: pd.DataFrame, *, model: str, gpu: str, trace: str, n: int, rates, classes, budget: int,
         seed: int, targets: dict | None = None, constants=None) -> dict:
    prompt, output = trace_lengths(traces, trace, n, seed)
    rng = np.random.default_rng(seed + 1)
    names = [c["name"] for c in classes]
    cls = rng.choice(len(classes), n, p=[c["share"] for c in classes])
    slo = np.array([c["ttft_slo_s"] for c in classes])[cls]
    timer = StepTimer(model, gpu, max_tokens=budget + 512, constants=constants)
    pol = policy("vllm", max_num_batched_tokens=budget)
    step_est = StepEstimator(timer, budget, int(prompt.mean() + output.mean() / 2))
    scalar_s = timer.step_arrays(np.array([int(prompt.mean())]), np.array([0]))
    estimators = {"steptime": step_est, "scalar": ScalarEstimator(scalar_s)}
    rows = []
    for rate in rates:
        arr = poisson_arrivals(n, rate, seed)
        wl = Workload(arr, prompt, output, name=trace)
        runs = {"fcfs": simulate(model, gpu, wl, pol, timer=timer)}
        for name, est in estimators.items():
            runs[f"edf_{name}"] = simulate(model, gpu, wl, pol, timer=timer, deadline=arr + slo, estimator=est)
        row = {"rate_req_s": float(rate)}
        for name, run in runs.items():
            d = run.requests
            ok = d["ttft_s"].to_numpy() <= slo
            row[f"{name}_attainment"] = float(ok.mean())
            for i, cn in enumerate(names):
                row[f"{name}_attainment_{cn}"] = float(ok[cls == i].mean())
            if name.startswith("edf_"):
                e = d["first_token_estimate_s"].to_numpy() - d["arrival_s"].to_numpy()
                a = d["ttft_s"].to_numpy()
                m = np.isfinite(e)
                row[f"{name}_estimated"] = int(m.sum())
                row[f"{name}_estimate_median_abs_error_s"] = float(np.median(np.abs(e[m] - a[m]))) if m.any() else None
                row[f"{name}_estimate_median_rel_error"] = float(np.median((e[m] - a[m]) / a[m])) if m.any() else None
        rows.append(row)
    return {"table": pd.DataFrame(rows), "targets": targets or {}, "scalar_s": float(scalar_s),
            "workload": {"model": model, "gpu": gpu, "trace": trace, "requests": n, "budget": budget, "seed": seed,
                         "classes": classes}}
