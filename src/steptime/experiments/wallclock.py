"""Wall clock: the engine step inside a real serving engine, scored on real step and token times.

One step table (``steps``: one row per measured engine step) and one token table
(``tpot``: one row per served configuration) feed every experiment here:

* E1.26  every forward-pass-metrics (FPM) step predicted vs measured, per phase (prefill
         sweep / decode / mixed) x TP, for three predictors on the same steps: ``kernels``
         (the per-operator model: GPU kernel time only), the engine profile (``vllm``), and
         a bare roofline (datasheet peaks, no host, no floors);
* R2.3   the engine constants read from at most three wall-clock steps per (GPU, engine),
         chosen by `reading_rule` (batch composition only, never scores), the rest held out;
* E1.18  exposed host time per engine: measured minus predicted GPU kernel time on the
         smallest steps, where the host dominates;
* E1.21  prefill on wall clock across GPUs where the sets hold isolated prefills;
* E2.11  token time (TPOT) predicted as ONE decode step at the measured mean running batch
         with a stated mean context, plus the amortised prefill of arriving requests for
         aggregated serving: an approximation of a schedule, not a replay.

Step columns (`STEP_COLUMNS`): ``gpu, model, engine, tp, phase`` ('prefill' | 'decode' |
'mixed'), ``segment``, ``step`` (an id unique within (gpu, model, engine, tp)),
``ctx_tokens, ctx_requests, ctx_kv_tokens`` (new prefill tokens, requests, prefix already
cached), ``decode_requests, mean_decode_kv_tokens``, ``latency_ms``.

Predictors are callables ``f(steps_of_one_tp, tp, overrides) -> dict`` of per-step
arrays (ms): ``total`` and one entry per term kind (host, launch, gemm, attention, comm,
light). `make_predictor` builds them on `steptime.step.predict_steps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from steptime.errors import SteptimeError

PHASES = ("prefill", "decode", "mixed")
STEP_COLUMNS = ("gpu", "model", "engine", "tp", "phase", "segment", "step", "ctx_tokens", "ctx_requests",
                "ctx_kv_tokens", "decode_requests", "mean_decode_kv_tokens", "latency_ms")
KINDS = ("gemm", "attention", "light", "comm", "launch", "host")


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
    from steptime.step import TERM_KIND

    out = {k: np.zeros(n) for k in KINDS}
    for t, v in terms_ms.items():
        kind = TERM_KIND.get(t, "host" if ("host" in t or "samp" in t) else "light")
        kind = {"launch": "launch", "comm": "comm"}.get(kind, kind)
        out.setdefault(kind, np.zeros(n))
        out[kind] = out[kind] + np.asarray(v, dtype=float)
    out["total"] = sum(out[k] for k in out)
    return out


def make_predictor(name: str, model, gpu, *, engine: str | None = None, dtype: str = "bf16",
                   constants=None, fitted=None) -> Callable:
    """A step predictor by name: 'kernels', 'roofline', or an engine profile ('vllm', ...).

    `overrides` passed at call time (name -> value) are laid over the profile for this GPU:
    engine fields (specs/engines.yaml) through `Engine.with_fitted`, any other name as a
    constant of calibration; this is how R2.3's fitted engine constants enter. `fitted` is a
    fitted-constants file or dict (results/calibration/engine_constants.yaml) for get_engine.
    """
    from steptime.calibration import Constants
    from steptime.specs import get_gpu, get_model
    from steptime.step import predict_steps

    m = get_model(model)
    g = get_gpu(gpu)
    base = constants or Constants.default()
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
    from steptime.specs.engines import get_engine

    profile = get_engine("kernels" if name == "kernels" else (engine or name), fitted=fitted_engines)
    fields = set(profile.values)

    def f(steps, tp, overrides=None):
        ov = dict(overrides or {})
        eng_ov = {k: v for k, v in ov.items() if k in fields}
        const_ov = {k: v for k, v in ov.items() if k not in fields}
        c = base.with_overrides(const_ov, scope=f"gpu.{g.key}", provenance="FITTED",
                                source="wall-clock readings (R2.3)") if const_ov else base
        e = profile.with_fitted(g.key, eng_ov, source="wall-clock readings (R2.3)") if eng_ov else profile
        sid, new, kv = expand_requests(steps)
        r = predict_steps(m, g, sid, new, kv, len(steps), tp=int(tp), constants=c, engine=e, dtype=dtype)
        return term_kinds(r["terms_ms"], len(steps))
    from steptime.specs.engines import allreduces_per_layer

    f.n_allreduce_calls = allreduces_per_layer() * m.num_hidden_layers
    return with_scales(f, my_scales) if my_scales else f


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
        import yaml
        from pathlib import Path

        fitted = yaml.safe_load(Path(fitted).read_text()) or {}
    engines = fitted.get("engines", {}) or {}
    def values(sec):
        return {eng: {gk: {n: e["value"] for n, e in tbl.items()} for gk, tbl in per_gpu.items()}
                for eng, per_gpu in (fitted.get(sec, {}) or {}).items()}
    return {"engines": engines}, values("constants"), values("scales")


def roofline_steps(model, gpu, step_id, new_tokens, kv_len, n_steps: int, *, tp: int = 1) -> dict:
    """Bare roofline of a step: every GEMM and attention kernel at max(flops / peak, bytes / BW)
    with datasheet peaks, light kernels as bytes / BW, the TP all-reduce as bytes over the
    link bandwidth (ring), no floors, no host, no launches. A speed-of-light lower bound."""
    from steptime.step import layer_shapes
    from steptime.terms import light

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
        parts.append(pd.DataFrame({"pred_ms": r["total"], **{f"{k}_ms": r[k] for k in KINDS}}, index=s.index))
    return pd.concat(parts).loc[steps.index]


# ---------------------------------------------------------------------------------------
# The reading rule (R2.3): at most three steps per (GPU, engine), by composition only.
READING_RULE = ("three sweep compositions, chosen by batch composition alone: (1) the decode step with the "
                "fewest requests at the smallest TP (host, launch and per-step floors dominate), (2) the decode "
                "step with the most requests at the smallest TP (the per-request host slope), (3) the decode step "
                "with the fewest requests at the largest TP (the per-step cost tensor parallelism adds). Within "
                "a composition the reading is the earliest such step of the sweep (lowest step id). Every step of "
                "those three sweep compositions at that TP (the repeats of the same cell) is excluded from scoring; "
                "steps of the chat-shaped segment are never excluded: they are other cells.")


@dataclass
class Readings:
    rows: list  # index labels of the three reading steps in `steps`
    cells: list  # (gpu, engine, tp, phase, composition) per reading
    excluded: list = field(default_factory=list)  # index labels excluded from scoring


def composition_key(steps):
    """A hashable composition per step: (tp, phase, ctx_tokens, ctx_requests, ctx_kv_tokens, decode_requests)."""
    cols = ["tp", "phase", "ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_requests"]
    return list(map(tuple, steps[cols].astype(object).to_numpy()))


def reading_rule(steps) -> Readings:
    """The three reading steps of one (GPU, engine) step table (see READING_RULE)."""
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
        cand = d[n == target].sort_values("step")
        picks.append(cand.index[0])
    picks = list(dict.fromkeys(picks))  # one TP degree: the third reading equals the first
    sweep = steps[steps["segment"] == "sweep"]
    keys = composition_key(sweep)
    key_of = dict(zip(steps.index, composition_key(steps)))
    chosen = {key_of[i] for i in picks}
    excluded = sorted(set(picks) | {i for i, k in zip(sweep.index, keys) if k in chosen})
    cells = [(str(steps.at[i, "gpu"]), str(steps.at[i, "engine"]), int(steps.at[i, "tp"]), "decode",
              int(steps.at[i, "decode_requests"]), int(steps.at[i, "step"])) for i in picks]
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
    from steptime.metrics import score, signed_error

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


def signed_error_bins(steps, pred, by: str, bins) -> list[dict]:
    """Median signed error per bin of `by` (e.g. decode_requests, total tokens)."""
    from steptime.metrics import signed_error

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
def exposed_host(steps, kernels_pred, max_requests: int = 4) -> list[dict]:
    """Measured minus predicted GPU kernel time on decode steps with at most `max_requests`
    requests (where the host dominates), per (gpu, engine, tp): median and IQR, in ms."""
    x = steps.assign(gpu_ms=kernels_pred.loc[steps.index, "pred_ms"].to_numpy())
    x = x[(x["phase"] == "decode") & (x["decode_requests"] <= max_requests)]
    out = []
    for (g, e, tp), d in x.groupby(["gpu", "engine", "tp"], sort=True):
        ex = (d["latency_ms"] - d["gpu_ms"]).to_numpy()
        out.append({"gpu": g, "engine": e, "tp": int(tp), "steps": int(len(d)),
                    "exposed_ms_median": float(np.median(ex)), "exposed_ms_q25": float(np.quantile(ex, 0.25)),
                    "exposed_ms_q75": float(np.quantile(ex, 0.75)),
                    "exposed_share_median": float(np.median(ex / d["latency_ms"].to_numpy()))})
    return out


# ---------------------------------------------------------------------------------------
# E2.11: token time as one decode step at the measured mean batch (an approximation)
TPOT_COLUMNS = ("dataset", "gpu", "model", "engine", "tp", "dtype", "mode", "batch", "prompt_tokens",
                "output_tokens", "tpot_ms")
TPOT_NOTE = ("TPOT approximated as ONE decode step at the measured mean running batch (linear between the two "
             "integer batches around it), every request at the mean context prompt + output/2, plus for "
             "aggregated serving the prefill of the requests that arrive meanwhile, amortised over the decode "
             "steps (batch / output_tokens prefills of prompt_tokens per step, GPU kernel time only). This "
             "approximates a continuous-batching schedule; it is not a replay of one. Silicon rows that record "
             "no precision are predicted in bf16 (ASSUMED; counted per group in metrics.dtype_assumed).")


def mean_context(prompt_tokens, output_tokens):
    """Mean KV length a decode step reads over a request's life: the prompt plus half the output."""
    return np.asarray(prompt_tokens, dtype=float) + np.asarray(output_tokens, dtype=float) / 2.0


