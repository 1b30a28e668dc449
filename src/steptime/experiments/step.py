"""E1.1 / E1.1b / E1.20 / E1.22 (Vidur part): the whole per-layer step on Vidur's tables.

The measured quantity is the sum of ONE layer's non-attention operators as Vidur
profiles them (steptime.step.VIDUR_LAYER_OPS; `emb` runs once per step and is left out of
the layer sum, as Vidur's own predictor leaves it out of a block). Each (gpu, model, tp,
num_tokens) row is one cell; decode-sized cells have <= 64 tokens, prefill-sized >= 512.

Held out per GPU: the GEMM constants are the shipped ones (defaults.yaml, set on
AIConfigurator GEMM tables by E1.x GEMM experiments; Vidur cells never set them), the
light-kernel constants come from the OTHER Vidur GPUs (E1.1c's fit) and the GPU's own
light_bw_scale deploy reading (one cell, excluded from scoring).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Calibration, Constants
from steptime.experiments import light as LX
from steptime.metrics import score, signed_error
from steptime.specs import get_gpu, get_model
from steptime.step import VIDUR_GEMM, VIDUR_LAYER_OPS, VIDUR_LIGHT, vidur_layer_ops

DECODE_MAX, PREFILL_MIN = 64, 512
TERM_OF = {**{op: "gemm" for op in VIDUR_GEMM}, **{op: "light" for op in VIDUR_LIGHT}}
RUNGS = ("bare_roofline", "+gemm_eta_c", "+gemm_eta_mem", "+gemm_floor", "+light_eta", "+light_floor")


def wide_cells(vidur):
    """One row per (gpu, model, tp, num_tokens): measured ms per Vidur operator + the layer sum."""
    x = vidur[vidur["op"].isin(list(VIDUR_LAYER_OPS) + ["emb"])]
    w = x.pivot_table(index=["gpu", "model", "tp", "num_tokens"], columns="op", values="latency_ms",
                      aggfunc="median").reset_index()
    w.columns.name = None
    present = [op for op in VIDUR_LAYER_OPS if op in w]
    w["layer_ms"] = w[present].sum(axis=1, min_count=1)
    w = w.dropna(subset=["layer_ms"])
    w["cell"] = list(zip(w["gpu"], ["vidur_layer"] * len(w), w["model"], w["tp"].astype(int),
                         w["num_tokens"].astype(int)))
    T = w["num_tokens"].to_numpy()
    w["size"] = np.where(T <= DECODE_MAX, "decode", np.where(T >= PREFILL_MIN, "prefill", "mid"))
    return w.sort_values(["gpu", "model", "tp", "num_tokens"]).reset_index(drop=True)


def held_out_constants(light_cells, gpu, gpus) -> tuple[Constants, dict]:
    """Shipped constants with the light-kernel factors refitted on the other Vidur GPUs and
    the GPU's own light_bw_scale deploy reading."""
    others = [g for g in gpus if g != gpu]
    fit = LX.fit_kernels(light_cells, others)
    eta = dict(fit["light_eta"])
    floors = dict(fit["light_floor_us"])
    base = Constants.default()
    eta.setdefault("kv_write", base.get("light_eta")["kv_write"])
    floors.setdefault("kv_write", float(np.median(list(floors.values()))))
    xg = light_cells[light_cells["gpu"] == gpu].reset_index(drop=True)
    scale = LX.bw_scale(xg, gpu)
    c = base.with_overrides({"light_eta": eta, "light_floor_us": floors}, scope="global",
                            source=f"E1.1c fit on {others}")
    c = c.with_overrides({"light_bw_scale": scale}, scope=f"gpu.{get_gpu(gpu).key}", provenance="MEASURED",
                         source="E1.1c deploy reading")
    return c, {"fit_on": others, "light_bw_scale": scale, "light_eta": eta, "light_floor_us": floors,
               "deploy_cell": list(xg["cell"].iloc[LX.deploy_index(xg)])}


def predict_ops_frame(w, gpu, constants) -> dict:
    """Predicted ms per Vidur op for every row of one GPU (dict op -> array)."""
    out = {op: np.full(len(w), np.nan) for op in list(VIDUR_LAYER_OPS) + ["emb"]}
    for (model, tp), idx in w.groupby(["model", "tp"]).groups.items():
        ii = w.index.get_indexer(idx)
        r = vidur_layer_ops(model, gpu, w.loc[idx, "num_tokens"].to_numpy(float), tp=int(tp), constants=constants)
        for op, v in r.items():
            out[op][ii] = v
    return out


def ladder_ops(w, gpu, constants) -> dict:
    """Layer time (ms) per ablation rung for every row of one GPU."""
    g = get_gpu(gpu)
    res = {r: np.zeros(len(w)) for r in RUNGS}
    for (model, tp), idx in w.groupby(["model", "tp"]).groups.items():
        ii = w.index.get_indexer(idx)
        parts = vidur_layer_ops(model, gpu, w.loc[idx, "num_tokens"].to_numpy(float), tp=int(tp),
                                constants=constants, parts=True)
        for op, p in parts.items():
            if op not in VIDUR_LAYER_OPS:
                continue
            if TERM_OF[op] == "gemm":
                bare = np.maximum(p["flops"] / g.peak_flops, p["bytes"] / g.mem_bw)
                r1 = np.maximum(p["t_compute"], p["bytes"] / g.mem_bw)
                r2 = np.maximum(p["t_compute"], p["t_memory"])
                r3 = p["t"]
                rungs = (bare, r1, r2, r3, r3, r3)
            else:
                floor, stream, nb = p
                bare = nb / g.mem_bw
                rungs = (bare, bare, bare, bare, stream, floor + stream)
            for r, v in zip(RUNGS, rungs):
                res[r][ii] += v * 1e3
    return res


