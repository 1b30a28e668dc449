"""Wall-clock steps: the step table, predictors on it, the three-reading rule and fit, scores,
and the step-level adjustments (block/comm scales) with their per-operator price.

Part of `steptime_lab.experiments.wallclock` (import from there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from steptime.errors import SteptimeError
from steptime.io import read_yaml
from steptime.ops import predict_ops
from steptime.specs import get_gpu, get_model
from steptime.specs.engines import allreduces_per_layer, get_engine
from steptime.step import GPU_KINDS as _STEP_GPU_KINDS, HOST_KINDS as _STEP_HOST_KINDS, is_gpu_kind, layer_shapes, predict_steps, term_kind
from steptime.terms import attention as A, comm, light
from steptime_lab.metrics import score, signed_error
from steptime_lab.regimes import llm_shaped
from steptime_lab.run_constants import require_constants

PHASES = ("prefill", "decode", "mixed")
STEP_COLUMNS = ("gpu", "model", "engine", "tp", "phase", "segment", "step", "ctx_tokens", "ctx_requests",
                "ctx_kv_tokens", "decode_requests", "mean_decode_kv_tokens", "latency_ms")
KINDS = ("gemm", "attention", "light", "moe", "comm", "launch", "host")  # every kind of the product's step terms
if set(KINDS) != _STEP_GPU_KINDS | _STEP_HOST_KINDS:
    raise RuntimeError("wallclock.KINDS must list every kind of steptime.step's terms")
# The product's split (steptime.step.is_gpu_kind): which KINDS are GPU work (T_blocks) and which host time.
GPU_KINDS = tuple(k for k in KINDS if is_gpu_kind(k))
HOST_KINDS = tuple(k for k in KINDS if not is_gpu_kind(k))


class WallclockError(SteptimeError, ValueError):
    """Bad wall-clock input (missing columns, impossible batch composition)."""


def check_steps(steps) -> None:
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    if missing:
        raise WallclockError(f"step table lacks column(s) {', '.join(missing)}")
    bad = steps["phase"][~steps["phase"].isin(PHASES)]
    if len(bad):
        raise WallclockError(f"step table: unknown phase {bad.iloc[0]!r} (known: {', '.join(PHASES)})")
    n = steps["ctx_requests"].to_numpy() + steps["decode_requests"].to_numpy()
    if np.any(n <= 0):
        i = int(np.flatnonzero(n <= 0)[0])
        raise WallclockError(f"step table row {i}: a step with no request")
    if np.any((steps["ctx_requests"].to_numpy() > 0) & (steps["ctx_tokens"].to_numpy() < steps["ctx_requests"].to_numpy())):
        raise WallclockError("step table: fewer prefill tokens than prefill requests in a step")
    if np.any(steps["latency_ms"].to_numpy() <= 0):
        raise WallclockError("step table: latency_ms must be > 0")


# ---------------------------------------------------------------------------------------
# Steps -> per-request arrays (the batch composition the predictor sees)
def expand_requests(steps):
    """(step_index, new_tokens, kv_len) per request, from each step's aggregate composition.

    Decode requests each read the step's mean decode KV length; a step's prefill tokens
    and cached prefix are split evenly over its prefill requests (the FPM rows give sums,
    not per-request lengths: a stated approximation).
    """
    nd = steps["decode_requests"].to_numpy().astype(np.int64)
    nc = steps["ctx_requests"].to_numpy().astype(np.int64)
    idx = np.arange(len(steps))
    d_sid = np.repeat(idx, nd)
    d_kv = np.repeat(steps["mean_decode_kv_tokens"].to_numpy(float), nd)
    c_sid = np.repeat(idx, nc)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_tok = np.where(nc > 0, steps["ctx_tokens"].to_numpy(float) / np.maximum(nc, 1), 0.0)
        per_kv = np.where(nc > 0, steps["ctx_kv_tokens"].to_numpy(float) / np.maximum(nc, 1), 0.0)
    c_new = np.repeat(per_tok, nc)
    c_kv = np.repeat(per_kv, nc)
    sid = np.concatenate([d_sid, c_sid])
    new = np.concatenate([np.ones(len(d_sid)), np.maximum(c_new, 2.0)])  # a prefill chunk is > 1 token
    kv = np.concatenate([d_kv, c_kv])
    return sid, new, kv


def term_kinds(terms_ms: dict, n: int) -> dict:
    """Sum a predict_steps term breakdown into KINDS (+ 'total')."""
    out = {k: np.zeros(n) for k in KINDS}
    for t, v in terms_ms.items():
        kind = term_kind(t)  # the product's kind of each term, dense and MoE alike (an unknown term is refused)
        out[kind] = out[kind] + np.asarray(v, dtype=float)
    out["total"] = sum(out[k] for k in out)
    return out


def make_predictor(name: str, model, gpu, *, engine: str | None = None, dtype: str = "bf16",
                   constants=None, fitted=None, ep: int = 1, moe_constants=None,
                   moe_kernels: str | None = None) -> Callable:
    """A step predictor by name: 'kernels', 'roofline', or an engine profile ('vllm', ...).

    `overrides` passed at call time (name -> value) are laid over the profile for this GPU:
    engine fields (specs/engines.yaml) through `Engine.with_fitted`, the STEP_ADJUSTMENTS
    (block/comm scales, comm_offset_us) through `with_scales`, and a constant of calibration
    (a name the constants define) as that constant; any other name is refused (WallclockError),
    so a misrouted name cannot be dropped silently. `fitted` is a fitted-constants file or dict
    (results/calibration/engine_constants.yaml): all three of its parts (engines, constants,
    scales) for this (engine, GPU) enter here, the one constructor that reads it. A mixture-of-experts
    model's expert-parallel degree `ep` and fused-MoE constants `moe_constants` go to predict_steps;
    `moe_kernels` (one of specs.engines.MOE_KERNELS; None: the profile's moe.kernels) swaps whose fused-MoE laws
    the profile's routed experts read (Engine.with_moe_kernels), nothing else.
    """
    m = get_model(model)
    g = get_gpu(gpu)
    base = require_constants(constants, "wallclock.steps.make_predictor")
    fitted_engines, fitted_consts, fitted_scales = split_fitted(fitted)
    mine = fitted_consts.get("kernels" if name == "kernels" else (engine or name), {}).get(g.key)
    my_scales = fitted_scales.get("kernels" if name == "kernels" else (engine or name), {}).get(g.key) or {}
    if mine:
        base = base.with_overrides(mine, scope=f"gpu.{g.key}", provenance="FITTED",
                                   source="R2.3 wall-clock readings (engine_constants.yaml)")
    if name == "roofline":
        def f(steps, tp, overrides=None):
            sid, new, kv = expand_requests(steps)
            return roofline_steps(m, g, sid, new, kv, len(steps), tp=tp)
        return f

    profile = get_engine("kernels" if name == "kernels" else (engine or name), fitted=fitted_engines)
    if moe_kernels is not None:
        profile = profile.with_moe_kernels(moe_kernels, source="make_predictor(moe_kernels=...)")
    fields = set(profile.values)
    known = {r["name"] for r in base.table()}

    def f(steps, tp, overrides=None):
        ov = dict(overrides or {})
        unknown = sorted(set(ov) - fields - known)
        if unknown:
            raise WallclockError(f"unknown override name(s) {', '.join(unknown)} for {name}@{g.key} "
                                 f"(known: engine fields of specs/engines.yaml, constants of calibration, "
                                 f"step adjustments {', '.join(STEP_ADJUSTMENTS)})")
        eng_ov = {k: v for k, v in ov.items() if k in fields}
        const_ov = {k: v for k, v in ov.items() if k not in fields}
        c = base.with_overrides(const_ov, scope=f"gpu.{g.key}", provenance="FITTED",
                                source="wall-clock readings (R2.3)") if const_ov else base
        e = profile.with_fitted(g.key, eng_ov, source="wall-clock readings (R2.3)") if eng_ov else profile
        sid, new, kv = expand_requests(steps)
        moe_kw = {"ep": ep, "moe_constants": moe_constants} if getattr(m, "is_moe", False) else {}
        r = predict_steps(m, g, sid, new, kv, len(steps), tp=int(tp), constants=c, engine=e, dtype=dtype,
                          rows="work", **moe_kw)  # expand_requests' mean requests: fractional lengths
        k = term_kinds(r["terms_ms"], len(steps))
        # the step's whole host launch (exposed + hidden dispatch floor): what a world-size-1 row can hold of it
        k["dispatch_full"] = np.asarray(r["terms_ms"]["dispatch_floor"], float) + np.asarray(r["hidden_ms"]["dispatch_floor"], float)
        # the serial eager host wait inside the host kind (host.eager_inline_ms): the row reading moves it
        k["eager_inline"] = np.asarray(r["eager_inline_ms"], float)
        return k

    f.n_allreduce_calls = allreduces_per_layer() * m.num_hidden_layers
    return with_scales(f, my_scales)


def split_fitted(fitted):
    """(engines part for get_engine, {engine: {gpu: {constant: value}}}, {engine: {gpu: {scale: value}}})
    of a fitted-constants doc or path.

    The file R2.3 writes has `engines: {engine: {gpu: {field: entry}}}` (fields of
    specs/engines.yaml, read by get_engine) and `constants: {engine: {gpu: {name: entry}}}`
    (calibration constants fitted on the same readings), `scales: {engine: {gpu: {name: entry}}}`
    (SCALES: multipliers on term kinds, e.g. comm_scale); the last two apply to that engine's
    predictions on that GPU only, through make_predictor."""
    if fitted is None:
        return {}, {}, {}
    if not isinstance(fitted, dict):
        fitted = read_yaml(fitted) or {}
    engines = fitted.get("engines", {}) or {}
    def values(sec):
        return {eng: {gk: {n: e["value"] for n, e in tbl.items()} for gk, tbl in per_gpu.items()}
                for eng, per_gpu in (fitted.get(sec, {}) or {}).items()}
    return {"engines": engines}, values("constants"), values("scales")


def roofline_steps(model, gpu, step_id, new_tokens, kv_len, n_steps: int, *, tp: int = 1) -> dict:
    """Bare roofline of a step: every GEMM and attention kernel at max(flops / peak, bytes / BW)
    with datasheet peaks, light kernels as bytes / BW, the TP all-reduce as bytes over the
    link bandwidth (ring), no floors, no host, no launches. A speed-of-light lower bound."""
    P, BW = gpu.peak_flops, gpu.mem_bw
    sid = np.asarray(step_id, dtype=np.int64)
    new = np.asarray(new_tokens, dtype=float)
    kv = np.asarray(kv_len, dtype=float)
    T = np.bincount(sid, weights=new, minlength=n_steps)
    N = np.bincount(sid, minlength=n_steps).astype(float)
    L = model.num_hidden_layers
    gem = np.zeros(n_steps)
    for n_, k_ in layer_shapes(model, tp).values():
        gem += L * np.maximum(2 * T * n_ * k_ / P, 2.0 * (T * k_ + n_ * k_ + T * n_) / BW)
    v = model.vocab_size // tp
    h = model.hidden_size
    gem += np.where(N > 0, np.maximum(2 * N * v * h / P, 2.0 * (N * h + v * h + N * v) / BW), 0.0)
    hq = model.num_attention_heads // tp
    hkv = max(1, model.num_key_value_heads // tp)
    d = model.head_dim
    fl = 4.0 * hq * d * (new * kv + new * new / 2.0)
    by = (kv + new) * 2 * hkv * d * 2.0
    att = L * np.maximum(np.bincount(sid, weights=fl, minlength=n_steps) / P,
                         np.bincount(sid, weights=by, minlength=n_steps) / BW)
    lt = np.zeros(n_steps)
    for kern in light.LIGHT_KERNELS:
        reps = 1 if kern == "emb" else L * light.PER_LAYER[kern]
        lt += reps * light.light_bytes(kern, T, model, tp) / BW
    comm = np.zeros(n_steps)
    if tp > 1 and gpu.link_bw > 0:
        comm = 2 * L * 2.0 * (tp - 1) / tp * (2.0 * T * h) / gpu.link_bw
    out = {k: np.zeros(n_steps) for k in KINDS}
    out.update(gemm=gem * 1e3, attention=att * 1e3, light=lt * 1e3, comm=comm * 1e3)
    out["total"] = sum(out[k] for k in KINDS)
    return out


def predict_table(steps, predictor: Callable, overrides=None):
    """Per-step predictions (a DataFrame aligned with `steps`: pred_ms and one column per kind)."""
    import pandas as pd

    parts = []
    for tp, s in steps.groupby("tp", sort=True):
        r = predictor(s, int(tp), overrides)
        extra = {f"{x}_ms": r[x] for x in ("dispatch_full", "eager_inline") if x in r}
        parts.append(pd.DataFrame({"pred_ms": r["total"], **{f"{k}_ms": r[k] for k in KINDS}, **extra}, index=s.index))
    return pd.concat(parts).loc[steps.index]


# ---------------------------------------------------------------------------------------
# The reading rule (R2.3): at most three steps per (GPU, engine), by composition only.
READING_RULE = ("three sweep compositions, chosen by batch composition alone: (1) the decode step with the "
                "fewest requests at the smallest TP (host, launch and per-step floors dominate), (2) the decode "
                "step with the most requests at the smallest TP (the per-request host slope), (3) the decode step "
                "with the fewest requests at the largest TP (the per-step cost tensor parallelism adds). Within "
                "a composition the reading is its median repeat (the step whose latency is the lower median of the "
                "composition's repeats; ties by lowest step id): a user takes a few repeats and reads the typical "
                "one, not the first, which is often the slowest (warm-up). Every step of "
                "those three sweep compositions at that TP (the repeats of the same cell) is excluded from scoring; "
                "steps of the chat-shaped segment are never excluded: they are other cells. Since wave 33 (helper "
                "eager): with eager_tokens > 0 one of the three (eager_slot) is instead the one-request sweep prefill of "
                "that many tokens at the smallest TP (an eager step: it reads host.eager_inline_ms), chosen after "
                "seeing E1.26's scores.")


@dataclass
class Readings:
    rows: list  # index labels of the three reading steps in `steps`
    cells: list  # (gpu, engine, tp, phase, composition) per reading
    excluded: list = field(default_factory=list)  # index labels excluded from scoring


def composition_key(steps):
    """A hashable composition per step: (tp, phase, ctx_tokens, ctx_requests, ctx_kv_tokens, decode_requests)."""
    cols = ["tp", "phase", "ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_requests"]
    return list(map(tuple, steps[cols].astype(object).to_numpy()))


REPEAT_PICKS = ("median", "earliest")


def pick_repeat(cand, pick="median"):
    """The index label of one repeat of a composition (`cand`: its steps): 'median' (the lower median
    latency, ties by step id), 'earliest' (the lowest step id; the rule before issue 19), or a
    numpy Generator (a uniformly random repeat, for the spread of a score over repeats)."""
    if isinstance(pick, np.random.Generator):
        return cand.index[int(pick.integers(len(cand)))]
    if pick == "earliest":
        return cand.sort_values("step", kind="stable").index[0]
    if pick == "median":
        c = cand.sort_values(["latency_ms", "step"], kind="stable")
        return c.index[(len(c) - 1) // 2]
    raise WallclockError(f"unknown repeat pick {pick!r} (known: {', '.join(REPEAT_PICKS)}, or a numpy Generator)")


EAGER_SLOTS = ("fewest_requests_decode", "most_requests_decode", "largest_tp_decode")  # the readings, in order


def reading_rule(steps, pick="median", eager_tokens: int = 0, eager_slot: str = "largest_tp_decode") -> Readings:
    """The three reading steps of one (GPU, engine) step table (see READING_RULE); `pick` chooses the
    repeat within a composition (pick_repeat); `eager_tokens` > 0: the one-request sweep prefill of that many new
    tokens (no cached prefix) at the smallest TP is read in place of the decode reading `eager_slot` (EAGER_SLOTS;
    wave 33)."""
    if steps[["gpu", "engine"]].drop_duplicates().shape[0] != 1:
        raise WallclockError("reading_rule: give the steps of one (GPU, engine)")
    dec = steps[(steps["phase"] == "decode") & (steps["segment"] == "sweep")]
    if dec.empty:
        dec = steps[steps["phase"] == "decode"]
    if dec.empty:
        raise WallclockError("reading_rule: no decode step to read")
    tps = sorted(dec["tp"].unique())
    picks = []
    for tp, which in ((tps[0], "min"), (tps[0], "max"), (tps[-1], "min")):
        d = dec[dec["tp"] == tp]
        n = d["decode_requests"]
        target = n.min() if which == "min" else n.max()
        picks.append(pick_repeat(d[n == target], pick))
    if eager_tokens:
        pre = steps[(steps["segment"] == "sweep") & (steps["phase"] == "prefill") & (steps["tp"] == tps[0])
                    & (steps["ctx_tokens"] == int(eager_tokens)) & (steps["ctx_requests"] == 1)
                    & (steps["ctx_kv_tokens"] == 0) & (steps["decode_requests"] == 0)]
        if pre.empty:
            raise WallclockError(f"reading_rule: no one-request sweep prefill of {eager_tokens} tokens at TP {tps[0]} "
                                 f"to read")
        if eager_slot not in EAGER_SLOTS:
            raise WallclockError(f"reading_rule: unknown eager_slot {eager_slot!r} (known: {', '.join(EAGER_SLOTS)})")
        picks[EAGER_SLOTS.index(eager_slot)] = pick_repeat(pre, pick)
    picks = list(dict.fromkeys(picks))  # one TP degree: the third reading equals the first
    sweep = steps[steps["segment"] == "sweep"]
    keys = composition_key(sweep)
    key_of = dict(zip(steps.index, composition_key(steps)))
    chosen = {key_of[i] for i in picks}
    excluded = sorted(set(picks) | {i for i, k in zip(sweep.index, keys) if k in chosen})
    cells = [(str(steps.at[i, "gpu"]), str(steps.at[i, "engine"]), int(steps.at[i, "tp"]), str(steps.at[i, "phase"]),
              int(steps.at[i, "decode_requests"] if steps.at[i, "phase"] == "decode" else steps.at[i, "ctx_tokens"]),
              int(steps.at[i, "step"])) for i in picks]
    return Readings(rows=picks, cells=cells, excluded=excluded)


def fit_engine_constants(steps, readings: Readings, predictor: Callable, names: list[str], x0: dict,
                         bounds: dict | None = None) -> dict:
    """Solve `names` (at most as many as readings) so the predictor meets the reading steps.

    Least squares on log(pred / measured) over the reading steps only (scipy), starting
    at x0; returns {name: value}.
    """
    from scipy.optimize import least_squares

    if len(names) > len(readings.rows):
        raise WallclockError(f"{len(names)} constants from {len(readings.rows)} readings: under-determined")
    r = steps.loc[readings.rows]
    meas = r["latency_ms"].to_numpy(float)
    lo = [(bounds or {}).get(n, (0.0, np.inf))[0] for n in names]
    hi = [(bounds or {}).get(n, (0.0, np.inf))[1] for n in names]
    p0 = np.clip([float(x0[n]) for n in names], lo, [h if np.isfinite(h) else 1e9 for h in hi])

    def resid(p):
        pred = predict_table(r, predictor, dict(zip(names, p)))["pred_ms"].to_numpy()
        return np.log(np.maximum(pred, 1e-9) / meas)

    base = resid(p0)
    for i, n in enumerate(names):  # a constant the readings cannot see is refused, not "fitted"
        q = p0.copy()
        q[i] = q[i] * 1.5 + 0.1
        if np.max(np.abs(resid(q) - base)) < 1e-9:
            raise WallclockError(f"constant {n!r} does not change the prediction of the reading steps: it cannot "
                                 f"be read from them (choose another constant)")

    sol = least_squares(resid, p0, bounds=(lo, hi), x_scale="jac")
    return {n: float(v) for n, v in zip(names, sol.x)}


# ---------------------------------------------------------------------------------------
# Scores
def score_steps(steps, pred, *, keys=("gpu", "engine", "tp", "phase"), n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """MAPE, median APE, signed mean error per group (errors as fractions)."""
    out = []
    x = steps.assign(pred_ms=pred.loc[steps.index, "pred_ms"].to_numpy())
    for k, d in x.groupby(list(keys), sort=True):
        k = k if isinstance(k, tuple) else (k,)
        s = score(d["pred_ms"].to_numpy(), d["latency_ms"].to_numpy(), n_boot=n_boot, seed=seed)
        s["signed_mean"] = float(np.mean(signed_error(d["pred_ms"], d["latency_ms"])))
        out.append({**dict(zip(keys, [v.item() if hasattr(v, "item") else v for v in k])), **s})
    return out


def tp_scaling(steps, pred, ref_tp: int = 1, kv_bucket: int = 512) -> list[dict]:
    """t(TP) / t(ref_tp) on matched sweep compositions, measured vs predicted (medians per cell).

    A cell is a sweep composition (phase, ctx tokens/requests/prefix, decode requests, mean
    decode KV rounded to `kv_bucket`) present at both TP degrees."""
    x = steps.assign(pred_ms=pred.loc[steps.index, "pred_ms"].to_numpy())
    x = x[x["segment"] == "sweep"].copy()
    x["kvb"] = (x["mean_decode_kv_tokens"] / kv_bucket).round().astype(int)
    cols = ["phase", "ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_requests", "kvb"]
    med = x.groupby(["tp"] + cols)[["latency_ms", "pred_ms"]].median().reset_index()
    base = med[med["tp"] == ref_tp].drop(columns="tp")
    out = []
    for tp in sorted(med["tp"].unique()):
        if tp == ref_tp:
            continue
        j = med[med["tp"] == tp].merge(base, on=cols, suffixes=("", "_ref"))
        if j.empty:
            continue
        mr = j["latency_ms"] / j["latency_ms_ref"]
        pr = j["pred_ms"] / j["pred_ms_ref"]
        err = (pr / mr - 1.0).to_numpy()
        out.append({"tp": int(tp), "ref_tp": ref_tp, "cells": int(len(j)),
                    "measured_ratio_median": float(np.median(mr)), "predicted_ratio_median": float(np.median(pr)),
                    "mean_abs_ratio_error": float(np.mean(np.abs(err))), "max_abs_ratio_error": float(np.max(np.abs(err))),
                    "by_phase": {ph: float(np.mean(np.abs(err[(j["phase"] == ph).to_numpy()])))
                                 for ph in sorted(j["phase"].unique())}})
    return out


def shares(pred, steps, keys=("tp", "phase")) -> list[dict]:
    """Median share of each term kind in the predicted step, per group."""
    x = pred.join(steps[list(keys)])
    out = []
    for k, d in x.groupby(list(keys), sort=True):
        k = k if isinstance(k, tuple) else (k,)
        row = dict(zip(keys, [v.item() if hasattr(v, "item") else v for v in k]))
        for kind in KINDS:
            row[kind] = float(np.median(d[f"{kind}_ms"] / d["pred_ms"]))
        out.append(row)
    return out


TERM_GROUPS = {"compute": ("gemm", "attention", "light"), "comm": ("comm",), "host": HOST_KINDS}


PREFILL_RESIDUAL_NOTE = (
    "Diagnostic, no claim (issue 19): where a prefill step's missing time sits. Per TP, over the sweep's "
    "prefill steps with no cached prefix: the median residual (measured - predicted, ms) of each composition; a "
    "line residual = a + b tokens through the one-prompt compositions (a: a per-step constant, b: a per-token "
    "cost); each multi-prompt composition's residual less that line at its tokens, per extra prompt (a per-prompt "
    "cost); and each composition's residual over the predicted GEMM time (a GEMM efficiency miss at the per-rank "
    "shapes reads as a fraction that follows the per-rank shape, not the step's tokens). A cost every rank pays "
    "on every token (embedding, sampler, a replicated light kernel) gives the same b at every TP; per-rank work "
    "gives b falling as 1 / TP. Each composition's residual is also split by the phase of the step recorded next "
    "(step id + 1 at the same TP; 'absent' where that step is not in the table): a row that holds part of the next "
    "step's host work (engines.yaml schedule.inline_launch_world) reads larger before an eager prefill or mixed step.")


def prefill_residual(steps, pred) -> list[dict]:
    """PREFILL_RESIDUAL_NOTE's table, one entry per TP of one (gpu, engine) step table; `pred` is a predict_table
    frame aligned with `steps`. A TP with fewer than two one-prompt compositions has no line (None)."""
    check_steps(steps)
    if not pred.index.equals(steps.index) or "pred_ms" not in pred or "gemm_ms" not in pred:
        raise WallclockError("prefill_residual: pred must be a predict_table frame aligned with steps")
    if len(steps[["gpu", "engine"]].drop_duplicates()) != 1:
        raise WallclockError("prefill_residual: one (gpu, engine) per call")
    x = steps.assign(res=steps["latency_ms"] - pred["pred_ms"], gemm=pred["gemm_ms"])
    nxt = {(int(t), int(i)): str(ph) for t, i, ph in zip(x["tp"], x["step"], x["phase"])}
    x["next_phase"] = [nxt.get((int(t), int(i) + 1), "absent") for t, i in zip(x["tp"], x["step"])]
    x = x[(x["phase"] == "prefill") & (x["segment"] == "sweep") & (x["ctx_kv_tokens"] == 0)]
    if x.empty:
        raise WallclockError("prefill_residual: no sweep prefill steps without a cached prefix")
    out = []
    for tp, s in x.groupby("tp", sort=True):
        by_next = s.groupby(["ctx_tokens", "ctx_requests", "next_phase"])["res"].median()
        g = (s.groupby(["ctx_tokens", "ctx_requests"])
             .agg(steps=("res", "size"), measured_ms=("latency_ms", "median"), residual_ms=("res", "median"),
                  gemm_ms=("gemm", "median")).reset_index())
        one = g[g["ctx_requests"] == 1]
        line = None
        if one["ctx_tokens"].nunique() >= 2:
            b, a = np.polyfit(one["ctx_tokens"].to_numpy(float), one["residual_ms"].to_numpy(float), 1)
            line = {"a_ms": float(a), "b_us_per_token": float(b * 1e3)}
        comps = []
        for r in g.itertuples():
            e = {"tokens": int(r.ctx_tokens), "prompts": int(r.ctx_requests), "steps": int(r.steps),
                 "measured_ms": float(r.measured_ms), "residual_ms": float(r.residual_ms),
                 "residual_over_gemm": float(r.residual_ms / r.gemm_ms) if r.gemm_ms > 0 else None,
                 "residual_by_next_phase_ms": {ph: float(v) for ph, v in
                                               by_next.loc[(r.ctx_tokens, r.ctx_requests)].items()}}
            if line is not None and r.ctx_requests > 1:
                e["excess_per_extra_prompt_ms"] = float((r.residual_ms - line["a_ms"] - line["b_us_per_token"] * 1e-3
                                                         * r.ctx_tokens) / (r.ctx_requests - 1))
            comps.append(e)
        out.append({"tp": int(tp), "line": line, "compositions": comps})
    return out


SPLIT_SIGNAL_NOTE = (
    "Diagnostic, no claim (issue 19 item 1, wave 37, helper tsplit): does the served decode pay the split-KV cost "
    "(attn_split_us per split, attention.split_count) that the per-operator tables price? Per TP, over the decode "
    "steps of SPLIT_SIGNAL_REQUESTS requests (one: its KV length is the row's mean, which the FPM rows give where they "
    "give no per-request lengths, and vLLM captures a CUDA graph at one request, so the served batch is not padded) "
    "whose KV length spans at least SPLIT_SIGNAL_MIN_SPAN tokens (at least SPLIT_SIGNAL_MIN_STEPS steps): the "
    "least-squares slope in KV length (us per 1,000 tokens, with its standard error) of the residual "
    "measured - predicted WITHOUT any per-split cost, beside the slope of the per-split cost the prediction prices. "
    "At a fixed batch every other term of the step but the KV read (priced in both) is constant, so a measured slope "
    "near the priced one says the engine pays the splits at the priced count; a slope near 0 says it does not. "
    "Source (DESIGN, wave 37 tsplit): under vLLM's FULL CUDA graphs the TRT-LLM-gen decode grid is fixed at capture "
    "(max_seq_len = max_model_len, the padded batch), so the kernel launches more CTAs per (request, KV head) than "
    "the per-operator collector's eager call at short KV; this reads which count the wall clock pays.")
SPLIT_SIGNAL_REQUESTS = (1,)  # one request: no per-request length spread, its own capture size (first built with
# (1, 2, 4): the 4-request chat rows at TP 1 / 4 read -112 / -81 us per 1k tokens where nothing is priced, a
# mean-KV artefact of unequal lengths; chosen after seeing that, disclosed in DESIGN wave 37 tsplit)
SPLIT_SIGNAL_MIN_SPAN = 1500.0  # tokens between the 5th and 95th percentile of the steps' mean KV length
SPLIT_SIGNAL_MIN_STEPS = 30


def without_split_cost(constants):
    """`constants` with every per-split cost 0 (the global attn_split_us and each attention lane's): the prediction
    `split_kv_signal` compares the measured steps with."""
    lanes = constants.get("attn_lane_factors") or {}
    return constants.with_overrides({"attn_split_us": 0.0,
                                     "attn_lane_factors": {k: {**v, "attn_split_us": 0.0} for k, v in lanes.items()}})


def split_kv_signal(steps, pred, pred_nosplit) -> list[dict]:
    """SPLIT_SIGNAL_NOTE's table for one (gpu, engine) step table: `pred` and `pred_nosplit` are predict_table frames
    aligned with `steps`, the second from the same predictor with every per-split cost 0 (their difference is the
    priced split time). One entry per (TP, request count) that qualifies; [] where none does."""
    check_steps(steps)
    for name, t in (("pred", pred), ("pred_nosplit", pred_nosplit)):
        if not t.index.equals(steps.index) or "pred_ms" not in t:
            raise WallclockError(f"split_kv_signal: {name} must be a predict_table frame aligned with steps")
    if len(steps[["gpu", "engine"]].drop_duplicates()) != 1:
        raise WallclockError("split_kv_signal: one (gpu, engine) per call")
    x = steps.assign(res=steps["latency_ms"] - pred_nosplit["pred_ms"], split=pred["pred_ms"] - pred_nosplit["pred_ms"])
    if (x["split"] < -1e-9).any():
        raise WallclockError("split_kv_signal: pred is below pred_nosplit on some step (pred_nosplit must be the same "
                             "predictor with the per-split cost 0)")
    x = x[(x["phase"] == "decode") & x["decode_requests"].isin(SPLIT_SIGNAL_REQUESTS)]
    out = []
    for (tp, b), g in x.groupby(["tp", "decode_requests"], sort=True):
        kv = g["mean_decode_kv_tokens"].to_numpy(float)
        lo, hi = np.quantile(kv, [0.05, 0.95])
        if len(g) < SPLIT_SIGNAL_MIN_STEPS or hi - lo < SPLIT_SIGNAL_MIN_SPAN:
            continue
        X = np.c_[np.ones(len(g)), kv / 1000.0]
        beta, *_ = np.linalg.lstsq(X, g["res"].to_numpy(float), rcond=None)
        e = g["res"].to_numpy(float) - X @ beta
        se = float(np.sqrt(e @ e / (len(g) - 2) * np.linalg.inv(X.T @ X)[1, 1]))
        priced = np.linalg.lstsq(X, g["split"].to_numpy(float), rcond=None)[0][1]
        out.append({"tp": int(tp), "decode_requests": int(b), "steps": int(len(g)), "kv_p05": float(lo),
                    "kv_p95": float(hi), "measured_excess_us_per_1k": float(beta[1] * 1e3),
                    "measured_excess_se_us_per_1k": se * 1e3, "priced_split_us_per_1k": float(priced * 1e3),
                    "priced_split_median_ms": float(g["split"].median())})
    return out


def residual_terms(steps, pred) -> dict:
    """Which predicted term the residual (measured - predicted) scales with, per phase, leave-one-TP-out.

    Diagnostic, not a predictor: per phase, measured_ms = sum_g (1 + s_g) * term_g_ms is fitted by least
    squares on the steps of every TP but one (groups `TERM_GROUPS`; a group absent from every fitting step
    keeps s_g = 0), and the left-out TP's steps are scored with those scales: if one term's scale explains
    the error at every TP, the held-out signed error is small at every TP. Also the median residual in ms
    per (TP, phase)."""
    x = pred.loc[steps.index].join(steps[["tp", "phase", "latency_ms"]])
    for g, kinds in TERM_GROUPS.items():
        x[g] = sum(x[f"{k}_ms"] for k in kinds)
    groups = list(TERM_GROUPS)
    out = {"groups": {g: list(k) for g, k in TERM_GROUPS.items()}, "by_phase": [], "residual_ms": []}
    for (tp, ph), d in x.groupby(["tp", "phase"], sort=True):
        r = d["latency_ms"] - d["pred_ms"]
        out["residual_ms"].append({"tp": int(tp), "phase": ph, "steps": int(len(d)),
                                   "median_ms": float(r.median()), "median_signed": float((-r / d["latency_ms"]).median())})
    for ph, d in x.groupby("phase", sort=True):
        tps = sorted(d["tp"].unique())
        for held in tps:
            fit, ev = d[d["tp"] != held], d[d["tp"] == held]
            used = [g for g in groups if float(fit[g].abs().sum()) > 0.0]
            scale = dict.fromkeys(groups, 0.0)
            if len(fit) >= len(used) and used:
                a = fit[used].to_numpy(float)
                y = (fit["latency_ms"] - fit["pred_ms"]).to_numpy(float)
                sol, *_ = np.linalg.lstsq(a / fit[["latency_ms"]].to_numpy(float), y / fit["latency_ms"].to_numpy(float),
                                          rcond=None)
                scale.update({g: round(float(v), 4) for g, v in zip(used, sol)})
            adj = ev["pred_ms"] + sum(scale[g] * ev[g] for g in groups)
            before = signed_error(ev["pred_ms"], ev["latency_ms"])
            after = signed_error(adj, ev["latency_ms"])
            out["by_phase"].append({"phase": ph, "held_out_tp": int(held), "steps": int(len(ev)),
                                    "fitted_on_tp": [int(t) for t in tps if t != held],
                                    "scales": scale, "signed_median_before": float(np.median(before)),
                                    "signed_median_after": float(np.median(after)),
                                    "mape_before": float(np.mean(np.abs(before))),
                                    "mape_after": float(np.mean(np.abs(after)))})
    return out


def signed_error_bins(steps, pred, by: str, bins) -> list[dict]:
    """Median signed error per bin of `by` (e.g. decode_requests, total tokens)."""
    x = steps.assign(err=signed_error(pred.loc[steps.index, "pred_ms"], steps["latency_ms"]))
    x["bin"] = np.digitize(x[by].to_numpy(float), bins)
    out = []
    for (tp, ph, b), d in x.groupby(["tp", "phase", "bin"], sort=True):
        lo = bins[b - 1] if b > 0 else None
        out.append({"tp": int(tp), "phase": ph, "bin_lo": None if lo is None else float(lo), "steps": int(len(d)),
                    f"{by}_median": float(d[by].median()), "signed_median": float(d["err"].median())})
    return out


# ---------------------------------------------------------------------------------------
# E1.18: exposed host time from the small steps
def gpu_part(pred):
    """The GPU-work part (GPU_KINDS, steptime.step's split) of a predict_table frame, per step (ms)."""
    return sum(pred[f"{k}_ms"] for k in GPU_KINDS)


def host_part(pred):
    """The host part (HOST_KINDS: launch floor beyond the kernels, exposed scheduler floor, sampling) of a
    predict_table frame, per step (ms)."""
    return sum(pred[f"{k}_ms"] for k in HOST_KINDS)


def exposed_host(steps, engine_pred, max_requests: int = 4, kernels_pred=None) -> list[dict]:
    """Measured step minus the GPU-work part (gpu_part) of the ENGINE's own prediction of the same step, on
    decode steps with at most `max_requests` requests (where the host dominates), per (gpu, engine, tp):
    median and IQR in ms, beside what the same prediction prices as host time (host_part) and the measured
    minus predicted host. `engine_pred` is predict_table of the engine's profile on `steps` (not the bare
    'kernels' profile: an engine whose kernels the profile fuses runs less GPU work than the bare tables).
    `kernels_pred` (optional, a diagnostic only): the bare 'kernels' prediction of the same steps, whose GPU part
    is reported as how much the engine's GPU part differs from it (`gpu_minus_bare_kernels_ms_median`)."""
    missing = [f"{k}_ms" for k in KINDS if f"{k}_ms" not in engine_pred.columns]
    if missing:
        raise WallclockError(f"exposed_host needs a predict_table frame (lacks {', '.join(missing)})")
    p = engine_pred.loc[steps.index]
    x = steps.assign(gpu_ms=gpu_part(p).to_numpy(), pred_host_ms=host_part(p).to_numpy(),
                     bare_ms=np.nan if kernels_pred is None else gpu_part(kernels_pred.loc[steps.index]).to_numpy())
    x = x[(x["phase"] == "decode") & (x["decode_requests"] <= max_requests)]
    out = []
    for (g, e, tp), d in x.groupby(["gpu", "engine", "tp"], sort=True):
        ex = (d["latency_ms"] - d["gpu_ms"]).to_numpy()
        ph = d["pred_host_ms"].to_numpy()
        out.append({"gpu": g, "engine": e, "tp": int(tp), "steps": int(len(d)),
                    "exposed_ms_median": float(np.median(ex)), "exposed_ms_q25": float(np.quantile(ex, 0.25)),
                    "exposed_ms_q75": float(np.quantile(ex, 0.75)),
                    "exposed_share_median": float(np.median(ex / d["latency_ms"].to_numpy())),
                    "predicted_host_ms_median": float(np.median(ph)),
                    "host_error_ms_median": float(np.median(ph - ex)),
                    "gpu_ms_median": float(np.median(d["gpu_ms"].to_numpy()))})
        if kernels_pred is not None:
            out[-1]["gpu_minus_bare_kernels_ms_median"] = float(np.median((d["gpu_ms"] - d["bare_ms"]).to_numpy()))
    return out


# ---------------------------------------------------------------------------------------
# Records for `steptime evaluate --family wallclock`
def records(scores: list[dict], *, dataset: str, predictor: str, family: str = "wallclock") -> list[dict]:
    """Score rows (gpu, engine, tp, phase|subset, cells, mape, ...) as evaluate records."""
    out = []
    for s in scores:
        out.append({"family": family, "dataset": dataset, "gpu": s["gpu"], "engine": s["engine"], "tp": s["tp"],
                    "predictor": predictor, "subset": s.get("subset", s.get("phase")), "cells": s["cells"],
                    "mape": s["mape"], "median_ape": s["median_ape"], "mape_ci": s["mape_ci"]})
    return out


# ---------------------------------------------------------------------------------------
# R2.3's block-scale arm and its price on the per-operator tables (E1.16 re-measured)
BLOCK_SCALE = "block_scale"
COMM_SCALE = "comm_scale"
# Step-level multipliers a wall-clock fit may read (they act on term kinds of the prediction, so
# they mean the same thing whatever law sits behind a term): name -> the kinds they multiply.
COMM_OFFSET = "comm_offset_us"
SCALES = {BLOCK_SCALE: GPU_KINDS, COMM_SCALE: ("comm",)}
# Step-level adjustments: SCALES multiply term kinds; COMM_OFFSET adds microseconds to every
# all-reduce call of a TP > 1 step (a shift of the per-call latency floor, whatever law sits
# behind the all-reduce term; the term is held at >= 0).
STEP_ADJUSTMENTS = (*SCALES, COMM_OFFSET)


def with_scales(predictor: Callable, fixed: dict | None = None) -> Callable:
    """`predictor` with the STEP_ADJUSTMENTS among the overrides (and `fixed`) applied: block_scale
    on every GPU kernel term (round 1's aggregate k on T_blocks), comm_scale on the all-reduce term,
    comm_offset_us per all-reduce call (`predictor.n_allreduce_calls` per step); identity when absent."""
    calls = getattr(predictor, "n_allreduce_calls", None)

    def f(steps, tp, overrides=None):
        ov = {**(fixed or {}), **dict(overrides or {})}
        sc = {n: float(ov.pop(n)) for n in list(ov) if n in SCALES}
        off = float(ov.pop(COMM_OFFSET, 0.0))
        r = dict(predictor(steps, tp, ov or None))
        for n, k in sc.items():
            for kind in SCALES[n]:
                r[kind] = r[kind] * k
        if off and tp > 1:
            if calls is None:
                raise WallclockError(f"{COMM_OFFSET} needs a predictor that states its all-reduce calls per step")
            r["comm"] = np.maximum(r["comm"] + np.where(r["comm"] > 0, calls * off * 1e-3, 0.0), 0.0)
        r["total"] = sum(r[kind] for kind in KINDS)
        return r
    f.n_allreduce_calls = calls
    return f


with_block_scale = with_scales


def kind_scale(fitted: dict, kind: str) -> float:
    """The product of the fitted SCALES that act on term kind `kind` (1 when none does)."""
    k = 1.0
    for n, v in (fitted or {}).items():
        if n in SCALES and kind in SCALES[n]:
            k *= float(v)
    return k


def per_op_cost(tables: dict, fitted: dict, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """MAPE on per-operator tables before and after a wall-clock fit's scales.

    `tables`: name -> (term kind, pred_ms, measured_ms) of one GPU's per-operator cells; each
    table's predictions are multiplied by the fitted scales acting on its kind (kind_scale), and an
    all-reduce table's cells (one call each) shifted by the fitted comm_offset_us."""
    out = []
    for name, (kind, p, m) in sorted(tables.items()):
        k = kind_scale(fitted, kind)
        off = float((fitted or {}).get(COMM_OFFSET, 0.0)) if kind == "comm" else 0.0
        a = score(p, m, n_boot=n_boot, seed=seed)
        b = score(np.maximum(np.asarray(p) * k + off * 1e-3, 1e-9), m, n_boot=n_boot, seed=seed)
        out.append({"table": name, "kind": kind, "cells": a["cells"], "scale": k, "offset_us": off,
                    "mape_per_op_calibrated": a["mape"], "mape_wallclock_scaled": b["mape"],
                    "delta": b["mape"] - a["mape"]})
    return out


def per_op_tables(gpu: str, gemm_df=None, attn_cells=None, allreduce_df=None, constants=None) -> dict:
    """name -> (term kind, steptime prediction, measured) in ms on one GPU's per-operator tables
    with the shipped constants: GEMM cells (LLM-shaped: n, k >= 1024, m <= 16384), attention
    cells of LLM shapes, and all-reduce cells (vLLM's custom all-reduce under CUDA graphs ->
    'custom', NCCL -> 'nccl'; every message size and GPU count). `constants`: the rule's (None: shipped)."""
    constants = require_constants(constants, "wallclock.steps.per_op_tables")
    out = {}
    if gemm_df is not None:
        g = gemm_df[gemm_df["gpu"] == gpu]
        g = g[llm_shaped(g["m"], g["n"], g["k"])]
        if len(g):
            p = predict_ops("gemm", gpu, constants=constants, m=g["m"].to_numpy(float), n=g["n"].to_numpy(float), k=g["k"].to_numpy(float))
            out["aic_gemm_llm"] = ("gemm", p["t_ms"], g["latency_ms"].to_numpy(float))
    if attn_cells is not None:
        x = attn_cells[(attn_cells["gpu"] == gpu) & attn_cells["llm"]]
        for phase in ("decode", "prefill"):
            xp = x[x["phase"] == phase]
            if len(xp):
                r = A.attention_cells(xp["b"].to_numpy(), xp["s"].to_numpy(), xp["c"].to_numpy(), xp["H"].to_numpy(),
                                      xp["Hkv"].to_numpy(), xp["d"].to_numpy(), get_gpu(gpu), constants,
                                      kv_dtype=xp["kv_dtype"].to_numpy(), warm_l2=True)
                out[f"aic_attention_{phase}_llm"] = ("attention", np.asarray(r["t"]) * 1e3, xp["y_ms"].to_numpy(float))
    if allreduce_df is not None:
        a = allreduce_df[allreduce_df["gpu"] == gpu]
        for backend, impl in (("vllm_graph", "custom"), ("nccl", "nccl")):
            ab = a[a["backend"] == backend]
            if not len(ab):
                continue
            pred = np.zeros(len(ab))
            for n in sorted(ab["num_gpus"].unique()):
                m = (ab["num_gpus"] == n).to_numpy()
                osm = get_engine("vllm").ar_limits["one_shot_max_bytes"][int(n)] if impl == "custom" else None
                pred[m] = comm.allreduce_time(ab["message_bytes"].to_numpy(float)[m], int(n), get_gpu(gpu),
                                              constants, impl, one_shot_max=osm) * 1e3
            out[f"aic_allreduce_{impl}"] = ("comm", pred, ab["latency_ms"].to_numpy(float))
    return out




# ---------------------------------------------------------------------------------------
# How a world-size-1 run's rows read (engines.yaml schedule.inline_launch_world)
ROW_READING_NOTE = ("Diagnostic, no claim: per TP, whether a row is its own step's time (engines.yaml "
                    "schedule.inline_launch_world: at world size 1 vLLM V1 launches step n + 1 on the engine thread "
                    "before it waits for step n's output, so row n can hold n + 1's host launch). Signatures: decode "
                    "rows just before an eager step (a prefill or mixed step above graph_max_tokens; consecutive step "
                    "ids) against decode rows just before a decode, as median measured / predicted; and every row "
                    "recorded under the bare roofline of its batch, with the row before it and the two rows' sum "
                    "(measured and predicted).")


def row_reading_fpm(steps, pred_ms, floor_ms, cap: float) -> list[dict]:
    """ROW_READING_NOTE's table, one entry per TP of a (gpu, engine) step table: `pred_ms` (a predictor's step times)
    and `floor_ms` (the bare roofline's) are aligned with `steps`; `cap` is the engine's graph_max_tokens."""
    import pandas as pd

    check_steps(steps)
    pred, floor = np.asarray(pred_ms, float), np.asarray(floor_ms, float)
    if pred.shape != (len(steps),) or floor.shape != (len(steps),) or not (np.isfinite(pred).all() and (pred > 0).all()):
        raise WallclockError("row_reading_fpm: pred_ms and floor_ms must be positive, finite and aligned with steps")
    if len(steps[["gpu", "engine"]].drop_duplicates()) != 1:
        raise WallclockError("row_reading_fpm: one (gpu, engine) per call")
    pred, floor = pd.Series(pred, index=steps.index), pd.Series(floor, index=steps.index)
    eng = get_engine(str(steps["engine"].iloc[0]))
    out = []
    for tp, s in steps.groupby("tp", sort=True):
        s = s.sort_values("step")
        lat, p, f = s["latency_ms"].to_numpy(float), pred[s.index].to_numpy(), floor[s.index].to_numpy()
        ids, ph = s["step"].to_numpy(), s["phase"].to_numpy()
        tok = (s["ctx_tokens"] + s["decode_requests"]).to_numpy()  # the step's scheduled tokens
        nxt = np.r_[np.diff(ids) == 1, False]
        eager_next = nxt & np.r_[(ph[1:] != "decode") & (tok[1:] > cap), False]
        dec = ph == "decode"
        row = {"tp": int(tp), "rows_own_step": bool(eng.step_time_is_own(int(tp))), "rows": int(len(s))}
        for name, m in (("decode_before_eager", dec & eager_next),
                        ("decode_before_decode", dec & nxt & np.r_[ph[1:] == "decode", False])):
            row[name] = {"rows": int(m.sum()),
                         "measured_over_predicted_median": float(np.median(lat[m] / p[m])) if m.any() else None}
        below = []
        for i in np.where(lat < f)[0]:
            e = {"step": int(ids[i]), "phase": str(ph[i]), "num_tokens": int(tok[i]), "measured_ms": float(lat[i]),
                 "predicted_ms": float(p[i]), "roofline_ms": float(f[i])}
            if i > 0 and ids[i] - ids[i - 1] == 1:
                e.update({"previous_measured_ms": float(lat[i - 1]), "previous_predicted_ms": float(p[i - 1]),
                          "sum_with_previous_measured_ms": float(lat[i] + lat[i - 1]),
                          "sum_with_previous_predicted_ms": float(p[i] + p[i - 1])})
            below.append(e)
        row["below_roofline"] = below
        out.append(row)
    return out


INLINE_ROW_NOTE = ("The engine's row reading at world size 1 (engines.yaml schedule.inline_launch_world; vLLM V1 "
                   "EngineCore.step_with_batch_queue schedules and executes step n + 1 before it waits for step n's "
                   "output, and UniProcExecutor runs execute_model inline on the engine-core thread, so step n + 1's "
                   "host launch runs while step n's kernels run): a row is the time between two output collections. "
                   "Row n = the rest of step n's host terms + the time until both the host launches made in that "
                   "interval and step n's GPU work are done, GPU = the prediction's GPU kinds, D = the whole dispatch "
                   "floor the product prices for a step (engine_dispatch_floor: per-kernel launch, eager above "
                   "graph_max_tokens, graph replay below; exposed + hidden), in place of step n's own max(GPU(n), "
                   "D(n)). Step n + 1 is launched inside row n (before n's output is read) when the scheduler can "
                   "schedule it while n is in flight (EARLY_LAUNCH_NOTE): it directly follows n (consecutive step id) "
                   "and holds a running request (a decode: async scheduling schedules it ahead with a placeholder "
                   "token), a continuing prompt chunk (ctx_kv_tokens > 0), or step n's record shows a request already "
                   "queued (queued_ctx_requests, where the table has it); otherwise its own launch falls in its own "
                   "row. The GPU runs each step's kernels as they are issued (fluid: work issued evenly over the "
                   "launch, run in order at the predicted GPU time): the part of step n + 1's GPU work done during "
                   "its launch inside row n is not in row n + 1 (the GPU tail split), so an eager step launched "
                   "inside the row before it keeps only what its GPU work has left. Where D(n + 1) < GPU(n) on every "
                   "row (E1.26's dense TP 1 rows) this is max(GPU(n), D(n + 1)) + the rest of n's host terms. The serial "
                   "eager wait host.eager_inline_ms (wave 33) of a step launched early is added to the row "
                   "before it (the engine thread prepares it after step n's GPU work, the GPU idle) and left out of its "
                   "own. No other constant. Rows at a layout where Engine.step_time_is_own holds (dp, where the table has it) are "
                   "unchanged.")
EARLY_LAUNCH_NOTE = ("vLLM V1's scheduler under async scheduling (vllm/v1/core/sched/scheduler.py: a running request is "
                     "scheduled again with num_output_placeholders while its step is in flight; a prompt longer than "
                     "the token budget continues in the next step) can schedule step n + 1 before step n's output is "
                     "read only from requests it already holds; a request that arrives after n's output is read (a "
                     "sweep's next prompt, sent when the previous one finishes) starts a step whose launch is in its "
                     "own row.")


def launched_early(steps) -> np.ndarray:
    """Per row of `steps` (one layout, sorted by step id): whether the engine can launch this step before it reads the
    previous step's output (EARLY_LAUNCH_NOTE), from the recorded batch alone."""
    missing = [c for c in ("step", "decode_requests", "ctx_kv_tokens") if c not in steps.columns]
    if missing:
        raise WallclockError(f"launched_early: the step table lacks column(s) {', '.join(missing)}")
    ids = steps["step"].to_numpy()
    if np.any(np.diff(ids) <= 0):
        raise WallclockError("launched_early: the steps must be sorted by increasing step id")
    held = (steps["decode_requests"].to_numpy() > 0) | (steps["ctx_kv_tokens"].to_numpy() > 0)
    if "queued_ctx_requests" in steps.columns:
        held = held | np.r_[False, steps["queued_ctx_requests"].to_numpy()[:-1] > 0]
    return np.r_[False, np.diff(ids) == 1] & held


def loop_rows_ms(gpu, dispatch, early) -> np.ndarray:
    """Each row's launch-and-GPU span under INLINE_ROW_NOTE's loop (the row less the step's host terms outside its
    launch), from per-step arrays in step order: `gpu` (GPU work), `dispatch` (the whole host launch D) and `early`
    (launched inside the previous row; launched_early). Within a row the host first launches the step itself unless
    it was launched early, then the next step if that one is launched early; the GPU runs the work issued so far in
    order (fluid: each launch issues its step's work evenly over D). A step whose own launch is in its own row and
    whose next step is not launched early spans its own max(GPU, D)."""
    gpu, dispatch = np.asarray(gpu, dtype=float), np.asarray(dispatch, dtype=float)
    early = np.asarray(early, dtype=bool)
    n = len(gpu)
    if not (gpu.shape == dispatch.shape == early.shape == (n,)):
        raise WallclockError("loop_rows_ms: gpu, dispatch and early must be aligned 1-D arrays")
    if n and early[0]:
        raise WallclockError("loop_rows_ms: the first row cannot be launched inside a row before it")
    out, left = np.zeros(n), 0.0  # left: GPU work of this row's step still to run when the row starts
    for k in range(n):
        # the step's own GPU work ends at f; the host is busy until h
        f, h = (left, 0.0) if early[k] else (max(gpu[k], dispatch[k]), dispatch[k])
        nxt = k + 1 < n and early[k + 1]
        h0 = h
        if nxt:  # the next step's launch, issued over [h, h + D], its kernels after this step's
            done_next = max(max(f, h) + gpu[k + 1], h + dispatch[k + 1])
            h += dispatch[k + 1]
        end = max(h, f)
        out[k] = end
        if not nxt:
            left = 0.0
        elif end <= max(f, h0):  # launched before this step's GPU work ended: none of it has run (exactly)
            left = gpu[k + 1]
        else:
            left = max(0.0, done_next - end)
    return out


def inline_row_ms(steps, pred):
    """What each row of `steps` measures under the engine's loop (INLINE_ROW_NOTE), from a predict_table frame
    `pred` aligned with `steps` (with its dispatch_full_ms column): a Series of ms."""
    import pandas as pd

    check_steps(steps)
    missing = [c for c in ["pred_ms", "dispatch_full_ms", *(f"{k}_ms" for k in KINDS)] if c not in pred.columns]
    if missing:
        raise WallclockError(f"inline_row_ms needs a predict_table frame of an engine predictor (lacks {', '.join(missing)})")
    if not pred.index.equals(steps.index):
        raise WallclockError("inline_row_ms: pred must be aligned with steps")
    out = pred["pred_ms"].astype(float).copy()
    g, d = gpu_part(pred), pred["dispatch_full_ms"].astype(float)
    own = out - pred["launch_ms"].astype(float)  # the step's GPU work and its host terms outside the launch
    dp = steps["dp"] if "dp" in steps.columns else pd.Series(1, index=steps.index)
    for (eng, tp, dpv), s in steps.assign(_dp=dp).groupby(["engine", "tp", "_dp"], sort=True):
        if get_engine(str(eng)).step_time_is_own(int(tp), dp=int(dpv)):
            continue
        for _, r in s.groupby(["gpu", "model"], sort=True):
            r = r.sort_values("step")
            i = r.index
            early = launched_early(r)
            span = loop_rows_ms(g[i].to_numpy(), d[i].to_numpy(), early)
            out[i] = own[i].to_numpy() + (span - g[i].to_numpy())
            if "eager_inline_ms" in pred.columns:  # a step launched early: its serial wait ends the row before
                w = np.where(early, pred.loc[i, "eager_inline_ms"].to_numpy(float), 0.0)
                out[i] = out[i].to_numpy() - w + np.r_[w[1:], 0.0]
    return pd.Series(out, index=steps.index, name="inline_ms")


COLLECTION_UNIT_NOTE = ("Collection units (issue 19, wave 42): at a layout whose rows are not their own steps "
                        "(Engine.step_time_is_own false: world size 1) a row is the time between two output "
                        "collections of the engine thread, which also launches the next step (INLINE_ROW_NOTE); where "
                        "that launch waits for the device, the earlier row ends when the next step's GPU work is done "
                        "and the later row holds only what follows. A held-out row measured below the speed-of-light "
                        "bound of its own recorded batch cannot be its step's own time: it is scored merged with the "
                        "held-out row directly before it (consecutive step id), measured sum against predicted sum, "
                        "once, in the later row's phase; a run of such rows merges into the row before the run. "
                        "Nothing is fitted; every other row is scored as it is.")


def _layout_keys(steps) -> list[str]:
    """The columns that name one run's layout in a step table (gpu, engine, model, tp, and ep / dp where present)."""
    return ["gpu", "engine", "model", "tp", *(c for c in ("ep", "dp") if c in steps.columns)]


def collection_units(steps, floor_ms, held=None):
    """Per row of `steps`, the index label of the row that carries its collection unit (COLLECTION_UNIT_NOTE): itself,
    or the last row of the below-bound run it is merged into. `floor_ms`: each row's speed-of-light bound (aligned
    with `steps`); `held`: boolean mask of the held-out rows (None: every row). A pandas Series."""
    import pandas as pd

    check_steps(steps)
    floor = np.asarray(floor_ms, dtype=float)
    held = np.ones(len(steps), dtype=bool) if held is None else np.asarray(held, dtype=bool)
    if floor.shape != (len(steps),) or held.shape != (len(steps),):
        raise WallclockError("collection_units: floor_ms and held must be aligned with the steps")
    if not np.all(np.isfinite(floor)):
        raise WallclockError("collection_units: floor_ms must be finite")
    pos = pd.Series(np.arange(len(steps)), index=steps.index)
    out = pd.Series(steps.index.to_numpy(), index=steps.index)
    for key, s in steps.groupby(_layout_keys(steps), sort=True):
        lay = dict(zip(_layout_keys(steps), key))
        if get_engine(str(lay["engine"])).step_time_is_own(int(lay["tp"]), dp=int(lay.get("dp", 1))):
            continue
        s = s.sort_values("step")
        p = pos[s.index].to_numpy()
        ids, lat = s["step"].to_numpy(), s["latency_ms"].to_numpy(float)
        merge = np.r_[False, (np.diff(ids) == 1) & held[p[1:]] & held[p[:-1]]] & (lat < floor[p]) & held[p]
        last = s.index.to_numpy().copy()
        for k in range(len(s) - 1, 0, -1):  # each merged row and the row before it carry the unit's last row
            if merge[k]:
                last[k - 1] = last[k]
        out[s.index] = last
    return out


def merged_units(steps, pred, units):
    """(steps, pred) with each collection unit as one row (the unit's last row: its keys, the units' measured and
    predicted sums), from `units` (collection_units) aligned with `steps` and a predict_table frame `pred`."""
    if not (pred.index.equals(steps.index) and units.index.equals(steps.index)):
        raise WallclockError("merged_units: pred and units must be aligned with the steps")
    lat = steps["latency_ms"].groupby(units.to_numpy()).sum()
    pms = pred["pred_ms"].groupby(units.to_numpy()).sum()
    keep = steps.index[units.to_numpy() == steps.index.to_numpy()]
    return (steps.loc[keep].assign(latency_ms=lat[keep].to_numpy()),
            pred.loc[keep].assign(pred_ms=pms[keep].to_numpy()))