def _decode_frame(n, kv, tp):
    import pandas as pd

    n = np.asarray(n, dtype=int)
    return pd.DataFrame({"tp": tp, "phase": "decode", "ctx_tokens": 0, "ctx_requests": 0, "ctx_kv_tokens": 0,
                         "decode_requests": n, "mean_decode_kv_tokens": np.asarray(kv, float)})


def _prefill_frame(tokens, tp):
    import pandas as pd

    t = np.maximum(np.asarray(tokens, dtype=float).round().astype(int), 2)
    return pd.DataFrame({"tp": tp, "phase": "prefill", "ctx_tokens": t, "ctx_requests": 1, "ctx_kv_tokens": 0,
                         "decode_requests": 0, "mean_decode_kv_tokens": 0.0})


def predict_tpot(rows, predictor: Callable, kernels: Callable | None = None, tp: int = 1) -> dict:
    """Predicted TPOT (ms) for rows of ONE (gpu, model, engine, tp, dtype): decode step at the
    mean batch, plus the amortised prefill for mode == 'agg' (GPU kernel time of a 1 x prompt
    prefill from `kernels`, times batch / output_tokens)."""
    B = rows["batch"].to_numpy(float)
    if np.any(B <= 0):
        raise WallclockError("TPOT rows: mean running batch must be > 0")
    kv = mean_context(rows["prompt_tokens"], rows["output_tokens"])
    lo = np.maximum(np.floor(B), 1).astype(int)
    hi = np.maximum(np.ceil(B), 1).astype(int)
    t_lo = predictor(_decode_frame(lo, kv, tp), tp, None)["total"]
    t_hi = predictor(_decode_frame(hi, kv, tp), tp, None)["total"]
    w = np.where(hi > lo, B - lo, 0.0)
    dec = t_lo + w * (t_hi - t_lo)
    pre = np.zeros(len(rows))
    kdec = np.full(len(rows), np.nan)
    agg = (rows["mode"] == "agg").to_numpy()
    if kernels is not None:
        k_lo = kernels(_decode_frame(lo, kv, tp), tp, None)["total"]
        k_hi = kernels(_decode_frame(hi, kv, tp), tp, None)["total"]
        kdec = k_lo + w * (k_hi - k_lo)
    if kernels is not None and agg.any():
        tp_pre = kernels(_prefill_frame(rows["prompt_tokens"].to_numpy()[agg], tp), tp, None)["total"]
        pre[agg] = tp_pre * B[agg] / np.maximum(rows["output_tokens"].to_numpy(float)[agg], 1.0)
    return {"decode_ms": dec, "prefill_amortised_ms": pre, "pred_ms": dec + pre, "kernels_decode_ms": kdec}


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
GPU_KINDS = ("gemm", "attention", "light", "comm")
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
    from steptime.metrics import score

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