def run(vidur, light_cells, gpus=None, seed: int = 0, n_boot: int = 1000) -> dict:
    import pandas as pd

    w_all = wide_cells(vidur)
    gpus = gpus or sorted(w_all["gpu"].unique())
    cal = Calibration()
    recs, ladder, frames, decomp, per_gpu = [], [], [], [], {}
    for g in gpus:
        C, info = held_out_constants(light_cells, g, gpus)
        per_gpu[g] = info
        cal.record(f"light_bw_scale[{g}]", [tuple(info["deploy_cell"])], LX.DEPLOY_NOTE)
        w = w_all[w_all["gpu"] == g].reset_index(drop=True)
        # the deploy cell is one operator of one row: drop that row from scoring
        dep = info["deploy_cell"]
        drop = (w["model"] == dep[2]) & (w["tp"] == dep[3]) & (w["num_tokens"] == dep[4])
        w = w[~drop.to_numpy()].reset_index(drop=True)
        cal.check_disjoint([(c[0], "light", c[2], c[3], c[4], LX.DEPLOY_OP) for c in w["cell"]])
        ops = predict_ops_frame(w, g, C)
        present = [op for op in VIDUR_LAYER_OPS]
        pred = np.zeros(len(w))
        for op in present:
            pred += np.where(np.isnan(w[op].to_numpy()) if op in w else True, 0.0, ops[op])
        rung = ladder_ops(w, g, C)
        fr = w.copy()
        fr["pred_ms"] = pred
        for op in present:
            fr[f"pred_{op}"] = ops[op]
        for r in RUNGS:
            fr[f"rung_{r}"] = rung[r]
        frames.append(fr)
        y = w["layer_ms"].to_numpy()
        for subset in ("decode", "prefill", "all"):
            m = (w["size"] == subset).to_numpy() if subset != "all" else np.ones(len(w), bool)
            recs.append({"family": "step", "gpu": g, "predictor": "steptime", "subset": subset,
                         **score(pred[m], y[m], n_boot=n_boot, seed=seed)})
            recs.append({"family": "step", "gpu": g, "predictor": "bare_roofline", "subset": subset,
                         **score(rung["bare_roofline"][m], y[m], n_boot=n_boot, seed=seed)})
            for r in RUNGS:
                ladder.append({"gpu": g, "subset": subset, "rung": r,
                               **score(rung[r][m], y[m], n_boot=n_boot, seed=seed)})
            for (model, tp), d in w[m].groupby(["model", "tp"]):
                mm = m & (w["model"] == model).to_numpy() & (w["tp"] == tp).to_numpy()
                recs.append({"family": "step", "gpu": g, "predictor": "steptime", "subset": subset,
                             "model": model, "tp": int(tp), "scope": "cell_group",
                             **score(pred[mm], y[mm], n_boot=200, seed=seed)})
            # residual decomposition by term (E1.1b)
            net = float(np.sum(pred[m] - y[m]))
            tot = float(np.sum(y[m]))
            for term in ("gemm", "light"):
                tops = [op for op in present if TERM_OF[op] == term and op in w]
                pm = np.nansum([np.where(np.isnan(w[op].to_numpy()), 0, ops[op])[m] for op in tops], axis=0)
                ym = np.nansum([np.nan_to_num(w[op].to_numpy())[m] for op in tops], axis=0)
                s = score(pm, ym, n_boot=200, seed=seed) if np.all(ym > 0) else {"mape": None}
                decomp.append({"gpu": g, "subset": subset, "term": term, "time_share": float(ym.sum() / tot),
                               "mape": s["mape"], "signed_residual_ms": float(np.sum(pm - ym)),
                               "share_of_net_residual": float(np.sum(pm - ym) / net) if net else None,
                               "share_of_abs_residual": float(np.sum(np.abs(pm - ym)) / max(np.sum(np.abs(pred[m] - y[m])), 1e-12))})
            for op in present:
                if op not in w:
                    continue
                ok = m & ~np.isnan(w[op].to_numpy())
                decomp.append({"gpu": g, "subset": subset, "term": op, "time_share": float(np.sum(w[op].to_numpy()[ok]) / tot),
                               "mape": score(ops[op][ok], w[op].to_numpy()[ok], n_boot=50, seed=seed)["mape"],
                               "signed_residual_ms": float(np.sum(ops[op][ok] - w[op].to_numpy()[ok])),
                               "share_of_net_residual": float(np.sum(ops[op][ok] - w[op].to_numpy()[ok]) / net) if net else None})
    return {"records": recs, "ladder": ladder, "decomposition": decomp, "per_gpu": per_gpu, "calibration": cal,
            "pred": pd.concat(frames, ignore_index=True)}


def dominant_op(row, ops=VIDUR_LAYER_OPS) -> str:
    """The operator with the largest absolute error in one predicted row."""
    best, val = None, -1.0
    for op in ops:
        m = row.get(op)
        if m is None or np.isnan(m):
            continue
        e = abs(row[f"pred_{op}"] - m)
        if e > val:
            best, val = op, e
    return best


def signed(fr) -> np.ndarray:
    return signed_error(fr["pred_ms"].to_numpy(), fr["layer_ms"].to_numpy())
