"""E1.13 and L0.2: the factor product against one scalar efficiency, each factor switched
off in turn (globals refitted), and the per-cell efficiency a bare roofline would need.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.experiments.gemm.contract import calibration_record, cell_ids, deploy_readings, subset_masks
from steptime_lab.experiments.gemm.folds import fit_globals, fold_from_json, gpu_params
from steptime_lab.experiments.gemm.scoring import predictions, records
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.metrics import score


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


def scalar_vs_factors(df, doc: dict, *, constants: Constants) -> dict:
    out = {}
    for gpu in sorted(doc["folds"]):
        g = get_gpu(gpu)
        fold = fold_from_json(doc, gpu, constants=constants)
        p = fold["params"]
        cell, t_read = fold["readings"]["eta_active"]
        _, _, m0, n0, k0 = cell
        floor = float(p["kernel_floor_us"]) * 1e-6
        eta_bar = 2.0 * m0 * n0 * k0 / g.peak_flops / (t_read * 1e-3 - floor)
        cal = calibration_record({gpu: fold["readings"]})
        c = df[df["gpu"] == gpu].reset_index(drop=True)
        c = c[[x not in cal.all_cells() for x in cell_ids(c)]].reset_index(drop=True)
        mk = subset_masks(c)["llm"] & (c["m"] >= 128).to_numpy()
        c = c[mk].reset_index(drop=True)
        m, n, k = (c[x].to_numpy(float) for x in ("m", "n", "k"))
        y = c["latency_ms"].to_numpy(float) * 1e-3
        r = G.gemm_time(m, n, k, g, params=p)
        t_c0 = r["flops"] / g.peak_flops
        eta_meas = t_c0 / np.maximum(y - floor, 1e-9)
        t_scalar = G.smax(t_c0 / eta_bar, r["t_memory"] + r["t_cta"], float(p["overlap_p"])) + floor
        drift = eta_bar / r["eta_c"] - 1.0
        out[gpu] = {"eta_bar": float(eta_bar), "cells": int(len(c)),
                    "eta_c_factor": {"mean": float(r["eta_c"].mean()), "min": float(r["eta_c"].min()),
                                     "max": float(r["eta_c"].max())},
                    "eta_meas": {"mean": float(eta_meas.mean()), "min": float(eta_meas.min()),
                                 "max": float(eta_meas.max())},
                    "drift_abs_mean": float(np.mean(np.abs(drift))), "drift_abs_max": float(np.max(np.abs(drift))),
                    "latency_factor": score(r["t"], y, n_boot=200), "latency_scalar": score(t_scalar, y, n_boot=200),
                    "eta_error_factor": float(np.mean(np.abs(r["eta_c"] / eta_meas - 1))),
                    "eta_error_scalar": float(np.mean(np.abs(eta_bar / eta_meas - 1))),
                    "_scatter": {"eta_meas": eta_meas, "eta_c": r["eta_c"]}}
    return out


def implied_alpha_ledger(df, doc: dict, *, constants: Constants) -> dict:
    out = {}
    for gpu in sorted(doc["folds"]):
        fold = fold_from_json(doc, gpu, constants=constants)
        cal = calibration_record({gpu: fold["readings"]})
        a = implied_alpha(df, gpu, fold["params"])
        a = a[[x not in cal.all_cells() for x in cell_ids(a)]].reset_index(drop=True)
        mk = subset_masks(a)
        comp = a[mk["llm"] & a["compute_bound"].to_numpy() & (a["m"] >= 128).to_numpy()]
        g = get_gpu(gpu)
        x = G.gemm_bytes(a["m"].to_numpy(float), a["n"].to_numpy(float), a["k"].to_numpy(float)) / g.l2_bytes
        mem = a[(a["m"] <= 16).to_numpy() & (a["n"] >= 256).to_numpy() & (a["k"] >= 256).to_numpy() & (x >= 0.3)]
        rc = (comp["pred_ms"] / comp["latency_ms"]).to_numpy()
        rm = (mem["pred_ms"] / mem["latency_ms"]).to_numpy()
        out[gpu] = {
            "compute": {"cells": int(len(comp)), "alpha_min": float(comp["alpha_c"].min()),
                        "alpha_max": float(comp["alpha_c"].max()), "alpha_mean": float(comp["alpha_c"].mean()),
                        "alpha_cv": cv(comp["alpha_c"]), "after_factors_cv": cv(rc),
                        "collapse": cv(comp["alpha_c"]) / cv(rc)},
            "memory": {"cells": int(len(mem)), "alpha_min": float(mem["alpha_m"].min()),
                       "alpha_max": float(mem["alpha_m"].max()), "alpha_mean": float(mem["alpha_m"].mean()),
                       "alpha_cv": cv(mem["alpha_m"]), "after_factors_cv": cv(rm),
                       "collapse": cv(mem["alpha_m"]) / cv(rm)},
            "_comp": (comp["alpha_c"].to_numpy(), rc), "_mem": (mem["alpha_m"].to_numpy(), rm),
        }
    return out


ABLATIONS = {
    "sm_fill (tile ladder, tail, grid cap)": {"tiles": [[1, 1, 1.0]], "streamk_rel": 0.0},
    "skinny 16-row tile": {"_drop_tile": 16},
    "stream-K launch": {"streamk_rel": 0.0},
    "k-duty (prologue over k)": {"duty_k": 0.0},
    "persistent prologue duty": {"duty_c": 0.0},
    "clock droop": {"clk_droop": 0.0},  # with settle's clk_droop=0 this entry turns droop ON (see factor_ablation)
    "Hopper clock droop": {"hopper_clk_droop": 0.0},
    "overlap max (hard max instead)": {"overlap_p": 50.0},
    "L2-resident path": {"l2_resident_x": 0.0, "wave_l2_resident_x": 0.0},
    "memory ramp t_half": {"mem_t_half_us": 0.0, "wave_mem_t_half_us": 0.0},
    "per-CTA stream (persistent)": {"cta_stream_us_mb": 0.0},
    "stream-K token grain (whole tiles instead)": {"streamk_m_grain": 0.0},
    "Blackwell split depth (k pieces >= split_min_k)": {"blackwell_split_min_k": 0.0},
    "Hopper split depth (k pieces >= split_min_k)": {"hopper_split_min_k": 0.0},
}


def without_tile(constants: Constants, gpus, tile_m: int) -> Constants:
    """`constants` with every tile of `tile_m` rows dropped from each GPU's tile ladder."""
    out = constants
    for g in gpus:
        tiles = constants.get("tiles", get_gpu(g))
        out = out.with_overrides({"tiles": [t for t in tiles if t[0] != tile_m]}, scope=f"gpu.{g}",
                                 provenance="ASSUMED", source=f"ablation: the {tile_m}-row tile dropped")
    return out


