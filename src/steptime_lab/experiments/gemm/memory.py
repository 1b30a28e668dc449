"""E1.3: the memory law (achieved DRAM fraction in the working set over L2, or a fixed time
in the bytes read), per GPU, shared across GPUs and held out, and where small working sets
beat DRAM speed (the L2-resident regime).
"""

from __future__ import annotations

import numpy as np

from steptime_lab.experiments.gemm.contract import cell_ids
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.metrics import mape


def memory_cells(df, gpu: str, m_max: int = 16):
    """Memory-bound GEMM cells: m <= m_max, n and k >= 256 (weight streaming dominates)."""
    sub = df[(df["gpu"] == gpu) & (df["m"] <= m_max) & (df["n"] >= 256) & (df["k"] >= 256)]
    return sub.reset_index(drop=True)


def fit_mem_law(bytes_, t_net, bw, l2, law: str, shape: float | None = None):
    """Fit eta_mem on memory-bound cells: t_net = bytes / (BW eta(bytes)).

    law 'x':     eta = eta_max x / (x + x_half), x = bytes / L2   (shape = x_half)
    law 'bytes': eta = eta_max B / (B + eta_max BW t_half)         (shape = t_half, seconds)
    Both are affine in bytes: t = bytes/(BW eta_max) + offset; offset = x_half L2/(BW eta_max)
    or t_half. With `shape` given only eta_max is fitted. Returns (eta_max, shape).
    """
    from scipy.optimize import least_squares

    b = np.asarray(bytes_, dtype=float)
    t = np.asarray(t_net, dtype=float)

    def model(e, s):
        if law == "x":
            return b / (bw * e) + s * l2 / (bw * e)
        return b / (bw * e) + s

    if shape is None:
        x0 = [0.8, 0.3 if law == "x" else 2e-6]
        sc = [0.1, 0.1 if law == "x" else 1e-6]
        r = least_squares(lambda v: np.log(model(v[0], v[1]) / t), x0, bounds=([0.05, 0], [3, np.inf]),
                          x_scale=sc, loss="soft_l1", f_scale=0.1)
        # a shape the solver leaves at its lower bound (active_mask -1) is the bound: its last digits (1e-10 on one
        # CPU, 1e-18 on another) are the solver's round-off, not a fitted value
        return float(r.x[0]), 0.0 if r.active_mask[1] == -1 else float(r.x[1])
    r = least_squares(lambda v: np.log(model(v[0], shape) / t), [0.8], bounds=([0.05], [3]),
                      loss="soft_l1", f_scale=0.1)
    return float(r.x[0]), float(shape)


def mem_law_predict(bytes_, bw, l2, law: str, eta_max: float, shape: float):
    b = np.asarray(bytes_, dtype=float)
    if law == "x":
        return b / (bw * eta_max) + shape * l2 / (bw * eta_max)
    return b / (bw * eta_max) + shape


MEM_LAWS = ("x", "bytes")


def memory_table(df, sm=None, x_min: float = 0.3, x_min_stream: float = 1.0):
    """Memory-bound cells of every GPU: GEMMs with m <= 16 and n, k >= 256 (working set >=
    x_min of L2), and (if `sm` is given) the streaming scale_matrix kernel (>= x_min_stream:
    a streaming kernel stays L2-resident up to nearly the whole L2). The DRAM regime.
    Columns: gpu, kind, bytes, x, latency_ms, cell."""
    import pandas as pd

    rows = []
    for gpu in sorted(df["gpu"].unique()):
        g = get_gpu(gpu)
        c = memory_cells(df, gpu)
        b = G.gemm_bytes(c["m"].to_numpy(float), c["n"].to_numpy(float), c["k"].to_numpy(float))
        rows.append(pd.DataFrame({"gpu": gpu, "kind": "gemm", "bytes": b, "x": b / g.l2_bytes,
                                  "latency_ms": c["latency_ms"].to_numpy(float),
                                  "cell": cell_ids(c)}))
        if sm is not None and gpu in set(sm["gpu"]):
            s = sm[(sm["gpu"] == gpu)]
            b = s["bytes"].to_numpy(float)
            rows.append(pd.DataFrame({"gpu": gpu, "kind": "scale_matrix", "bytes": b, "x": b / g.l2_bytes,
                                      "latency_ms": s["latency_ms"].to_numpy(float),
                                      "cell": [(gpu, "scale_matrix", int(m), int(k)) for m, k in zip(s["m"], s["k"])]}))
    t = pd.concat(rows, ignore_index=True)
    keep = np.where(t["kind"] == "gemm", t["x"] >= x_min, t["x"] >= x_min_stream)
    return t[keep].reset_index(drop=True)


