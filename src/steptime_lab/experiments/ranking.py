"""E2.2 / E2.6: rank GPUs for a workload set, tie-aware.

Ground truth is built only from measured rows: a workload's per-layer time on a GPU is
the sum of AIConfigurator's measured latencies of its four projection GEMMs (m = new
tokens, exact (n, k) of the model at its TP degree) and of its attention call (decode:
batch x KV length; prefill: one chunk), at shapes that are exactly on every GPU's
measured grid. Nothing is interpolated; a workload with a missing cell on any GPU is
dropped. Light kernels are not in these tables, so the ranked quantity is
"GEMM + attention per layer".

Tie-aware scoring: a predicted tie (relative difference <= TIE_REL) is counted as a
tie, never as a hit; H100 and H200 share a datasheet compute peak, so a compute-bound
cell can tie. `naive_*` metrics break ties by the listed GPU order (a stable sort), the
artifact E2.6 re-scores.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from steptime_lab.experiments.cells import attention_cells, gemm_cells
from steptime_lab.experiments.ratios import attention_work, gemm_work, roofline_s
from steptime_lab.experiments.transfer.profiled import predict_profiled
from steptime.step import layer_shapes
from steptime.plotting import PALETTE, save, subplots
from steptime.specs import get_gpu, get_model, model_keys
from steptime.step import memory_bytes
from steptime_lab.experiments.ratios import predict_steptime
from steptime_lab.results import claim

GPUS = ("a100-sxm", "l40s", "rtx-pro-6000", "h100-sxm", "h200-sxm", "b200", "gb200", "b300", "gb300")
TPS = (1, 2, 4, 8)
DECODE_BATCHES = (1, 4, 16, 64, 256)
KV_LENS = (1024, 4096, 16384)
PREFILL_CHUNKS = (512, 1024, 2048, 4096, 8192)
TIE_REL = 1e-6       # predicted times within this relative difference are a tie
MEAS_TIE_REL = 0.02  # measured times this close are within measurement spread (reported separately)
PIECES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attn")


def on_grid_models(gemm, attn, gpus=GPUS, tps=TPS):
    """(model, tp) pairs of the zoo whose GEMM (n, k) and attention heads are measured on every GPU.
    Models with identical shapes at the same TP are kept once (the first by name)."""
    nk = [set(zip(gemm.loc[gemm.gpu == g, "n"], gemm.loc[gemm.gpu == g, "k"])) for g in gpus]
    heads = {}
    for phase in ("decode", "prefill"):
        heads[phase] = [set(zip(attn.loc[(attn.gpu == g) & (attn.phase == phase), "num_heads"],
                                attn.loc[(attn.gpu == g) & (attn.phase == phase), "num_kv_heads"])) for g in gpus]
    out, seen = [], set()
    for key in sorted(model_keys()):
        m = get_model(key)
        if m.head_dim != 128:
            continue
        for tp in tps:
            if m.num_attention_heads % tp:
                continue
            shapes = layer_shapes(m, tp)
            hk = (m.num_attention_heads // tp, max(1, m.num_key_value_heads // tp))
            sig = (tuple(shapes.values()), hk)
            if sig in seen:
                continue
            if all(all(s in g for s in shapes.values()) for g in nk) and all(
                    all(hk in g for g in heads[p]) for p in heads):
                seen.add(sig)
                out.append((key, tp))
    return out


def workloads(gemm, attn, gpus=GPUS):
    """Workload set: on-grid (model, tp) x decode batches x KV lengths, plus prefill chunks.
    Kept only when every component cell is measured on every GPU and the KV cache fits the
    smallest GPU's memory."""
    min_mem = min(get_gpu(g).mem_bytes for g in gpus)
    out = []
    for model, tp in on_grid_models(gemm, attn, gpus):
        m = get_model(model)
        for b in DECODE_BATCHES:
            for kv in KV_LENS:
                if memory_bytes(m, b * kv, tp) <= min_mem:
                    out.append({"model": model, "tp": tp, "phase": "decode", "batch": b, "kv_len": kv, "tokens": b})
        for c in PREFILL_CHUNKS:
            if memory_bytes(m, c, tp) <= min_mem:
                out.append({"model": model, "tp": tp, "phase": "prefill", "batch": 1, "kv_len": 0, "tokens": c})
    return out


def component_cells(wl: dict):
    """The GEMM and attention cells of one workload (shapes per GPU after TP)."""
    m = get_model(wl["model"])
    tp = wl["tp"]
    gem = [(term, wl["tokens"], n, k) for term, (n, k) in layer_shapes(m, tp).items()]
    h, hk = m.num_attention_heads // tp, max(1, m.num_key_value_heads // tp)
    new = 1 if wl["phase"] == "decode" else wl["tokens"]
    att = {"phase": wl["phase"], "batch_size": float(wl["batch"]), "new_tokens": float(new),
           "kv_len": float(wl["kv_len"]), "num_heads": float(h), "num_kv_heads": float(hk), "head_dim": 128.0}
    # Vidur's attention features (for the home RF): decode KV length; prefill batch x chunk^2
    att["kv_cache_size"] = att["kv_len"]
    att["prefill_chunk_size_squared"] = 0.0 if wl["phase"] == "decode" else float(wl["batch"]) * new ** 2
    return gem, att


def measured_terms(wls, gemm, attn, gpus=GPUS):
    """(workloads kept, {"gemm", "attention"}: arrays [n_workloads, n_gpus] of measured ms, the four
    projection GEMMs summed and the attention call); drops any workload with a component cell missing
    on any GPU."""
    gidx = {g: gemm[gemm.gpu == g].set_index(["m", "n", "k"])["latency_ms"] for g in gpus}
    akey = ["phase", "batch_size", "new_tokens", "kv_len", "num_heads", "num_kv_heads"]
    aidx = {g: attn[attn.gpu == g].set_index(akey)["latency_ms"] for g in gpus}
    kept, rows_g, rows_a = [], [], []
    for wl in wls:
        gem, att = component_cells(wl)
        row_g, row_a = [], []
        for g in gpus:
            try:
                row_g.append(sum(float(gidx[g].loc[(m, n, k)]) for _, m, n, k in gem))
                row_a.append(float(aidx[g].loc[tuple(att[c] for c in akey)]))
            except KeyError:
                row_g = None
                break
        if row_g is not None:
            kept.append(wl)
            rows_g.append(row_g)
            rows_a.append(row_a)
    shape = (len(kept), len(gpus))
    return kept, {"gemm": np.asarray(rows_g, dtype=float).reshape(shape),
                  "attention": np.asarray(rows_a, dtype=float).reshape(shape)}


def measured_times(wls, gemm, attn, gpus=GPUS):
    """(workloads kept, array [n_workloads, n_gpus] of measured ms); drops any workload with a
    component cell missing on any GPU."""
    kept, terms = measured_terms(wls, gemm, attn, gpus)
    return kept, terms["gemm"] + terms["attention"]


def _frames(wls):
    import pandas as pd

    g_rows, a_rows = [], []
    for i, wl in enumerate(wls):
        gem, att = component_cells(wl)
        for term, m, n, k in gem:
            g_rows.append({"wl": i, "term": term, "m": m, "n": n, "k": k})
        a_rows.append({"wl": i, **att})
    return pd.DataFrame(g_rows), pd.DataFrame(a_rows)


def predicted_terms(wls, gpus=GPUS, constants=None, constants_for=None) -> dict:
    """steptime's prediction of the same pieces, per term: {"gemm", "attention"}: [n_workloads, n_gpus]
    in ms. `constants_for(gpu) -> (Constants, Calibration)` gives each GPU its held-out constants."""
    gf, af = _frames(wls)
    out = {"gemm": np.zeros((len(wls), len(gpus))), "attention": np.zeros((len(wls), len(gpus)))}
    for j, g in enumerate(gpus):
        c = constants_for(g)[0] if constants_for is not None else constants
        pg = predict_steptime("aic_gemm", gf, g, c)
        out["gemm"][:, j] = np.bincount(gf["wl"], weights=pg, minlength=len(wls))
        out["attention"][:, j] = predict_steptime("aic_attention", af, g, c)
    return out


def predicted_times(wls, gpus=GPUS, constants=None, constants_for=None):
    """steptime's prediction of the same pieces: [n_workloads, n_gpus] in ms (the sum of `predicted_terms`)."""
    t = predicted_terms(wls, gpus, constants, constants_for)
    return t["gemm"] + t["attention"]


def roofline_times(wls, gpus=GPUS):
    """Bare datasheet roofline of the same pieces: [n_workloads, n_gpus] in ms."""
    gf, af = _frames(wls)
    fg, bg = gemm_work(gf["m"], gf["n"], gf["k"])
    fa, ba = attention_work(af)
    out = np.zeros((len(wls), len(gpus)))
    for j, g in enumerate(gpus):
        out[:, j] = (np.bincount(gf["wl"], weights=roofline_s(fg, bg, g), minlength=len(wls))
                     + roofline_s(fa, ba, g)) * 1e3
    return out


def rf_times(wls, gemm_bundle, attn_bundle, gpus=GPUS, scaled: bool = True):
    """The home RF's prediction of the same pieces, spec-scaled per piece to each GPU
    (scaled=False: verbatim, the same number on every GPU)."""
    home = gemm_bundle["home_gpu"]
    if attn_bundle["home_gpu"] != home:
        raise ValueError("GEMM and attention RFs must share a home GPU")
    gf, af = _frames(wls)
    pg = predict_profiled(gemm_bundle, "rf", gf)
    pa = predict_profiled(attn_bundle, "rf", af)
    fg, bg = gemm_work(gf["m"], gf["n"], gf["k"])
    fa, ba = attention_work(af)
    out = np.zeros((len(wls), len(gpus)))
    for j, g in enumerate(gpus):
        rg = roofline_s(fg, bg, g) / roofline_s(fg, bg, home) if scaled else 1.0
        ra = roofline_s(fa, ba, g) / roofline_s(fa, ba, home) if scaled else 1.0
        out[:, j] = np.bincount(gf["wl"], weights=pg * rg, minlength=len(wls)) + pa * ra
    return out


