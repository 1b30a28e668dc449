"""E2.5: what each predictor pays to calibrate, what it covers, and how well it does at home.

A ledger row per predictor: rows profiled (measured table rows its fit consumed), GPUs
it can answer for, its MAPE on the home GPU's held-out cells and its mean MAPE on the
unseen GPUs (both from the E2.1 records). Wall seconds (fit time, prediction speed) are
measured on this machine in this run; they are not deterministic, so they go to a
separate timing file, never into the deterministic result.
"""

from __future__ import annotations

import time

import numpy as np

from steptime.calibration import Constants, _default_doc
from steptime.calibration.readings import CONTRACT, readings_by_family
from steptime.ops import predict_ops
from steptime.plotting import PALETTE, save, setup
from steptime_lab.experiments.ratios import predict_layer_ops
from steptime_lab.experiments.transfer.profiled import predict_profiled
from steptime_lab.results import claim
from steptime_lab.run_constants import require_constants

LEDGER_PREDICTORS = ("steptime", "steptime_home_only", "rf", "rf_spec_scaled", "rf_spec_scaled_readings", "ml_loo",
                     "poly", "poly_spec_scaled")


def steptime_rows(constants) -> dict:
    """Rows that set steptime's constants: per-GPU deploy cells and family/global fitted cells."""
    constants = require_constants(constants, "calibration_cost.steptime_rows")
    per_gpu, shared = {}, 0
    for scope, table in constants._scopes.items():
        n = sum(len(c.cells) for c in table.values())
        if scope.startswith("gpu."):
            per_gpu[scope[4:]] = per_gpu.get(scope[4:], 0) + n
        else:
            shared += n
    return {"deploy_cells_per_gpu": per_gpu, "shared_calibration_cells": shared,
            "max_deploy_cells_one_gpu": max(per_gpu.values()) if per_gpu else 0}


def deploy_cells_used(cal_log: dict | None) -> dict:
    """{dataset: max over target GPUs of the target's own GPU cells that set a steptime
    constant}, from E2.1's per-(dataset, target) calibration record. Every family's per-GPU
    constants now derive from the same GEMM readings, so the cells are counted whatever kind
    they are; host-scheduler rows (a property of the serving host) are left out."""
    out = {}
    for key, cal in (cal_log or {}).items():
        ds, _, target = key.partition("|")
        cells = {tuple(c) for v in cal.get("target_cells", {}).values() for c in v}
        n = sum(1 for c in cells if len(c) > 1 and c[1] != "host")
        out[ds] = max(out.get(ds, 0), n)
    return out


def _cells_behind(fitted_on: dict | None) -> int | None:
    """Measured cells behind one record's predictor, from its E2.1 `fitted_on` entry: the
    shared fits' cells (every family, every GPU) plus the target's readings."""
    if not fitted_on:
        return None
    if "total_cells" in fitted_on:
        return int(fitted_on["total_cells"])
    n = int(fitted_on.get("cells", 0)) + int(fitted_on.get("target_readings", 0))
    n += sum(int(v.get("cells", 0)) for v in (fitted_on.get("families") or {}).values())
    return n


