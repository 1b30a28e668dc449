"""E2.12: serving peers side by side on the same workloads, same metric (mean TTFT and TPOT).

Rows of the table:
  * AIConfigurator's silicon sample (measured aggregated serving, closed loop at a client
    concurrency, fixed ISL/OSL) for the dense model/GPU pairs steptime models: the measured
    means, steptime's simulator (steptime.serve, closed loop at the row's concurrency, vLLM-style
    token budget), and AIConfigurator's own aggregated-serving estimate (steptime.serve.aic).
  * DistServe's fitted latency model (OPT on A100) has no measured serving run in raw/: its row
    drives the same disaggregated simulator as steptime on the same requests, agreement only.

What each peer was fitted on (the fairness line of every score):
  steptime       datasheet numbers + at most nine readings per GPU (three per family: GEMM, NCCL,
                 wall clock); no serving run, no silicon row.
  AIConfigurator per-operator latency tables AIC measured on that GPU with that engine (a profiled
                 peer), interpolated; the silicon sample is AIC's own validation set, shipped with
                 its package (so AIC may have been tuned against it).
  DistServe      a latency model fitted by DistServe on its own profiling runs of OPT on A100.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from steptime import peers as registry  # the peer registry (`peers` here names the peers of a table)
from steptime.serve import Policy, Workload, poisson_arrivals, simulate, simulate_disagg, synthetic
from steptime_lab.experiments.serving import _kv_blocks, replay_run, trace_lengths
from steptime_lab.figures import parity
from steptime_lab.results import claim, target
from steptime.plotting import PALETTE, save, subplots

# what each peer was fitted on: the registry's line (steptime.peers), the fairness line of every score
FITTED_ON = {p: registry.entry(p).fitted_on for p in ("steptime", "aiconfigurator", "distserve")}
SIMULATED = "simulated (a scheduler model driven by predicted step times), not measured"


def silicon_workloads(silicon: pd.DataFrame, *, model: str, gpu: str) -> pd.DataFrame:
    """Aggregated-serving rows of one dense model/GPU with a known TP, pp=1 and no attention DP.

    Precision: the row's, or bf16 where the row leaves it empty (the checkpoint named in
    model_source is a bf16 one; DERIVED)."""
    if model.startswith("llama-3.1-8b") or model.startswith("llama-3.1-70b"):
        raise ValueError(f"{model} silicon rows are reserved as an outside check: not read")
    d = silicon[(silicon["model"] == model) & (silicon["gpu"] == gpu) & (silicon["mode"] == "agg")].copy()
    d = d[d["tp"].notna() & d["pp"].fillna(1).eq(1) & d["attention_dp"].fillna(1).eq(1)]
    d = d[d["ttft_ms"].notna() & d["tpot_ms"].notna()]
    if d.empty:
        raise ValueError(f"no aggregated silicon rows for {model} on {gpu}")
    d["precision"] = d["precision"].astype(object).where(d["precision"].notna(), "bf16")
    d["gemm_quant_mode"] = d["gemm_quant_mode"].astype(object).where(d["gemm_quant_mode"].notna(), "bfloat16")
    for c in ("tp", "isl", "osl", "concurrency"):
        d[c] = d[c].astype(int)
    return d.sort_values(["engine", "engine_version", "tp", "isl", "osl", "concurrency", "id"]).reset_index(drop=True)


def _closed_loop(model, gpu, row, *, budget: int, per_concurrency: int, min_requests: int, seed: int, timers: dict,
                 constants=None):
    c = int(row.concurrency)
    n = max(min_requests, per_concurrency * c)
    dtype = "fp8" if str(row.precision).startswith("fp8") else "bf16"
    key = (row.engine, int(row.tp), dtype, c)
    pol = Policy("vllm", max_num_batched_tokens=budget, max_num_seqs=max(c, 1))
    if key not in timers:
        timers[key] = registry.make("steptime", model, gpu, tp=int(row.tp), engine=row.engine, dtype=dtype,
                                max_tokens=budget, max_requests=max(c, 1), constants=constants)
    wl = synthetic(n, isl=int(row.isl), osl=int(row.osl), concurrency=c, seed=seed)
    t0 = time.perf_counter()
    run = simulate(model, gpu, wl, pol, tp=int(row.tp), timer=timers[key])
    dt = time.perf_counter() - t0
    s = run.summary()
    return {"ttft_s": s["ttft_s"]["mean"], "tpot_s": s["tpot_s"]["mean"], "requests": n}, dt


def _rel(pred, meas):
    return (pred - meas) / meas


def side_by_side(silicon: pd.DataFrame, traces: pd.DataFrame, distserve: pd.DataFrame, distserve_tokens: pd.DataFrame, *,
          cases, budget: int, per_concurrency: int, min_requests: int, seed: int, distserve_case: dict,
          aic: bool = True, targets: dict | None = None, servingsim: tuple | None = None,
          servingsim_runs=(), constants=None) -> dict:
    """The side-by-side table. `cases`: [{model, gpu, aic_model}], `aic`: ask AIConfigurator too;
    `servingsim`: (requests, timeseries) of LLMServingSim's runs, `servingsim_runs`: [{run, aic_model}]."""
    rows, timing = [], {"steptime": [0.0, 0], "aiconfigurator": [0.0, 0], "distserve": [0.0, 0],
                        "steptime_disagg": [0.0, 0], "steptime_replay": [0.0, 0]}
    estimators, aic_calls = {}, []
    for case in cases:
        model, gpu = case["model"], case["gpu"]
        timers = {}
        for row in silicon_workloads(silicon, model=model, gpu=gpu).itertuples(index=False):
            st, dt = _closed_loop(model, gpu, row, budget=budget, per_concurrency=per_concurrency,
                                  min_requests=min_requests, seed=seed, timers=timers, constants=constants)
            timing["steptime"][0] += dt
            timing["steptime"][1] += st["requests"]
            out = {"id": row.id, "model": model, "gpu": gpu, "engine": row.engine,
                   "engine_version": row.engine_version, "precision": row.precision, "tp": int(row.tp),
                   "isl": int(row.isl), "osl": int(row.osl), "concurrency": int(row.concurrency),
                   "requests_simulated": st["requests"],
                   "ttft_s_measured": float(row.ttft_ms) * 1e-3, "tpot_s_measured": float(row.tpot_ms) * 1e-3,
                   "ttft_s_steptime": st["ttft_s"], "tpot_s_steptime": st["tpot_s"]}
            if aic:
                k = (case["aic_model"], gpu, row.engine, int(row.tp), row.gemm_quant_mode)
                if k not in estimators:
                    estimators[k] = registry.make("aiconfigurator", case["aic_model"], gpu, row.engine, tp=int(row.tp),
                                               quant=row.gemm_quant_mode)
                t0 = time.perf_counter()
                a = estimators[k].estimate(int(row.isl), int(row.osl), int(row.concurrency), ctx_tokens=budget)
                aic_calls.append(time.perf_counter() - t0)
                timing["aiconfigurator"][0] += aic_calls[-1]
                timing["aiconfigurator"][1] += 1
                out.update({"ttft_s_aiconfigurator": a["ttft_s"], "tpot_s_aiconfigurator": a["tpot_s"],
                            "aic_tables": f"{estimators[k].backend_name} {estimators[k].version} on "
                                          f"{estimators[k].system}"})
            rows.append(out)
    table = pd.DataFrame(rows)
    peers = ["steptime"] + (["aiconfigurator"] if aic else [])
    for p in peers:
        for m in ("ttft_s", "tpot_s"):
            table[f"{m}_err_{p}"] = _rel(table[f"{m}_{p}"], table[f"{m}_measured"])
    replay = (servingsim_rows(*servingsim, runs=servingsim_runs, aic=aic, timing=timing,
                                      constants=constants)
              if servingsim is not None and servingsim_runs else pd.DataFrame())
    ds = distserve_agreement(traces, distserve, distserve_tokens, seed=seed, timing=timing, constants=constants,
                             **distserve_case)
    speed = {k: ({"seconds_per_request": v[0] / v[1], "requests": v[1]} if v[1] else None) for k, v in timing.items()}
    if timing["aiconfigurator"][1]:
        speed["aiconfigurator"] = {"seconds_per_workload_point": timing["aiconfigurator"][0] / timing["aiconfigurator"][1],
                                   "median_seconds_per_workload_point": float(np.median(aic_calls)),
                                   "workload_points": timing["aiconfigurator"][1],
                                   "note": "one mean-field estimate per workload (no request is simulated); the "
                                           "mean includes loading AIC's tables on the first call of each "
                                           "engine/TP/quant, the median does not"}
    return {"table": table, "peers": peers, "distserve": ds, "servingsim": replay, "speed": speed, "targets": targets or {},
            "settings": {"budget": budget, "per_concurrency": per_concurrency, "min_requests": min_requests,
                         "seed": seed}}