# ---------------------------------------------------------------------------------------
def _spearman(a, b):
    from scipy.stats import spearmanr

    if np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0
    return float(spearmanr(a, b).statistic)


def rank_scores(pred, meas, gpus=GPUS, tie_rel: float = TIE_REL, meas_tie_rel: float = MEAS_TIE_REL) -> dict:
    """Tie-aware top-1, pairwise accuracy and Spearman of predicted vs measured GPU order."""
    n_wl, n_g = meas.shape
    top = {"hit": 0, "miss": 0, "tie": 0}
    naive_hits = 0
    within = 0
    regret = []  # measured slowdown of the predicted pick over the measured best (ties: the worst tied)
    confused = {}  # "pick>best": [(measured gap, predicted gap)] over the wrong (untied) picks
    clear = {"n": 0, "hit": 0}
    pairs = {"correct": 0, "wrong": 0, "tie": 0, "meas_near_tie": 0, "correct_clear": 0, "wrong_clear": 0}
    per_pair = {}
    rho = []
    for i in range(n_wl):
        p, m = pred[i], meas[i]
        best_m = int(np.argmin(m))
        pmin = p.min()
        tied = np.flatnonzero(p <= pmin * (1 + tie_rel))
        first = int(np.argmin(p))  # stable: first listed GPU wins a tie
        naive_hits += first == best_m
        if len(tied) > 1:
            top["tie"] += 1
        elif tied[0] == best_m:
            top["hit"] += 1
        else:
            top["miss"] += 1
        if len(tied) == 1 and m[tied[0]] <= m[best_m] * (1 + meas_tie_rel):
            within += 1
        regret.append(float(m[tied].max() / m[best_m] - 1.0))
        if len(tied) == 1 and tied[0] != best_m:  # a wrong pick: which GPU was taken for the measured best
            confused.setdefault(f"{gpus[tied[0]]}>{gpus[best_m]}", []).append(
                (m[tied[0]] / m[best_m] - 1.0, p[best_m] / p[tied[0]] - 1.0))
        if np.sort(m)[1] > m[best_m] * (1 + meas_tie_rel):  # the measured winner is clear
            clear["n"] += 1
            clear["hit"] += int(len(tied) == 1 and tied[0] == best_m)
        for a, b in combinations(range(n_g), 2):
            key = f"{gpus[a]}|{gpus[b]}"
            d = per_pair.setdefault(key, {"correct": 0, "wrong": 0, "tie": 0})
            near = abs(m[a] - m[b]) <= meas_tie_rel * min(m[a], m[b])
            pairs["meas_near_tie"] += near
            if abs(p[a] - p[b]) <= tie_rel * min(p[a], p[b]):
                pairs["tie"] += 1
                d["tie"] += 1
                continue
            ok = (p[a] < p[b]) == (m[a] < m[b])
            pairs["correct" if ok else "wrong"] += 1
            d["correct" if ok else "wrong"] += 1
            if not near:
                pairs["correct_clear" if ok else "wrong_clear"] += 1
        rho.append(_spearman(p, m))
    n_pairs = n_wl * n_g * (n_g - 1) // 2
    decided = pairs["correct"] + pairs["wrong"]
    return {
        "workloads": int(n_wl), "gpus": list(gpus),
        "top1": top["hit"] / n_wl if n_wl else None, "top1_ties": top["tie"], "top1_misses": top["miss"],
        "top1_hits": top["hit"], "top1_naive_stable_sort": naive_hits / n_wl if n_wl else None,
        "top1_within_meas_band": within / n_wl if n_wl else None,
        "top1_regret_mean": float(np.mean(regret)) if regret else None,
        "top1_regret_max": float(np.max(regret)) if regret else None,
        # the regret distribution over the workloads whose pick was not the measured best
        "top1_regret_wrong_picks": _regret_distribution([r for r in regret if r > 0]),
        # which GPU pairs the wrong picks confuse: "pick>best" -> count, the measured gap (pick / best - 1)
        # and the predicted one (best / pick - 1, the margin the pick won by)
        "top1_confusions": _confusions(confused),
        "workloads_clear_winner": clear["n"],
        "top1_clear_winner": clear["hit"] / clear["n"] if clear["n"] else None,
        "pairs": int(n_pairs), "pair_correct": pairs["correct"], "pair_wrong": pairs["wrong"],
        "pair_ties": pairs["tie"], "pair_accuracy": pairs["correct"] / n_pairs if n_pairs else None,
        "pair_accuracy_decided": pairs["correct"] / decided if decided else None,
        "pair_wrong_clear": pairs["wrong_clear"], "pair_meas_near_ties": pairs["meas_near_tie"],
        "spearman_mean": float(np.mean(rho)) if rho else None,
        "spearman_min": float(np.min(rho)) if rho else None,
        "per_pair": per_pair,
    }


def _regret_distribution(wrong) -> dict:
    """Quantiles and bands of the measured slowdown of the wrong picks (or of any measured gaps)."""
    if not len(wrong):
        return {"n": 0}
    w = np.asarray(wrong, dtype=float)
    q = np.quantile(w, [0.5, 0.9, 1.0])
    return {"n": int(len(w)), "p50": float(q[0]), "p90": float(q[1]), "max": float(q[2]),
            "within_1pct": int((w <= 0.01).sum()), "within_2pct": int((w <= 0.02).sum()),
            "within_3pct": int((w <= 0.03).sum()), "within_5pct": int((w <= 0.05).sum()),
            "over_5pct": int((w > 0.05).sum())}