def _law_fit_global(tab, law: str, gpus, reading_cells: dict | None = None):
    """Shared shape over `gpus`, eta_max per GPU (fitted, or from its reading cell when given)."""
    from scipy.optimize import least_squares

    sub = {g: tab[tab["gpu"] == g] for g in gpus}

    def etas_for(shape):
        out = {}
        for g in gpus:
            gg = get_gpu(g)
            d = sub[g]
            if reading_cells and g in reading_cells:
                b, t = reading_cells[g]
                off = shape * (gg.l2_bytes / gg.mem_bw) if law == "x" else shape
                # t = b/(BW e) + off (x-law: off = x_half L2/(BW e)) -> solve e
                e = (b + (shape * gg.l2_bytes if law == "x" else 0.0)) / (gg.mem_bw * max(t - (0 if law == "x" else off), 1e-9))
                out[g] = float(np.clip(e, 0.05, 3.0))
            else:
                out[g] = fit_mem_law(d["bytes"], d["latency_ms"] * 1e-3, gg.mem_bw, gg.l2_bytes, law, shape=shape)[0]
        return out

    def resid(v):
        etas = etas_for(v[0])
        r = []
        for g in gpus:
            gg = get_gpu(g)
            d = sub[g]
            pred = mem_law_predict(d["bytes"], gg.mem_bw, gg.l2_bytes, law, etas[g], v[0])
            r.append(np.log(pred / (d["latency_ms"].to_numpy() * 1e-3)))
        return np.concatenate(r)

    x0, sc = (0.1, 0.05) if law == "x" else (3e-6, 1e-6)
    r = least_squares(resid, [x0], bounds=([0.0], [np.inf]), x_scale=[sc], loss="soft_l1", f_scale=0.1)
    shape = float(r.x[0])
    return shape, etas_for(shape)