def per_op_tables(gpu: str, gemm_df=None, attn_cells=None, allreduce_df=None) -> dict:
    """name -> (term kind, steptime prediction, measured) in ms on one GPU's per-operator tables
    with the shipped constants: GEMM cells (LLM-shaped: n, k >= 1024, m <= 16384), attention
    cells of LLM shapes, and all-reduce cells (vLLM's custom all-reduce under CUDA graphs ->
    'custom', NCCL -> 'nccl'; every message size and GPU count)."""
    from steptime.calibration import Constants
    from steptime.ops import predict_ops
    from steptime.specs import get_gpu

    out = {}
    if gemm_df is not None:
        g = gemm_df[gemm_df["gpu"] == gpu]
        llm = (g["n"] >= 1024) & (g["k"] >= 1024) & (g["m"] <= 16384)
        g = g[llm]
        if len(g):
            p = predict_ops("gemm", gpu, m=g["m"].to_numpy(float), n=g["n"].to_numpy(float), k=g["k"].to_numpy(float))
            out["aic_gemm_llm"] = ("gemm", p["t_ms"], g["latency_ms"].to_numpy(float))
    if attn_cells is not None:
        from steptime.terms import attention as A

        x = attn_cells[(attn_cells["gpu"] == gpu) & attn_cells["llm"]]
        for phase in ("decode", "prefill"):
            xp = x[x["phase"] == phase]
            if len(xp):
                r = A.attention_cells(xp["b"].to_numpy(), xp["s"].to_numpy(), xp["c"].to_numpy(), xp["H"].to_numpy(),
                                      xp["Hkv"].to_numpy(), xp["d"].to_numpy(), get_gpu(gpu), Constants.default(),
                                      kv_dtype=xp["kv_dtype"].to_numpy(), warm_l2=True)
                out[f"aic_attention_{phase}_llm"] = ("attention", np.asarray(r["t"]) * 1e3, xp["y_ms"].to_numpy(float))
    if allreduce_df is not None:
        from steptime.terms import comm

        a = allreduce_df[allreduce_df["gpu"] == gpu]
        for backend, impl in (("vllm_graph", "custom"), ("nccl", "nccl")):
            ab = a[a["backend"] == backend]
            if not len(ab):
                continue
            pred = np.zeros(len(ab))
            for n in sorted(ab["num_gpus"].unique()):
                m = (ab["num_gpus"] == n).to_numpy()
                pred[m] = comm.allreduce_time(ab["message_bytes"].to_numpy(float)[m], int(n), get_gpu(gpu),
                                              Constants.default(), impl) * 1e3
            out[f"aic_allreduce_{impl}"] = ("comm", pred, ab["latency_ms"].to_numpy(float))
    return out