def _confusions(confused: dict) -> dict:
    """Per confused pair "pick>best" (built most frequent first; a result file sorts the keys): how many
    wrong picks, their measured gap (median, max) and the predicted margin the pick won by (median)."""
    out = {}
    for key, v in sorted(confused.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        a = np.asarray(v, dtype=float)
        out[key] = {"n": int(len(a)), "meas_gap_p50": float(np.median(a[:, 0])), "meas_gap_max": float(a[:, 0].max()),
                    "pred_gap_p50": float(np.median(a[:, 1]))}
    return out


def runner_up_gaps(meas) -> dict:
    """A property of the measured data, no predictor's: per workload the measured runner-up's slowdown
    over the measured fastest GPU (second fastest / fastest - 1), as a distribution with its bands."""
    s = np.sort(np.asarray(meas, dtype=float), axis=1)
    return _regret_distribution(s[:, 1] / s[:, 0] - 1.0)


FLAT_M_MAX = 8  # decode GEMMs with m <= this stream the same weights: the law's time is flat in m there


def flat_region_jitter(gemm_cells_df, gpus=GPUS, pairs=(), m_max: int = FLAT_M_MAX) -> dict:
    """A property of the measured GEMM table, no predictor's: at each (n, k) measured at m = 1..m_max
    (at least 6 of them; the same weight bytes streamed, so one time in the law), the standard
    deviation over m of log latency, per GPU (median over shapes), and of the log ratio of two GPUs'
    latencies, per pair (a GPU "a/b" of `pairs`). Whether kernel-tactic switches or run-to-run spread,
    a GPU's own table decides it and a held-out predictor cannot see it."""
    f = gemm_cells_df[(gemm_cells_df["m"] <= m_max) & gemm_cells_df["gpu"].isin(list(gpus))]
    f = f.assign(lt=np.log(f["latency_ms"].to_numpy(dtype=float)))
    sd = f.groupby(["gpu", "n", "k"])["lt"].agg(["std", "count"])
    sd = sd[sd["count"] >= 6]
    out = {"m_max": m_max, "per_gpu_log_sd_p50": {g: float(v) for g, v in sd.groupby("gpu")["std"].median().items()},
           "per_pair_log_ratio_sd_p50": {}}
    wide = f.pivot_table(index=["n", "k", "m"], columns="gpu", values="lt")
    for pair in pairs:
        a, b = pair.split("/")
        if a in wide and b in wide:
            r = (wide[a] - wide[b]).dropna()
            cnt = r.groupby(level=[0, 1]).count()
            r_sd = r.groupby(level=[0, 1]).std()[cnt >= 6]
            out["per_pair_log_ratio_sd_p50"][pair] = {"sd_p50": float(r_sd.median()), "shapes": int(len(r_sd))}
    return out


SUSTAINED_AI_MIN = 600.0   # FLOP per byte moved: GEMM cells above this are compute-bound on every GPU here
SUSTAINED_GFLOP_EDGES = (10.0, 100.0, 1000.0, 1e5)  # bins of a cell's work, GFLOP
SUSTAINED_PAIRS = ("gb300/b300", "gb200/b200", "b300/b200", "gb300/gb200", "h200-sxm/h100-sxm")


def sustained_work_ratios(gemm_cells_df, pairs=SUSTAINED_PAIRS, ai_min: float = SUSTAINED_AI_MIN,
                          edges=SUSTAINED_GFLOP_EDGES) -> dict:
    """A property of the measured GEMM table, no predictor's: per GPU pair "a/b", the median measured
    latency ratio a / b of the compute-bound cells (2mnk over the bytes of A, W and C at least `ai_min`)
    measured on both, per bin of the cell's work (GFLOP, `edges`: [edges[i], edges[i+1])), beside
    the two GPUs' datasheet board power. A ratio that moves with the work is a clock that the sustained
    load sets (the deploy reading, one 137 GFLOP cell, sees one point of it); whether board power
    orders it is what the TDPs beside it show."""
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be at least two increasing GFLOP values, got {edges}")
    f = gemm_cells_df
    m, n, k = (f[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    flops = 2.0 * m * n * k
    f = f.assign(gflop=flops / 1e9)[flops / (2.0 * (m * k + k * n + m * n)) >= ai_min]
    wide = f.pivot_table(index=["m", "n", "k"], columns="gpu", values="latency_ms")
    gflop = f.groupby(["m", "n", "k"])["gflop"].first().reindex(wide.index).to_numpy()
    out = {"ai_min": ai_min, "gflop_edges": list(edges), "pairs": {}}
    for pair in pairs:
        a, b = pair.split("/")
        if a not in wide or b not in wide:
            continue
        r = (wide[a] / wide[b]).to_numpy()
        ok = np.isfinite(r)
        bins = []
        for lo, hi in zip(edges, edges[1:]):
            sel = ok & (gflop >= lo) & (gflop < hi)
            bins.append({"gflop": [lo, hi], "cells": int(sel.sum()),
                         "ratio_p50": float(np.median(r[sel])) if sel.any() else None})
        out["pairs"][pair] = {"bins": bins, "power_w": [get_gpu(a).power_w, get_gpu(b).power_w]}
    return out


FLOOR_KV_MAX = 256         # decode KV tokens per request up to which the call's bytes are negligible: its floor regime
FLOOR_MODE_STEP_MS = 0.001  # a floor-regime cell this far above its shape group's lowest is in the upper level
FLOOR_MODE_GPUS = ("b200", "gb200", "b300", "gb300")  # one kernel lane and framework version: their levels compare


def decode_floor_modes(attn_cells_df, gpus=FLOOR_MODE_GPUS, kv_max: float = FLOOR_KV_MAX,
                       step_ms: float = FLOOR_MODE_STEP_MS) -> dict:
    """A property of the measured decode-attention table, no predictor's: in the floor regime (decode,
    KV length <= kv_max: the bytes read are negligible, so at one (heads, KV heads, batch) the kernel's
    work does not change with the KV length), a shape group's lower level is its lowest cell over `gpus`
    (siblings of one kernel lane) and KV lengths. Per GPU: the share of its cells more than step_ms above
    that level (`share_upper`); of its groups, the share with every cell in the lower level, with both
    levels (which then is not a function of the shape) and with every cell above; the median time above
    the lower level, over all its cells and over its upper ones (the step); and per batch size the share above. A GPU whose table sits low more often measures
    faster at small calls, and no reading of one cell sees how often."""
    gpus = [g for g in gpus if g in set(attn_cells_df["gpu"])]
    if len(gpus) < 2:
        raise ValueError(f"decode_floor_modes needs at least two GPUs present in the table, got {gpus}")
    key = ["num_heads", "num_kv_heads", "batch_size"]
    d = attn_cells_df[(attn_cells_df["phase"] == "decode") & (attn_cells_df["kv_len"] <= kv_max)
                      & attn_cells_df["gpu"].isin(gpus)]
    wide = d.pivot_table(index=key + ["kv_len"], columns="gpu", values="latency_ms", aggfunc="median").dropna()
    low = wide.min(axis=1).groupby(level=key).transform("min")
    above = wide.sub(low, axis=0)
    upper = above > step_ms
    frac = upper.groupby(level=key).mean()
    by_batch = upper.groupby(level="batch_size").mean()
    out = {"kv_max": float(kv_max), "step_ms": float(step_ms), "gpus": list(gpus), "cells_per_gpu": int(len(wide)),
           "groups": int(len(frac)), "per_gpu": {}}
    for g in gpus:
        out["per_gpu"][g] = {"share_upper": float(upper[g].mean()), "groups_all_lower": float((frac[g] == 0).mean()),
                             "groups_mixed": float(((frac[g] > 0) & (frac[g] < 1)).mean()),
                             "groups_all_upper": float((frac[g] == 1).mean()),
                             "above_lower_ms_p50": float(above[g].median()),
                             "upper_above_lower_ms_p50": float(above[g][upper[g]].median()) if upper[g].any() else 0.0,
                             "share_upper_by_batch": {f"{b:g}": float(v) for b, v in by_batch[g].items()}}
    return out


def flat_region_replicates(wls, gemm_cells_df, meas_terms: dict, gpus=GPUS, m_max: int = FLAT_M_MAX) -> dict:
    """A property of the measured tables, no predictor's: how reproducible the measured fastest GPU is.

    A decode workload with at most `m_max` new tokens streams the same projection weights at every
    m <= m_max (the GEMM law's time is flat there), so the GEMM cells of the same (n, k) at another
    m' <= m_max are a physical replicate of its GEMM term. Per such workload and each m' measured on
    every GPU, the measured total is rebuilt with the m' GEMM cells (the attention cell unchanged) and
    the replicate's fastest GPU is compared with the measured one. `same_best` is the fraction of
    replicates that keep the measured fastest GPU: a ceiling on any predictor's top-1 agreement on
    these workloads (tactic switches or run-to-run spread, only the GPU's own table knows which m is
    slow); `regret_max` is the measured cost of trusting a replicate's pick.

    `mean_pick_same_best` (per workload, not per replicate): the pick of the geometric mean of the
    workload's other-m replicates (its own m left out) plus the measured attention, i.e. what a
    predictor reaches that knew each GPU's own GEMM table at the same weights and the attention
    cell exactly: a reference for the noise-limited top-1 on these workloads, with the measured cost
    of its worst pick (`mean_pick_regret_max`)."""
    if m_max < 2:
        raise ValueError(f"m_max must be at least 2 (two token counts to compare), got {m_max}")
    mg = np.asarray(meas_terms["gemm"], dtype=float)
    ma = np.asarray(meas_terms["attention"], dtype=float)
    if mg.shape != (len(wls), len(gpus)) or ma.shape != mg.shape:
        raise ValueError(f"measured terms must be [n_workloads, n_gpus] = {(len(wls), len(gpus))}, "
                         f"got {mg.shape} and {ma.shape}")
    gidx = {g: gemm_cells_df[gemm_cells_df.gpu == g].set_index(["m", "n", "k"])["latency_ms"] for g in gpus}
    meas = mg + ma
    same, regret, used = [], [], set()
    mean_same, mean_regret = [], []
    for i, wl in enumerate(wls):
        if wl["phase"] != "decode" or wl["tokens"] > m_max:
            continue
        gem, _ = component_cells(wl)
        alts = []
        for m2 in range(1, m_max + 1):
            if m2 == wl["tokens"]:
                continue
            try:
                alt = np.array([sum(float(gidx[g].loc[(m2, n, k)]) for _, _, n, k in gem) for g in gpus])
            except KeyError:  # this m is not measured on every GPU at every (n, k) of the workload
                continue
            pick = int(np.argmin(alt + ma[i]))
            same.append(pick == int(np.argmin(meas[i])))
            regret.append(float(meas[i, pick] / meas[i].min() - 1.0))
            used.add(i)
            alts.append(alt)
        if alts:  # the workload's replicates pooled (its own m left out): one pick per workload
            pick = int(np.argmin(np.exp(np.log(np.asarray(alts)).mean(axis=0)) + ma[i]))
            mean_same.append(pick == int(np.argmin(meas[i])))
            mean_regret.append(float(meas[i, pick] / meas[i].min() - 1.0))
    if not same:
        return {"m_max": m_max, "workloads": 0, "replicates": 0}
    return {"m_max": m_max, "workloads": len(used), "replicates": len(same), "same_best": float(np.mean(same)),
            "regret_max": float(np.max(regret)), "regret_over_5pct": int(np.sum(np.asarray(regret) > 0.05)),
            "mean_pick_same_best": float(np.mean(mean_same)), "mean_pick_regret_max": float(np.max(mean_regret)),
            "workload_ids": sorted(used)}


def confusion_terms(pred_terms: dict, meas_terms: dict, wls, gpus=GPUS) -> dict:
    """Per confused pair "pick>best" of the wrong top-1 picks (argmin; a predicted tie is not a pick here):
    how many, how many decode, and the median measured and predicted time ratio pick / best of the total,
    the GEMM term and the attention term, with the term whose predicted pick-minus-best difference errs
    more (`carrier`, as in `ranking_diagnosis`)."""
    pg, pa, mg, ma = (np.asarray(x, dtype=float) for x in (pred_terms["gemm"], pred_terms["attention"],
                                                            meas_terms["gemm"], meas_terms["attention"]))
    if not (pg.shape == pa.shape == mg.shape == ma.shape == (len(wls), len(gpus))):
        raise ValueError(f"every term must be [n_workloads, n_gpus] = {(len(wls), len(gpus))}")
    pred, meas = pg + pa, mg + ma
    pick, best = np.argmin(pred, axis=1), np.argmin(meas, axis=1)
    rows = {}
    for i in np.flatnonzero(pick != best):
        a, b = int(pick[i]), int(best[i])
        err_g = (pg[i, b] - pg[i, a]) - (mg[i, b] - mg[i, a])
        err_a = (pa[i, b] - pa[i, a]) - (ma[i, b] - ma[i, a])
        rows.setdefault(f"{gpus[a]}>{gpus[b]}", []).append(
            (wls[i]["phase"] == "decode", meas[i, a] / meas[i, b], pred[i, a] / pred[i, b], mg[i, a] / mg[i, b],
             pg[i, a] / pg[i, b], ma[i, a] / ma[i, b], pa[i, a] / pa[i, b], err_g >= err_a))
    out = {}
    for key, v in sorted(rows.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        x = np.asarray(v, dtype=float)
        med = lambda j: float(np.median(x[:, j]))  # noqa: E731
        out[key] = {"n": len(v), "decode": int(x[:, 0].sum()),
                    "total": {"meas": med(1), "pred": med(2)}, "gemm": {"meas": med(3), "pred": med(4)},
                    "attention": {"meas": med(5), "pred": med(6)},
                    "carrier": {"gemm": int(x[:, 7].sum()), "attention": int(len(v) - x[:, 7].sum())}}
    return out


BAND_SCALES = (1.0, 0.5, 0.25)  # the pair band shrunk by these factors for the expected top-1
REF_MIN_NK = 1024  # reference GEMM cells are LLM-sized: n and k at least this
ATTN_KEY = ("phase", "batch_size", "new_tokens", "kv_len", "num_heads", "num_kv_heads")
ATTN_REGIME = ("phase", "batch_size", "new_tokens", "kv_len")  # an attention cell's regime: its call, any heads


def reference_cells(wls, gemm_cells_df, attn_cells_df, exclude_gemm=()) -> tuple:
    """The cells OUTSIDE the ranking in the ranking's own regimes, to score the predictor on what it was
    not ranked on: GEMM cells (m, n, k) at the workloads' token counts m with n, k >= REF_MIN_NK, and
    attention cells (head_dim 128) at the workloads' (phase, batch, new tokens, KV length) with any heads;
    none is a component cell of any workload, no GEMM cell is in `exclude_gemm` (the deploy readings,
    (m, n, k)). Returns (gemm [m, n, k] and attention [ATTN_KEY + head_dim] frames, one row per cell)."""
    gf, af = _frames(wls)
    if not len(gf):
        raise ValueError("reference_cells needs at least one workload")
    skip = set(zip(gf["m"], gf["n"], gf["k"])) | {tuple(int(x) for x in c) for c in exclude_gemm}
    g = gemm_cells_df[gemm_cells_df["m"].isin(set(gf["m"])) & (gemm_cells_df["n"] >= REF_MIN_NK)
                      & (gemm_cells_df["k"] >= REF_MIN_NK)][["m", "n", "k"]].drop_duplicates()
    g = g[np.array([c not in skip for c in zip(g["m"], g["n"], g["k"])], dtype=bool)]
    g = g.sort_values(["m", "n", "k"]).reset_index(drop=True)
    regimes = set(map(tuple, af[list(ATTN_REGIME)].itertuples(index=False)))
    mine = set(map(tuple, af[list(ATTN_KEY)].itertuples(index=False)))
    a = attn_cells_df[attn_cells_df["head_dim"] == 128][list(ATTN_KEY) + ["head_dim"]].drop_duplicates()
    keep = [r[:4] in regimes and r not in mine for r in a[list(ATTN_KEY)].itertuples(index=False, name=None)]
    a = a[np.array(keep, dtype=bool)].sort_values(list(ATTN_KEY)).reset_index(drop=True)
    return g, a


def regime_errors(pred, meas, regime) -> dict:
    """Held-out errors per regime of one term ([n_cells, n_gpus] predicted and measured, NaN where a cell
    is not measured on a GPU; `regime` a key per cell): per GPU the MAPE (`abs`), and per GPU pair the
    mean |predicted ratio / measured ratio - 1| over the cells measured on both (`pair`, symmetric to
    first order): how well the predictor orders two GPUs, which is what a ranking needs."""
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    if pred.shape != meas.shape or pred.ndim != 2 or len(regime) != len(meas):
        raise ValueError(f"pred and meas must be [n_cells, n_gpus] alike with one regime per cell, got "
                         f"{pred.shape}, {meas.shape} and {len(regime)} regimes")
    groups = {}
    for j, r in enumerate(regime):  # tuples or scalars alike, in order of first appearance
        groups.setdefault(r, []).append(j)
    out = {}
    for r, i in groups.items():
        rel = pred[i] / meas[i]
        ab = np.nanmean(np.abs(rel - 1.0), axis=0)
        pair = np.full((meas.shape[1],) * 2, np.nan)
        for a, b in combinations(range(meas.shape[1]), 2):
            e = np.abs(rel[:, a] / rel[:, b] - 1.0)
            e = e[np.isfinite(e)]
            if len(e):
                pair[a, b] = pair[b, a] = float(np.mean(e))
        out[r] = {"abs": ab, "pair": pair, "cells": len(i)}
    return out


def _noisy_top1(meas, sigma, rng, draws: int) -> list:
    """`draws` x `_top1_of` the measured times `meas` [workloads, GPUs] times an independent log-normal error
    of log-sd `sigma` (a scalar, or per workload as a column) per cell, against `meas` itself."""
    return [_top1_of(meas * np.exp(rng.normal(0.0, 1.0, meas.shape) * sigma), meas) for _ in range(draws)]


def near_tie_band(meas_terms: dict, pred_terms: dict, wls, gemm_err: dict, attn_err: dict, gpus=GPUS,
                  seed: int = 0, draws: int | None = None) -> dict:
    """How many workloads' measured best and runner-up are closer than the predictor's held-out error on
    the terms that separate them (the negative result's size: a pick there is within the predictor's own
    band, whichever it takes).

    Per workload: b, r = the measured fastest and second GPUs, gap = t_r / t_b - 1 (measured). `gemm_err`
    (keyed by token count m) and `attn_err` (keyed by ATTN_REGIME) are `regime_errors` of the two terms on
    cells outside the ranking. The pair band is the measured term shares (on b) times the terms' pair-ratio
    errors of (b, r) in the workload's regimes; the absolute band the smaller of the two GPUs' own
    share-weighted MAPE. Reported: the fractions inside each band, and the predictor's top-1 (argmin)
    inside and outside the pair band, overall and by phase and by (best, runner-up) pair.

    `top1_expected_at_pair_band`: the mean top-1 of the measured times times an independent log-normal
    error per (workload, GPU) whose sigma makes the expected |error| of a two-GPU ratio equal the workload's
    pair band (E|X - Y| = 2 sigma / sqrt(pi) for X, Y ~ N(0, sigma)): what a predictor as accurate as
    steptime's held-out pair ratios, with no systematic bias, would be expected to reach (seeded draws);
    `top1_expected_at_band_scale` the same with the band times each of BAND_SCALES (how much more accurate
    the sibling ratios would have to be). `ranking_cell_pair_error`: the same |predicted ratio / measured
    ratio - 1| of (b, r) realised on the ranking's own cells (mean, median) and the top-1 expected of an
    unbiased random error of that mean size: above steptime's top-1 where its error is systematic (one GPU
    favoured), which `by_measured_best` (per GPU: measured best, hits, picks) shows."""
    mg, ma = (np.asarray(meas_terms[k], dtype=float) for k in ("gemm", "attention"))
    pred = np.asarray(pred_terms["gemm"], dtype=float) + np.asarray(pred_terms["attention"], dtype=float)
    if not (mg.shape == ma.shape == pred.shape == (len(wls), len(gpus))):
        raise ValueError(f"every term must be [n_workloads, n_gpus] = {(len(wls), len(gpus))}")
    meas = mg + ma
    rows = []
    for i, wl in enumerate(wls):
        b, r = (int(x) for x in np.argsort(meas[i], kind="stable")[:2])
        _, att = component_cells(wl)
        eg, ea = gemm_err.get(wl["tokens"]), attn_err.get(tuple(att[c] for c in ATTN_REGIME))
        if eg is None or ea is None or not np.isfinite(eg["pair"][b, r]) or not np.isfinite(ea["pair"][b, r]):
            continue  # no reference cell in this regime for this pair
        w = mg[i] / meas[i]  # each GPU's measured GEMM share
        band = w[b] * eg["pair"][b, r] + (1 - w[b]) * ea["pair"][b, r]
        own = w * eg["abs"] + (1 - w) * ea["abs"]
        gap = meas[i, r] / meas[i, b] - 1.0
        rows.append((i, wl["phase"], f"{gpus[b]}|{gpus[r]}", gap, band, gap <= band, gap <= min(own[b], own[r]),
                     int(np.argmin(pred[i])) == b, abs(pred[i, b] / pred[i, r] / (meas[i, b] / meas[i, r]) - 1.0)))
    if not rows:
        return {"workloads": 0}

    def part(sel):
        inside = [x for x in sel if x[5]]
        outside = [x for x in sel if not x[5]]
        return {"n": len(sel), "inside_pair_band": len(inside), "pair_band_p50": float(np.median([x[4] for x in sel])),
                "top1_inside": float(np.mean([x[7] for x in inside])) if inside else None,
                "top1_outside": float(np.mean([x[7] for x in outside])) if outside else None}

    by_pair = {}
    for x in rows:
        by_pair.setdefault(x[2], []).append(x)
    draws = NOISE_DRAWS if draws is None else int(draws)
    idx = np.array([x[0] for x in rows])
    sig = np.array([x[4] for x in rows]) * np.sqrt(np.pi) / 2.0
    rng = np.random.default_rng(seed)
    exp_top1 = {f"{f:g}": float(np.mean([d["top1"] for d in _noisy_top1(meas[idx], sig[:, None] * f, rng, draws)]))
                for f in BAND_SCALES}
    own_err = float(np.mean([x[8] for x in rows]))  # the realised pair error on the ranking's own cells
    sig_own = np.full((len(idx), 1), own_err * np.sqrt(np.pi) / 2.0)
    exp_own = float(np.mean([d["top1"] for d in _noisy_top1(meas[idx], sig_own, rng, draws)]))
    best, pick = np.argmin(meas[idx], axis=1), np.argmin(pred[idx], axis=1)
    return {"workloads": len(rows), "skipped_no_reference": len(wls) - len(rows),
            "top1_expected_at_pair_band": exp_top1["1"], "top1_expected_at_band_scale": exp_top1,
            "ranking_cell_pair_error": {"mean": own_err, "p50": float(np.median([x[8] for x in rows])),
                                        "top1_expected": exp_own},
            "by_measured_best": {gpus[j]: {"best": int(np.sum(best == j)),
                                           "hits": int(np.sum((best == j) & (pick == j))),
                                           "picked": int(np.sum(pick == j))}
                                 for j in range(len(gpus)) if np.any(best == j) or np.any(pick == j)},
            "draws": int(draws), "seed": int(seed),
            "fraction_inside_pair_band": float(np.mean([x[5] for x in rows])),
            "fraction_inside_own_mape_band": float(np.mean([x[6] for x in rows])),
            "gap_p50": float(np.median([x[3] for x in rows])), "pair_band_p50": float(np.median([x[4] for x in rows])),
            **part(rows), "by_phase": {p: part([x for x in rows if x[1] == p]) for p in ("decode", "prefill")},
            "by_best_runner_up": {k: part(v) for k, v in sorted(by_pair.items(), key=lambda kv: (-len(kv[1]), kv[0]))},
            "pair_errors_p50": _pair_error_summary(gemm_err, attn_err, sorted(by_pair), gpus)}


def _pair_error_summary(gemm_err: dict, attn_err: dict, pairs, gpus) -> dict:
    """Per 'best|runner-up' pair: the median over regimes of each term's pair-ratio error, by phase
    (GEMM decode: m <= 256 tokens, the ranking's decode batches; prefill: the chunks)."""
    out = {}
    for key in pairs:
        a, b = (gpus.index(x) for x in key.split("|"))
        row = {}
        for term, err, is_dec in (("gemm", gemm_err, lambda r: r <= max(DECODE_BATCHES)),
                                  ("attention", attn_err, lambda r: r[0] == "decode")):
            for phase, want in (("decode", True), ("prefill", False)):
                v = [e["pair"][a, b] for r, e in err.items() if is_dec(r) == want and np.isfinite(e["pair"][a, b])]
                row[f"{term}_{phase}"] = float(np.median(v)) if v else None
        out[key] = row
    return out


def held_out_reference_errors(wls, gemm_cells_df, attn_cells_df, gpus=GPUS, constants=None,
                              constants_for=None) -> tuple:
    """`regime_errors` of steptime's GEMM and attention terms on `reference_cells` (each GPU on its
    held-out constants, its GEMM deploy readings excluded): ({m: errors}, {attention regime: errors}, sizes)."""
    reads = set()
    if constants_for is not None:
        for g in gpus:
            reads |= {tuple(c[2:5]) for c in constants_for(g)[1].all_cells()
                      if isinstance(c, tuple) and len(c) == 5 and c[1] == "gemm"}
    gref, aref = reference_cells(wls, gemm_cells_df, attn_cells_df, reads)
    gk, ak = ["m", "n", "k"], list(ATTN_KEY)
    pg, mg = np.full((len(gref), len(gpus)), np.nan), np.full((len(gref), len(gpus)), np.nan)
    pa, ma = np.full((len(aref), len(gpus)), np.nan), np.full((len(aref), len(gpus)), np.nan)
    for j, g in enumerate(gpus):
        c = constants_for(g)[0] if constants_for is not None else constants
        tg = gemm_cells_df[gemm_cells_df.gpu == g].groupby(gk)["latency_ms"].median()
        if len(gref):  # the product refuses an empty cell list
            mg[:, j] = tg.reindex(_cells_index(gref, gk)).to_numpy()
            pg[:, j] = predict_steptime("aic_gemm", gref, g, c)
        ta = attn_cells_df[(attn_cells_df.gpu == g) & (attn_cells_df.head_dim == 128)].groupby(ak)[
            "latency_ms"].median()
        if len(aref):
            ma[:, j] = ta.reindex(_cells_index(aref, ak)).to_numpy()
            pa[:, j] = predict_steptime("aic_attention", aref, g, c)
    ge = regime_errors(pg, mg, list(gref["m"]))
    ae = regime_errors(pa, ma, list(map(tuple, aref[list(ATTN_REGIME)].itertuples(index=False, name=None))))
    return ge, ae, {"gemm_cells": len(gref), "attention_cells": len(aref), "readings_excluded": len(reads)}


def _cells_index(frame, cols):
    """A MultiIndex of `cols` of `frame` (for reindexing a grouped table onto given cells)."""
    import pandas as pd

    return pd.MultiIndex.from_frame(frame[cols])


def _replicate_summary(res, scores) -> dict:
    """The flat-region replicate agreement beside steptime's top-1 on the same workloads (argmin picks)."""
    rep = res["diagnosis"].get("flat_region_replicates", {})
    if not rep.get("replicates"):
        return {}
    ids = rep["workload_ids"]
    pred, meas = res["pred"]["steptime"][ids], res["meas"][ids]
    return {"flat_region_replicates": {"workloads": rep["workloads"], "replicates": rep["replicates"],
                                       "same_best": rep["same_best"], "regret_max": rep["regret_max"],
                                       "mean_pick_same_best": rep["mean_pick_same_best"],
                                       "steptime_top1_same_workloads": float(np.mean(
                                           np.argmin(pred, axis=1) == np.argmin(meas, axis=1)))}}


def _top1_of(pred, meas) -> dict:
    """Top-1 hits by argmin (ties broken by GPU order: a diagnostic's short score, not the tie-aware one)
    and the measured regret of the picks."""
    pick, best = np.argmin(pred, axis=1), np.argmin(meas, axis=1)
    reg = meas[np.arange(len(meas)), pick] / meas.min(axis=1) - 1.0
    return {"top1": float(np.mean(pick == best)), "hits": int(np.sum(pick == best)),
            "regret_max": float(reg.max()), "regret_over_5pct": int(np.sum(reg > 0.05))}


DIAGNOSIS_DISCLOSED = (
    "The diagnosis (top1_confusions, runner_up_gaps, diagnosis: which_term, twin_ratios, ceilings_in_sample, "
    "independent_error, gemm_flat_region_jitter, confusion_terms, flat_region_replicates, "
    "gemm_sustained_work_ratios, near_tie_band) was designed after E2.2's "
    "scores had been seen (issue 24). It changes "
    "no predictor and no score. The ceilings are fitted on the scored workloads themselves: bounds on what a per-GPU "
    "factor could add, not predictors. The regimes (GEMM: phase x tokens; attention: phase x KV length), the error "
    "sigmas and m <= 8 for the flat region were chosen with the scores in view. Wave 24 (helper rank) added, after "
    "seeing the scores, flat_region_replicates' mean_pick_same_best (the pooled other-m replicates' pick per workload) "
    "and the claim that every wrong pick of steptime is within 5% of the measured best: that target is issue 24's "
    "(config targets.max_regret), not set by the score; no predictor, constant, tie rule or other target changed. "
    "Wave 27 (helper rank) added near_tie_band after seeing the scores: its reference cells (outside the ranking, "
    "n, k >= 1024, the ranking's token counts and attention calls), the share weighting and the pair-ratio MAPE "
    "were chosen by the helper with the top-1 known; it changes no predictor and no score. "
    "Wave 31 (helper rank) added decode_floor_modes after seeing the scores: the floor regime (KV <= 256), the "
    "1 us step, the Blackwell siblings as one lane and the lower level as the group's minimum were chosen with "
    "the top-1 and its confusions known; it is a property of the measured table and changes no predictor or score. "
    "Wave 39 (helper grey9) adds steptime_residual_twins (datasheet twins ordered by the physics, the groups by the "
    "grey box), scored in a claim of its own after the near-tie claim; the grey box's ranking claims still score the "
    "grey box's own predictions (the lead's decision: the pre-registered predictor keeps its claims). The rule and "
    "the twin groups (similarity distance < 0.5) were "
    "written down after the grey box's and the physics' E2.2 scores had been seen and before this ranking's own "
    "score was computed; it was kept over a second candidate (twins left out of each other's grey-box fits, which "
    "cost E2.1 24.7 MAPE points) after both candidates' scores were seen; by construction its top-1 equals the "
    "physics' wherever every pick is a datacenter Blackwell.")
NOISE_SIGMAS = (0.005, 0.01, 0.02, 0.03)  # independent log-normal errors for the attainable-top-1 reference
NOISE_DRAWS = 200


def ranking_diagnosis(pred_terms: dict, meas_terms: dict, wls, gpus=GPUS, seed: int = 0) -> dict:
    """Why the top-1 picks go wrong, for one predictor with a GEMM and an attention term
    ({"gemm", "attention"}: [n_workloads, n_gpus] ms each, predicted and measured):

    * `which_term`: top-1 with one term replaced by its measured value (the other predicted), and
      per wrong pick which term's predicted pick-minus-best difference errs more (`carrier`);
    * `twin_ratios`: per confused GPU pair and term, the median measured and predicted time ratio
      over all workloads (is the pair's typical gap right?) and the 10-90% range of the measured one;
    * `ceilings` (IN-SAMPLE, not predictors): the top-1 reached by rescaling each GPU's predicted terms
      by their median measured/predicted ratio on the scored workloads themselves, per GPU and term,
      and per GPU, term and regime (GEMM: phase x tokens; attention: phase x KV length). A per-GPU
      fact (a clock, a bandwidth, a power limit) moves a GPU's terms by about one factor per regime, so
      these bound what any such fact could add;
    * `independent_error`: the expected top-1 of a predictor whose each (workload, GPU) time is the
      measured one times an independent log-normal error of the given sigma (seeded draws), and the
      predictor's own cross-GPU error spread on the GPUs its wrong picks involve.
    """
    pg, pa, mg, ma = (np.asarray(x, dtype=float) for x in (pred_terms["gemm"], pred_terms["attention"],
                                                            meas_terms["gemm"], meas_terms["attention"]))
    pred, meas = pg + pa, mg + ma
    n = len(meas)
    pick, best = np.argmin(pred, axis=1), np.argmin(meas, axis=1)
    carrier = {"gemm": 0, "attention": 0}
    involved = set()
    for i in np.flatnonzero(pick != best):
        a, b = pick[i], best[i]
        involved |= {int(a), int(b)}
        err_g = (pg[i, b] - pg[i, a]) - (mg[i, b] - mg[i, a])  # predicted minus measured (best - pick), ms
        err_a = (pa[i, b] - pa[i, a]) - (ma[i, b] - ma[i, a])
        carrier["gemm" if err_g >= err_a else "attention"] += 1
    which = {"measured_gemm_predicted_attention": _top1_of(mg + pa, meas),
             "predicted_gemm_measured_attention": _top1_of(pg + ma, meas),
             "carrier": carrier}
    pairs = sorted({(int(a), int(b)) for a, b in zip(pick, best) if a != b})
    twins = {}
    for a, b in pairs:
        row = {}
        for term, (P, M) in (("gemm", (pg, mg)), ("attention", (pa, ma)), ("total", (pred, meas))):
            mr, pr = M[:, a] / M[:, b], P[:, a] / P[:, b]
            row[term] = {"meas": float(np.median(mr)), "pred": float(np.median(pr)),
                         "meas_p10": float(np.quantile(mr, 0.1)), "meas_p90": float(np.quantile(mr, 0.9))}
        twins[f"{gpus[a]}/{gpus[b]}"] = row
    per_gpu = _top1_of(pg * np.median(mg / pg, axis=0) + pa * np.median(ma / pa, axis=0), meas)
    phase = np.array([w["phase"] for w in wls])
    tok = np.array([w["tokens"] for w in wls])
    kv = np.array([w["kv_len"] for w in wls])
    pg2, pa2 = pg.copy(), pa.copy()
    for key in sorted(set(zip(phase, tok))):
        i = (phase == key[0]) & (tok == key[1])
        pg2[i] = pg[i] * np.median(mg[i] / pg[i], axis=0)
    for key in sorted(set(zip(phase, kv))):
        i = (phase == key[0]) & (kv == key[1])
        pa2[i] = pa[i] * np.median(ma[i] / pa[i], axis=0)
    per_regime = _top1_of(pg2 + pa2, meas)
    rng = np.random.default_rng(seed)
    noise = {}
    for s in NOISE_SIGMAS:
        draws = _noisy_top1(meas, s, rng, NOISE_DRAWS)
        noise[f"{s:g}"] = {"top1_mean": float(np.mean([d["top1"] for d in draws])),
                           "regret_max_p50": float(np.median([d["regret_max"] for d in draws]))}
    cols = sorted(involved)
    spread = (np.log(pred[:, cols] / meas[:, cols]).std(axis=1, ddof=1) if len(cols) > 1 else np.zeros(n))
    return {"which_term": which, "twin_ratios": twins,
            "ceilings_in_sample": {"per_gpu_per_term_scale": per_gpu, "per_gpu_per_term_per_regime_scale": per_regime},
            "independent_error": {"sigma_to_expected": noise, "draws": NOISE_DRAWS, "seed": seed,
                                  "predictor_cross_gpu_log_error_sd": {
                                      "gpus": [gpus[j] for j in cols], "p50": float(np.median(spread)),
                                      "mean": float(np.mean(spread))}}}


def greybox_times(wls, grey_gemm, grey_attn, gpus=GPUS, constants_for=None):
    """The grey box's prediction of the same pieces (each GPU's GEMM and attention terms on its
    held-out constants times corrections fitted on the other GPUs' tables): [n_workloads, n_gpus] ms."""
    gf, af = _frames(wls)
    out = np.zeros((len(wls), len(gpus)))
    for j, g in enumerate(gpus):
        c = constants_for(g)[0] if constants_for is not None else None
        pg = grey_gemm.predict(gf, g, c)
        pa = grey_attn.predict(af, g, c)
        out[:, j] = np.bincount(gf["wl"], weights=pg, minlength=len(wls)) + pa
    return out


def twin_groups(gpus=GPUS) -> list[list[int]]:
    """The column indices of `gpus` grouped by datasheet twins (`transfer.greybox.twins`: GPUs closer than
    TWIN_DISTANCE in the grey box's similarity coordinates), each group in `gpus`' order; a GPU without twins is
    its own group."""
    from steptime_lab.experiments.transfer.greybox import twins

    gpus = list(gpus)
    groups, seen = [], set()
    for i, g in enumerate(gpus):
        if i in seen:
            continue
        members = [i] + [gpus.index(t) for t in twins(g, gpus)]
        members = sorted(set(members) - seen)
        seen.update(members)
        groups.append(members)
    return groups


def twin_ordered(grey, phys, gpus=GPUS) -> np.ndarray:
    """Ranking keys [n_workloads, n_gpus] (ms) in which the physics orders datasheet twins and the grey box the
    groups: per workload and twin group (`twin_groups`), the member the physics predicts fastest keeps its own
    grey-box time and every other member sits at that time times its physics ratio to it (issue 24, wave 39,
    grey9's candidate 2). Refuses arrays of other shapes or non-positive physics times."""
    grey, phys = np.asarray(grey, dtype=float), np.asarray(phys, dtype=float)
    if grey.shape != phys.shape or grey.ndim != 2 or grey.shape[1] != len(gpus):
        raise ValueError(f"twin_ordered: grey {grey.shape} and physics {phys.shape} must both be "
                         f"[workloads, {len(gpus)} GPUs]")
    if not np.all(np.isfinite(phys) & (phys > 0)):
        raise ValueError("twin_ordered: the physics times must be finite and positive")
    out = grey.copy()
    rows = np.arange(len(grey))
    for members in twin_groups(gpus):
        if len(members) < 2:
            continue
        cols = np.asarray(members)
        rep = cols[np.argmin(phys[:, cols], axis=1)]
        out[:, cols] = (grey[rows, rep] / phys[rows, rep])[:, None] * phys[:, cols]
    return out


def ranking_inputs(gemm_raw, ctx_raw, gen_raw, gpus=GPUS):
    """Tidy tables -> (cells_gemm, cells_attn, workloads kept, measured [wl, gpu])."""
    g = gemm_cells(gemm_raw)
    a = attention_cells(ctx_raw, gen_raw)
    g = g[g.gpu.isin(gpus)]
    a = a[a.gpu.isin(gpus)]
    wls = workloads(g, a, gpus)
    kept, meas = measured_times(wls, g, a, gpus)
    return g, a, kept, meas


# ---------------------------------------------------------------------------------------
GPU_SETS = {
    "all": GPUS,
    # the four SKUs round 1 ranked (A100, L40S, H100, H200): comparable with its numbers
    "round1_four": ("a100-sxm", "l40s", "h100-sxm", "h200-sxm"),
}


def run(gemm_cells_df, attn_cells_df, wls, meas, gemm_bundle=None, attn_bundle=None, constants=None,
        constants_for=None, grey=None, grey_shared=None) -> dict:
    """Scores of every predictor on every GPU set. The RF (home-profiled) cannot rank GPUs
    it has not profiled: verbatim it predicts the same time everywhere (all ties); only its
    spec-scaled transfer produces an order."""
    terms = predicted_terms(wls, GPUS, constants, constants_for)
    preds = {"steptime": terms["gemm"] + terms["attention"],
             "datasheet_roofline": roofline_times(wls, GPUS)}
    if gemm_bundle is not None and attn_bundle is not None:
        preds["rf_spec_scaled"] = rf_times(wls, gemm_bundle, attn_bundle, GPUS, scaled=True)
        preds["rf_verbatim"] = rf_times(wls, gemm_bundle, attn_bundle, GPUS, scaled=False)
    if grey is not None:  # (GreyBox for aic_gemm, GreyBox for aic_attention)
        preds["steptime_residual"] = greybox_times(wls, grey[0], grey[1], GPUS, constants_for)
        # the grey box's ranking: datasheet twins ordered by the physics, the groups by the grey box (`twin_ordered`;
        # issue 24, wave 39, grey9: its leave-one-GPU-out corrections swap the twins' GPU-specific residuals)
        preds["steptime_residual_twins"] = twin_ordered(preds["steptime_residual"], preds["steptime"], GPUS)
    if grey_shared is not None:  # the same with shape-only (`shared`) corrections: set a priori, not by this score
        preds["steptime_residual_shared"] = greybox_times(wls, grey_shared[0], grey_shared[1], GPUS, constants_for)
    out = {}
    for set_name, gset in GPU_SETS.items():
        idx = [GPUS.index(g) for g in gset]
        out[set_name] = {p: rank_scores(v[:, idx], meas[:, idx], gset) for p, v in preds.items()}
    res = {"scores": out, "pred": preds, "meas": meas,
           "runner_up_gaps": {k: runner_up_gaps(meas[:, [GPUS.index(g) for g in v]]) for k, v in GPU_SETS.items()}}
    kept, meas_terms = measured_terms(wls, gemm_cells_df, attn_cells_df, GPUS)
    if len(kept) == len(wls) and np.allclose(meas_terms["gemm"] + meas_terms["attention"], meas):
        res["diagnosis"] = {"steptime": ranking_diagnosis(terms, meas_terms, wls, GPUS)}
        res["diagnosis"]["steptime"]["confusion_terms"] = confusion_terms(terms, meas_terms, wls, GPUS)
        res["diagnosis"]["flat_region_replicates"] = flat_region_replicates(wls, gemm_cells_df, meas_terms, GPUS)
        res["diagnosis"]["gemm_flat_region_jitter"] = flat_region_jitter(
            gemm_cells_df, GPUS, tuple(res["diagnosis"]["steptime"]["twin_ratios"]))
        res["diagnosis"]["gemm_sustained_work_ratios"] = sustained_work_ratios(gemm_cells_df)
        res["diagnosis"]["decode_floor_modes"] = decode_floor_modes(attn_cells_df)
        ge, ae, sizes = held_out_reference_errors(wls, gemm_cells_df, attn_cells_df, GPUS, constants, constants_for)
        res["diagnosis"]["near_tie_band"] = {**near_tie_band(meas_terms, terms, wls, ge, ae, GPUS), "reference": sizes}
    if grey is not None:  # what each GPU's grey box was fitted on (never that GPU's table)
        res["greybox_fitted_on"] = {g: {"gemm": _brief(grey[0].fitted_on(g)),
                                        "attention": _brief(grey[1].fitted_on(g))} for g in GPUS}
    if grey_shared is not None:
        res["greybox_shared_fitted_on"] = {g: {"gemm": _brief(grey_shared[0].fitted_on(g)),
                                               "attention": _brief(grey_shared[1].fitted_on(g))} for g in GPUS}
    return res


def _brief(info: dict) -> dict:
    return {k: info[k] for k in ("gpus", "cells", "target_readings", "fast", "setting", "shared") if k in info}


def ranking_document(res, wls, meas, home_gpu: str | None, targets: dict) -> dict:
    """metrics + claims of E2.2; `targets["top1"]`: the tie-aware top-1 agreement to reach (config/experiments.yaml)."""
    claims = []
    for set_name, by in res["scores"].items():
        s = by["steptime"]
        claims.append(claim(f"GPU set '{set_name}': steptime's tie-aware top-1 pick matches the measured fastest GPU",
                            s["top1"], f"fraction of {s['workloads']} workloads (ties {s['top1_ties']}, misses "
                            f"{s['top1_misses']})", target=targets["top1"], met=s["top1"] >= targets["top1"], op=">=",
                            unit="fraction"))
        claims.append(claim(f"GPU set '{set_name}': steptime's top-1 on workloads with a clear measured winner "
                            f"(runner-up more than {MEAS_TIE_REL:.0%} slower)", s["top1_clear_winner"],
                            f"fraction of {s['workloads_clear_winner']} such workloads; ties count as non-hits"))
        claims.append(claim(f"GPU set '{set_name}': what a wrong pick costs: the measured slowdown of steptime's "
                            "pick over the measured fastest GPU", {"mean": s["top1_regret_mean"],
                                                                   "max": s["top1_regret_max"]},
                            f"measured time of the pick / measured best - 1, over {s['workloads']} workloads "
                            "(0 on a hit)"))
        if set_name == "all" and "max_regret" in targets:  # issue 24 item 3: over all nine GPUs, every wrong pick
            reg, worst = targets["max_regret"], float(s["top1_regret_max"] or 0.0)
            claims.append(claim(f"GPU set '{set_name}': every wrong pick of steptime is within {reg:.0%} of the "
                                "measured best's time", round(worst, 6),
                                f"<= {reg}: the largest measured time of the pick / measured best - 1 over "
                                f"{s['workloads']} workloads (ties: the worst tied GPU)", target=reg,
                                met=worst <= reg, op="<=", unit="fraction"))
        claims.append(claim(f"GPU set '{set_name}': every pair steptime decides is ordered as measured",
                            {"wrong": s["pair_wrong"], "decided": s["pair_correct"] + s["pair_wrong"],
                             "wrong_outside_2pct_measured_band": s["pair_wrong_clear"]},
                            "pairs (predicted ties excluded)", target=0, met=s["pair_wrong"] == 0, key="wrong", op="==",
                            unit="pairs"))
        if "steptime_residual" in by and set_name == "all" and "greybox_top1" in targets:
            # the grey box's own predictions, ranked as they are (the twin-ordered variant is reported after the
            # near-tie claim: it was chosen after the grey box's E2.2 score was seen; wave 39, the lead)
            gs, t1, reg = by["steptime_residual"], targets["greybox_top1"], targets["greybox_max_regret"]
            claims.append(claim(f"GPU set '{set_name}': the grey box's (steptime_residual) tie-aware top-1 pick "
                                "matches the measured fastest GPU", gs["top1"],
                                f">= {t1} of {gs['workloads']} workloads (ties {gs['top1_ties']}, misses "
                                f"{gs['top1_misses']})", target=t1, met=gs["top1"] >= t1, op=">=", unit="fraction of workloads"))
            worst = float(gs["top1_regret_max"] or 0.0)
            claims.append(claim(f"GPU set '{set_name}': every wrong pick of the grey box is within {reg:.0%} of "
                                "the measured best's time", round(worst, 6),
                                f"<= {reg}: the largest measured time of the pick / measured best - 1 (ties: the "
                                "worst tied GPU)", target=reg, met=worst <= reg, op="<=", unit="fraction"))
            claims.append(claim(f"GPU set '{set_name}': the regret distribution of the grey box's wrong picks "
                                "(steptime's beside it)", {"steptime_residual": gs["top1_regret_wrong_picks"],
                                                          "steptime": s["top1_regret_wrong_picks"],
                                                          **({"steptime_residual_shared": by[
                                                              "steptime_residual_shared"]["top1_regret_wrong_picks"]}
                                                             if "steptime_residual_shared" in by else {})},
                                "measured time of the pick / measured best - 1 over the workloads not picked "
                                "right: count, median, p90, max, and how many within 2% and 5%"))
        if "steptime_residual_shared" in by and set_name == "all" and "greybox_top1" in targets:
            sh = by["steptime_residual_shared"]
            claims.append(claim(
                f"GPU set '{set_name}': the grey box with shape-only corrections (steptime_residual_shared: the same "
                "cell gets nearly the same factor on every GPU) keeps near-tied GPUs in order; reported beside the "
                "grey box, not chosen by this score", {"top1": sh["top1"], "top1_regret_max": sh["top1_regret_max"],
                                                       "pair_wrong": sh["pair_wrong"]},
                f"tie-aware top-1 over {sh['workloads']} workloads (target {targets['greybox_top1']}), the largest "
                f"wrong pick's measured slowdown (target {targets['greybox_max_regret']}) and the pairs ordered "
                "wrongly", target=targets["greybox_top1"], key="top1", met=sh["top1"] >= targets["greybox_top1"],
                op=">=", unit="fraction of workloads"))
        if set_name == "all" and "steptime" in res.get("diagnosis", {}):
            dg = res["diagnosis"]["steptime"]
            wrong = s["top1_regret_wrong_picks"]
            claims.append(claim(
                f"GPU set '{set_name}': which GPUs steptime's wrong picks confuse, and how far apart they measure",
                {"confusions": {k: v["n"] for k, v in s["top1_confusions"].items()},
                 "wrong_picks": wrong.get("n", 0), "wrong_within_2pct": wrong.get("within_2pct", 0),
                 "wrong_within_3pct": wrong.get("within_3pct", 0),
                 "workloads_runner_up_within_2pct": res["runner_up_gaps"][set_name].get("within_2pct", 0),
                 "top1_measured_gemm": dg["which_term"]["measured_gemm_predicted_attention"]["top1"],
                 "top1_independent_error_1pct": dg["independent_error"]["sigma_to_expected"]["0.01"]["top1_mean"],
                 "twin_gemm_log_ratio_sd_over_m": {k: v["sd_p50"] for k, v in res["diagnosis"][
                     "gemm_flat_region_jitter"]["per_pair_log_ratio_sd_p50"].items()},
                 "top1_ceiling_per_gpu_regime_scale_in_sample": dg["ceilings_in_sample"][
                     "per_gpu_per_term_per_regime_scale"]["top1"],
                 **_replicate_summary(res, s)},
                "wrong picks per 'pick>measured best' pair; their measured gap (pick / best - 1) bands; workloads whose "
                "measured runner-up is within 2% of the fastest (a property of the data); top-1 with the measured GEMM "
                "in place of the predicted one; the in-sample ceiling of rescaling each GPU's terms per regime; the "
                "top-1 expected of the measured times with an independent 1% error per GPU; per confused pair, the "
                "spread (sd of the log ratio) of the two GPUs' measured GEMM times over m = 1..8 at one (n, k); on the "
                "decode workloads of at most 8 tokens, how often the measured fastest GPU stays the fastest when the "
                "GEMM cells are swapped for the same weights' cells at another m <= 8 (a physical replicate; a "
                "property of the data) and how often the pick of those replicates pooled per workload (its own m left "
                "out) is the measured fastest, beside steptime's top-1 on the same workloads"))
        if "rf_spec_scaled" in by:
            claims.append(claim(f"GPU set '{set_name}': a home-profiled RF covers 1 GPU; verbatim it ties every pair",
                                {"rf_verbatim_pair_ties": by["rf_verbatim"]["pair_ties"],
                                 "rf_spec_scaled_top1": by["rf_spec_scaled"]["top1"]},
                                f"the RF profiled only {home_gpu}; its only way to rank is the spec-scaled transfer"))
    if "near_tie_band" in res.get("diagnosis", {}):  # appended last: the earlier claim ids stay as they were
        nt = res["diagnosis"]["near_tie_band"]
        claims.append(claim(
            "GPU set 'all': workloads whose measured fastest and second-fastest GPUs are closer than "
            "steptime's held-out error on the terms that separate them (a pick there is inside the predictor's "
            "own band)", {k: nt.get(k) for k in ("fraction_inside_pair_band", "inside_pair_band", "workloads",
                                                 "top1_inside", "top1_outside", "gap_p50", "pair_band_p50",
                                                 "fraction_inside_own_mape_band", "top1_expected_at_band_scale",
                                                 "ranking_cell_pair_error", "by_measured_best")},
            "per workload: the measured runner-up's gap (runner-up / fastest - 1) against the two GPUs' held-out "
            "pair-ratio error (mean |predicted ratio / measured ratio - 1|) of the GEMM and attention terms in the "
            "workload's regime (GEMM: same m; attention: same call, any heads), weighted by the measured term "
            f"shares, on {nt.get('reference', {}).get('gemm_cells', 0)} GEMM and "
            f"{nt.get('reference', {}).get('attention_cells', 0)} attention cells outside the ranking (each GPU on "
            "its held-out constants, deploy readings excluded); steptime's top-1 (argmin) inside and outside that "
            "band; the fraction whose gap is within the smaller of the two GPUs' own share-weighted MAPE; and "
            "the top-1 expected of the measured times with an unbiased random error of the pair band's size, and "
            "of half and a quarter of it (seeded draws); the pair error realised on the ranking's own cells and the top-1 an "
            "unbiased error of that size would give; per GPU how often it is the measured best, a hit and picked"))
    allg = res["scores"].get("all", {})
    if "steptime_residual_twins" in allg and "greybox_top1" in targets:  # after the near-tie claim: ids stay
        tw = allg["steptime_residual_twins"]
        claims.append(claim(
            "GPU set 'all': the grey box ranked with datasheet twins (B200 / GB200 / B300 / GB300) ordered by the "
            "physics and the groups by the grey box (steptime_residual_twins; chosen after the grey box's own E2.2 "
            "score was seen: its leave-one-GPU-out corrections carry each twin's siblings' residual, not its own)",
            {"top1": tw["top1"], "top1_regret_max": tw["top1_regret_max"], "pair_wrong": tw["pair_wrong"],
             "grey_box_pair_wrong": allg["steptime_residual"]["pair_wrong"]},
            f"tie-aware top-1 over {tw['workloads']} workloads (target {targets['greybox_top1']}), the largest wrong "
            "pick's measured slowdown and the pairs ordered wrongly, beside the pairs the grey box's own ranking "
            "orders wrongly", target=targets["greybox_top1"], key="top1", met=tw["top1"] >= targets["greybox_top1"],
            op=">=", unit="fraction of workloads"))
    metrics = {"by_gpu_set": {k: v for k, v in res["scores"].items()},
               "workloads": [dict(w, measured_ms={g: float(x) for g, x in zip(GPUS, meas[i])},
                                  steptime_ms={g: float(x) for g, x in zip(GPUS, res["pred"]["steptime"][i])},
                                  **{f"{p}_ms": {g: float(x) for g, x in zip(GPUS, res["pred"][p][i])}
                                     for p in ("steptime_residual", "steptime_residual_shared") if p in res["pred"]})
                             for i, w in enumerate(wls)],
               **{k: res[k] for k in ("greybox_fitted_on", "greybox_shared_fitted_on", "runner_up_gaps", "diagnosis")
                  if k in res},
               **({"disclosed": DIAGNOSIS_DISCLOSED} if "diagnosis" in res else {}),
               "settings": {"tie_rel": TIE_REL, "measured_band_rel": MEAS_TIE_REL, "gpus": list(GPUS),
                            "gpu_sets": {k: list(v) for k, v in GPU_SETS.items()},
                            "decode_batches": list(DECODE_BATCHES), "kv_lens": list(KV_LENS),
                            "prefill_chunks": list(PREFILL_CHUNKS), "rf_home_gpu": home_gpu,
                            "ranked_quantity": "per-layer GEMM (4 projections) + attention, ms; measured = sum of "
                                               "AIConfigurator rows exactly on the grid (no interpolation)"}}
    return {"metrics": metrics, "claims": claims}


def tie_document(res) -> dict:
    """Naive (stable-sort) vs tie-aware scoring, and where the predicted ties sit."""
    claims, metrics = [], {}
    for set_name, by in res["scores"].items():
        m = {}
        for p, s in by.items():
            ties = {k: v["tie"] for k, v in s["per_pair"].items() if v["tie"]}
            m[p] = {"top1_naive_stable_sort": s["top1_naive_stable_sort"], "top1_tie_aware": s["top1"],
                    "top1_ties": s["top1_ties"], "top1_misses": s["top1_misses"],
                    "pair_accuracy_decided": s["pair_accuracy_decided"], "pair_ties": s["pair_ties"],
                    "tied_pairs": ties, "hopper_pair": s["per_pair"].get("h100-sxm|h200-sxm")}
        metrics[set_name] = m
        claims.append(claim(f"GPU set '{set_name}': where each predictor ties GPUs (pairs x workloads)",
                            {p: v["tied_pairs"] for p, v in m.items() if p != "rf_verbatim"},
                            "predicted ties per GPU pair (relative difference <= 1e-6); rf_verbatim ties every pair"))
        s = m["steptime"]
        claims.append(claim(f"GPU set '{set_name}': steptime's top-1 scored tie-aware vs with a stable sort",
                            {"naive": s["top1_naive_stable_sort"], "tie_aware": s["top1_tie_aware"]},
                            "a predicted tie is never a hit under tie-aware scoring"))
    return {"metrics": metrics, "claims": claims}


def _set_panels(res, figsize):
    """One panel per GPU set: the figure, its row of axes and (axis, set name, scores by predictor) per panel."""
    sets = list(res["scores"])
    fig, axes = subplots(1, len(sets), figsize=figsize, squeeze=False)
    return fig, axes[0], [(ax, s, res["scores"][s]) for ax, s in zip(axes[0], sets)]


def plot_ranking(res, stem):
    fig, axes, panels = _set_panels(res, (11, 3.8))
    for ax, set_name, by in panels:
        names = list(by)
        mets = [("top1", "top-1 (tie-aware)"), ("top1_clear_winner", "top-1, clear winner"),
                ("top1_naive_stable_sort", "top-1 (stable sort)"),
                ("pair_accuracy_decided", "pairs correct / decided"), ("spearman_mean", "Spearman (mean)")]
        w = 0.8 / len(names)
        for i, n in enumerate(names):
            ax.bar([j + (i - (len(names) - 1) / 2) * w for j in range(len(mets))],
                   [by[n][k] or 0 for k, _ in mets], width=w, label=n, color=PALETTE.get(n))
        ax.set_xticks(range(len(mets)))
        ax.set_xticklabels([l for _, l in mets], rotation=20, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("score (fraction)")
        ax.set_title(f"GPU set '{set_name}' ({len(GPU_SETS[set_name])} GPUs)")
    axes[0].legend(fontsize=7)
    save(fig, stem, tight_layout=True, caption=(
        "E2.2 GPU ranking for the workload set (per-layer GEMM + attention; measured = sums of AIConfigurator "
        "rows on the grid). Tie-aware top-1 counts a predicted tie as a non-hit; 'clear winner' scores only the "
        "workloads whose measured runner-up is more than 2% slower; the stable-sort column is the "
        "artifact E2.6 re-scores. The home RF verbatim predicts the same time on every GPU (all ties). "
        "steptime_residual is the grey box: steptime's GEMM and attention terms times corrections fitted on the "
        "other GPUs' tables; steptime_residual_twins its ranking with datasheet twins (B200, GB200, B300, GB300) ordered by "
        "the physics and the groups by the grey box (reported beside the grey box's own ranking); steptime_residual_shared the "
        "same with corrections that see the cell's shape only."))


def plot_ties(res, stem):
    fig, axes, panels = _set_panels(res, (10, 3.6))
    for ax, set_name, by in panels:
        names = list(by)
        hits = [by[n]["top1_hits"] for n in names]
        ties = [by[n]["top1_ties"] for n in names]
        miss = [by[n]["top1_misses"] for n in names]
        ax.bar(names, hits, label="hit", color="#1a9850")
        ax.bar(names, ties, bottom=hits, label="predicted tie", color="#bdbdbd")
        ax.bar(names, miss, bottom=[a + b for a, b in zip(hits, ties)], label="miss", color="#d73027")
        for i, n in enumerate(names):
            ax.text(i, hits[i] + ties[i] + miss[i] + 0.3, f"stable sort: {by[n]['top1_naive_stable_sort']:.0%}",
                    ha="center", fontsize=6)
        ax.set_ylabel("workloads")
        ax.set_ylim(0, (hits[0] + ties[0] + miss[0]) * 1.12)
        ax.set_title(f"top-1 outcomes, GPU set '{set_name}'")
        ax.tick_params(axis="x", rotation=20, labelsize=7)
    axes[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(1.1, -0.22), ncol=3)
    save(fig, stem, tight_layout=True,
         caption="E2.6 tie-aware re-score: per predictor, workloads whose top-1 pick is a hit, a "
                 "predicted tie (never counted as a hit) or a miss; above each bar the top-1 a stable "
                 "sort would report (a tie broken by GPU order counted as a hit).")
