"""SM fill, scored: the mechanics (tile-boundary staircases, the fill factor switched off, the
cluster size switched, grid caps, the measured peak fraction) and the held-out scores built on them:
the tile ladder and last-wave tail on Ampere/Ada and Vidur's A40 (`wave_fill_scores`, E1.2), the
Hopper cluster size (`cluster_comparison`, E1.11; `cluster_cap_scores`, E1.2b) and the Blackwell
paradigm (`paradigm_scores`, E1.12). Claims: `claims.py`; figures: `figures.py`.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime.specs import get_gpu, gpu_keys, vidur_operators
from steptime.terms import gemm as G
from steptime_lab.experiments.gemm.contract import (
    apply_readings, base_params, calibration_record, cell_ids, deploy_readings, predict, subset_masks,
)
from steptime_lab.experiments.gemm.folds import _readings_json, fit_globals, fold_from_json, gpu_params, with_globals
from steptime_lab.experiments.gemm.scoring import predictions, records, score_cells
from steptime_lab.experiments.gemm.settling import FIT_SETTINGS, SHIPPED_FIXED
from steptime_lab.metrics import score


def staircase_jumps(df, gpu: str, params: dict | None, boundaries=None, paradigm: str | None = None):
    """Measured vs predicted latency ratio t(m+1)/t(m) across tile boundaries m (LLM-shaped (n, k)).

    Returns a DataFrame: n, k, m, measured_jump, predicted_jump (predicted needs params).
    """
    import pandas as pd

    sub = df[(df["gpu"] == gpu) & (df["n"] >= 1024) & (df["k"] >= 1024)]
    ms = set(sub["m"].unique())
    boundaries = boundaries or sorted(m for m in ms if (m + 1) in ms and m >= 64)
    piv = sub.pivot_table(index=["n", "k"], columns="m", values="latency_ms")
    rows = []
    for b in boundaries:
        if b not in piv.columns or (b + 1) not in piv.columns:
            continue
        meas = (piv[b + 1] / piv[b]).dropna()
        for (n, k), v in meas.items():
            rows.append({"n": n, "k": k, "m": b, "measured_jump": float(v)})
    out = pd.DataFrame(rows)
    if params is not None and len(out):
        t0 = predict(gpu, out["m"].to_numpy(float), out["n"].to_numpy(float), out["k"].to_numpy(float),
                     params, paradigm=paradigm)
        t1 = predict(gpu, out["m"].to_numpy(float) + 1, out["n"].to_numpy(float), out["k"].to_numpy(float),
                     params, paradigm=paradigm)
        out["predicted_jump"] = t1 / t0
    return out


def no_fill_params(params: dict) -> dict:
    """The same constants with SM fill switched off: one ideal tile, every SM busy (ablation)."""
    p = dict(params)
    p["tiles"] = [[1, 1, max(r for _, _, r in params["tiles"])]]
    return p


def cap_table(gpu, sizes=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16)) -> list[dict]:
    g = get_gpu(gpu)
    rows = []
    for c in sizes:
        rows.append({"cluster": c, "geometry_layout": G.geometry_cluster_cap(g.sms, g.gpcs, c, G.gpc_layout(g)),
                     "geometry_even": G.geometry_cluster_cap(g.sms, g.gpcs, c),
                     "blind": G.blind_cluster_cap(g.sms, c),
                     "measured": g.max_active_clusters.get(c, None) and g.max_active_clusters[c] * c})
    return rows


def peak_fraction(df, gpu: str) -> dict:
    """Highest measured fraction of the datasheet tensor peak, and its 99th percentile."""
    g = get_gpu(gpu)
    sub = df[df["gpu"] == gpu]
    fr = 2.0 * sub["m"] * sub["n"] * sub["k"] / (sub["latency_ms"] * 1e-3) / g.peak_flops
    return {"max": float(fr.max()), "p99": float(fr.quantile(0.99))}


def params_no_fill(gpu: str, glob: dict, readings: dict, *, constants: Constants) -> dict:
    """Ablation: the same globals with the SM-fill factor off, deploy readings re-applied."""
    base = no_fill_params(with_globals(gpu, base_params(gpu, constants), glob))
    return apply_readings(gpu, base, readings)


def fill_ablation(cells, gpu: str, params: dict, params_nf: dict, m_min: int = 64) -> dict:
    """MAPE with and without the fill factor on cells with m >= m_min (n, k >= 1024)."""
    c = cells[(cells["gpu"] == gpu) & (cells["m"] >= m_min) & (cells["n"] >= 1024) & (cells["k"] >= 1024)]
    m, n, k = (c[x].to_numpy(float) for x in ("m", "n", "k"))
    y = c["latency_ms"].to_numpy(float)
    full = score(predict(gpu, m, n, k, params), y, n_boot=200)
    nf = score(predict(gpu, m, n, k, params_nf), y, n_boot=200)
    return {"with_fill": full, "without_fill": nf, "m_min": m_min}


def jump_stats(j) -> dict:
    if len(j) == 0:
        return {"pairs": 0}
    meas = j["measured_jump"].to_numpy()
    out = {"pairs": int(len(j)), "measured_jump_mean": float(meas.mean()),
           "measured_steps_over_5pct": int((meas > 1.05).sum())}
    for col in ("predicted_jump", "predicted_jump_nofill"):
        if col in j:
            p = j[col].to_numpy()
            out[col.replace("predicted_jump", "mae") or "mae"] = float(np.mean(np.abs(p - meas)))
            out[col.replace("predicted_jump", "corr")] = float(np.corrcoef(p, meas)[0, 1]) if p.std() > 0 else None
            big = meas > 1.05
            out[col.replace("predicted_jump", "caught")] = int((big & (p > 1.05)).sum())
    return out


def params_cluster(gpu: str, glob: dict, readings: dict, cluster: int, *, constants: Constants) -> dict:
    g = dict(glob)
    g["hopper_cluster_size"] = cluster
    return gpu_params(gpu, g, readings, constants=constants)


def _shape_cells(df, gpu, n, k):
    return df[(df["gpu"] == gpu) & (df["n"] == n) & (df["k"] == k)].sort_values("m")


# ---------------------------------------------------------------- wave quantisation (Ampere/Ada, Vidur's A40)
VIDUR_GEMM_OPS = tuple(vidur_operators(kind="gemm"))  # Vidur's projection GEMMs (specs/operators.yaml)

def vidur_gemm_cells(vm, gpu: str):
    """Vidur's four projection GEMMs on `gpu` as GEMM cells: gpu, m, n, k, latency_ms (median over
    models/TP rows with the same shape), op."""
    sub = vm[(vm["gpu"] == gpu) & (vm["op"].isin(VIDUR_GEMM_OPS))].dropna(subset=["gemm_m", "gemm_n", "gemm_k"])
    sub = sub.assign(m=sub["gemm_m"].astype(int), n=sub["gemm_n"].astype(int), k=sub["gemm_k"].astype(int))
    out = sub.groupby(["gpu", "m", "n", "k"], as_index=False).agg(latency_ms=("latency_ms", "median"),
                                                                   op=("op", "first"))
    return out.sort_values(["n", "k", "m"]).reset_index(drop=True)


def vidur_readings(cells, gpu: str) -> dict:
    """Deploy readings for a GPU known only through Vidur's operator table, chosen by rule:
    compute = the cell with the most flops; memory = the single-token cell with the largest
    weight (n k) and the one whose weight is closest to 128 MiB (as on the AIC GPUs)."""
    c = cells[cells["gpu"] == gpu]
    big = c.loc[(c["m"] * c["n"] * c["k"]).idxmax()]
    one = c[c["m"] == c["m"].min()].assign(w=lambda d: d["n"] * d["k"]).sort_values("w")
    hi = one.iloc[-1]
    lo = one.iloc[int(np.argmin(np.abs(one["w"].to_numpy() * 2.0 - 128 * 2**20)))]

    def cell(r):
        return ((gpu, "gemm", int(r["m"]), int(r["n"]), int(r["k"])), float(r["latency_ms"]))

    return {"eta_active": cell(big), "eta_mem_max": cell(hi), "mem_t_half_us": cell(lo)}


WAVE_GPUS = tuple(gpu_keys(("ampere", "ada"), tables="aic"))  # a100-sxm, l40s

def wave_fill_scores(df, doc: dict, vidur_cells, *, constants: Constants) -> dict:
    out = {}
    for gpu in WAVE_GPUS:
        fold = fold_from_json(doc, gpu, constants=constants)
        pnf = params_no_fill(gpu, fold["globals"], fold["readings"], constants=constants)
        j = staircase_jumps(df, gpu, fold["params"])
        if len(j):
            j["predicted_jump_nofill"] = staircase_jumps(df, gpu, pnf)["predicted_jump"].to_numpy()
        cal = calibration_record({gpu: fold["readings"]})
        cells = df[df["gpu"] == gpu]
        cells = cells[[c not in cal.all_cells() for c in cell_ids(cells)]]
        out[gpu] = {"source": "aic-gemm", "jumps": jump_stats(j), "ablation": fill_ablation(cells, gpu, fold["params"], pnf),
                    "params": {k: fold["params"][k] for k in ("eta_active", "eta_mem_max", "mem_t_half_us")},
                    "calibration": cal.to_dict()}
    # A40 via Vidur: never in any fit; globals from the all-GPU fit, three readings of its own
    gpu = "a40"
    if vidur_cells is not None and (vidur_cells["gpu"] == gpu).any():
        rd = vidur_readings(vidur_cells, gpu)
        glob = doc["all"]
        p = gpu_params(gpu, glob, rd, constants=constants)
        pnf = params_no_fill(gpu, glob, rd, constants=constants)
        cal = calibration_record({gpu: rd})
        cells = vidur_cells[vidur_cells["gpu"] == gpu]
        cells = cells[[c not in cal.all_cells() for c in cell_ids(cells)]]
        cal.check_disjoint(cell_ids(cells))
        per_op = {}

        for op, c in cells.groupby("op"):
            m, n, k = (c[x].to_numpy(float) for x in ("m", "n", "k"))
            y = c["latency_ms"].to_numpy(float)
            per_op[op] = {"with_fill": score(predict(gpu, m, n, k, p), y, n_boot=200),
                          "without_fill": score(predict(gpu, m, n, k, pnf), y, n_boot=200)}
        out[gpu] = {"source": f"vidur mlp.csv ({', '.join(VIDUR_GEMM_OPS)})",
                    "ablation": fill_ablation(cells, gpu, p, pnf, m_min=64), "per_op": per_op,
                    "params": {k: p[k] for k in ("eta_active", "eta_mem_max", "mem_t_half_us")},
                    "readings": _readings_json(rd), "calibration": cal.to_dict()}
    return out



# ---------------------------------------------------------------- Hopper's cluster size and grid cap
HOPPER = tuple(gpu_keys("hopper", tables="aic"))  # h100-sxm, h200-sxm

CLUSTER_SIZES = (2, 4, 16)  # distinct Hopper caps: 132, 116, 112 CTAs


def cluster_comparison(df, sizes, targets, *, constants: Constants, seed: int = 0, others=None) -> dict:
    """For each cluster size: LOO fits (held-out target, globals from the other GPUs, the
    cluster size applied to the Hopper GPUs) over `constants` and the target's scores."""
    gpus = list(others or sorted(df["gpu"].unique()))
    readings = {g: deploy_readings(df, g) for g in gpus}
    out = {}
    for c in sizes:
        fixed = {"hopper_cluster_size": c, **SHIPPED_FIXED}
        glob_all = fit_globals(df, gpus, readings, constants=constants, seed=seed,
                               n_per_gpu=FIT_SETTINGS["n_per_gpu"] // 2, max_nfev=FIT_SETTINGS["max_nfev"] // 2,
                               fixed=fixed)
        for t in targets:
            glob = fit_globals(df, [o for o in gpus if o != t], readings, constants=constants, seed=seed, x0=glob_all,
                               n_per_gpu=FIT_SETTINGS["n_per_gpu"] // 2, max_nfev=FIT_SETTINGS["max_nfev"] // 2,
                               fixed=fixed)
            fold = {"globals": glob, "params": gpu_params(t, glob, readings[t], constants=constants),
                    "readings": readings[t]}
            P = predictions(df, {t: fold}, baselines=())
            recs = {r["subset"]: r for r in records(P, n_boot=200, seed=seed)}
            out[(c, t)] = {"llm": recs["llm"]["mape"], "prefill": recs["prefill"]["mape"],
                           "all": recs["all"]["mape"], "eta_active": fold["params"]["eta_active"],
                           "params": fold["params"]}
    return out


