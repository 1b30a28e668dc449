"""GEMM-term experiments: calibration under the contract, leave-one-GPU-out fits, scoring.

The calibration contract for the GEMM term, as code:

* per GPU, three named deploy readings (`DEPLOY_CELLS`), each one measured cell of the
  GPU's own table, setting one per-GPU constant: a large square GEMM sets `eta_active`,
  a one-token GEMM over a large weight sets `eta_mem_max`, a one-token GEMM over a
  mid-sized weight sets the memory ramp `mem_t_half_us`. They are excluded from every score of that GPU.
* the remaining constants (`FIT_GLOBALS`: duty, memory ramp, L2 path, overlap) are
  fitted on the OTHER GPUs when a GPU is scored (leave-one-GPU-out), each of those GPUs
  with its own deploy readings applied, on a seeded subsample of their cells.

Everything here takes a tidy table with columns gpu, m, n, k, latency_ms (one dtype).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Calibration
from steptime.specs import get_gpu
from steptime.terms import gemm as G

AIC_GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "l40s", "b200", "gb200", "b300", "gb300", "rtx-pro-6000")

# name of the per-GPU constant -> the (m, n, k) cell whose latency sets it
DEPLOY_CELLS = {
    "eta_active": (4096, 4096, 4096),
    "eta_mem_max": (1, 16384, 16384),
    "mem_t_half_us": (1, 8192, 8192),
}
DEPLOY_NOTES = {
    "eta_active": "one large square GEMM (m=n=k=4096, an LLM prefill-sized projection): sustained tensor throughput over the fill/duty factors",
    "eta_mem_max": "one single-token GEMM over a 512 MiB weight (m=1, n=k=16384): streaming DRAM efficiency",
    "mem_t_half_us": ("one single-token GEMM over a 128 MiB weight (m=1, n=k=8192): with the 512 MiB "
                      "reading it pins the memory branch's fixed ramp (offset) on this GPU"),
}

# global constants fitted leave-one-GPU-out: name -> (start, lower, upper)
FIT_GLOBALS = {
    "kernel_floor_us": (2.0, 0.0, 10.0),
    "duty_c": (0.3, 0.0, 5.0),
    "duty_k": (64.0, 0.0, 2000.0),
    "l2_resident_x": (0.15, 0.01, 0.95),
    "l2_gain": (5.0, 0.0, 64.0),
    "overlap_p": (4.0, 1.0, 50.0),
    "streamk_rel": (0.9, 0.0, 1.0),
    "clk_droop": (0.2, 0.0, 0.6),
    "clk_droop_us": (1000.0, 10.0, 1e5),
}
FIT_SAMPLE = 1500  # cells per GPU in a fit (seeded)

SUBSETS = ("llm", "all", "decode", "prefill")


# ---------------------------------------------------------------------------------------
# cells and subsets
def subset_masks(df) -> dict:
    """Boolean masks: llm (n, k >= 1024, m <= 16384), all, decode (llm, m <= 64), prefill (llm, m >= 1024)."""
    m, n, k = df["m"].to_numpy(), df["n"].to_numpy(), df["k"].to_numpy()
    llm = (n >= 1024) & (k >= 1024) & (m <= 16384)
    return {"llm": llm, "all": np.ones(len(df), dtype=bool), "decode": llm & (m <= 64),
            "prefill": llm & (m >= 1024)}


def cell_ids(df) -> list:
    return [(g, "gemm", int(m), int(n), int(k)) for g, m, n, k in
            zip(df["gpu"], df["m"], df["n"], df["k"])]


def load_gemm(gpus=None):
    """bf16 GEMM table of the AIConfigurator GPUs: gpu, m, n, k, latency_ms (through steptime.data)."""
    from steptime.data import load_aic_gemm

    df = load_aic_gemm()
    if "dtype" in df.columns:
        df = df[df["dtype"].astype(str).isin(["bf16", "bfloat16"])]
    df = df[df["gpu"].isin(list(gpus or AIC_GPUS))]
    df = df.groupby(["gpu", "m", "n", "k"], as_index=False)["latency_ms"].median()
    return df.sort_values(["gpu", "n", "k", "m"]).reset_index(drop=True)


def deploy_readings(df, gpu: str) -> dict:
    """{constant: (cell id, latency_ms)} of `gpu`'s deploy readings, from its table."""
    out = {}
    sub = df[df["gpu"] == gpu]
    for name, (m, n, k) in DEPLOY_CELLS.items():
        row = sub[(sub["m"] == m) & (sub["n"] == n) & (sub["k"] == k)]
        if len(row) != 1:
            raise ValueError(f"{gpu}: deploy cell {name} (m={m}, n={n}, k={k}) missing from the table")
        out[name] = ((gpu, "gemm", m, n, k), float(row["latency_ms"].iloc[0]))
    return out