# ---------------------------------------------------------------------------------------
# E1.26 + R2.3 + E1.18 on one (GPU, engine) step table
@dataclass
class FpmSpec:
    """What run_fpm fits and compares (all from the workflow's params)."""
    model: str
    engine: str = "vllm"
    dtype: str = "bf16"
    fit_names: tuple = ("host_a_ms", "host_b_ms", "host_ray_tp_ms")        # R2.3: the engine's constants
    block_fit_names: tuple = ("host_a_ms", BLOCK_SCALE, "host_ray_tp_ms")   # R2.3 arm C: scale on kernels
    bounds: dict = field(default_factory=dict)
    small_requests: int = 4
    kv_bucket: int = 512


def run_fpm(steps, spec: FpmSpec, *, fitted_doc=None, n_boot: int = 1000, seed: int = 0) -> dict:
    """Every predictor on the same held-out steps of one (GPU, engine) table.

    Without `fitted_doc`, R2.3: the engine constants `spec.fit_names` (and the block-scale
    arm's `spec.block_fit_names`) are fitted on the three reading steps. With it (the
    engine_constants.yaml R2.3 wrote), E1.26: those values are used as written, after
    checking that they were read from the same three steps the rule picks here."""
    from steptime.calibration import Calibration, Constants
    from steptime.specs import get_gpu

    check_steps(steps)
    gpus = steps["gpu"].unique()
    if len(gpus) != 1:
        raise WallclockError(f"run_fpm: one GPU per call (got {sorted(gpus)})")
    gpu = str(gpus[0])
    rd = reading_rule(steps)
    ev = steps.drop(index=rd.excluded)
    cal = Calibration()
    cal.record(f"engine[{spec.engine}@{gpu}]", rd.cells, READING_RULE)
    cal.check_disjoint([(str(r.gpu), str(r.engine), int(r.tp), str(r.phase), int(r.decode_requests), int(r.step))
                        for r in ev.itertuples()])
    eng = with_scales(make_predictor(spec.engine, spec.model, gpu, engine=spec.engine, dtype=spec.dtype))
    preds = {"kernels": make_predictor("kernels", spec.model, gpu, dtype=spec.dtype), spec.engine: eng,
             "roofline": make_predictor("roofline", spec.model, gpu)}
    fit_name, blk_name = f"{spec.engine}_wallclock_fit", f"{spec.engine}_wallclock_block_scale"
    c0 = Constants.default()
    names = list(dict.fromkeys(list(spec.fit_names) + list(spec.block_fit_names)))
    x0 = {n: (1.0 if n in SCALES else 0.0 if n == COMM_OFFSET else _start_value(n, spec.engine, gpu, c0))
          for n in names}
    fitted_blk = None
    if fitted_doc is None:
        bnd = {BLOCK_SCALE: (0.3, 3.0), COMM_SCALE: (0.0, 3.0), COMM_OFFSET: (-50.0, 50.0),
               **{k: tuple(v) for k, v in spec.bounds.items()}}
        fitted = fit_engine_constants(steps, rd, eng, list(spec.fit_names), x0, bnd)
        blk = eng
        fitted_blk = fit_engine_constants(steps, rd, blk, list(spec.block_fit_names), x0, bnd)
    else:
        fitted, cells = fitted_values(fitted_doc, spec.engine, gpu)
        if sorted(map(tuple, cells)) != sorted(map(tuple, rd.cells)):
            raise WallclockError(f"engine constants for {spec.engine}@{gpu} were read from {cells}, "
                                 f"not the rule's steps {rd.cells}")
    tabs = {name: predict_table(ev, p) for name, p in preds.items()}
    tabs[fit_name] = predict_table(ev, eng, fitted)
    if fitted_blk is not None:
        tabs[blk_name] = predict_table(ev, eng, fitted_blk)
    sol_ok = ev["latency_ms"].to_numpy() >= tabs["roofline"]["pred_ms"].to_numpy()
    scores = {name: score_steps(ev, t, n_boot=n_boot, seed=seed) for name, t in tabs.items()}
    scores_sol = {name: score_steps(ev[sol_ok], t, n_boot=n_boot, seed=seed) for name, t in tabs.items()}
    scaling = {name: tp_scaling(ev, t, kv_bucket=spec.kv_bucket) for name, t in tabs.items()}
    ev_tok = ev.assign(tokens=ev["ctx_tokens"] + ev["decode_requests"])
    focus = [n for n in (spec.engine, fit_name, "kernels", "roofline") if n in tabs]
    bins_req = {n: signed_error_bins(ev, tabs[n], "decode_requests", [0, 2, 5, 9, 17, 25, 33, 65, 129]) for n in focus}
    bins_tok = {n: signed_error_bins(ev_tok, tabs[n], "tokens", [0, 33, 129, 513, 2049, 4097, 8193]) for n in focus}
    return {"gpu": gpu, "engine": spec.engine, "model": spec.model, "readings": rd, "calibration": cal,
            "fitted": fitted, "fitted_block": fitted_blk, "x0": x0, "eval": ev, "pred": tabs,
            "scores": scores, "scores_sol": scores_sol, "tp_scaling": scaling,
            "shares": {n: shares(tabs[n], ev) for n in focus if n != "roofline"},
            "signed_vs_requests": bins_req, "signed_vs_tokens": bins_tok,
            "exposed_host": exposed_host(ev, tabs["kernels"], spec.small_requests),
            "below_speed_of_light": {"steps": int((~sol_ok).sum()),
                                     "by_tp_phase": [{"tp": int(tp), "phase": ph, "steps": int(n)} for (tp, ph), n in
                                                     ev[~sol_ok].groupby(["tp", "phase"]).size().items()]},
            "names": {"fit": fit_name, "block": blk_name}}