def cluster_cap_scores(df, doc: dict, alt_cluster: int = 16, *, constants: Constants) -> dict:
    settled = int(doc["fixed"].get("hopper_cluster_size", 2))
    out = {"settled_cluster_size": settled, "alternative_cluster_size": alt_cluster, "gpus": {}}
    for gpu in HOPPER:
        fold = fold_from_json(doc, gpu, constants=constants)
        palt = params_cluster(gpu, fold["globals"], fold["readings"], alt_cluster, constants=constants)
        cal = calibration_record({gpu: fold["readings"]})
        cells = df[df["gpu"] == gpu].reset_index(drop=True)
        cells = cells[[c not in cal.all_cells() for c in cell_ids(cells)]].reset_index(drop=True)
        cal.check_disjoint(cell_ids(cells))
        masks = subset_masks(cells)
        m, n, k = (cells[x].to_numpy(float) for x in ("m", "n", "k"))
        y = cells["latency_ms"].to_numpy(float)
        r = {}
        for name, p in ((f"cluster_{settled}", fold["params"]), (f"cluster_{alt_cluster}", palt)):
            pr = predict(gpu, m, n, k, p)
            full = predict(gpu, m, n, k, p, full=True)
            r[name] = {s: score(pr[mk], y[mk], n_boot=200) for s, mk in masks.items() if s in ("llm", "prefill")}
            r[name]["grid_cap"] = G.cluster_cap(get_gpu(gpu), int(p["cluster_size"]))
            r[name]["eta_active"] = p["eta_active"]
            r[name]["stream_k_share_prefill"] = float(np.mean(full["stream_k"][masks["prefill"]]))
            j = staircase_jumps(df, gpu, p)
            r[name]["jumps"] = jump_stats(j)
        out["gpus"][gpu] = r
    return out