def servingsim_rows(requests: pd.DataFrame, timeseries: pd.DataFrame, *, runs, aic: bool = True,
                    timing: dict | None = None, constants=None) -> pd.DataFrame:
    """LLMServingSim's real vLLM runs (open loop, arrival trace): measured mean TTFT/TPOT, steptime's replay
    of the same arrivals (steptime_lab.experiments.serving.replay_run, as E2.10), and AIC's aggregated estimate.

    AIC takes a fixed concurrency and ISL/OSL, not a trace: it is asked at the run's mean prompt and output
    lengths and the run's time-averaged number of running requests, an input read from the MEASURED
    1-second series (steptime's replay needs no such input)."""
    out = []
    for spec in runs:
        rows = requests[requests["run"] == spec["run"]]
        if rows.empty:
            raise ValueError(f"no LLMServingSim run {spec['run']!r}")
        r0 = rows.iloc[0]
        if str(r0["model"]).startswith(("llama-3.1-8b", "llama-3.1-70b")):
            raise ValueError(f"{spec['run']}: Llama-3.1-8B/70B are reserved from AIConfigurator's estimator")
        t0 = time.perf_counter()
        sim, _ = replay_run(rows, constants=constants)
        if timing is not None:
            timing["steptime_replay"][0] += time.perf_counter() - t0
            timing["steptime_replay"][1] += len(rows)
        ts = timeseries[(timeseries["run"] == spec["run"]) & (timeseries["running"] > 0)]
        row = {"run": spec["run"], "model": r0["model"], "gpu": r0["gpu"], "engine": "vllm",
               "engine_version": r0["engine_version"], "tp": int(r0["tp"]), "requests": int(len(rows)),
               "isl_mean": float(rows["input_tokens"].mean()), "osl_mean": float(rows["output_tokens"].mean()),
               "running_mean_measured": float(ts["running"].mean()),
               "max_num_batched_tokens": int(r0["max_num_batched_tokens"]),
               "ttft_s_measured": float(rows["ttft_s"].mean()), "tpot_s_measured": float(rows["tpot_s"].mean()),
               "ttft_s_steptime": float(np.nanmean(sim["ttft_s"])), "tpot_s_steptime": float(np.nanmean(sim["tpot_s"]))}
        if aic:
            est = registry.make("aiconfigurator", spec["aic_model"], r0["gpu"], "vllm", tp=int(r0["tp"]))
            a = est.estimate(round(row["isl_mean"]), round(row["osl_mean"]), round(row["running_mean_measured"]),
                             ctx_tokens=row["max_num_batched_tokens"])
            row.update({"ttft_s_aiconfigurator": a["ttft_s"], "tpot_s_aiconfigurator": a["tpot_s"],
                        "aic_tables": f"vllm {est.version} on {est.system}"})
        for p in ("steptime",) + (("aiconfigurator",) if aic else ()):
            for m in ("ttft_s", "tpot_s"):
                row[f"{m}_err_{p}"] = _rel(row[f"{m}_{p}"], row[f"{m}_measured"])
        out.append(row)
    return pd.DataFrame(out)


