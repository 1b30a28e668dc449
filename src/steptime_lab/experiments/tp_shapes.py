"""E1.29: do the efficiency laws hold at the TP-split shapes? (issue 19 item 1)

At tensor parallelism TP each rank runs the projection GEMMs with n (column-parallel: qkv,
gate_up) or k (row-parallel: o, down) divided by TP, and attention on heads / TP query heads
and max(1, kv_heads / TP) KV heads (`steptime.step.layer_shapes`, specs/engines.yaml
tensor_parallel). At TP 8 a 70B layer's GEMMs are skinny. This experiment scores the GEMM
and attention terms at exactly those per-rank shapes of the dense models steptime knows
(specs/models.yaml), per GPU and TP, held out by GPU, on measured cells that have them:

* AIConfigurator's bf16 GEMM tables (nine GPUs): every (m, n, k) cell, m <= 16384, whose
  (n, k) is one of a known model's per-rank projection shapes at that TP;
* Vidur's per-operator tables (A100, H100): the four projection operators of the profiled
  models at TP 1/2/4/8, which Vidur measured at exactly the per-rank shapes;
* AIConfigurator's attention tables (bf16 KV): decode and prefill cells whose (heads,
  kv_heads, head_dim) is a known model's per-rank head split at that TP.

Constants: the GPU's leave-one-GPU-out GEMM fold (E1.23's; its three deploy readings are
excluded from scoring) and E1.24's held-out attention fold (its excluded cells too). Nothing
is fitted here: the split shapes only score. Targets: E1.23's GEMM bound per architecture and
E1.24's attention bounds, per GPU x TP.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model, model_keys
from steptime.specs.moe import is_moe
from steptime.step import layer_shapes
from steptime.terms import attention as A
from steptime.terms import gemm as G
from steptime_lab.experiments import attention as AX
from steptime_lab.experiments.gemm.contract import DISCLOSED as GEMM_DISCLOSED
from steptime_lab import vidur_stack as VS
from steptime_lab.regimes import LLM_MAX_M, LLM_MIN_NK, VIDUR_STACK_MIN_M
from steptime_lab.results import claim

TPS = (1, 2, 4, 8)
VIDUR_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
             "mlp_down_proj": "down_proj"}


def dense_models() -> list[str]:
    return [k for k in model_keys() if not is_moe(k)]


def model_splits(models=None, tps=TPS):
    """(key, model, tp) for every dense model (or `models`) and TP degree that divides its query heads:
    the one loop over the split configurations that split_shapes and split_heads share."""
    for key in models or dense_models():
        m = get_model(key)
        for tp in tps:
            if m.num_attention_heads % tp == 0:
                yield key, m, tp


def split_shapes(models=None, tps=TPS) -> pd.DataFrame:
    """One row per (model, tp, weight): the per-rank GEMM (n, k). TP must divide the query heads."""
    return pd.DataFrame([{"model": key, "tp": tp, "weight": w, "n": int(n), "k": int(k)}
                         for key, m, tp in model_splits(models, tps)
                         for w, (n, k) in layer_shapes(m, tp).items()])


def split_heads(models=None, tps=TPS) -> pd.DataFrame:
    """One row per (model, tp): per-rank query heads, KV heads (replicated below one per rank), head dim."""
    return pd.DataFrame([{"model": key, "tp": tp, "H": m.num_attention_heads // tp,
                          "Hkv": max(1, m.num_key_value_heads // tp), "d": m.head_dim}
                         for key, m, tp in model_splits(models, tps)])


def _skinny(n, k) -> np.ndarray:
    return (np.asarray(n) < LLM_MIN_NK) | (np.asarray(k) < LLM_MIN_NK)


def aic_gemm_cells(gemm: pd.DataFrame, shapes: pd.DataFrame) -> pd.DataFrame:
    """AIConfigurator bf16 GEMM cells at a per-rank shape: gpu, tp, m, n, k, latency_ms, models (which
    models have the shape at that TP), skinny (n or k below E1.23's LLM-shaped bound)."""
    g = gemm[gemm["m"] <= LLM_MAX_M][["gpu", "m", "n", "k", "latency_ms"]]
    who = (shapes.groupby(["tp", "n", "k"])["model"].agg(lambda s: ",".join(sorted(set(s)))).reset_index()
           .rename(columns={"model": "models"}))
    x = g.merge(who, on=["n", "k"])
    x["source"] = "aic"
    x["skinny"] = _skinny(x["n"], x["k"])
    return x.sort_values(["gpu", "tp", "n", "k", "m"]).reset_index(drop=True)


def vidur_gemm_cells(vidur: pd.DataFrame, gpus) -> pd.DataFrame:
    """Vidur's projection operators (measured at the per-rank shapes of its models at TP 1-8) on `gpus`."""
    v = vidur[vidur["op"].isin(list(VIDUR_OPS)) & vidur["gpu"].isin(list(gpus))]
    v = v[v["gemm_m"].astype(float) <= LLM_MAX_M]
    x = pd.DataFrame({"gpu": v["gpu"].astype(str).to_numpy(), "tp": v["tp"].astype(int).to_numpy(),
                      "m": v["gemm_m"].astype(int).to_numpy(), "n": v["gemm_n"].astype(int).to_numpy(),
                      "k": v["gemm_k"].astype(int).to_numpy(), "latency_ms": v["latency_ms"].astype(float).to_numpy(),
                      "models": v["model"].astype(str).to_numpy(), "weight": v["op"].map(VIDUR_OPS).to_numpy()})
    x["source"] = "vidur"
    x["skinny"] = _skinny(x["n"], x["k"])
    return x.sort_values(["gpu", "tp", "models", "weight", "m"]).reset_index(drop=True)


def attention_cells(cells: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """E1.24's tidy attention cells (bf16 KV) at a per-rank head split of a known model at that TP."""
    c = cells[cells["kv_dtype"] == "bf16"]
    who = (heads.groupby(["tp", "H", "Hkv", "d"])["model"].agg(lambda s: ",".join(sorted(set(s)))).reset_index()
           .rename(columns={"model": "models"}))
    x = c.merge(who.astype({"H": float, "Hkv": float, "d": float}), on=["H", "Hkv", "d"])
    return x.reset_index(drop=True)


def predict_gemm(cells: pd.DataFrame, gemm_doc: dict, base: Constants,
                 stack: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """Held-out GEMM predictions (ms) per GPU; the fold's deploy-reading cells are dropped.

    `stack`: {gpu: factor} of a measurement stack slower than the tables the fold was fitted on (Vidur's,
    `vidur_stack_factors`): that GPU's compute branch runs at eta_active / factor (memory branch unchanged)."""
    from steptime_lab.evaluate.held_out import held_out_constants

    out, notes = [], {}
    for g, x in cells.groupby("gpu", sort=True):
        if g not in gemm_doc.get("folds", {}):
            notes[g] = "no held-out GEMM fold (not an AIConfigurator GPU): not scored"
            continue
        c, cal = held_out_constants(g, ("gemm",), gemm_doc=gemm_doc, base=base)
        used = cal.all_cells()
        keep = np.array([(g, "gemm", int(m), int(n), int(k)) not in used
                         for m, n, k in zip(x["m"], x["n"], x["k"])]) if x["source"].iloc[0] == "aic" \
            else np.ones(len(x), dtype=bool)
        x = x[keep].copy()
        gpu = get_gpu(g)
        params = G.resolve(gpu, c)
        params["eta_active"] = VS.stacked_eta(params["eta_active"], float((stack or {}).get(g, 1.0)), g)
        x["pred_ms"] = G.gemm_time(x["m"].to_numpy(), x["n"].to_numpy(), x["k"].to_numpy(), gpu,
                                   params=params)["t"] * 1e3
        out.append(x)
    p = pd.concat(out, ignore_index=True)
    p["err"] = p["pred_ms"] / p["latency_ms"] - 1
    return p, notes


# Vidur's measurement stack (issue 19 item 1, wave 31, helper `vgemm`; DESIGN.md). Vidur's profiler times the
# projections of Sarathi-Serve's fp16 model through PyTorch (its own cuBLAS, kernel durations from the torch
# profiler trace); the GEMM folds are fitted on AIConfigurator's tables. On the cells both tables measured, Vidur
# is 1.12-1.16x slower once the GEMM is compute-bound at the large tile (m >= 2048) on both A100 and H100, and
# within a few percent at m <= 16 (memory-bound): a compute-rate factor of the stack, not a per-call offset.
# the rows that fit the factor: m >= VIDUR_STACK_MIN_M (steptime_lab.regimes; compute-bound at the large tile on both GPUs)


def vidur_stack_factors(pred: pd.DataFrame, min_m: int = VIDUR_STACK_MIN_M) -> dict:
    """Per scored GPU, Vidur's stack factor fitted on the OTHER Vidur GPUs' rows (`vidur_stack.fit_stack_factor`):
    the median of measured / held-out prediction (each of those GPUs at its own leave-one-GPU-out fold, no stack
    factor) over their rows with m >= `min_m`. The scored GPU's own rows set nothing. {gpu: {"factor",
    "fitted_on", "cells", "min_m"}}; a GPU with no other Vidur GPU gets factor 1 (no correction)."""
    need = {"gpu", "source", "m", "latency_ms", "pred_ms"}
    if not need <= set(pred.columns):
        raise ValueError(f"vidur_stack_factors needs the columns {sorted(need)}, missing "
                         f"{sorted(need - set(pred.columns))}")
    v = pred[pred["source"] == "vidur"].rename(columns={"latency_ms": "measured", "pred_ms": "predicted"})
    return {str(g): VS.fit_stack_factor(v, g, min_m) for g in sorted(v["gpu"].unique())}


VIDUR_M_BANDS = ((1, 64, "m <= 64"), (65, 256, "64 < m <= 256"), (257, 1024, "256 < m <= 1024"),
                 (1025, LLM_MAX_M, "m > 1024"))


def signed_by_m_band(pred: pd.DataFrame) -> dict:
    """Median signed error (predicted / measured - 1) and MAPE per GPU and m band: where in m a table misses."""
    out = {}
    for g, x in pred.groupby("gpu", sort=True):
        out[str(g)] = {band: {"cells": int(len(z)), "bias": round(float(np.median(z["err"])), 4),
                              "mape": round(_mape(z["err"]), 4)}
                       for lo, hi, band in VIDUR_M_BANDS
                       if len(z := x[(x["m"] >= lo) & (x["m"] <= hi)])}
    return out


def predict_attention(cells: pd.DataFrame, gemm_doc: dict, attn_doc: dict, base: Constants) -> pd.DataFrame:
    """Held-out attention predictions (ms): E1.24's fold per GPU, its scoring exclusions dropped."""
    from steptime_lab.evaluate.held_out import held_out_constants

    per_gpu = attn_doc["metrics"]["per_gpu"]
    out = []
    for g, x in cells.groupby("gpu", sort=True):
        if g not in per_gpu:
            continue
        c, _ = held_out_constants(g, ("gemm", "attention"), gemm_doc=gemm_doc, attn_doc=attn_doc, base=base)
        if AX.KV_WRITE_ETA_KEY not in per_gpu[g]:
            raise ValueError(f"{g}: the attention result records no held-out KV-write eta ({AX.KV_WRITE_ETA_KEY}); "
                             "rebuild E1.24")
        # E1.24's fold, not the shipped value
        c = AX.with_kv_write_eta(c, per_gpu[g][AX.KV_WRITE_ETA_KEY], f"kv_write eta held out for {g} (E1.24 kv_write_fold)")
        drop = {tuple(v) for v in per_gpu[g].get("scoring_excludes", {}).values()}
        x = x[[tuple(cid) not in drop for cid in x["cell"]]].copy()
        r = AX.predict(x, g, A.attention_constants(get_gpu(g), c), constants=c)  # E1.24's: attention + the table's KV write
        x["pred_ms"] = np.asarray(r["t"])
        out.append(x)
    p = pd.concat(out, ignore_index=True)
    p["err"] = p["pred_ms"] / p["y_ms"] - 1
    return p


def _mape(e) -> float:
    e = np.asarray(e, dtype=float)
    return float(np.mean(np.abs(e))) if len(e) else float("nan")


def _score(x: pd.DataFrame) -> dict:
    return {"cells": int(len(x)), "mape": round(_mape(x["err"]), 4),
            "bias": round(float(np.median(x["err"])), 4) if len(x) else None}


SKINNY_M_BANDS = ((1, 256, "m <= 256 (decode-sized, memory-bound)"), (257, LLM_MAX_M, "m > 256 (prefill-sized)"))


def skinny_by_side(gemm_pred: pd.DataFrame) -> list[dict]:
    """Where the GEMM law misses at the skinny split shapes (issue 19): the held-out signed error of the
    AIConfigurator skinny cells per architecture, by which dimension TP made small (n: a column-parallel
    weight, qkv / gate_up; k: a row-parallel one, o / down) and by m band. A law in the bytes alone would
    give both sides one sign at the same bytes; opposite signs point at the shape (few output tiles and
    a long serial k loop per CTA when n is small; a short one when k is small)."""
    if not {"m", "n", "k", "skinny", "source"} <= set(gemm_pred.columns):
        return []
    x = gemm_pred[(gemm_pred["source"] == "aic") & gemm_pred["skinny"].astype(bool)].copy()
    if x.empty:
        return []
    x["arch"] = [get_gpu(g).architecture for g in x["gpu"]]
    x["side"] = np.where(x["n"] < x["k"], "small_n", "small_k")
    out = []
    for (arch, side), y in x.groupby(["arch", "side"], sort=True):
        for lo, hi, band in SKINNY_M_BANDS:
            z = y[(y["m"] >= lo) & (y["m"] <= hi)]
            if len(z):
                out.append({"arch": arch, "side": side, "m_band": band, "cells": int(len(z)),
                            "shapes": sorted({f"{int(n)}x{int(k)}" for n, k in zip(z["n"], z["k"])}),
                            "bias": round(float(np.median(z["err"])), 4), "mape": round(_mape(z["err"]), 4)})
    return out


# Matched neighbours of a skinny cell (`skinny_matched_excess`): non-skinny cells of the same GPU at the same m whose
# bytes moved (`steptime.terms.gemm.gemm_bytes`) are within this factor of the skinny cell's
MATCH_BYTES_RATIO = 1.5


def skinny_matched_excess(gemm_pred: pd.DataFrame, ratio: float = MATCH_BYTES_RATIO) -> list[dict]:
    """Is a skinny miss the shape's, or the working set's? (issue 19 item 1, wave 35 helper `skinny`.) Per GPU,
    small side and m band of the AIConfigurator skinny cells: the held-out signed log error log(pred / meas) (median)
    and its excess over the same GPU's non-skinny cells at the same m and the same bytes moved within a factor
    `ratio` (median over the skinny cells that have such neighbours of: the cell's log error minus its neighbours'
    median). An excess near 0 says the law errs at that working set whatever the shape (the memory law, not the
    launch geometry of the split); a large one says the split shape itself runs differently."""
    if not {"m", "n", "k", "skinny", "source", "pred_ms", "latency_ms"} <= set(gemm_pred.columns):
        return []
    x = gemm_pred[gemm_pred["source"] == "aic"].drop_duplicates(["gpu", "m", "n", "k"]).copy()
    x["le"] = np.log(x["pred_ms"] / x["latency_ms"])
    x["bytes"] = G.gemm_bytes(x["m"].to_numpy(float), x["n"].to_numpy(float), x["k"].to_numpy(float))
    out = []
    for g, y in x.groupby("gpu", sort=True):
        sk = y[y["skinny"].astype(bool)]
        if sk.empty:
            continue
        ref = y[~y["skinny"].astype(bool)]
        by_m = {m: r for m, r in ref.groupby("m")}
        excess = np.full(len(sk), np.nan)
        for i, (m, b, le) in enumerate(zip(sk["m"], sk["bytes"], sk["le"])):
            r = by_m.get(m)
            if r is not None:
                near = r["le"][(r["bytes"] >= b / ratio) & (r["bytes"] <= b * ratio)]
                if len(near):
                    excess[i] = le - float(np.median(near))
        sk = sk.assign(excess=excess, side=np.where(sk["n"] < sk["k"], "small_n", "small_k"))
        for side, z in sk.groupby("side", sort=True):
            for lo, hi, band in SKINNY_M_BANDS:
                w = z[(z["m"] >= lo) & (z["m"] <= hi)]
                if len(w):
                    e = w["excess"].dropna()
                    out.append({"gpu": str(g), "side": side, "m_band": band, "cells": int(len(w)),
                                "signed_log": round(float(np.median(w["le"])), 4), "matched": int(len(e)),
                                "excess_log": round(float(np.median(e)), 4) if len(e) else None})
    return out


def _nondecreasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares fit of `y` (in order) by a non-decreasing sequence (pool adjacent violators)."""
    vals, wts, sizes = [], [], []
    for v, u in zip(np.asarray(y, dtype=float), np.asarray(w, dtype=float)):
        vals.append(v)
        wts.append(u)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            u2 = wts[-2] + wts[-1]
            vals[-2] = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / u2
            wts[-2] = u2
            sizes[-2] += sizes[-1]
            del vals[-1], wts[-1], sizes[-1]
    return np.repeat(vals, sizes)


def monotone_floor(gemm_pred: pd.DataFrame) -> dict:
    """How much of the MAPE no law smooth in m can remove (issue 19 item 1, wave 35 helper `skinny`): per source,
    GPU and TP, the MAPE of the measured latency's own best non-decreasing fit in m per (n, k) (least squares in log
    latency, the cells of one m pooled; in-sample, fitted on the scored cells themselves: a lower bound for any
    predictor whose time does not fall as m grows at a fixed weight, not a predictor), beside the law's MAPE, for all
    cells and the skinny ones. The measured tables step down as well as up in m where the library's heuristic
    switches kernels (A100 768 x 4096: 8.8 us at m = 1, 12.5-13.3 us at m = 2-16, 9.7 us at m = 32)."""
    if not {"source", "gpu", "tp", "m", "n", "k", "skinny", "pred_ms", "latency_ms"} <= set(gemm_pred.columns):
        return {}
    x = gemm_pred.copy()
    x["log_t"] = np.log(x["latency_ms"])
    fits = []
    for (src, g, n, k), y in x.groupby(["source", "gpu", "n", "k"], sort=True):
        per_m = y.groupby("m")["log_t"].agg(["mean", "size"]).sort_index()
        fits.append(pd.DataFrame({"source": src, "gpu": g, "n": n, "k": k, "m": per_m.index.to_numpy(),
                                  "fit_ms": np.exp(_nondecreasing(per_m["mean"].to_numpy(),
                                                                  per_m["size"].to_numpy()))}))
    x = x.merge(pd.concat(fits, ignore_index=True), on=["source", "gpu", "n", "k", "m"], how="left")
    x["e_law"] = x["pred_ms"] / x["latency_ms"] - 1
    x["e_floor"] = x["fit_ms"] / x["latency_ms"] - 1
    out = {}
    for (src, g, tp), y in x.groupby(["source", "gpu", "tp"], sort=True):
        s = y[y["skinny"].astype(bool)]
        out[f"{src}:{g}@tp{int(tp)}"] = {
            "cells": int(len(y)), "law": round(_mape(y["e_law"]), 4), "floor": round(_mape(y["e_floor"]), 4),
            "skinny_cells": int(len(s)), "skinny_law": round(_mape(s["e_law"]), 4) if len(s) else None,
            "skinny_floor": round(_mape(s["e_floor"]), 4) if len(s) else None}
    return out


def gemm_target(gpu: str, targets: dict) -> float:
    t = targets["gemm_mape"]
    return float(t.get(get_gpu(gpu).architecture, t["default"]))


def vidur_stack_context(raw: pd.DataFrame, scaled: pd.DataFrame, factors: dict) -> dict:
    """What the Vidur stack factor does (metrics.vidur_stack): the factors, each GPU x TP's MAPE without and with
    it, and the signed error by m band without and with it."""
    def by_tp(x):
        return {f"{g}@tp{int(tp)}": round(_mape(y["err"]), 4) for (g, tp), y in x.groupby(["gpu", "tp"], sort=True)}
    return {"factors": factors, "mape_without": by_tp(raw), "mape_with": by_tp(scaled),
            "signed_by_m_band_without": signed_by_m_band(raw), "signed_by_m_band_with": signed_by_m_band(scaled),
            "note": "Vidur's projection GEMMs (fp16, PyTorch's cuBLAS, Sarathi-Serve's model) against the GEMM law "
                    "fitted on AIConfigurator's tables: the scored GPU's compute branch runs at eta_active / "
                    "factor, the factor fitted on the other Vidur GPU's rows at m >= "
                    f"{VIDUR_STACK_MIN_M} (vidur_stack_factors); chosen after seeing these rows (DESIGN.md, wave 31 "
                    "helper vgemm)."}


def document(gemm_pred: pd.DataFrame, attn_pred: pd.DataFrame, targets: dict, unsplit: dict | None = None,
             notes: dict | None = None, vidur_stack: dict | None = None) -> dict:
    """Per (source, GPU, TP): MAPE at the split shapes against the target (E1.23's for GEMMs, E1.24's for
    attention), with the skinny cells (n or k < 1024) apart and how far each TP is from TP 1.
    `vidur_stack` (`vidur_stack_context`) is recorded as metrics.vidur_stack with two context claims."""
    records, claims = [], []
    for (src, g), x in gemm_pred.groupby(["source", "gpu"], sort=True):
        tgt = gemm_target(g, targets)
        base = _score(x[x["tp"] == 1])["mape"] if (x["tp"] == 1).any() else None
        for tp, y in x.groupby("tp", sort=True):
            rec = {"term": "gemm", "source": src, "gpu": g, "tp": int(tp), **_score(y), "target": tgt,
                   "skinny": _score(y[y["skinny"]]), "not_skinny": _score(y[~y["skinny"]]),
                   "tp1_mape": base, "unsplit_e1_23": (unsplit or {}).get(g)}
            records.append(rec)
            claims.append(claim(f"{g} TP {tp}: held-out GEMM MAPE at the per-rank shapes of the known models "
                                f"({'AIConfigurator' if src == 'aic' else 'Vidur'}, {rec['cells']} cells, "
                                f"{rec['skinny']['cells']} skinny)", rec["mape"], "steptime MAPE at TP-split shapes",
                                target=tgt, met=rec["mape"] <= tgt, op="<=", unit="fraction"))
    for (g, phase), x in attn_pred.groupby(["gpu", "phase"], sort=True):
        tgt = float(targets[f"attention_{phase}"])
        base = _score(x[x["tp"] == 1])["mape"] if (x["tp"] == 1).any() else None
        for tp, y in x.groupby("tp", sort=True):
            rec = {"term": f"attention_{phase}", "source": "aic", "gpu": g, "tp": int(tp), **_score(y),
                   "target": tgt, "tp1_mape": base, "heads": sorted({f"{int(h)}/{int(kv)}/{int(d)}" for h, kv, d
                                                                       in zip(y["H"], y["Hkv"], y["d"])})}
            records.append(rec)
            claims.append(claim(f"{g} TP {tp}: held-out {phase} attention MAPE at the per-rank head splits of the "
                                f"known models ({rec['cells']} cells)", rec["mape"],
                                f"steptime MAPE at TP-split heads ({phase})", target=tgt, met=rec["mape"] <= tgt,
                                op="<=", unit="fraction"))
    r = pd.DataFrame(records)
    summary = {}
    for (term, src), x in r.groupby(["term", "source"], sort=True):
        met = x["mape"] <= x["target"]
        miss = x[~met]
        summary[f"{term}:{src}"] = {
            "met": int(met.sum()), "scored": int(len(x)),
            "mape_by_tp": {int(tp): round(float(y["mape"].median()), 4) for tp, y in x.groupby("tp")},
            "worst": {"gpu": str(x.loc[x["mape"].idxmax(), "gpu"]), "tp": int(x.loc[x["mape"].idxmax(), "tp"]),
                      "mape": float(x["mape"].max())},
            "missed_by": {f"{g}@tp{int(tp)}": round(float(m - t), 4)
                          for g, tp, m, t in zip(miss["gpu"], miss["tp"], miss["mape"], miss["target"])},
            "tp8_minus_tp1": {g: round(float(y.loc[y["tp"] == 8, "mape"].iloc[0] - y.loc[y["tp"] == 1, "mape"].iloc[0]), 4)
                              for g, y in x.groupby("gpu") if {1, 8} <= set(y["tp"])}}
    for key, s in summary.items():
        grow = s["tp8_minus_tp1"]
        if grow:
            claims.append(claim(f"{key}: the MAPE at TP 8 minus TP 1, per GPU (positive: the law degrades at the "
                                f"skinny shapes)", grow, "MAPE(TP 8) - MAPE(TP 1)"))
    sides = skinny_by_side(gemm_pred)
    if sides:
        claims.append(claim("held-out signed error (median predicted / measured - 1) of the skinny AIConfigurator "
                            "cells by architecture, small side and m band (arch/side/m band)",
                            {f"{d['arch']}/{d['side']}/{'small_m' if d['m_band'].startswith('m <=') else 'large_m'}":
                             d["bias"] for d in sides}, "signed error by side"))
    if vidur_stack:  # last, so the earlier claims keep their indices
        claims.append(claim("Vidur GEMM: the measurement-stack factor per scored GPU (Vidur's time / the held-out law's "
                            f"at m >= {VIDUR_STACK_MIN_M}), fitted on the other Vidur GPU's rows",
                            {g: d["factor"] for g, d in vidur_stack["factors"].items()}, "stack factor"))
        claims.append(claim("Vidur GEMM: held-out MAPE per GPU@TP without the stack factor (the law at "
                            "AIConfigurator's rate; context)", vidur_stack["mape_without"], "MAPE without stack factor"))
    return {"metrics": {"records": records, "summary": summary, "notes": notes or {}, "skinny_by_side": sides,
                        "skinny_matched": skinny_matched_excess(gemm_pred), "monotone_floor": monotone_floor(gemm_pred),
                        **({"vidur_stack": vidur_stack} if vidur_stack else {}),
                        "disclosed": " ".join(list(AX.DISCLOSED) + list(GEMM_DISCLOSED)
                                              + ([vidur_stack["note"]] if vidur_stack and "note" in vidur_stack else [])),
                        "target_met": int(sum(c.get("met", False) for c in claims if "met" in c)),
                        "target_scored": int(sum(1 for c in claims if "met" in c))},
            "claims": claims}


def plot(doc: dict, stem, caption: str | None = None):
    """MAPE against TP per GPU, one panel per term and source; dashed: the target."""
    from steptime import plotting

    plt = plotting.setup()
    r = pd.DataFrame(doc["metrics"]["records"])
    panels = [(t, s) for t, s in (("gemm", "aic"), ("gemm", "vidur"), ("attention_decode", "aic"),
                                  ("attention_prefill", "aic")) if ((r["term"] == t) & (r["source"] == s)).any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    colour = {g: f"C{i % 10}" for i, g in enumerate(sorted(r["gpu"].unique()))}  # one colour per GPU in every panel
    for ax, (t, s) in zip(axes[0], panels):
        x = r[(r["term"] == t) & (r["source"] == s)]
        for g, y in x.groupby("gpu", sort=True):
            y = y.sort_values("tp")
            ax.plot(y["tp"], y["mape"] * 100, marker="o", lw=1.2, label=g, color=colour[g])
            ax.axhline(float(y["target"].iloc[0]) * 100, color=colour[g], ls=":", lw=0.7)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(TPS))
        ax.set_xticklabels([str(v) for v in TPS])
        ax.set_xlabel("tensor-parallel degree (per-rank shapes)")
        ax.set_ylabel("held-out MAPE (%)")
        ax.set_title(f"{t.replace('_', ' ')} ({'AIConfigurator' if s == 'aic' else 'Vidur'})", fontsize=9)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    plotting.save(fig, stem, caption)