# ---------------------------------------------------------------- Blackwell's fill paradigm
BLACKWELL = tuple(gpu_keys("blackwell", tables="aic"))


def paradigm_scores(df, doc: dict, gpu: str, paradigms=("wave", "persistent"), seed: int = 0, *,
                    constants: Constants) -> dict:
    out = {}
    for par in paradigms:
        fold = fold_from_json(doc, gpu, paradigm=par, constants=constants)
        sub = df[df["gpu"] == gpu].reset_index(drop=True)
        cal = calibration_record({gpu: fold["readings"]})
        sub = sub[[c not in cal.all_cells() for c in cell_ids(sub)]].reset_index(drop=True)
        cal.check_disjoint(cell_ids(sub))
        pred = predict(gpu, sub["m"].to_numpy(float), sub["n"].to_numpy(float), sub["k"].to_numpy(float),
                       fold["params"], paradigm=par)
        y = sub["latency_ms"].to_numpy(float)
        sc = score_cells(pred, y, subset_masks(sub), n_boot=200, seed=seed)
        jumps = staircase_jumps(df, gpu, fold["params"], paradigm=par)
        mid = (jumps["m"] >= 128) & (jumps["m"] <= 4352)
        j = jumps[mid]
        out[par] = {"scores": {s: {"mape": v["mape"], "mape_ci": v["mape_ci"], "cells": v["cells"]}
                               for s, v in sc.items()},
                    "jump_mae": float(np.mean(np.abs(j["predicted_jump"] - j["measured_jump"]))),
                    "jump_corr": float(np.corrcoef(j["predicted_jump"], j["measured_jump"])[0, 1]),
                    "eta_active": fold["params"]["eta_active"]}
    return out
