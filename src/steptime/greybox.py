"""The grey box's per-term corrections, shipped as data (`steptime predict --explain`).

The lab's grey box (`steptime_residual`, E2.1) keeps every term of the step equation and
multiplies each by a learned, bounded correction

    c_term(x) = exp(clip(g_term(phi(x)), -B, B)),   B = ln 2 (a factor within [1/2, 2]),

g_term a boosted-tree regressor of the log residual log(measured / steptime) of the term on
the GPUs' tables. The product may not import the lab, so the fitted trees ship as arrays
(calibration/greybox.npz, written by the lab rule `settle_greybox_corrections` and copied
by `steptime calibration ship`) and are evaluated here with numpy alone.

This module owns the term features phi (the lab's fit uses these same functions), the
tree evaluator and `explain`, which maps the step's terms onto the corrected tables:

* the four projection GEMMs: the GEMM correction (AIConfigurator's bf16 GEMM table) at
  m = the step's new tokens, (n, k) the projection's shape at the TP degree;
* attention (prefill, decode): the attention correction (AIConfigurator's bf16 attention
  tables) at the step's requests as one cell of alike requests (count, mean new tokens,
  mean KV length);
* rmsnorm, add, rope, act: the corrections of Vidur's per-layer operators (input and
  post-attention layernorm averaged for rmsnorm).

Every other term (kv_write, emb, lm_head, all-reduce, host, sampling) is physics only
(factor 1): no table corrects it. fp8 GEMMs and an fp8 KV cache are not corrected either
(the tables are bf16).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from types import MappingProxyType

import numpy as np

from steptime.calibration import GREYBOX_FILE
from steptime.errors import InputError
from steptime.io import atomic_path
from steptime.specs import get_gpu, get_model
from steptime.step import layer_shapes
from steptime.terms import light

BOUND = math.log(2.0)
TILE = 128  # output tile edge used for the wave count (the common bf16 CTA tile)
# the product's terms -> the shipped correction models (averaged when several)
TERM_MODELS = MappingProxyType({"qkv_proj": ("gemm",), "o_proj": ("gemm",), "gate_up_proj": ("gemm",), "down_proj": ("gemm",),
               "attn_prefill": ("attention",), "attn_decode": ("attention",),
               "rmsnorm": ("input_layernorm", "post_attention_layernorm"), "add": ("add",), "rope": ("attn_rope",),
               "act": ("mlp_act",)})
LIGHT_KERNEL = MappingProxyType({"input_layernorm": "rmsnorm", "post_attention_layernorm": "rmsnorm", "attn_rope": "rope",
                "mlp_act": "act", "add": "add"})


# ---------------------------------------------------------------- features (shared with the lab's fit)

def _lg(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 1e-12))


def _gddr(g) -> float:
    return float(str(g.mem_type or "").upper().startswith("GDDR"))


def datasheet(gpu) -> list[float]:
    """The GPU's datasheet features: log2 peak bf16, bandwidth, SMs, L2, ridge point; SM major; GDDR flag."""
    g = _spec(gpu)
    return [math.log2(g.peak_flops), math.log2(g.mem_bw), math.log2(float(g.sms)), math.log2(float(g.l2_mb)),
            math.log2(g.peak_flops / g.mem_bw), float(int(g.sm_version) // 10), _gddr(g)]


def _spec(gpu):
    return get_gpu(gpu) if isinstance(gpu, str) else gpu


def _with_datasheet(cols, gpu) -> np.ndarray:
    n = len(np.asarray(cols[0]))
    return np.column_stack(list(cols) + [np.tile(np.asarray(datasheet(gpu)), (n, 1))])


def _l2(g) -> float:
    return float(g.l2_mb) * 2 ** 20


def gemm_features(m, n, k, gpu) -> np.ndarray:
    """A GEMM cell's features: log2 m, n, k, working set over L2, waves over SMs, intensity over the ridge."""
    g = _spec(gpu)
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    f, b = 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    waves = np.ceil(m / TILE) * np.ceil(n / TILE) / float(g.sms)
    return _with_datasheet([_lg(m), _lg(n), _lg(k), _lg(b / _l2(g)), _lg(waves),
                            _lg(f / b / (g.peak_flops / g.mem_bw))], g)


def attention_work(bs, s, kv, h, hk, d):
    """FLOPs and bytes of an attention cell (bf16): causal prefill, KV-read decode."""
    ctx = kv + (s + 1.0) / 2.0
    return bs * 4.0 * h * d * s * ctx, bs * 2.0 * (2.0 * h * d * s + 2.0 * hk * d * (kv + s))


def attention_features(decode, bs, s, kv, h, hk, d, gpu) -> np.ndarray:
    """An attention cell's features (AIConfigurator's cell: `bs` alike requests of `s` new tokens, `kv` its
    kv_len column, `h` / `hk` query / KV heads of dimension `d`)."""
    g = _spec(gpu)
    dec, bs, s, kv, h, hk, d = (np.asarray(x, dtype=float) for x in (decode, bs, s, kv, h, hk, d))
    f, b = attention_work(bs, s, kv, h, hk, d)
    waves = bs * h * np.ceil(s / TILE) / float(g.sms)
    return _with_datasheet([dec, _lg(bs), _lg(s), _lg(kv), _lg(h), _lg(hk), _lg(b / _l2(g)), _lg(waves),
                            _lg(f / b / (g.peak_flops / g.mem_bw))], g)


def step_op_features(gemm_op: bool, tokens, tp, hidden, flops, nbytes, gpu) -> np.ndarray:
    """A Vidur per-layer operator's features at `tokens` new tokens (model hidden size, TP degree)."""
    g = _spec(gpu)
    T, tp, hid, f, b = (np.asarray(x, dtype=float) * np.ones(len(np.atleast_1d(tokens)))
                        for x in (tokens, tp, hidden, flops, nbytes))
    sms = float(g.sms)
    if gemm_op:  # n = flops / (2 T k) is not needed: working set and waves carry the shape
        nk = f / np.maximum(2.0 * T, 1.0)
        waves = np.ceil(T / TILE) * np.maximum(nk / hid / TILE, 1.0) / sms
        extra = _lg(f / np.maximum(b, 1.0) / (g.peak_flops / g.mem_bw))
    else:
        waves = T * hid / tp / (sms * 1024.0)
        extra = np.zeros(len(T))
    return _with_datasheet([_lg(T), _lg(tp), _lg(hid), _lg(b / _l2(g)), _lg(waves), extra], g)


# ---------------------------------------------------------------- the tree ensemble

class TreeEnsemble:
    """A boosted-tree regressor as arrays: `predict(X) = baseline + sum over trees of the leaf value`,
    a node going left when x[feature] <= threshold (a missing value where missing_left says).
    Node indices are global (each tree's root at `roots[t]`)."""

    FIELDS = ("feature", "threshold", "left", "right", "leaf", "value", "missing_left", "roots", "baseline")

    def __init__(self, feature, threshold, left, right, leaf, value, missing_left, roots, baseline):
        self.feature = np.asarray(feature, dtype=np.int64)
        self.threshold = np.asarray(threshold, dtype=float)
        self.left, self.right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
        self.leaf = np.asarray(leaf, dtype=bool)
        self.value = np.asarray(value, dtype=float)
        self.missing_left = np.asarray(missing_left, dtype=bool)
        self.roots = np.asarray(roots, dtype=np.int64)
        self.baseline = float(np.asarray(baseline, dtype=float).reshape(-1)[0])

    def arrays(self) -> dict:
        return {f: getattr(self, f) for f in self.FIELDS}

    def predict(self, X) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        n = len(X)
        if not len(self.roots):
            return np.full(n, self.baseline)
        node = np.tile(self.roots, (n, 1))  # cells x trees
        rows = np.arange(n)[:, None]
        for _ in range(len(self.feature)):
            live = ~self.leaf[node]
            if not live.any():
                break
            x = X[rows, np.where(live, self.feature[node], 0)]
            go_left = np.where(np.isnan(x), self.missing_left[node], x <= self.threshold[node])
            node = np.where(live, np.where(go_left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)


class Corrections:
    """The shipped per-term corrections: {model name: TreeEnsemble} plus what each was fitted on."""

    def __init__(self, models: dict, meta: dict):
        self.models, self.meta = dict(models), dict(meta)

    @classmethod
    def load(cls, path=None) -> "Corrections":
        path = Path(GREYBOX_FILE if path is None else path)
        if not path.exists():
            raise InputError(f"no shipped grey-box corrections at {path} (build results/calibration/greybox.npz "
                             "and run `steptime calibration ship results/calibration/greybox.npz`)")
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            models = {name: TreeEnsemble(*(z[f"{name}/{f}"] for f in TreeEnsemble.FIELDS))
                      for name in meta["models"] if meta["models"][name].get("setting") != "none"}
        return cls(models, meta)

    def save(self, path) -> None:
        """An .npz (numpy's zip of .npy arrays) with fixed timestamps, so the same fit gives the same bytes; written
        atomically (steptime.io.atomic_path: a failure half-way leaves `path` as it was)."""
        arrays = {"meta": np.array(json.dumps(self.meta, sort_keys=True))}
        arrays.update({f"{name}/{f}": v for name, m in sorted(self.models.items()) for f, v in m.arrays().items()})
        with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for key, v in arrays.items():
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.asarray(v), allow_pickle=False)
                z.writestr(info, buf.getvalue())

    def log_correction(self, name: str, X) -> np.ndarray:
        """The bounded log correction of model `name` at features X (0 where no correction was chosen)."""
        if name not in self.models:
            return np.zeros(len(np.atleast_2d(X)))
        return np.clip(self.models[name].predict(X), -BOUND, BOUND)


def shipped() -> Corrections:
    """The shipped corrections (calibration/greybox.npz, read on each call: `ship` may rewrite it)."""
    return Corrections.load()


# ---------------------------------------------------------------- explain one step

def _features_for(term: str, name: str, model, gpu, batch, tp: int) -> np.ndarray | None:
    """One feature row of correction model `name` for the step's `term`, or None when it has no such work."""

    new = np.array([g.new_tokens for g in batch.groups for _ in range(g.count)], dtype=float)
    kv = np.array([g.kv_len for g in batch.groups for _ in range(g.count)], dtype=float)
    T = float(new.sum())
    if T <= 0:
        return None
    if name == "gemm":
        n, k = layer_shapes(model, tp)[term]
        return gemm_features([T], [n], [k], gpu)
    if name == "attention":
        mask = new > 1 if term == "attn_prefill" else new <= 1
        if not mask.any():
            return None
        dec = term == "attn_decode"
        # AIConfigurator's kv_len: cached tokens for a prefill cell, cached + the new token for a decode cell
        kv_col = kv[mask].mean() + (1.0 if dec else 0.0)
        return attention_features([float(dec)], [float(mask.sum())], [new[mask].mean()], [kv_col],
                                  [model.num_attention_heads // tp], [max(1, model.num_key_value_heads // tp)],
                                  [model.head_dim], gpu)
    nb = light.light_bytes(LIGHT_KERNEL[name], np.array([T]), model, tp)
    return step_op_features(False, np.array([T]), tp, model.hidden_size, 0.0, nb, gpu)


def explain(prediction, model, gpu, batch, *, tp: int = 1, corrections: Corrections | None = None) -> dict:
    """The grey box's reading of a `predict_step` result: per term its physics value, the shipped
    correction factor and the corrected value (ms); the corrected terms sum to `total_ms`.

    Overlap (the max against the dispatch floor) is not re-evaluated: the hidden terms stay hidden."""
    corr = corrections if corrections is not None else shipped()
    mdl = get_model(model) if isinstance(model, str) else model
    g = _spec(gpu)
    bf16 = getattr(prediction, "dtype", "bf16") == "bf16"
    kv_bf16 = getattr(prediction, "kv_dtype", "bf16") == "bf16"
    moe = bool(getattr(prediction, "moe", False))
    rows = {}
    for term, ms in prediction.terms_ms.items():
        names = () if moe else TERM_MODELS.get(term, ())
        if term in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj") and not bf16:
            names = ()
        if term in ("attn_prefill", "attn_decode") and not kv_bf16:
            names = ()
        factors, used = [], []
        for name in names:
            X = _features_for(term, name, mdl, g, batch, tp) if ms > 0 else None
            if X is not None:  # a model the fit kept at the physics ('none') gives factor 1
                factors.append(float(np.exp(corr.log_correction(name, X))[0]))
                used += [name] if name in corr.models else []
        factor = float(np.mean(factors)) if factors else 1.0
        rows[term] = {"physics_ms": float(ms), "factor": factor, "corrected_ms": float(ms) * factor,
                      "models": used}
    total = float(sum(r["corrected_ms"] for r in rows.values()))
    return {"terms": rows, "total_ms": total, "physics_total_ms": float(prediction.total_ms),
            "label": "grey box (steptime_residual): physics terms x bounded learned corrections (factor in [1/2, 2])",
            "fitted_on": {name: m.get("fitted_on") for name, m in corr.meta.get("models", {}).items()},
            "settings": {name: m.get("setting") for name, m in corr.meta.get("models", {}).items()},
            "loo_cv_mape": {name: m.get("loo_cv_mape") for name, m in corr.meta.get("models", {}).items()},
            "source": corr.meta.get("source")}