def _start_value(name: str, engine: str, gpu: str, constants) -> float:
    """The shipped value of an engine field (profile) or a calibration constant, for one GPU."""
    from steptime.specs import get_gpu
    from steptime.specs.engines import get_engine

    e = get_engine(engine, fitted={})
    g = get_gpu(gpu)
    if name in e.values:
        return float(e.get(name, g, constants))
    return float(constants.get(name, g))


def engine_constants_doc(fits: list[dict], spec: FpmSpec, experiment: str = "R2.3") -> dict:
    """The fitted-constants file: engine fields under `engines`, calibration constants under
    `constants`, each {value, provenance: FITTED, source, experiment, cells}."""
    from steptime.specs.engines import get_engine

    doc: dict = {"engines": {}, "constants": {}, "scales": {}}
    for r in fits:
        fields = set(get_engine(r["engine"], fitted={}).values)
        for n, v in sorted(r["fitted"].items()):
            cells = [list(c) for c in r["readings"].cells]
            sec = "engines" if n in fields else ("scales" if n in STEP_ADJUSTMENTS else "constants")
            doc[sec].setdefault(r["engine"], {}).setdefault(r["gpu"], {})[n] = {
                "value": round(float(v), 6), "provenance": "FITTED", "experiment": experiment, "cells": cells,
                "source": f"{experiment}: least squares on log step time over three wall-clock steps of "
                          f"{r['model']} ({READING_RULE.split(':')[0]}; shipped value {r['x0'][n]:.6g})"}
    return doc


def fitted_values(doc, engine: str, gpu: str) -> tuple[dict, list]:
    """({name: value}, reading cells) of one (engine, GPU) in a fitted-constants doc or path."""
    raw = doc if isinstance(doc, dict) else __import__("yaml").safe_load(__import__("pathlib").Path(doc).read_text())
    vals, cells = {}, None
    for sec in ("engines", "constants", "scales"):
        for n, e in ((raw.get(sec) or {}).get(engine, {}).get(gpu, {}) or {}).items():
            vals[n] = float(e["value"])
            cells = [tuple(c) for c in e.get("cells", [])]
    if not vals:
        raise WallclockError(f"no fitted engine constants for {engine}@{gpu}")
    return vals, cells


# ---------------------------------------------------------------------------------------
# Adapters: the tidy tables of steptime.data (W1's loaders) -> the frames above
def engine_profile(engine: str, version=None) -> str:
    """The engine profile of a measured (engine, version): vLLM before 0.8 ran the V0 engine
    (V1 became the default in 0.8), later ones V1; other engines map to their own profile."""
    e = str(engine).lower()
    if e == "vllm" and version is not None and str(version) not in ("", "<NA>", "nan", "None"):
        try:
            major, minor = (int(p) for p in str(version).split(".")[:2])
        except ValueError:
            return "vllm"
        return "vllm-v0" if (major, minor) < (0, 8) else "vllm"
    return e


def fpm_steps(tidy, moe: bool = False):
    """STEP_COLUMNS from the tidy `fpm_steps` table (dense models only unless `moe`)."""
    x = tidy if moe else tidy[~tidy["moe"].astype(bool)]
    out = x.rename(columns={"workload_segment": "segment"}).copy()
    out["phase"] = out["phase"].replace({"context": "prefill"})
    out["step"] = out["counter_id"]
    if "mean_decode_kv_tokens" not in out:
        out["mean_decode_kv_tokens"] = np.where(out["decode_requests"] > 0,
                                                out["decode_kv_tokens"] / np.maximum(out["decode_requests"], 1), 0.0)
    out["engine"] = [engine_profile(e, v) for e, v in zip(out["engine"], out["engine_version"])]
    return out.reset_index(drop=True)


DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp8": "fp8", "float8": "fp8"}


