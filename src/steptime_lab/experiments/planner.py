"""E2.13: the planner's serving simulation against measured frontiers, and a cost-sanity table.

Part 1 (accuracy, measured): AIConfigurator's silicon sample measures aggregated serving
(closed loop at a client concurrency, fixed ISL/OSL) of dense models per (GPU, engine, TP,
precision). One curve = one (GPU, engine, precision, TP, ISL, OSL) at several concurrencies.
For each point steptime simulates the same closed loop (steptime.serve, as `steptime plan`
does) with the GPU HELD OUT: its own deploy readings removed (Constants.without_gpu), so it
is predicted from its datasheet and its family's constants. Both sides are reduced by the
same formula:

    throughput per GPU = concurrency x OSL / (TTFT + (OSL - 1) TPOT) / TP
    tokens/s per user  = 1 / TPOT

(means, seconds). Scores: MAPE of each per curve; and the planner's pick at a TPOT SLO
(the (TP, concurrency) with the highest predicted throughput per GPU among the predicted
points meeting the SLO, per (ISL, OSL)) against the measured best among the measured points
meeting it: top-1, and within 10 % of the measured best's throughput per GPU.

Part 2 (simulated only): `steptime.plan` on three workloads (chat, code, long-context
summarisation) over the GPUs with prices; the pick per workload, its cost per million output
tokens and its limiting term. A sanity table, not a measurement.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime_lab.experiments.precision import SERVED_PASSES_DISCLOSED
from steptime_lab.experiments.serving_peers import silicon_workloads
from steptime_lab.results import claim, target
from steptime.plan import plan
from steptime.plotting import save, subplots
from steptime.serve import Policy, StepTimer, simulate, synthetic
from steptime_lab.run_constants import require_constants

SIMULATED = "simulated (a scheduler model driven by predicted step times), not measured"
CURVE = ["gpu", "engine", "precision", "tp", "isl", "osl"]


def _per_gpu(c, osl, ttft_s, tpot_s, tp):
    return c * osl / (ttft_s + (osl - 1) * tpot_s) / tp


def frontier_points(silicon: pd.DataFrame, *, model: str, gpu: str, engine: str, budget: int, per_concurrency: int,
                    min_requests: int, seed: int, constants=None, hold_out: bool = True) -> pd.DataFrame:
    """Every measured point of `model` on `gpu` with `engine`, with steptime's simulated twin
    (`hold_out`: the GPU's own deploy readings removed, as for a GPU nobody measured)."""
    held = (require_constants(constants, "planner.frontier_points"))
    held = held.without_gpu(gpu) if hold_out else held
    d = silicon_workloads(silicon, model=model, gpu=gpu)
    d = d[d["engine"] == engine]
    rows, timers = [], {}
    for r in d.itertuples(index=False):
        c, tp = int(r.concurrency), int(r.tp)
        dtype = "fp8" if str(r.precision).startswith("fp8") else "bf16"
        if str(r.precision) not in ("fp8", "bf16"):
            continue  # fp4 and others: steptime models bf16 and fp8 projections
        key = (tp, dtype)
        if key not in timers:
            timers[key] = StepTimer(model, gpu, tp=tp, engine=engine, dtype=dtype, constants=held,
                                    max_tokens=budget, max_requests=max(c, 256))
        wl = synthetic(max(min_requests, per_concurrency * c), isl=int(r.isl), osl=int(r.osl), concurrency=c, seed=seed)
        run = simulate(model, gpu, wl, Policy("vllm", max_num_batched_tokens=budget, max_num_seqs=max(c, 1)),
                       timer=timers[key])
        s = run.summary()
        ttft_m, tpot_m = float(r.ttft_ms) * 1e-3, float(r.tpot_ms) * 1e-3
        ttft_s, tpot_s = s["ttft_s"]["mean"], s["tpot_s"]["mean"]
        rows.append({"id": r.id, "gpu": gpu, "engine": engine, "precision": str(r.precision), "tp": tp,
                     "isl": int(r.isl), "osl": int(r.osl), "concurrency": c,
                     "ttft_s_measured": ttft_m, "tpot_s_measured": tpot_m, "ttft_s_sim": ttft_s, "tpot_s_sim": tpot_s,
                     "per_gpu_measured": _per_gpu(c, int(r.osl), ttft_m, tpot_m, tp),
                     "per_gpu_sim": _per_gpu(c, int(r.osl), ttft_s, tpot_s, tp),
                     "per_user_measured": 1.0 / tpot_m, "per_user_sim": 1.0 / tpot_s})
    return pd.DataFrame(rows)


def curve_scores(points: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key, g in points.groupby(CURVE, sort=True):
        if len(g) < 2:
            continue  # a single point is not a curve
        ape_t = np.abs(g["per_gpu_sim"] / g["per_gpu_measured"] - 1)
        ape_u = np.abs(g["per_user_sim"] / g["per_user_measured"] - 1)
        out.append({**dict(zip(CURVE, key)), "points": len(g), "mape_per_gpu": float(ape_t.mean()),
                    "mape_per_user": float(ape_u.mean())})
    return pd.DataFrame(out)


def picks(points: pd.DataFrame, slos_s) -> pd.DataFrame:
    """The planner's pick per (GPU, engine, precision, ISL, OSL) and TPOT SLO vs the measured best."""
    out = []
    for key, g in points.groupby(["gpu", "engine", "precision", "isl", "osl"], sort=True):
        for slo in slos_s:
            meas = g[g["tpot_s_measured"] <= slo]
            pred = g[g["tpot_s_sim"] <= slo]
            row = {**dict(zip(["gpu", "engine", "precision", "isl", "osl"], key)), "slo_tpot_s": float(slo),
                   "measured_feasible": len(meas), "predicted_feasible": len(pred)}
            if len(meas):
                b = meas.loc[meas["per_gpu_measured"].idxmax()]
                row.update(best_id=b["id"], best_tp=int(b["tp"]), best_concurrency=int(b["concurrency"]),
                           best_per_gpu=float(b["per_gpu_measured"]))
            if len(pred):
                p = pred.loc[pred["per_gpu_sim"].idxmax()]
                row.update(pick_id=p["id"], pick_tp=int(p["tp"]), pick_concurrency=int(p["concurrency"]),
                           pick_per_gpu_measured=float(p["per_gpu_measured"]),
                           pick_meets_measured=bool(p["tpot_s_measured"] <= slo))
            if len(meas) and len(pred):
                row["top1"] = bool(row["pick_id"] == row["best_id"])
                row["within_10pct"] = bool(row["pick_meets_measured"]
                                           and row["pick_per_gpu_measured"] >= 0.9 * row["best_per_gpu"])
            out.append(row)
    return pd.DataFrame(out)


def cost_table(*, model: str, workloads: dict, gpus, max_gpus: int, jobs: int, seed: int,
               constants=None) -> pd.DataFrame:
    """`steptime.plan` on each named workload: the pick, its cost and limiting term (simulated)."""
    rows = []
    for name, w in workloads.items():
        wl = synthetic(int(w["requests"]), isl=tuple(w["isl"]), osl=tuple(w["osl"]), rate=float(w["rate"]),
                       seed=seed, name=name)
        res = plan(model, wl, slo_ttft_s=w["slo_ttft_ms"] / 1e3, slo_tpot_s=w["slo_tpot_ms"] / 1e3,
                   percentile=float(w.get("percentile", 90)), gpus=gpus, max_gpus=max_gpus, jobs=jobs,
                   constants=constants)
        best = res.ranked()
        row = {"workload": name, "model": model, "rate_req_s": float(w["rate"]), "isl": list(w["isl"]),
               "osl": list(w["osl"]), "slo_ttft_ms": w["slo_ttft_ms"], "slo_tpot_ms": w["slo_tpot_ms"],
               "layouts": len(res.rows), "simulated": len(res.simulated()), "dropped": len(res.dropped()),
               "pruned": len(res.pruned()), "meeting_slo": len(best), "label": SIMULATED}
        if best:
            b = best[0]
            row.update(pick=b["layout"], gpus=b["gpus"], usd_per_m_output_tokens=b["usd_per_m_output_tokens"],
                       ttft_p_s=b["ttft_pct_s"], tpot_p_s=b["tpot_pct_s"], tok_s_per_gpu=b["throughput_per_gpu"],
                       limiting=b["limiting"], uncalibrated=b["uncalibrated"])
            per_gpu = {}
            for r in best:
                per_gpu.setdefault(r["gpu"], r)
            row["best_per_gpu_type"] = {g: {"layout": r["layout"], "usd_per_m_output_tokens":
                                            r["usd_per_m_output_tokens"], "limiting": r["limiting"]}
                                        for g, r in per_gpu.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def held_out_plan(silicon: pd.DataFrame, *, model: str, gpu: str, engine: str, budget: int, per_concurrency: int,
          min_requests: int, slos_ms, seed: int, cost: dict, targets: dict, constants=None) -> dict:
    pts = frontier_points(silicon, model=model, gpu=gpu, engine=engine, budget=budget,
                          per_concurrency=per_concurrency, min_requests=min_requests, seed=seed,
                          constants=constants)
    curves = curve_scores(pts)
    # the same points with the GPU's own readings: what the uncalibrated (datasheet + family) mode costs
    cal = curve_scores(frontier_points(silicon, model=model, gpu=gpu, engine=engine, budget=budget,
                                       per_concurrency=per_concurrency, min_requests=min_requests, seed=seed,
                                       hold_out=False, constants=constants))
    pk = picks(pts, [s / 1e3 for s in slos_ms])
    costs = cost_table(model=cost["model"], workloads=cost["workloads"], gpus=cost["gpus"],
                       max_gpus=int(cost["max_gpus"]), jobs=int(cost.get("jobs", 1)), seed=seed,
                       constants=constants)
    return {"points": pts, "curves": curves, "calibrated_curves": cal, "picks": pk, "costs": costs, "targets": targets,
            "settings": {"model": model, "gpu": gpu, "engine": engine, "budget": budget, "slos_ms": list(slos_ms),
                         "held_out": f"{gpu}'s own deploy readings removed (Constants.without_gpu); "
                                     "family and global constants as shipped"}}


def document(r: dict) -> dict:
    t = r["targets"]
    cur, pk = r["curves"], r["picks"]
    both = pk.dropna(subset=["top1"]) if "top1" in pk else pk.iloc[0:0]
    med_gpu = float(cur["mape_per_gpu"].median()) if len(cur) else None
    med_user = float(cur["mape_per_user"].median()) if len(cur) else None
    top1 = float(both["top1"].astype(bool).mean()) if len(both) else None
    w10 = float(both["within_10pct"].astype(bool).mean()) if len(both) else None
    tg = lambda k: target(t, k, "E2.13")  # noqa: E731
    claims = [
        claim("throughput per GPU along each measured frontier curve (held-out GPU)", med_gpu,
              "median over curves of the per-curve MAPE", tg("curve_mape_per_gpu_median_max"),
              med_gpu is not None and med_gpu <= tg("curve_mape_per_gpu_median_max"), op="<=", unit="MAPE"),
        claim("tokens/s per user along each measured frontier curve (held-out GPU)", med_user,
              "median over curves of the per-curve MAPE", tg("curve_mape_per_user_median_max"),
              med_user is not None and med_user <= tg("curve_mape_per_user_median_max"), op="<=", unit="MAPE"),
        claim("the planner's pick at a TPOT SLO is the measured best layout", top1,
              "fraction of (ISL, OSL, SLO) cases with a feasible pick and a feasible measured best",
              tg("pick_top1_min"), top1 is not None and top1 >= tg("pick_top1_min"), op=">=", unit="fraction of cases"),
        claim("the planner's pick meets the SLO measured and reaches 90 % of the measured best's throughput per GPU",
              w10, "fraction of the same cases", tg("pick_within_10pct_min"),
              w10 is not None and w10 >= tg("pick_within_10pct_min"), op=">=", unit="fraction of cases"),
    ]
    clean = lambda df: df.replace({np.nan: None}).to_dict(orient="records")  # noqa: E731
    return {"metrics": {"settings": r["settings"], "curves": clean(cur), "picks": clean(pk),
                        "points": clean(r["points"]), "curve_mape_per_gpu_median": med_gpu,
                        "curve_mape_per_user_median": med_user, "pick_top1": top1, "pick_within_10pct": w10,
                        "uncalibrated_cost": {
                            "note": "median per-curve MAPE with the GPU's own deploy readings (calibrated) and "
                                    "without them (uncalibrated: datasheet + family constants), same points",
                            "calibrated": {"per_gpu": float(r["calibrated_curves"]["mape_per_gpu"].median()),
                                           "per_user": float(r["calibrated_curves"]["mape_per_user"].median())},
                            "uncalibrated": {"per_gpu": med_gpu, "per_user": med_user}},
                        "cost_sanity": {"label": SIMULATED, "table": clean(r["costs"])},
                        "disclosed": SERVED_PASSES_DISCLOSED},
            "claims": claims}


def plot(r: dict, stem, caption: str = "") -> list:
    pts = r["points"]
    tps = sorted(pts["tp"].unique())
    fig, axes = subplots(1, len(tps), figsize=(3.4 * len(tps), 3.2), squeeze=False)
    for ax, tp in zip(axes[0], tps):
        g = pts[pts["tp"] == tp]
        for i, (key, c) in enumerate(g.groupby(["isl", "osl"])):
            c = c.sort_values("concurrency")
            col = f"C{i % 10}"
            ax.plot(c["per_user_measured"], c["per_gpu_measured"], "o-", color=col, ms=3, lw=1,
                    label=f"{key[0]}/{key[1]}")
            ax.plot(c["per_user_sim"], c["per_gpu_sim"], "x--", color=col, ms=3, lw=0.8)
        ax.set_xlabel("tokens/s per user")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_title(f"TP {tp}: measured o-, steptime x--", loc="left", fontsize=8)
    axes[0][0].legend(fontsize=5, title="ISL/OSL", title_fontsize=6)
    return save(fig, stem, caption=caption, tight_layout=True)