def distserve_agreement(traces, coefficients, max_tokens, *, model: str, gpu: str, tp: int, trace: str, n: int,
                        rate: float, prefill_instances: int, decode_instances: int, max_len: int, block_size: int,
                        seed: int, timing: dict | None = None, constants=None) -> dict:
    """steptime vs DistServe's fitted model driving the same disaggregated simulator, same requests."""
    d = traces[traces["trace"].str.startswith(trace)]
    d = d[d["num_prefill_tokens"] + d["num_decode_tokens"] <= max_len]
    prompt, output = trace_lengths(d.assign(trace=trace), trace, n, seed)
    kv = _kv_blocks(max_tokens, model, tp, block_size)
    pp = Policy("vllm", max_num_batched_tokens=4096, chunked_prefill=False, kv_blocks=kv)
    dp = Policy("vllm", kv_blocks=kv, reserve_full=True)
    wl = Workload(poisson_arrivals(n, rate, seed), prompt, output, name="disagg")
    out = {}
    for name, timer in (("steptime", registry.make("steptime", model, gpu, tp=tp, max_tokens=4096 + 256,
                                                constants=constants)),
                        ("distserve", registry.make("distserve", coefficients, model, gpu, tp=tp))):
        t0 = time.perf_counter()
        run = simulate_disagg(model, gpu, wl, prefill_instances=prefill_instances, decode_instances=decode_instances,
                              tp=tp, prefill_policy=pp, decode_policy=dp, timer=timer)
        if timing is not None:
            k = "steptime_disagg" if name == "steptime" else name
            timing[k][0] += time.perf_counter() - t0
            timing[k][1] += n
        s = run.summary()
        out[name] = {"ttft_s_mean": s["ttft_s"]["mean"], "tpot_s_mean": s["tpot_s"]["mean"],
                     "ttft_s_p50": s["ttft_s"]["p50"], "tpot_s_p50": s["tpot_s"]["p50"]}
    out["steptime_vs_distserve"] = {m: _rel(out["steptime"][m], out["distserve"][m]) for m in out["steptime"]}
    out["workload"] = {"model": model, "gpu": gpu, "tp": tp, "trace": trace, "requests": n, "rate_req_s": rate,
                       "pools": f"{prefill_instances}p{decode_instances}d", "kv_blocks": kv,
                       "prompt_mean": float(np.mean(prompt)), "output_mean": float(np.mean(output))}
    return out