def tpot_table(mlenergy_v2=None, mlenergy_v3=None, silicon=None, prompt_tokens: dict | None = None):
    """One TPOT frame (TPOT_COLUMNS + `measure`, `source_id`) from the tidy token-time tables, and
    the rows left out with their reason (a count per reason and dataset).

    ML.ENERGY: `avg_batch` is the measured mean running batch; the prompt length is not
    published, so the mean prompt comes from `prompt_tokens[(dataset, task)]` (an ASSUMED
    estimate, given by the caller); v2 gives the mean TPOT, v3 the MEDIAN inter-token latency
    (the measure compared is named per row). AIConfigurator silicon: the client concurrency
    stands for the running batch, prompt and output lengths are exact (isl, osl)."""
    import pandas as pd

    rows, skipped = [], []

    def skip(dataset, reason, n):
        if n:
            skipped.append({"dataset": dataset, "reason": reason, "rows": int(n)})

    prompt_tokens = prompt_tokens or {}
    for name, df, measure in (("mlenergy-v2", mlenergy_v2, "mean_tpot_ms"), ("mlenergy-v3", mlenergy_v3, "median_itl_ms")):
        if df is None:
            continue
        x = df.copy()
        skip(name, "MoE not supported yet", x["moe"].astype(bool).sum())
        x = x[~x["moe"].astype(bool)]
        if "arch" in x:
            skip(name, f"architecture not modelled (hybrid)", (x["arch"] == "hybrid").sum())
            x = x[x["arch"] == "dense"]
        for col, why in (("pp", "pipeline parallelism > 1 not modelled"), ("dp", "data parallelism > 1 not modelled"),
                         ("ep", "expert parallelism > 1 not modelled")):
            if col in x:
                skip(name, why, (x[col] > 1).sum())
                x = x[x[col] <= 1]
        key = [(name, t) for t in x["task"]]
        known = np.array([k in prompt_tokens for k in key], dtype=bool)
        skip(name, "task without a stated prompt-length estimate (multimodal or unlisted)", (~known).sum())
        x = x[known]
        rows.append(pd.DataFrame({
            "dataset": name, "gpu": x["gpu"].to_numpy(), "model": x["model"].to_numpy(),
            "model_source": x["model_source"].astype(str).to_numpy(),
            "engine": [engine_profile(e, v) for e, v in zip(x["engine"], x["engine_version"])],
            "tp": x["tp"].to_numpy(int), "dtype": [DTYPES.get(str(d).lower(), str(d).lower()) for d in x["dtype"]],
            "mode": "agg", "batch": x["avg_batch"].to_numpy(float),
            "prompt_tokens": [float(prompt_tokens[(name, t)]) for t in x["task"]],
            "output_tokens": x["avg_output_len"].to_numpy(float), "tpot_ms": x[measure].to_numpy(float),
            "measure": measure, "task": x["task"].to_numpy(),
            "source_id": x.get("source_file", x["model"]).astype(str).to_numpy()}))
    if silicon is not None:
        name = "aic-silicon"
        x = silicon.copy()
        skip(name, "MoE not supported yet", x["moe"].astype(bool).sum())
        x = x[~x["moe"].astype(bool)]
        skip(name, "disaggregated serving (per-pool layout not modelled)", (x["mode"] != "agg").sum())
        x = x[x["mode"] == "agg"]
        pp = x["pp"].fillna(1).astype(int)
        skip(name, "pipeline parallelism > 1 not modelled", (pp > 1).sum())
        x = x[pp <= 1]
        prec = x["precision"].astype("string").fillna("").str.lower()
        quant = x["gemm_quant_mode"].astype("string").fillna("").str.lower()
        dtype = np.where(quant.eq("fp8") | prec.eq("fp8"), "fp8",
                         np.where(prec.isin(["bf16", "bfloat16", "fp16", "float16"]) | (prec.eq("") & quant.eq("")),
                                  "bf16", "other:" + prec))
        other = np.char.startswith(dtype.astype(str), "other:")
        skip(name, "precision not modelled (fp4 / block-scaled fp8)", other.sum())
        x, dtype, prec, quant = x[~other], dtype[~other], prec[~other], quant[~other]
        rows.append(pd.DataFrame({
            "dataset": name, "gpu": x["gpu"].to_numpy(), "model": x["model"].to_numpy(),
            "model_source": x["model_source"].astype(str).to_numpy(),
            "engine": [engine_profile(e, v) for e, v in zip(x["engine"], x["engine_version"])],
            "tp": x["tp"].astype(int).to_numpy(), "dtype": dtype, "mode": "agg",
            "batch": x["concurrency"].astype(float).to_numpy(), "prompt_tokens": x["isl"].to_numpy(float),
            "output_tokens": x["osl"].to_numpy(float), "tpot_ms": x["tpot_ms"].to_numpy(float),
            "measure": "tpot_ms", "task": "isl/osl", "source_id": x["id"].astype(str).to_numpy(),
            "dtype_assumed": (prec.eq("") & quant.eq("")).to_numpy()}))
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=list(TPOT_COLUMNS))
    return frame, skipped


def _known_model(model: str, rows) -> str:
    """The table's model key, or its Hugging Face repository id when the key is not in models.yaml."""
    from steptime.errors import UnknownModelError
    from steptime.specs import get_model

    try:
        return get_model(model).key
    except UnknownModelError:
        if "model_source" in rows:
            return get_model(str(rows["model_source"].iloc[0])).key
        raise


