"""E1.27: fp8 (W8A8) projection GEMMs held out per GPU, from the datasheet fp8 peak.

The GEMM term with dtype="fp8" (terms/gemm.py, terms/precision.py) keeps every factor of the
bf16 term (SM fill, duty, achieved memory bandwidth, floor) and changes the compute peak (the
datasheet dense fp8 figure) and the bytes (one per weight and activation element, bf16
output). Each GPU's bf16 constants are its leave-one-GPU-out GEMM fold (globals fitted on the
other GPUs' bf16 tables plus its three bf16 deploy readings). Two variants:

  datasheet   nothing else: fp8 at the bf16 term's achieved fractions of the fp8 peak
  relative    three fp8 factors (achieved compute and memory fraction relative to bf16, an
              extra floor), fitted on the OTHER GPUs' fp8 tables (the same architecture and
              SM-fill paradigm where there are some, else all others): no fp8 cell of the
              held-out GPU sets anything.

Baseline: the bare fp8 roofline max(2mnk / P_fp8, bytes / BW). Also the measured fp8/bf16
speed-up on the same cells against the predicted one (what a planner asks of --dtype fp8).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.calibration import Calibration
from steptime_lab.experiments import gemm as GX
from steptime_lab.results import claim
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime.terms import precision as PT
from steptime import plotting
from steptime_lab.evaluate.held_out import held_out_constants

SUBSETS = ("llm", "decode", "prefill")


def load_fp8(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df["dtype"].astype(str) == "fp8"]
    d = d.groupby(["gpu", "m", "n", "k"], as_index=False)["latency_ms"].median()
    return d.sort_values(["gpu", "n", "k", "m"]).reset_index(drop=True)


def bare_roofline_fp8(gpu, m, n, k):
    g = get_gpu(gpu)
    m, n, k = (np.asarray(v, dtype=float) for v in (m, n, k))
    return np.maximum(2 * m * n * k / (g.fp8_dense_tflops * 1e12), G.gemm_bytes(m, n, k, "fp8") / g.mem_bw) * 1e3


def donors(gpu: str, others) -> list[str]:
    """GPUs whose fp8 tables set the held-out GPU's relative factors: same architecture and
    SM-fill paradigm, else all others."""
    g = get_gpu(gpu)
    same = [o for o in others if get_gpu(o).architecture == g.architecture
            and G.fill_paradigm(get_gpu(o)) == G.fill_paradigm(g)]
    return same or list(others)


def fit_rel(parts: dict, gpus, seed: int = 0, n_per_gpu: int = 3000) -> dict:
    """Least squares in log time of the three relative fp8 factors on `gpus`' cells.
    parts: gpu -> (gemm_time fp8 dict over its LLM cells, measured ms, gpu, constants)."""
    from scipy.optimize import least_squares

    rng = np.random.default_rng(seed)
    sel = {}
    for g in gpus:
        n = len(parts[g][1])
        sel[g] = np.sort(rng.choice(n, size=min(n, n_per_gpu), replace=False))

    def resid(p):
        rel = {"eta_c_rel": np.exp(p[0]), "eta_mem_rel": np.exp(p[1]), "floor_add_us": p[2]}
        out = []
        for g in gpus:
            gt, meas, gpu, c = parts[g]
            i = sel[g]
            sub = {k: (v[i] if isinstance(v, np.ndarray) and v.ndim == 1 else v) for k, v in gt.items()}
            out.append(np.log(PT.apply_rel(sub, gpu, c, rel) * 1e3) - np.log(meas[i]))
        return np.concatenate(out)

    s = least_squares(resid, [0.0, 0.0, 0.0], bounds=([np.log(0.2), np.log(0.2), -5.0], [np.log(2.0), np.log(2.0), 50.0]))
    return {"eta_c_rel": float(np.exp(s.x[0])), "eta_mem_rel": float(np.exp(s.x[1])), "floor_add_us": float(s.x[2])}


def run(fp8: pd.DataFrame, bf16: pd.DataFrame, gemm_doc: dict, base=None, seed: int = 0) -> dict:
    rows, cal, parts, consts = [], Calibration(), {}, {}
    gpus = [g for g in sorted(fp8["gpu"].unique()) if get_gpu(g).fp8_dense_tflops]
    for g in gpus:
        gpu = get_gpu(g)
        c, cal_g = held_out_constants(g, ("gemm",), gemm_doc=gemm_doc, base=base)
        x = fp8[fp8["gpu"] == g].reset_index(drop=True)
        x = x[GX.subset_masks(x)["llm"]].reset_index(drop=True)
        gt = G.gemm_time(x["m"].to_numpy(), x["n"].to_numpy(), x["k"].to_numpy(), gpu, c, dtype="fp8")
        parts[g] = (gt, x["latency_ms"].to_numpy(), gpu, c)
        consts[g] = (c, cal_g, x)
    rels = {}
    for g in gpus:
        gpu = get_gpu(g)
        c, cal_g, x = consts[g]
        dn = donors(g, [o for o in gpus if o != g])
        rels[g] = {"rel": fit_rel(parts, dn, seed=seed), "donors": dn}
        cells = [(g, "gemm_fp8", int(m), int(n), int(k)) for m, n, k in zip(x["m"], x["n"], x["k"])]
        cal_g.check_disjoint(cells)  # no fp8 cell set a constant (the fold's cells are bf16)
        for name, cs in cal_g.used.items():
            cal.record(name, cs, note=cal_g.notes.get(name, ""))
        gt = parts[g][0]
        tb = G.gemm_time(x["m"].to_numpy(), x["n"].to_numpy(), x["k"].to_numpy(), gpu, c, dtype="bf16")
        x["datasheet_ms"] = gt["t"] * 1e3
        x["pred_ms"] = PT.apply_rel(gt, gpu, c, rels[g]["rel"]) * 1e3
        x["pred_bf16_ms"] = tb["t"] * 1e3
        x["roof_ms"] = bare_roofline_fp8(g, x["m"], x["n"], x["k"])
        x["compute_bound"] = gt["compute_bound"]
        rows.append(x)
    pred = pd.concat(rows, ignore_index=True)
    b = bf16.groupby(["gpu", "m", "n", "k"], as_index=False)["latency_ms"].median().rename(
        columns={"latency_ms": "bf16_ms"})
    pred = pred.merge(b, on=["gpu", "m", "n", "k"], how="left")
    pred["err"] = pred["pred_ms"] / pred["latency_ms"] - 1
    pred["err_roof"] = pred["roof_ms"] / pred["latency_ms"] - 1
    pred["err_datasheet"] = pred["datasheet_ms"] / pred["latency_ms"] - 1
    pred["speedup_meas"] = pred["bf16_ms"] / pred["latency_ms"]
    pred["speedup_pred"] = pred["pred_bf16_ms"] / pred["pred_ms"]
    return {"pred": pred, "calibration": cal, "rel": rels, "all": fit_rel(parts, gpus, seed=seed)}


def _mape(e) -> float:
    e = np.asarray(e, dtype=float)
    return float(np.mean(np.abs(e[np.isfinite(e)])) * 100)


def document(r: dict, target_pct: float) -> dict:
    p = r["pred"]
    records, claims = [], []
    for g, x in p.groupby("gpu"):
        masks = GX.subset_masks(x)
        rec = {"gpu": g, "cells": int(len(x))}
        for s in SUBSETS:
            y = x[masks[s]]
            rec[s] = {"cells": int(len(y)), "mape": round(_mape(y["err"]), 2),
                      "mape_bare_roofline": round(_mape(y["err_roof"]), 2),
                      "mape_datasheet_only": round(_mape(y["err_datasheet"]), 2),
                      "bias": round(float(np.median(y["err"]) * 100), 2) if len(y) else None}
        both = x.dropna(subset=["speedup_meas"])
        big = both[both["compute_bound"]]
        big = big.assign(speedup_pred=big["pred_bf16_ms"] / big["pred_ms"])
        rec["speedup_fp8_over_bf16"] = {
            "compute_bound_cells": int(len(big)),
            "measured_median": round(float(big["speedup_meas"].median()), 3) if len(big) else None,
            "predicted_median": round(float(big["speedup_pred"].median()), 3) if len(big) else None,
            "datasheet_peak_ratio": round(get_gpu(g).fp8_dense_tflops / get_gpu(g).bf16_dense_tflops, 3)}
        rec["rel"] = {k: round(v, 4) for k, v in r["rel"][g]["rel"].items()}
        rec["rel_fitted_on"] = r["rel"][g]["donors"]
        records.append(rec)
        claims.append(claim(f"{g}: fp8 W8A8 GEMM, held out (bf16 GEMM fold, datasheet fp8 peak, fp8 factors from "
                            f"{', '.join(r['rel'][g]['donors'])}; no fp8 cell of {g}), LLM-shaped cells", rec["llm"]["mape"], "MAPE % (lower is better)",
                            target=target_pct, met=rec["llm"]["mape"] <= target_pct, op="<=", unit="%"))
    ours, roof = _mape(p["err"]), _mape(p["err_roof"])
    claims.append(claim("the fp8 term beats the bare fp8 roofline on LLM-shaped cells, all GPUs pooled",
                        {"steptime": round(ours, 2), "bare_roofline": round(roof, 2)}, "MAPE %", met=ours < roof,
                        key="steptime", op="<", target=round(roof, 2), unit="%"))
    return {"metrics": {"records": records, "target_met": sum(c.get("met", False) for c in claims[:-1]),
                        "target_scored": len(claims) - 1}, "claims": claims}


def plot(r: dict, stem, caption: str | None = None):
    plt = plotting.setup()
    p = r["pred"]
    gpus = sorted(p["gpu"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for g in gpus:
        x = p[p["gpu"] == g]
        axes[0].scatter(x["latency_ms"], x["pred_ms"], s=2, alpha=0.3, label=g)
    lim = [p["latency_ms"].min(), p["latency_ms"].max()]
    axes[0].plot(lim, lim, "k-", lw=0.8)
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("measured fp8 GEMM time (ms)")
    axes[0].set_ylabel("predicted, held out (ms)")
    axes[0].legend(fontsize=7, markerscale=4)
    recs = document(r, 100)["metrics"]["records"]
    xs = np.arange(len(recs))
    axes[1].bar(xs - 0.2, [v["llm"]["mape"] for v in recs], 0.4, label="steptime (fp8 peak, bf16 fold)")
    axes[1].bar(xs + 0.2, [v["llm"]["mape_bare_roofline"] for v in recs], 0.4, label="bare fp8 roofline")
    axes[1].set_xticks(xs)
    axes[1].set_xticklabels([v["gpu"] for v in recs], rotation=30, fontsize=8)
    axes[1].set_ylabel("MAPE on LLM-shaped cells (%)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    plotting.save(fig, stem, caption)


def defaults_updates(r: dict, experiment: str = "E1.27") -> list[dict]:
    """Each GPU's relative fp8 factors as scored (fitted on its donors, never itself), and a
    global value fitted on every GPU for GPUs without fp8 tables."""
    ups = []
    for g, v in sorted(r["rel"].items()):
        ups.append({"scope": f"gpu.{g}", "name": "gemm_fp8_rel", "value": {k: round(x, 5) for k, x in v["rel"].items()},
                    "provenance": "FITTED",
                    "source": "E1.27: achieved fp8 compute/memory fraction relative to the bf16 term and extra floor, "
                              "fitted on AIConfigurator's fp8 W8A8 GEMM tables (LLM-shaped cells) of "
                              + ", ".join(v["donors"]), "experiment": experiment, "cells": []})
    if "all" in r:
        ups.append({"scope": "global", "name": "gemm_fp8_rel", "value": {k: round(x, 5) for k, x in r["all"].items()},
                    "provenance": "FITTED",
                    "source": "E1.27: relative fp8 factors fitted on the fp8 W8A8 GEMM tables of " + ", ".join(sorted(r["rel"])),
                    "experiment": experiment, "cells": []})
    return ups
