"""E1.2: wave quantisation on Ampere/Ada (held-out folds on the AIC tables) and on the A40
through Vidur's projection-GEMM operators (never in any fit).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.experiments.gemm.contract import calibration_record, cell_ids, predict
from steptime_lab.experiments.gemm.fill import (
    _shape_cells, fill_ablation, jump_stats, params_no_fill, staircase_jumps,
)
from steptime_lab.experiments.gemm.folds import _readings_json, fold_from_json, gpu_params
from steptime_lab.results import claim
from steptime.specs import gpu_keys, vidur_operators
from steptime_lab.metrics import score


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


def e1_2_analysis(df, doc: dict, vidur_cells, *, constants: Constants) -> dict:
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


def e1_2_document(an: dict) -> dict:
    claims = []
    for gpu, a in an.items():
        ab = a["ablation"]
        w, nf = ab["with_fill"]["mape"], ab["without_fill"]["mape"]
        claims.append(claim(f"{gpu}: the tile ladder + last-wave tail {'lowers' if w < nf else 'does NOT lower'} the "
                            f"held-out MAPE on m >= {ab['m_min']} LLM-shaped cells ({w:.1%} with fill vs {nf:.1%} "
                            f"without)", w, "MAPE with vs without the fill factor", target=nf, met=w < nf, op="<", unit="fraction"))
        js = a.get("jumps", {})
        if js.get("pairs"):
            claims.append(claim(f"{gpu}: at tile boundaries (m -> m+1) the measured latency steps by > 5% on "
                                f"{js['measured_steps_over_5pct']} of {js['pairs']} pairs; the wave model flags "
                                f"{js.get('caught', 0)} of them (mean |jump error| {js.get('mae', float('nan')):.3f} vs "
                                f"{js.get('mae_nofill', float('nan')):.3f} without fill)", js.get("mae"),
                                "mean absolute error of t(m+1)/t(m)", target=js.get("mae_nofill"),
                                met=js.get("mae", 1) < js.get("mae_nofill", 0), op="<"))
    return {"metrics": an, "claims": claims}


def e1_2_panels(df, doc: dict, vidur_cells, *, constants: Constants) -> list:
    panels = []
    for gpu in WAVE_GPUS:
        fold = fold_from_json(doc, gpu, constants=constants)
        pnf = params_no_fill(gpu, fold["globals"], fold["readings"], constants=constants)
        cells = _shape_cells(df, gpu, 4096, 4096)
        panels.append((gpu, cells, [("model (held out)", fold["params"], "-"), ("without SM fill", pnf, "--")],
                       f"{gpu}: n = k = 4096"))
    if vidur_cells is not None and len(vidur_cells):
        rd = vidur_readings(vidur_cells, "a40")
        p = gpu_params("a40", doc["all"], rd, constants=constants)
        pnf = params_no_fill("a40", doc["all"], rd, constants=constants)
        c = vidur_cells[vidur_cells["op"] == "mlp_up_proj"]
        n, k = c.groupby(["n", "k"]).size().idxmax()
        panels.append(("a40", _shape_cells(vidur_cells, "a40", n, k),
                       [("model (held out)", p, "-"), ("without SM fill", pnf, "--")],
                       f"a40 (Vidur mlp_up_proj): n = {n}, k = {k}"))
    return panels