# The fit-noise replicas of E1.13's ablation (wave 37, helper repro): the "all factors" refit repeated with the fit
# sample drawn from these seed offsets. The capped refits land in a different place on a different CPU (numpy's AVX512
# and AVX2 log/exp round differently; the rough, piecewise objective amplifies it: converging to scipy's tolerances
# does not make the end point reproducible, DESIGN.md), and on a different sample, by up to ~0.1 pp of mean LLM-cell
# MAPE; an effect inside the noise band is a tie, not a verdict. The band is the larger of the replicas' spread and a
# declared floor (config sizes e1_13_ablation `tie_floor`).
NOISE_SEEDS = (1, 2)


def _refit_mean_llm(df, gpus, fixed: dict, constants: Constants, seed: int, n_per_gpu: int, max_nfev: int) -> dict:
    """One ablation entry: globals refitted on every GPU under `fixed`, readings re-applied, LLM-cell MAPE per GPU."""
    import pandas as pd

    readings = {g: deploy_readings(df, g) for g in gpus}
    glob = fit_globals(df, gpus, readings, constants=constants, seed=seed, n_per_gpu=n_per_gpu, max_nfev=max_nfev,
                       fixed=fixed)
    folds = {g: {"globals": glob, "params": gpu_params(g, glob, readings[g], constants=constants),
                 "readings": readings[g]} for g in gpus}
    P = predictions(df[subset_masks(df)["llm"]], folds, baselines=())
    r = pd.DataFrame(records(P, n_boot=10, seed=seed))
    r = r[r["subset"] == "llm"].set_index("gpu")["mape"]
    return {"llm_mape": {g: float(v) for g, v in r.items()}, "mean_llm_mape": float(r.mean())}


def factor_ablation(df, fixed: dict, *, constants: Constants, seed: int = 0, n_per_gpu: int = 800,
                    max_nfev: int = 30, noise_seeds=NOISE_SEEDS, tie_floor: float = 0.0) -> dict:
    """LLM-cell MAPE per GPU with every factor, and with each factor off (globals refitted on all
    GPUs each time, readings re-applied): in-sample for the globals, not held out.

    `noise_seeds`: the "all factors" refit repeated with the fit sample drawn at `seed` plus each of these offsets;
    "fit_noise" carries their mean LLM-cell MAPE, the spread (with the unshifted fit) and the tie band =
    max(spread, `tie_floor`), which `ablation_claims` reads (an effect inside it is a tie). Empty and a zero floor:
    no band (the sign rule)."""
    if not (np.isfinite(tie_floor) and tie_floor >= 0):
        raise ValueError(f"factor_ablation: tie_floor must be a finite number >= 0, got {tie_floor!r}")
    gpus = sorted(df["gpu"].unique())
    out = {}
    for name, off in [("all factors", {})] + list(ABLATIONS.items()):
        drop = off.get("_drop_tile")
        fx = {k: v for k, v in off.items() if k != "_drop_tile"}
        base_fixed = dict(fixed)
        if name == "clock droop" and base_fixed.get("clk_droop", None) == 0.0:
            # droop is off in the shipped model: this entry fits it back in instead
            base_fixed.pop("clk_droop")
            fx = {}
            name = "clock droop (fitted back in)"
        # the "skinny 16-row tile" entry starts the fit and the folds from constants whose tile ladder
        # lacks that tile on every GPU
        c = constants if drop is None else without_tile(constants, gpus, drop)
        out[name] = _refit_mean_llm(df, gpus, {**base_fixed, **fx}, c, seed, n_per_gpu, max_nfev)
    if noise_seeds or tie_floor > 0:
        reps = {str(int(k)): _refit_mean_llm(df, gpus, dict(fixed), constants, seed + int(k), n_per_gpu,
                                             max_nfev)["mean_llm_mape"] for k in noise_seeds}
        vals = [out["all factors"]["mean_llm_mape"], *reps.values()]
        spread = float(max(vals) - min(vals))
        out["fit_noise"] = {"seed_offsets": [int(k) for k in noise_seeds], "mean_llm_mape_by_seed_offset": reps,
                            "spread": spread, "floor": float(tie_floor), "band": max(spread, float(tie_floor)),
                            "rule": "an effect |without - with| <= band (the larger of the spread of the 'all "
                                    "factors' refit over its fit-sample seeds and the declared floor) is a tie, no "
                                    "verdict; the floor was chosen after seeing two numeric environments' scores "
                                    "(DESIGN.md, wave 37 helper repro)"}
    return out