def memory_law_study(tab, kind: str = "gemm", reading_m: int = 1, reading_nk=(16384, 16384)) -> dict:
    """Per-GPU fits, one global law, and held-out GPUs (shape from the others, eta_max from
    the GPU's own large single-token reading), for both laws, on cells of `kind`."""
    tab = tab[tab["kind"] == kind]
    gpus = sorted(tab["gpu"].unique())
    out = {"per_gpu": {}, "global": {}, "loo": {}, "cells": {g: int((tab["gpu"] == g).sum()) for g in gpus}}
    readings = {}
    for g in gpus:
        if kind == "gemm":
            cell = (g, "gemm", reading_m, reading_nk[0], reading_nk[1])
        else:
            d = tab[tab["gpu"] == g]
            cell = d.loc[d["bytes"].idxmax(), "cell"]
        row = tab[(tab["gpu"] == g) & (tab["cell"] == cell)]
        if len(row):
            readings[g] = (cell, float(row["bytes"].iloc[0]), float(row["latency_ms"].iloc[0]) * 1e-3)
    for law in MEM_LAWS:
        per = {}
        for g in gpus:
            gg = get_gpu(g)
            d = tab[tab["gpu"] == g]
            e, sh = fit_mem_law(d["bytes"], d["latency_ms"] * 1e-3, gg.mem_bw, gg.l2_bytes, law)
            pred = mem_law_predict(d["bytes"], gg.mem_bw, gg.l2_bytes, law, e, sh)
            per[g] = {"eta_max": e, "shape": sh, "mape": mape(pred, d["latency_ms"] * 1e-3)}
        out["per_gpu"][law] = per
        shape, etas = _law_fit_global(tab, law, gpus)
        gl = {}
        for g in gpus:
            gg = get_gpu(g)
            d = tab[tab["gpu"] == g]
            pred = mem_law_predict(d["bytes"], gg.mem_bw, gg.l2_bytes, law, etas[g], shape)
            gl[g] = {"eta_max": etas[g], "mape": mape(pred, d["latency_ms"] * 1e-3)}
        out["global"][law] = {"shape": shape, "per_gpu": gl}
        lo = {}
        for g in gpus:
            if g not in readings:
                continue
            others = [o for o in gpus if o != g]
            sh, _ = _law_fit_global(tab, law, others)
            cell, b, t = readings[g]
            _, e = _law_fit_global_reading(law, g, sh, b, t)
            gg = get_gpu(g)
            d = tab[(tab["gpu"] == g) & (tab["cell"] != cell)]
            pred = mem_law_predict(d["bytes"], gg.mem_bw, gg.l2_bytes, law, e, sh)
            lo[g] = {"shape_from_others": sh, "eta_max_reading": e, "reading_cell": list(cell),
                     "mape": mape(pred, d["latency_ms"] * 1e-3), "cells": int(len(d))}
        out["loo"][law] = lo
    return out


def _law_fit_global_reading(law: str, gpu: str, shape: float, b: float, t: float):
    """eta_max from one reading (bytes b, seconds t) given the shape: t = b/(BW e) + offset."""
    gg = get_gpu(gpu)
    if law == "x":
        e = (b + shape * gg.l2_bytes) / (gg.mem_bw * t)
    else:
        e = b / (gg.mem_bw * max(t - shape, 1e-9))
    return shape, float(np.clip(e, 0.05, 3.0))


def stream_l2_summary(sm) -> dict:
    """The streaming scale_matrix kernel against DRAM speed: max achieved / datasheet and the
    largest working set (x = bytes / L2) still above DRAM speed."""
    out = {}
    for gpu in sorted(sm["gpu"].unique()):
        g = get_gpu(gpu)
        s = sm[sm["gpu"] == gpu]
        bw = s["bytes"].to_numpy(float) / (s["latency_ms"].to_numpy(float) * 1e-3) / g.mem_bw
        x = s["bytes"].to_numpy(float) / g.l2_bytes
        above = bw > 1
        out[gpu] = {"max_bw_over_dram": float(bw.max()), "cells_above_dram": int(above.sum()),
                    "largest_x_above_dram": float(x[above].max()) if above.any() else None}
    return out


def l2_resident_summary(df) -> dict:
    """Where single-token GEMMs beat DRAM speed: fraction of m <= 16 cells with working set
    < L2 whose achieved bandwidth exceeds the datasheet HBM/GDDR bandwidth, and the max ratio."""
    out = {}
    for gpu in sorted(df["gpu"].unique()):
        g = get_gpu(gpu)
        c = df[(df["gpu"] == gpu) & (df["m"] <= 16)]
        b = G.gemm_bytes(c["m"].to_numpy(float), c["n"].to_numpy(float), c["k"].to_numpy(float))
        bw = b / (c["latency_ms"].to_numpy(float) * 1e-3) / g.mem_bw
        x = b / g.l2_bytes
        res = x < 1
        above = bw > 1
        out[gpu] = {"cells_in_l2": int(res.sum()), "above_dram_speed": int((res & above).sum()),
                    "max_bw_over_dram": float(bw.max()),
                    "x_of_max": float(x[np.argmax(bw)]),
                    "largest_x_above_dram": float(x[above].max()) if above.any() else None}
    return out
