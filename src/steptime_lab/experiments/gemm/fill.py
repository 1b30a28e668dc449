"""SM-fill mechanics shared by E1.2, E1.2b, E1.11 and E1.12: tile-boundary staircases, the
fill factor switched off, the cluster size switched, grid caps and the measured peak fraction.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.experiments.gemm.contract import apply_readings, base_params, predict
from steptime_lab.experiments.gemm.folds import gpu_params, with_globals
from steptime.specs import get_gpu
from steptime.terms import gemm as G
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