def run_tpot(rows, model_of=None, n_boot: int = 1000, seed: int = 0, fitted=None) -> dict:
    """Predict every TPOT row (grouped by dataset, gpu, model, engine, tp, dtype) with the engine
    profile, and score per dataset x GPU x engine (and per TP). A group the predictor refuses
    (unknown model, memory, precision a GPU cannot run) is left out with its reason."""
    import pandas as pd

    from steptime.metrics import score

    preds, skipped = [], []
    keys = ["dataset", "gpu", "model", "engine", "tp", "dtype"]
    for k, d in rows.groupby(keys, sort=True):
        ds, gpu, model, eng, tp, dt = k
        try:
            model = _known_model(model, d)
            f = make_predictor(eng, model if model_of is None else model_of(model), gpu, engine=eng, dtype=dt,
                               fitted=fitted)
            kern = make_predictor("kernels", model if model_of is None else model_of(model), gpu, dtype=dt)
            r = predict_tpot(d, f, kern, tp=int(tp))
        except SteptimeError as exc:
            skipped.append({"dataset": ds, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
                            "rows": int(len(d)), "group": [str(v) for v in k]})
            continue
        preds.append(d.assign(pred_ms=r["pred_ms"], decode_ms=r["decode_ms"],
                              prefill_amortised_ms=r["prefill_amortised_ms"], kernels_decode_ms=r["kernels_decode_ms"]))
    if skipped:  # one line per (dataset, reason), rows summed
        sk = pd.DataFrame(skipped).groupby(["dataset", "reason"], as_index=False)["rows"].sum()
        skipped = sk.to_dict("records")
    p = pd.concat(preds) if preds else rows.iloc[:0].assign(pred_ms=[], decode_ms=[], prefill_amortised_ms=[],
                                                            kernels_decode_ms=[])
    scores = []
    for by, sub in ((["dataset", "gpu", "engine"], "tpot"), (["dataset", "gpu", "engine", "tp"], "tpot_by_tp")):
        for k, d in p.groupby(by, sort=True):
            s = score(d["pred_ms"].to_numpy(), d["tpot_ms"].to_numpy(), n_boot=n_boot, seed=seed)
            s["signed_mean"] = float(np.mean((d["pred_ms"] - d["tpot_ms"]) / d["tpot_ms"]))
            s["models"] = sorted(d["model"].unique().tolist())
            scores.append({**dict(zip(by, [v.item() if hasattr(v, "item") else v for v in k])),
                           "tp": int(k[3]) if len(k) > 3 else "all", "subset": sub, **s})
    return {"pred": p, "scores": scores, "skipped": skipped}


# ---------------------------------------------------------------------------------------
# E1.21: prefill on wall clock across GPUs, where a set holds isolated prefills
def isolated_prefills(silicon):
    """AIConfigurator silicon rows whose TTFT is one isolated prefill: aggregated serving at client
    concurrency 1 (no queue, no batching with other prefills), dense models."""
    x = silicon[(~silicon["moe"].astype(bool)) & (silicon["mode"] == "agg")]
    return x[x["concurrency"].astype(float) == 1.0]


def prefill_coverage(mlenergy_v2=None, mlenergy_v3=None, silicon=None) -> list[dict]:
    """Per (dataset, GPU): dense configurations, and how many carry an isolated prefill time."""
    out = []
    for name, df in (("mlenergy-v2", mlenergy_v2), ("mlenergy-v3", mlenergy_v3)):
        if df is None:
            continue
        for g, d in df[~df["moe"].astype(bool)].groupby("gpu"):
            out.append({"dataset": name, "gpu": g, "dense_configurations": int(len(d)), "isolated_prefills": 0,
                        "why": "the leaderboard publishes token times (TPOT / inter-token latency), energy and "
                               "throughput only: no time-to-first-token or prefill time"})
    if silicon is not None:
        iso = isolated_prefills(silicon)
        for g, d in silicon[~silicon["moe"].astype(bool)].groupby("gpu"):
            n = int((iso["gpu"] == g).sum())
            cmin = d["concurrency"].astype(float).min()
            out.append({"dataset": "aic-silicon", "gpu": g, "dense_configurations": int(len(d)), "isolated_prefills": n,
                        "why": "" if n else f"TTFT only at client concurrency >= {cmin:g}: queueing and batched "
                                            f"prefills are inside it, not one prefill step"})
    return out


def score_isolated_prefills(iso, n_boot: int = 1000, seed: int = 0, fitted=None) -> tuple[list[dict], list[dict]]:
    """TTFT at concurrency 1 predicted as one prefill step of `isl` tokens (engine profile)."""
    import pandas as pd

    from steptime.metrics import score

    scores, skipped = [], []
    if iso is None or not len(iso):
        return scores, skipped
    for (g, model, eng_raw, ver, tp), d in iso.groupby(["gpu", "model", "engine", "engine_version", "tp"],
                                                        dropna=False, sort=True):
        eng = engine_profile(eng_raw, ver)
        prec = str(d["precision"].iloc[0]).lower()
        dt = "fp8" if prec == "fp8" else ("bf16" if prec in ("bf16", "bfloat16", "<na>", "nan", "none", "") else None)
        if dt is None:
            skipped.append({"dataset": "aic-silicon", "reason": f"precision {prec} not modelled", "rows": int(len(d))})
            continue
        try:
            f = make_predictor(eng, model, g, engine=eng, dtype=dt, fitted=fitted)
            pred = f(_prefill_frame(d["isl"].to_numpy(), int(tp)), int(tp), None)["total"]
        except SteptimeError as exc:
            skipped.append({"dataset": "aic-silicon", "reason": f"{type(exc).__name__}: {str(exc)[:160]}",
                            "rows": int(len(d))})
            continue
        s = score(pred, d["ttft_ms"].to_numpy(float), n_boot=n_boot, seed=seed)
        scores.append({"dataset": "aic-silicon", "gpu": g, "engine": eng, "tp": int(tp), "model": model,
                       "dtype": dt, "subset": "prefill", **s})
    return scores, skipped