# ---------------------------------------------------------------------------------------
# predictions with explicit parameters
def base_params(gpu) -> dict:
    return G.resolve(get_gpu(gpu))


def predict(gpu, m, n, k, params: dict, paradigm: str | None = None, full: bool = False):
    r = G.gemm_time(m, n, k, get_gpu(gpu), params=params, paradigm=paradigm)
    if full:
        return r
    return r["t"] * 1e3


def apply_readings(gpu: str, params: dict, readings: dict, paradigm: str | None = None,
                   rounds: int = 4) -> dict:
    """Set the per-GPU constants from the deploy readings (each inverts its own cell).

    The memory branch is affine in bytes on non-resident cells, t_m = B / (BW eta_max) +
    t_half, so the two one-token readings give eta_max and t_half in closed form; the
    compute time scales as 1 / eta_active. Both are read through the overlap max
    (t - floor = smax(t_c, t_m)) and iterated a few rounds (they interact only there).
    """
    p = dict(params)
    g = get_gpu(gpu)
    names = [nm for nm in ("eta_active", "eta_mem_max", "mem_t_half_us") if nm in readings]
    if not names:
        return p
    cells = [readings[nm][0] for nm in names]
    t_meas = np.array([readings[nm][1] for nm in names]) * 1e-3
    m = np.array([c[2] for c in cells], dtype=float)
    n = np.array([c[3] for c in cells], dtype=float)
    k = np.array([c[4] for c in cells], dtype=float)
    idx = {nm: i for i, nm in enumerate(names)}
    pw = float(p["overlap_p"])

    def unmax(total, other):
        # the branch value b with smax(b, other) = total
        if not np.isfinite(pw):
            return total
        d = total ** pw - other ** pw
        return np.where(d > 0, np.abs(d) ** (1.0 / pw), 0.05 * total)

    for _ in range(rounds):
        r = G.gemm_time(m, n, k, g, params=p, paradigm=paradigm)
        net = np.maximum(t_meas - r["t_floor"], 1e-9)
        if "eta_mem_max" in idx and "mem_t_half_us" in idx:
            i, j = idx["eta_mem_max"], idx["mem_t_half_us"]
            tm_i = unmax(net[i], r["t_compute"][i])
            tm_j = unmax(net[j], r["t_compute"][j])
            bi, bj = r["bytes"][i], r["bytes"][j]
            inv = g.mem_bw * (tm_i - tm_j) / (bi - bj)
            e = float(np.clip(1.0 / inv if inv > 0 else 2.0, 0.05, 2.0))
            h = float(np.clip(tm_j - bj / (g.mem_bw * e), 0.0, 50e-6))
            p["eta_mem_max"], p["mem_t_half_us"] = e, h * 1e6
        elif "eta_mem_max" in idx:
            i = idx["eta_mem_max"]
            tm = unmax(net[i], r["t_compute"][i])
            h = float(p["mem_t_half_us"]) * 1e-6
            p["eta_mem_max"] = float(np.clip(r["bytes"][i] / (g.mem_bw * max(tm - h, 1e-9)), 0.05, 2.0))
        if "eta_active" in idx:
            i = idx["eta_active"]
            tc = unmax(net[i], r["t_memory"][i])
            p["eta_active"] = float(np.clip(p["eta_active"] * r["t_compute"][i] / tc, 0.05, 1.0))
    return p


# ---------------------------------------------------------------------------------------
# leave-one-GPU-out fitting
def _fit_sample(df, gpus, n_per_gpu: int, seed: int, exclude: set, llm_share: float = 0.7) -> dict:
    """Seeded subsample per GPU: `llm_share` of it from LLM-shaped cells (the cells the
    contract's targets are on), the rest from the remaining grid; deploy cells excluded."""
    import pandas as pd

    out = {}
    for i, gpu in enumerate(gpus):
        sub = df[df["gpu"] == gpu]
        keep = np.array([c not in exclude for c in cell_ids(sub)])
        sub = sub[keep]
        llm = subset_masks(sub)["llm"]
        n_llm = min(int(llm.sum()), int(round(n_per_gpu * llm_share)))
        n_rest = min(int((~llm).sum()), n_per_gpu - n_llm)
        parts = [sub[llm].sample(n_llm, random_state=seed + i), sub[~llm].sample(n_rest, random_state=seed + i)]
        sub = pd.concat(parts)
        out[gpu] = (sub["m"].to_numpy(float), sub["n"].to_numpy(float), sub["k"].to_numpy(float),
                    sub["latency_ms"].to_numpy(float))
    return out


