"""E1.28: what tensor parallelism costs, per model x GPU x engine.

Per-GPU efficiency at TP t on matched work (the same batch composition, or the same serving
configuration, measured at TP 1 and at TP t):

    eff(t) = t(1) / (t x t(t))          (1: TP t GPUs do t times the work of one; < 1: a loss)

measured from the wall clock and predicted by the engine profile. The per-GPU time TP adds,
t x t(t) - t(1), is split over the predicted term kinds (gemm, attention, light, comm, launch,
host): t x kind(t) - kind(1) each; the kind with the largest share is the term that explains the
predicted loss. Two sources: AIConfigurator's real vLLM engine steps (sweep compositions matched
across TP, as E1.26's TP ratios) and AIConfigurator's silicon TPOT rows (aggregated serving at the
same model, prompt and output lengths and concurrency across TP; predicted as one decode step at
the measured batch, the attribution's step). ML.ENERGY's rows are not matched across TP (the
measured batch differs), so they are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime_lab.experiments.wallclock import KINDS
from steptime import plotting
from steptime.errors import SteptimeError
from steptime_lab.experiments.wallclock import make_predictor, mean_context
from steptime_lab.experiments.wallclock.tokens import _decode_frame, _known_model
from steptime_lab.results import claim, target

COMP = ["phase", "ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_requests", "kvb"]


def efficiency(cells: pd.DataFrame, keys: list[str], match: list[str]) -> list[dict]:
    """Per `keys` group and TP > 1: medians over the cells matched (on `match`) with TP 1 of the
    measured and predicted efficiency and of each kind's share of the predicted added per-GPU time.
    `cells`: one row per (keys, match, tp) with meas_ms, pred_ms and <kind>_ms."""
    out = []
    kcols = [f"{k}_ms" for k in KINDS]
    for g, d in cells.groupby(keys, sort=True):
        g = g if isinstance(g, tuple) else (g,)
        base = d[d["tp"] == 1][[*match, "meas_ms", "pred_ms", *kcols]]
        if base.empty:
            continue
        for tp in sorted(t for t in d["tp"].unique() if t > 1):
            x = d[d["tp"] == tp].merge(base, on=match, how="inner", suffixes=("", "_1"))
            if x.empty:
                continue
            em = x["meas_ms_1"] / (tp * x["meas_ms"])
            ep = x["pred_ms_1"] / (tp * x["pred_ms"])
            added = tp * x["pred_ms"] - x["pred_ms_1"]
            share = {k: float(np.median((tp * x[f"{k}_ms"] - x[f"{k}_ms_1"]) / added.where(added.abs() > 1e-9)))
                     for k in KINDS}
            share = {k: (v if np.isfinite(v) else 0.0) for k, v in share.items()}
            row = dict(zip(keys, [v.item() if hasattr(v, "item") else v for v in g]))
            m, p = float(np.median(em)), float(np.median(ep))
            out.append({**row, "tp": int(tp), "cells": int(len(x)), "efficiency_measured": m,
                        "efficiency_predicted": p, "efficiency_error": p / m - 1.0,
                        "added_share_by_kind": share, "loss_term": max(share, key=lambda k: share[k])})
    return out


def fpm_cells(steps: pd.DataFrame, pred: pd.DataFrame, kv_bucket: int = 512) -> pd.DataFrame:
    """Median measured and predicted step (and kinds) per sweep composition and TP, FPM steps."""
    x = steps.join(pred[["pred_ms", *[f"{k}_ms" for k in KINDS]]])
    x = x[x["segment"] == "sweep"].copy()
    x["kvb"] = (x["mean_decode_kv_tokens"] / kv_bucket).round().astype(int)
    cols = ["pred_ms", *[f"{k}_ms" for k in KINDS]]
    med = x.groupby(["gpu", "model", "engine", "tp", *COMP])[["latency_ms", *cols]].median().reset_index()
    return med.rename(columns={"latency_ms": "meas_ms"}).assign(dataset="aic-fpm")


def silicon_cells(rows: pd.DataFrame, fitted=None, constants=None) -> tuple[pd.DataFrame, list[dict]]:
    """Silicon TPOT rows (W.tpot_table, dataset aic-silicon, aggregated serving) with the decode step at
    the measured batch predicted per TP (total and kinds). Returns (cells, skipped groups)."""
    x = rows[(rows["dataset"] == "aic-silicon") & (rows["mode"] == "agg")]
    parts, skipped = [], []
    for (gpu, model, eng, tp, dt), d in x.groupby(["gpu", "model", "engine", "tp", "dtype"], sort=True):
        try:
            key = _known_model(model, d)
            f = make_predictor(eng, key, gpu, engine=eng, dtype=dt, fitted=fitted, constants=constants)
            r = f(_decode_frame(np.maximum(np.round(d["batch"].to_numpy(float)), 1),
                                mean_context(d["prompt_tokens"], d["output_tokens"]), int(tp)), int(tp), None)
        except SteptimeError as exc:
            skipped.append({"group": [gpu, model, eng, int(tp), dt], "rows": int(len(d)),
                            "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
            continue
        parts.append(d.assign(meas_ms=d["tpot_ms"].to_numpy(float), pred_ms=r["total"],
                              **{f"{k}_ms": r[k] for k in KINDS}))
    if not parts:
        return pd.DataFrame(), skipped
    c = pd.concat(parts)
    match = ["dtype", "prompt_tokens", "output_tokens", "batch"]
    cols = ["meas_ms", "pred_ms", *[f"{k}_ms" for k in KINDS]]
    return c.groupby(["dataset", "gpu", "model", "engine", "tp", *match])[cols].median().reset_index(), skipped


def run_e1_28(fpm_steps=None, fpm_pred=None, silicon_rows=None, *, fitted=None, kv_bucket: int = 512,
              constants=None) -> dict:
    keys = ["dataset", "gpu", "model", "engine"]
    rows, skipped = [], []
    if fpm_steps is not None and len(fpm_steps):
        rows += efficiency(fpm_cells(fpm_steps, fpm_pred, kv_bucket), keys, COMP)
    if silicon_rows is not None and len(silicon_rows):
        c, skipped = silicon_cells(silicon_rows, fitted, constants)
        if len(c):
            # a concurrency is matched across TP only where the measured batch is the same (it is the client's)
            rows += efficiency(c, keys, ["dtype", "prompt_tokens", "output_tokens", "batch"])
    return {"rows": rows, "skipped": skipped}


def document(r: dict, targets: dict) -> dict:
    lim = target(targets, "efficiency_error", "E1.28")
    claims = []
    for x in r["rows"]:
        claims.append(claim(
            f"{x['dataset']} {x['gpu']} {x['model']} {x['engine']} TP {x['tp']}: per-GPU efficiency t(1)/(TP t(TP)) "
            f"predicted {x['efficiency_predicted']:.3f} vs measured {x['efficiency_measured']:.3f} over {x['cells']} "
            f"matched cells (signed error {x['efficiency_error']:+.3f}); the predicted loss is carried by "
            f"{x['loss_term']}",
            round(abs(x["efficiency_error"]), 4), "|predicted / measured - 1| <= target", lim,
            abs(x["efficiency_error"]) <= lim, op="<="))
    return {"metrics": {"rows": r["rows"], "skipped": r["skipped"],
                        "definition": __doc__.split("\n\n")[1].strip()}, "claims": claims}


def plot(r: dict, stem, caption: str = ""):
    plt = plotting.setup()
    d = pd.DataFrame(r["rows"])
    if d.empty:
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.text(0.5, 0.5, "no matched TP cells", ha="center")
        plotting.save(fig, stem, caption)
        return
    panels = sorted({(a, b, c) for a, b, c in zip(d["dataset"], d["gpu"], d["model"])})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (ds, gpu, model) in zip(axes[0], panels):
        sub = d[(d["dataset"] == ds) & (d["gpu"] == gpu) & (d["model"] == model)]
        for i, (eng, e) in enumerate(sub.groupby("engine", sort=True)):
            e = e.sort_values("tp")
            tp = [1, *e["tp"].tolist()]
            col = plt.cm.tab10(i)
            ax.plot(tp, [1.0, *e["efficiency_measured"]], "o-", color=col, label=f"{eng} measured")
            ax.plot(tp, [1.0, *e["efficiency_predicted"]], "s--", color=col, label=f"{eng} predicted")
            for t, y, term in zip(e["tp"], e["efficiency_predicted"], e["loss_term"]):
                ax.annotate(term, (t, y), fontsize=6, xytext=(3, -9), textcoords="offset points")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
        ax.set_ylim(0, 1.15)
        ax.set_xlabel("tensor-parallel degree")
        ax.set_ylabel("per-GPU efficiency t(1) / (TP x t(TP))")
        ax.set_title(f"{gpu} {model} ({ds})", fontsize=8)
        ax.legend(fontsize=6)
    plotting.save(fig, stem, caption, tight_layout=True)