def write_fitted_constants(path, doc: dict) -> None:
    """Write the fitted-constants file (YAML, sorted keys, atomically) with a header naming its writer."""
    import yaml

    from steptime.io import atomic_path

    text = ("# Engine constants read from at most three wall-clock steps per (GPU, engine): written by the\n"
            "# pipeline (rule R2_3, steptime.experiments.wallclock); do not edit. Read with\n"
            "# steptime.specs.engines.get_engine(name, fitted=<this file>) (the `engines` part) and\n"
            "# steptime.experiments.wallclock.split_fitted / make_predictor(fitted=...) (all three parts).\n")
    text += yaml.safe_dump(doc, sort_keys=True, width=120)
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def prompt_sensitivity(rows, prompt_tokens: dict, scales, fitted=None) -> list[dict]:
    """TPOT MAPE per dataset x GPU x engine of the rows whose prompt length is an estimate (ML.ENERGY),
    with every estimate multiplied by each of `scales`: how much the stated guess matters."""
    est = rows[rows["dataset"].str.startswith("mlenergy")]
    out = []
    for sc in scales:
        x = est.assign(prompt_tokens=est["prompt_tokens"] * float(sc))
        res = run_tpot(x, n_boot=10, seed=0, fitted=fitted)
        for s in res["scores"]:
            if s["subset"] == "tpot":
                out.append({"scale": float(sc), "dataset": s["dataset"], "gpu": s["gpu"], "engine": s["engine"],
                            "cells": s["cells"], "mape": s["mape"]})
    return out


# ---------------------------------------------------------------------------------------
# `steptime evaluate --family wallclock`
def evaluate_records(fpm_tidy=None, mlenergy_v2=None, mlenergy_v3=None, silicon=None, *, fit: dict,
                     prompt_tokens: dict, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """Evaluate records from the tidy tables: FPM steps per (GPU, engine, TP, phase) for the kernel
    sum, the shipped profile, the profile with its three wall-clock readings (refitted here by the
    same rule as R2.3) and the bare roofline; TPOT per (dataset, GPU, engine, TP) and pooled over TP
    (tp None) for the engine profile. Errors as fractions."""
    out, fits = [], []
    if fpm_tidy is not None:
        steps = fpm_steps(fpm_tidy)
        for (gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
            r = run_fpm(s, FpmSpec(model=model, engine=engine, **fit), n_boot=n_boot, seed=seed)
            fits.append((r, FpmSpec(model=model, engine=engine, **fit)))
            for name in ("kernels", "roofline", engine, r["names"]["fit"]):
                for sc in r["scores"][name]:
                    out.append({"family": "wallclock", "dataset": "aic-fpm", "gpu": gpu, "engine": engine,
                                "tp": int(sc["tp"]), "predictor": name, "subset": sc["phase"], "cells": sc["cells"],
                                "mape": sc["mape"], "median_ape": sc["median_ape"], "mape_ci": sc["mape_ci"]})
    if any(t is not None for t in (mlenergy_v2, mlenergy_v3, silicon)):
        doc = engine_constants_doc([r for r, _ in fits], fits[0][1]) if fits else None
        rows, _ = tpot_table(mlenergy_v2, mlenergy_v3, silicon, prompt_tokens=prompt_tokens)
        res = run_tpot(rows, n_boot=n_boot, seed=seed, fitted=doc)
        for sc in res["scores"]:
            out.append({"family": "wallclock", "dataset": sc["dataset"], "gpu": sc["gpu"], "engine": sc["engine"],
                        "tp": sc["tp"] if sc["subset"] == "tpot_by_tp" else None, "predictor": "steptime",
                        "subset": "tpot", "cells": sc["cells"], "mape": sc["mape"], "median_ape": sc["median_ape"],
                        "mape_ci": sc["mape_ci"]})
    return out


def smallest_batch_rows(rows, max_batch: float):
    """Per (dataset, gpu, model, engine, tp, dtype): the rows at the group's smallest mean batch,
    where that batch is at most `max_batch` (the token-time rows where the host weighs most)."""
    keys = ["dataset", "gpu", "model", "engine", "tp", "dtype"]
    if not len(rows):
        return rows
    bmin = rows.groupby(keys)["batch"].transform("min")
    return rows[(rows["batch"] == bmin) & (bmin <= max_batch)]