def _summ(table: pd.DataFrame, peer: str, by=None) -> dict:
    def one(t):
        return {"rows": int(len(t)),
                "ttft_median_abs_rel_error": float(t[f"ttft_s_err_{peer}"].abs().median()),
                "tpot_median_abs_rel_error": float(t[f"tpot_s_err_{peer}"].abs().median()),
                "ttft_median_signed_rel_error": float(t[f"ttft_s_err_{peer}"].median()),
                "tpot_median_signed_rel_error": float(t[f"tpot_s_err_{peer}"].median())}
    if by is None:
        return one(table)
    return {" ".join(str(x) for x in (k if isinstance(k, tuple) else (k,))): one(g) for k, g in table.groupby(by)}


def document(r: dict) -> dict:
    t, table = r["targets"], r["table"]
    summary = {p: {"all": _summ(table, p), "by_engine": _summ(table, p, ["engine", "engine_version"]),
                   "fitted_on": FITTED_ON[p]} for p in r["peers"]}
    claims = []
    for p in r["peers"]:
        s = summary[p]["all"]
        for m, key in (("TPOT", "tpot_s_p50_abs_error_max"), ("TTFT", "ttft_s_p50_abs_error_max")):
            v = s[f"{m.lower()}_median_abs_rel_error"]
            claims.append(claim(f"{p}: median |relative error| of mean {m} over the {s['rows']} silicon rows "
                                f"(fitted on: {FITTED_ON[p]})", v, "vs measured mean (AIC silicon sample)",
                                target(t, key, "E2.12"), v <= target(t, key, "E2.12"), op="<=",
                                unit="fraction"))
    if "aiconfigurator" in r["peers"]:
        for m in ("tpot", "ttft"):
            a = summary["steptime"]["all"][f"{m}_median_abs_rel_error"]
            b = summary["aiconfigurator"]["all"][f"{m}_median_abs_rel_error"]
            margin = target(t, "vs_profiled_peer_margin", "E2.12")
            claims.append(claim(f"steptime (datasheet + <=9 readings, three per family) is within {margin} of "
                                f"AIConfigurator (profiled tables) in median |{m.upper()} error|", a - b,
                                "steptime error minus AIConfigurator error, same rows", margin, a - b <= margin, op="<=",
                                unit="fraction"))
    ss = r.get("servingsim", pd.DataFrame())
    for row in ss.to_dict(orient="records"):
        for p in r["peers"]:
            for m, key in (("tpot", "tpot_s_p50_abs_error_max"), ("ttft", "ttft_s_p50_abs_error_max")):
                v = row[f"{m}_s_err_{p}"]
                claims.append(claim(f"{p}: mean {m.upper()} of LLMServingSim's real run {row['run']} "
                                    f"(fitted on: {FITTED_ON[p]})", v, "relative error vs measured mean",
                                    target(t, key, "E2.12"), abs(v) <= target(t, key, "E2.12"),
                                    op="<=", abs_value=True, unit="fraction"))
    ds = r["distserve"]
    for m in ("tpot_s_mean", "ttft_s_mean"):
        v = ds["steptime_vs_distserve"][m]
        claims.append(claim(f"steptime agrees with DistServe's fitted model on {m} of the same requests (simulated; "
                            "no measured OPT run exists here)", v, "relative difference, steptime vs DistServe",
                            target(t, "distserve_agreement_max", "E2.12"),
                            abs(v) <= target(t, "distserve_agreement_max", "E2.12"), op="<=", abs_value=True,
                            unit="fraction"))
    return {"metrics": {"label": "rows: measured (AIC silicon sample) vs simulated/estimated; DistServe row: " + SIMULATED,
                        "metric": "mean TTFT and mean TPOT per workload (seconds)",
                        "summary": summary, "distserve": ds, "settings": r["settings"],
                        "servingsim_runs": r.get("servingsim", pd.DataFrame()).to_dict(orient="records"),
                        "servingsim_note": "LLMServingSim's real vLLM 0.19 runs (open loop): steptime replays the "
                                           "same arrivals; AIC is asked at the run's mean ISL/OSL and its measured "
                                           "time-averaged running batch (an input taken from the measurement). "
                                           "Measured TTFT includes queueing behind a full batch, which AIC's "
                                           "closed-loop estimate does not model. Llama-3.1-8B runs are not asked "
                                           "of AIC (reserved); their steptime replay is E2.10.",
                        "not_compared": {"vidur": "not run: Vidur 0.0.26 downloads its profiles from Hugging Face "
                                                  "datasets at run time and the GitHub snapshot's attention profiles "
                                                  "are absent here (see benchmarks/serve_peers.py)"},
                        "rows": table.to_dict(orient="records")},
            "claims": claims}


def plot(r: dict, stem, caption: str = "") -> list:
    table = r["table"]
    fig, axes = subplots(1, 2, figsize=(9, 4), squeeze=False)
    colors = {"steptime": PALETTE["steptime"], "aiconfigurator": PALETTE["aic_empirical"]}
    for ax, (m, name, unit, f) in zip(axes[0], (("ttft_s", "TTFT", "ms", 1e3), ("tpot_s", "TPOT", "ms", 1e3))):
        parity(ax, [(p, table[f"{m}_measured"] * f, table[f"{m}_{p}"] * f, {"color": colors[p], "alpha": 0.6})
                    for p in r["peers"]], pad=(0.5, 2), xlabel=f"measured mean {name} ({unit})",
               ylabel=f"predicted mean {name} ({unit})", legend={"fontsize": 7})
    return save(fig, stem, caption=caption, tight_layout=True)


def timing_document(r: dict) -> dict:
    return {"speed": r["speed"], "note": "wall-clock seconds on the build machine (not deterministic); "
                                         "steptime/distserve: per simulated request; aiconfigurator: per workload "
                                         "point (a mean-field estimate, no request simulated)"}