def ledger(transfer_records, bundles_meta: dict, n_gpus_datasheet: int, constants=None,
           cal_log: dict | None = None) -> list[dict]:
    """Cost-vs-coverage rows per (dataset, home GPU, predictor).

    `cells_behind_one_gpu`: every measured cell that shaped a constant (or a training row)
    the predictor used for one unseen target, shared fits on other GPUs included (maximum
    over the targets; from E2.1's `fitted_on`); `target_cells_per_gpu`: of those, the cells
    measured on the target itself (steptime's deploy readings, 0 for a pure transfer)."""
    st = steptime_rows(require_constants(constants, "calibration_cost.ledger"))
    used = deploy_cells_used(cal_log)
    by = {}
    for r in transfer_records:
        by.setdefault((r["dataset"], r["home_gpu"]), []).append(r)
    rows = []
    for (ds, home), recs in sorted(by.items()):
        meta = bundles_meta.get((ds, home), {})
        home_recs = {r["predictor"]: r for r in recs if r["target_gpu"] == home}
        unseen, behind, gpus_fit, reads = {}, {}, {}, {}
        for r in recs:
            if r["target_gpu"] != home:
                unseen.setdefault(r["predictor"], []).append(r["mape_all"])
                n = _cells_behind(r.get("fitted_on"))
                if n is not None:
                    behind.setdefault(r["predictor"], []).append(n)
                fo = r.get("fitted_on") or {}
                reads[r["predictor"]] = max(reads.get(r["predictor"], 0), int(fo.get("target_readings", 0) or 0))
                gpus = set(fo.get("gpus", [])) | {g for v in (fo.get("families") or {}).values()
                                                    for g in v.get("gpus", [])}
                if gpus:
                    gpus_fit[r["predictor"]] = max(gpus_fit.get(r["predictor"], 0), len(gpus))
        gpus_scored = sorted({r["target_gpu"] for r in recs})
        for pred in LEDGER_PREDICTORS:
            key = {"rf": "rf_verbatim", "poly": "poly_verbatim"}.get(pred, pred)
            if pred.startswith("steptime"):
                target_cells = used.get(ds, st["max_deploy_cells_one_gpu"])
                covered = n_gpus_datasheet
                home_mape = home_recs.get(pred, {}).get("mape_all")
            elif pred == "ml_loo":
                target_cells, covered = 0, n_gpus_datasheet
                home_mape = home_recs.get("ml_loo", {}).get("mape_all")
            else:
                tag = pred.split("_")[0]
                target_cells = reads.get(key, 0)
                covered = 1 if pred in ("rf", "poly") else n_gpus_datasheet
                home_mape = home_recs.get(f"{tag}_home", {}).get("mape_all")
            un = unseen.get(key, [])
            if not un and pred not in ("rf", "poly", "steptime"):
                continue  # a peer E2.1 did not run
            rows.append({"dataset": ds, "home_gpu": home, "predictor": pred,
                         "rows_profiled_per_gpu": meta.get("profiled_rows") if pred in
                         ("rf", "rf_spec_scaled", "rf_spec_scaled_readings", "poly", "poly_spec_scaled")
                         else target_cells,
                         "target_cells_per_gpu": target_cells,
                         "cells_behind_one_gpu": max(behind[key]) if behind.get(key) else None,
                         "gpus_fitted_on": gpus_fit.get(key),
                         "train_rows": meta.get("train_rows") if pred in ("rf", "poly") or pred.startswith(("rf_", "poly_"))
                         else 0,
                         "gpus_covered": covered, "gpus_scored": len(gpus_scored),
                         "home_mape": home_mape,
                         "unseen_mape_mean": float(np.mean(un)) if un else None,
                         "unseen_targets": len(un)})
    return rows