def fit_globals(df, gpus, readings: dict, *, seed: int = 0, n_per_gpu: int = FIT_SAMPLE,
                x0: dict | None = None, max_nfev: int = 60, names=None, fixed: dict | None = None) -> dict:
    """Least-squares fit (log error, soft-L1) of the global constants on `gpus`' cells.

    `readings[gpu]` are that GPU's deploy readings (applied inside the fit; their cells
    are left out of the fitted sample). Returns {name: value} for `names` (all of
    FIT_GLOBALS by default) plus `fixed` as given.
    """
    from scipy.optimize import least_squares

    names = list(names or FIT_GLOBALS)
    fixed = dict(fixed or {})
    exclude = {c for g in gpus for c, _ in readings[g].values()}
    sample = _fit_sample(df, gpus, n_per_gpu, seed, exclude)
    bases = {g: base_params(g) for g in gpus}
    start = np.array([(x0 or {}).get(nm, FIT_GLOBALS[nm][0]) for nm in names], dtype=float)
    lo = np.array([FIT_GLOBALS[nm][1] for nm in names])
    hi = np.array([FIT_GLOBALS[nm][2] for nm in names])
    start = np.clip(start, lo + 1e-9, hi - 1e-9)

    def resid(x):
        glob = dict(zip(names, x), **fixed)
        out = []
        for g in gpus:
            p = apply_readings(g, dict(bases[g], **glob), readings[g], rounds=3)
            m, n, k, y = sample[g]
            out.append(np.log(predict(g, m, n, k, p) / y))
        return np.concatenate(out)

    r = least_squares(resid, start, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, max_nfev=max_nfev,
                      x_scale=np.maximum(np.abs(start), 0.1))
    return {**dict(zip(names, map(float, r.x))), **fixed}


def gpu_params(gpu: str, glob: dict, readings: dict, paradigm: str | None = None) -> dict:
    """The full parameter set for `gpu`: defaults, then fitted globals, then its readings."""
    return apply_readings(gpu, dict(base_params(gpu), **glob), readings, paradigm=paradigm)


def loo(df, gpus=None, *, seed: int = 0, n_per_gpu: int = FIT_SAMPLE, max_nfev: int = 60,
        warm: dict | None = None) -> dict:
    """Leave-one-GPU-out: for each GPU, globals fitted on the others + its own readings.

    Returns {'folds': {gpu: {'globals', 'params', 'readings'}}, 'all': globals fitted on
    every GPU, 'calibration': Calibration}.
    """
    gpus = list(gpus or sorted(df["gpu"].unique()))
    readings = {g: deploy_readings(df, g) for g in gpus}
    glob_all = fit_globals(df, gpus, readings, seed=seed, n_per_gpu=n_per_gpu, x0=warm, max_nfev=max_nfev)
    folds = {}
    for g in gpus:
        others = [o for o in gpus if o != g]
        glob = fit_globals(df, others, readings, seed=seed, n_per_gpu=n_per_gpu, x0=glob_all,
                           max_nfev=max_nfev)
        folds[g] = {"globals": glob, "params": gpu_params(g, glob, readings[g]), "readings": readings[g]}
    return {"folds": folds, "all": glob_all, "readings": readings, "calibration": calibration_record(readings)}


def calibration_record(readings: dict) -> Calibration:
    cal = Calibration()
    for g, rd in readings.items():
        for name, (cell, _) in rd.items():
            cal.record(f"{name}@{g}", [cell], note=DEPLOY_NOTES[name])
    return cal


def fold_from_json(doc: dict, gpu: str) -> dict:
    """Rebuild a fold's params from a stored gemm_constants.json document (no refit)."""
    f = doc["folds"][gpu]
    readings = {name: (tuple(v["cell"]), float(v["latency_ms"])) for name, v in f["readings"].items()}
    return {"globals": f["globals"], "params": gpu_params(gpu, f["globals"], readings), "readings": readings}


# ---------------------------------------------------------------------------------------
# scoring
def score_cells(pred, meas, masks: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    from steptime.metrics import score

    return {s: score(pred[mk], meas[mk], n_boot=n_boot, seed=seed) for s, mk in masks.items()}


def predictions(df, folds: dict, baselines=("bare_roofline", "datasheet_alpha", "aic_empirical",
                                            "calibrated_roofline")) -> dict:
    """{gpu: {'df': cells scored (deploy cells removed), 'pred': {predictor: array}}}.

    Baselines that need fitting are fitted per subset in-sample (calibrated_roofline is an
    in-sample reference); the others have fixed constants.
    """
    from steptime.baselines import make_baseline

    out = {}
    for g, fold in folds.items():
        sub = df[df["gpu"] == g].reset_index(drop=True)
        cal = calibration_record({g: fold["readings"]})
        ids = cell_ids(sub)
        keep = np.array([c not in cal.all_cells() for c in ids])
        sub = sub[keep].reset_index(drop=True)
        cal.check_disjoint(cell_ids(sub))
        pred = {"steptime": predict(g, sub["m"].to_numpy(float), sub["n"].to_numpy(float),
                                    sub["k"].to_numpy(float), fold["params"])}
        masks = subset_masks(sub)
        y = sub["latency_ms"].to_numpy(float)
        for b in baselines:
            est = make_baseline(b, gpu=g)
            if getattr(est, "in_sample", False):
                # fitted on the very cells it is scored on, per subset: an in-sample reference
                pb = np.full(len(sub), np.nan)
                per = {}
                for s, mk in masks.items():
                    if mk.any():
                        per[s] = est.fit(sub[mk], y[mk]).predict(sub[mk])
                pred[b] = per
            else:
                pred[b] = est.fit(sub, y).predict(sub)
        out[g] = {"df": sub, "pred": pred, "masks": masks}
    return out


def records(preds: dict, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    from steptime.metrics import score

    recs = []
    for g, d in preds.items():
        y = d["df"]["latency_ms"].to_numpy(float)
        for predictor, p in d["pred"].items():
            for s, mk in d["masks"].items():
                if isinstance(p, dict):
                    if s not in p:
                        continue
                    sc = score(p[s], y[mk], n_boot=n_boot, seed=seed)
                else:
                    sc = score(p[mk], y[mk], n_boot=n_boot, seed=seed)
                recs.append({"family": "gemm", "gpu": g, "predictor": predictor, "subset": s, **sc})
    return recs


def ape_table(preds: dict, predictor: str = "steptime"):
    """Long table of per-cell APE and signed error for one predictor (all cells)."""
    import pandas as pd

    rows = []
    for g, d in preds.items():
        p = d["pred"][predictor]
        if isinstance(p, dict):
            continue
        sub = d["df"].copy()
        sub["pred_ms"] = p
        sub["ape"] = np.abs(p - sub["latency_ms"]) / sub["latency_ms"]
        sub["signed"] = (p - sub["latency_ms"]) / sub["latency_ms"]
        rows.append(sub)
    return pd.concat(rows, ignore_index=True)


# ---------------------------------------------------------------------------------------
# factor analyses
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


def implied_alpha(df, gpu: str, params: dict):
    """Per-cell efficiency a bare roofline needs on each branch, and what remains after our factors.

    alpha_c = (2mnk / P_peak) / t_meas on compute-bound cells; alpha_m = (bytes / BW) / t_meas
    on memory-bound cells. 'Residual' divides by the factor model's own efficiency:
    alpha_c / eta_c (pred) and alpha_m / eta_mem (pred), each on the floor-free time.
    """
    g = get_gpu(gpu)
    sub = df[df["gpu"] == gpu].reset_index(drop=True)
    m, n, k = (sub[c].to_numpy(float) for c in ("m", "n", "k"))
    y = sub["latency_ms"].to_numpy(float) * 1e-3
    r = G.gemm_time(m, n, k, g, params=params)
    t_c0 = r["flops"] / g.peak_flops
    t_m0 = r["bytes"] / g.mem_bw
    sub = sub.assign(alpha_c=t_c0 / y, alpha_m=t_m0 / y, eta_c=r["eta_c"], eta_mem=r["eta_mem"],
                     compute_bound=r["compute_bound"], t_floor=r["t_floor"],
                     t_compute=r["t_compute"], t_memory=r["t_memory"], pred_ms=r["t"] * 1e3)
    # floor-free residual efficiency ratios
    net = np.maximum(y - r["t_floor"], 1e-9)
    sub["resid_c"] = (t_c0 / net) / r["eta_c"]
    sub["resid_m"] = (t_m0 / net) / r["eta_mem"]
    return sub


def cv(x) -> float:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.std(x) / np.mean(x)) if x.size else float("nan")


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
        return float(r.x[0]), float(r.x[1])
    r = least_squares(lambda v: np.log(model(v[0], shape) / t), [0.8], bounds=([0.05], [3]),
                      loss="soft_l1", f_scale=0.1)
    return float(r.x[0]), float(shape)


def mem_law_predict(bytes_, bw, l2, law: str, eta_max: float, shape: float):
    b = np.asarray(bytes_, dtype=float)
    if law == "x":
        return b / (bw * eta_max) + shape * l2 / (bw * eta_max)
    return b / (bw * eta_max) + shape