def time_calls(fn, repeats: int = 5) -> float:
    """Best-of wall seconds of fn() (this machine, this run)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def prediction_speed(rf_estimator, cells, gpu: str, repeats: int = 5) -> dict:
    """Seconds per cell of steptime vs the RF's predict on the same GEMM cells, batched and one
    cell per call (the scheduler's case), measured side by side in this process."""
    m, n, k = (cells[c].to_numpy() for c in ("m", "n", "k"))
    X = cells[["m", "n", "k"]]
    batch_st = time_calls(lambda: predict_ops("gemm", gpu, m=m, n=n, k=k), repeats)
    batch_rf = time_calls(lambda: rf_estimator.predict(X), repeats)
    one = cells.iloc[:1]
    one_st = time_calls(lambda: predict_ops("gemm", gpu, m=one["m"].to_numpy(), n=one["n"].to_numpy(),
                                            k=one["k"].to_numpy()), repeats * 4)
    one_rf = time_calls(lambda: rf_estimator.predict(one[["m", "n", "k"]]), repeats * 4)
    nc = len(cells)
    return {"cells": nc, "steptime_s_per_cell_batched": batch_st / nc, "rf_s_per_cell_batched": batch_rf / nc,
            "speedup_batched": batch_rf / batch_st, "steptime_s_single_call": one_st, "rf_s_single_call": one_rf,
            "speedup_single_call": one_rf / one_st}


def calibrate_steptime_seconds(repeats: int = 5) -> float:
    """Wall seconds for steptime to 'calibrate': read the constants file and resolve it."""
    def go():
        _default_doc.cache_clear()
        Constants()

    return time_calls(go, repeats)


def reading_gpu_seconds(constants, engine_doc, *, gemm, allreduce, fpm, repeats: int) -> dict:
    """Per GPU and reading family (DESIGN's nine readings: three GEMM, three NCCL, three wall clock),
    the readings counted from the calibration records (steptime.calibration.readings) and the
    GPU-seconds they cost: each read cell's measured time in the tidy table, times the GPUs it
    occupies (an all-reduce: its GPU count; an engine step: its TP), times `repeats` (a reading is
    the median of a few repeats). A record with no row in the table is counted as unmatched, never
    given a time. Engine start-up, process launch and warm-up are not in any table and not counted."""
    out = {}
    for g, r in sorted(readings_by_family(constants, engine_doc).items()):
        fams = {}
        gm = gemm[gemm["gpu"] == g]
        secs, miss = 0.0, 0
        for _, (m, n, k) in sorted(r["gemm"]):
            x = gm[(gm["m"] == m) & (gm["n"] == n) & (gm["k"] == k)]["latency_ms"]
            secs, miss = (secs + float(x.median()) * 1e-3, miss) if len(x) else (secs, miss + 1)
        fams["gemm"] = {"readings": len(r["gemm"]), "gpu_seconds": secs * repeats, "unmatched": miss}
        ar = allreduce[allreduce["gpu"] == g]
        secs, miss = 0.0, 0
        for _, (backend, n_gpus, size) in sorted(r["nccl"]):
            x = ar[(ar["backend"] == backend) & (ar["num_gpus"] == n_gpus) & (ar["message_bytes"] == size)]["latency_ms"]
            secs, miss = (secs + float(x.median()) * 1e-3 * int(n_gpus), miss) if len(x) else (secs, miss + 1)
        fams["nccl"] = {"readings": len(r["nccl"]), "gpu_seconds": secs * repeats, "unmatched": miss}
        fp = fpm[fpm["gpu"] == g]
        per_engine = {}
        for engine, cells in sorted(r["wallclock"].items()):
            secs, miss = 0.0, 0
            for c in sorted(cells):
                tp, step = int(c[2]), int(c[5])
                x = fp[(fp["tp"] == tp) & (fp["counter_id"] == step)]["latency_ms"]
                secs, miss = (secs + float(x.median()) * 1e-3 * tp, miss) if len(x) else (secs, miss + 1)
            per_engine[engine] = {"readings": len(cells), "gpu_seconds": secs * repeats, "unmatched": miss}
        fams["wallclock"] = {"readings": max((v["readings"] for v in per_engine.values()), default=0),
                             "gpu_seconds": sum(v["gpu_seconds"] for v in per_engine.values()),
                             "per_engine": per_engine}
        fams["total_readings"] = sum(fams[f]["readings"] for f in ("gemm", "nccl", "wallclock"))
        fams["other_records"] = {t: len(c) for t, c in sorted(r["other"].items())}
        out[g] = fams
    return out


def document(rows, settings: dict, readings: dict | None = None) -> dict:
    """E2.5's metrics and claims from the ledger rows (`ledger`) and the readings' GPU-seconds (`reading_gpu_seconds`)."""
    claims = []
    for ds in sorted({r["dataset"] for r in rows}):
        sub = {r["predictor"]: r for r in rows if r["dataset"] == ds and r["home_gpu"] == "a100-sxm"}
        if "rf" in sub and "steptime" in sub:
            claims.append(claim(
                f"{ds}: the home RF profiles {sub['rf']['rows_profiled_per_gpu']} rows to cover 1 GPU; steptime "
                f"reads at most {sub['steptime']['rows_profiled_per_gpu']} deploy cells per GPU and covers "
                f"{sub['steptime']['gpus_covered']}",
                {"rf_home_mape": sub["rf"]["home_mape"], "steptime_home_mape": sub["steptime"]["home_mape"],
                 "rf_spec_scaled_unseen_mape": sub.get("rf_spec_scaled", {}).get("unseen_mape_mean"),
                 "steptime_unseen_mape": sub["steptime"]["unseen_mape_mean"]},
                "home and unseen-GPU MAPE (E2.1); wall seconds in results/E2_5_timing.json (not deterministic)"))
        if sub.get("steptime", {}).get("cells_behind_one_gpu") is not None:
            claims.append(claim(
                f"{ds}: counted in full, steptime's constants for one unseen GPU rest on "
                f"{sub['steptime']['cells_behind_one_gpu']} measured cells ({sub['steptime']['target_cells_per_gpu']} "
                f"of them on that GPU, the rest shared fits on {sub['steptime']['gpus_fitted_on']} other GPUs); the "
                f"home forest on {sub['rf']['train_rows'] if 'rf' in sub else None} cells of one GPU",
                {p: {"cells_behind_one_gpu": r["cells_behind_one_gpu"], "gpus_fitted_on": r["gpus_fitted_on"],
                     "unseen_mape_mean": r["unseen_mape_mean"]} for p, r in sub.items()},
                "every measured cell that shaped a constant or a training row used for the target "
                "(max over targets, E2.1 fitted_on)"))
    metrics = {"ledger": rows, "settings": settings}
    if readings is not None:
        metrics["readings_per_gpu"] = readings
        for g, r in readings.items():
            if not r["total_readings"]:
                continue
            claims.append(claim(
                f"{g}: readings counted from the calibration records ({CONTRACT}) and the GPU-seconds each "
                f"family costs (read cells' measured time x GPUs occupied x {settings.get('reading_repeats')} "
                f"repeats; engine start-up not counted)",
                {f: {"readings": r[f]["readings"], "gpu_seconds": round(r[f]["gpu_seconds"], 6)}
                 for f in ("gemm", "nccl", "wallclock")} | {"total_readings": r["total_readings"]},
                "count"))
    return {"metrics": metrics, "claims": claims}


def plot_ledger(rows, timing: dict, stem):
    """(a) rows profiled per GPU vs GPUs covered; (b) home and unseen-GPU MAPE per dataset."""
    from matplotlib.ticker import FuncFormatter

    plt = setup()
    marks = {"vidur_step": "o", "aic_gemm": "s", "aic_attention": "^"}
    preds = ("steptime", "rf", "rf_spec_scaled")
    colors = {"steptime": PALETTE["steptime"], "rf": PALETTE["rf_home"], "rf_spec_scaled": PALETTE["rf_spec_scaled"]}
    home = [r for r in rows if r["home_gpu"] == "a100-sxm" and r["predictor"] in preds]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    for r in home:
        dy = {"steptime": 0.0, "rf": 0.0, "rf_spec_scaled": -0.35}[r["predictor"]]
        ax.scatter((r["rows_profiled_per_gpu"] or 0) + 1, r["gpus_covered"] + dy, color=colors[r["predictor"]],
                   marker=marks[r["dataset"]], s=45)
    for p in preds:
        ax.scatter([], [], color=colors[p], label=p)
    for d, mk in marks.items():
        ax.scatter([], [], color="#555", marker=mk, label=d)
    ax.set_xscale("log")
    ax.set_xlabel("rows profiled on each GPU + 1 (log)")
    ax.set_ylabel("GPUs it can answer for")
    ax.set_title("(a) cost vs coverage (home A100)")
    ax.legend(fontsize=6, loc="center")
    ax = axes[1]
    dsets = [d for d in marks if any(r["dataset"] == d for r in home)]
    bars = [("rf", "home_mape", "RF, home (held out)"), ("steptime", "home_mape", "steptime, home"),
            ("rf_spec_scaled", "unseen_mape_mean", "RF spec-scaled, unseen (mean)"),
            ("steptime", "unseen_mape_mean", "steptime, unseen (mean)")]
    w = 0.8 / len(bars)
    for b_i, (p, key, label) in enumerate(bars):
        ys = []
        for d in dsets:
            r = next((r for r in home if r["dataset"] == d and r["predictor"] == p), {})
            ys.append(100 * (r.get(key) or 0))
        ax.bar([i + (b_i - 1.5) * w for i in range(len(dsets))], ys, width=w, label=label, color=colors[p],
               alpha=1.0 if key == "home_mape" else 0.55, edgecolor="k", linewidth=0.3)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(range(len(dsets)))
    ax.set_xticklabels(dsets)
    ax.set_ylabel("MAPE (%)")
    ax.set_title("(b) accuracy at home and on unseen GPUs")
    ax.legend(fontsize=6)
    fits = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(timing.get("fit_seconds", {}).items()) if k.endswith("|rf"))
    sp = timing.get("prediction_speed", {})
    st = timing.get("prediction_speed_step", {})
    fig.tight_layout()
    save(fig, stem, caption=(
        "E2.5 calibration cost against coverage and accuracy (home A100). (a) rows of measured table each "
        "predictor reads per GPU against the GPUs it can answer for (spec-scaled RF drawn slightly lower); "
        "(b) MAPE at home (held-out cells) and mean MAPE over the unseen GPUs, from E2.1. Wall seconds measured "
        "in this run on this machine (not deterministic, kept out of results/E2_5.json, see "
        f"results/E2_5_timing.json): RF fits {fits}; prediction speed, steptime vs the RF's predict: GEMM "
        f"{sp.get('speedup_batched', float('nan')):.1f}x batched, {sp.get('speedup_single_call', float('nan')):.1f}x "
        f"per single call; per-layer step {st.get('speedup_batched', float('nan')):.1f}x batched, "
        f"{st.get('speedup_single_call', float('nan')):.1f}x per single call (RF grid: {timing.get('rf_grid')})."))


def step_prediction_speed(bundle: dict, cells, gpu: str, repeats: int = 3) -> dict:
    """Seconds per per-layer step cell: the RF (nine per-operator forests, as Vidur predicts a
    layer) vs steptime's per-layer function, batched and one cell per call."""
    one = cells.iloc[:1]
    batch_rf = time_calls(lambda: predict_profiled(bundle, "rf", cells), repeats)
    batch_st = time_calls(lambda: predict_layer_ops(cells, gpu), repeats)
    one_rf = time_calls(lambda: predict_profiled(bundle, "rf", one), repeats * 3)
    one_st = time_calls(lambda: predict_layer_ops(one, gpu), repeats * 3)
    nc = len(cells)
    return {"cells": nc, "steptime_s_per_cell_batched": batch_st / nc, "rf_s_per_cell_batched": batch_rf / nc,
            "speedup_batched": batch_rf / batch_st, "steptime_s_single_call": one_st, "rf_s_single_call": one_rf,
            "speedup_single_call": one_rf / one_st}
