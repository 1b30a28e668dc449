"""One engine step: the whole equation, with a breakdown that sums to the total.

    t_step = max(T_blocks, N_kern * T_launch) + alpha * S(N) + T_samp
    T_blocks = N_L * (t_proj + t_attn + t_light_layer + t_allreduce) + t_emb + t_lm_head

A batch is a list of requests, each with `new_tokens` (1 for a decode, more for a
prefill chunk) and `kv_len` (tokens already in its KV cache), so mixed
prefill/decode (chunked-prefill) steps work.

`predict_steps` is the vectorised core over many steps at once (one row per request,
`step_id` saying which step it belongs to); `predict_step` wraps it for one batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Iterable, Sequence

import numpy as np

from steptime.calibration import Constants, check_constants
from steptime.errors import BatchError, InputError, MemoryFitError
from steptime.specs import get_gpu, get_model, vidur_operators
from steptime.specs.moe import is_moe, lighter_weights_hint
from steptime.specs.engines import allreduces_per_layer, check_engine_gpu, check_precision, get_engine, tp_sharding
from steptime.terms import attention, comm, gemm, host, light, precision
from steptime.validation import (MAX_REQUESTS, as_int, check_bool, check_choice, check_f_clk, check_request_rows,
                                 check_tokens, check_tp_heads)
from steptime import moe_step
from steptime.terms.moe import MoEConstants

PROJ_TERMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ATTN_TERMS = ("attn_prefill", "attn_decode")
LIGHT_TERMS = ("rmsnorm", "add", "rope", "act", "kv_write", "emb", "qk_norm")  # qk_norm: zero unless models.yaml qk_norm
QK_NORM_LAUNCHES = 2  # per layer: q's and k's RMSNorm (terms/light.py qk_norm)
FUSED_LIGHT = ("rmsnorm", "add")  # what an engine may fuse into the all-reduce (engines.yaml fuse_norm_max_bytes)
BLOCK_TERMS = PROJ_TERMS + ATTN_TERMS + LIGHT_TERMS + ("lm_head", "allreduce")
TERMS = BLOCK_TERMS + ("dispatch_floor", "host", "sampling")
TERM_KIND = MappingProxyType({
    **{t: "gemm" for t in PROJ_TERMS + ("lm_head",)}, **{t: "attention" for t in ATTN_TERMS},
    **{t: "light" for t in LIGHT_TERMS}, "allreduce": "comm", "dispatch_floor": "launch",
    "host": "host", "sampling": "host"})
# The one split of a step's breakdown into GPU work and host time: GPU work is T_blocks, the block terms the GPU
# runs (dense and mixture-of-experts steps alike: GEMMs, attention, light kernels, the all-reduce / expert
# exchange); the rest is what the host adds around them (the launch floor beyond T_blocks, the exposed
# scheduler floor S(N), sampling). A host overhead read off a measured step is the step minus THIS part of the
# same engine's prediction (gpu_ms), never minus another profile's kernels.
GPU_TERMS = frozenset(BLOCK_TERMS) | frozenset(moe_step.BLOCK_TERMS)
_ALL_KINDS = MappingProxyType({**TERM_KIND, **moe_step.TERM_KIND})
GPU_KINDS = frozenset(_ALL_KINDS[t] for t in GPU_TERMS)
HOST_KINDS = frozenset(_ALL_KINDS.values()) - GPU_KINDS
if any(_ALL_KINDS[t] in GPU_KINDS for t in set(_ALL_KINDS) - GPU_TERMS):  # a kind is GPU work or host, never both
    raise RuntimeError("steptime.step: a term kind is shared by GPU-work and host terms")


def is_gpu_kind(kind: str) -> bool:
    """Whether term kind `kind` (TERM_KIND's values: 'gemm', 'attention', 'light', 'comm', 'moe', 'launch',
    'host') is GPU work (T_blocks) rather than host time; an unknown kind is refused (InputError)."""
    if kind in GPU_KINDS:
        return True
    if kind in HOST_KINDS:
        return False
    raise InputError(f"unknown step term kind {kind!r} (GPU work: {', '.join(sorted(GPU_KINDS))}; "
                     f"host: {', '.join(sorted(HOST_KINDS))})")


def term_kind(term: str) -> str:
    """The kind of step term `term` (TERM_KIND for dense steps, moe_step.TERM_KIND for mixture-of-experts ones:
    'gemm', 'attention', 'light', 'moe', 'comm', 'launch', 'host'); a term steptime does not define is refused."""
    if term not in _ALL_KINDS:
        raise InputError(f"unknown step term {term!r} (known: {', '.join(sorted(_ALL_KINDS))})")
    return _ALL_KINDS[term]


def gpu_ms(terms_ms: dict):
    """The GPU-work part of a step breakdown (predict_steps' or predict_step's terms_ms): the sum of its
    GPU_TERMS, in the breakdown's unit. A term steptime does not define is refused (InputError), so a
    breakdown of another shape cannot be summed silently."""
    unknown = sorted(set(terms_ms) - set(_ALL_KINDS))
    if unknown:
        raise InputError(f"unknown step term(s) {', '.join(unknown)} (known: {', '.join(sorted(_ALL_KINDS))})")
    parts = [np.asarray(v, dtype=float) for t, v in terms_ms.items() if t in GPU_TERMS]
    return sum(parts) if parts else 0.0


@dataclass(frozen=True)
class Request:
    new_tokens: int
    kv_len: int = 0


@dataclass(frozen=True)
class Group:
    """`count` alike requests, each with `new_tokens` new tokens over `kv_len` cached ones."""

    count: int
    new_tokens: int
    kv_len: int = 0


def _group(count, new_tokens, kv_len, where: str) -> Group:
    """A checked group: whole numbers (never truncated), count >= 0, new tokens >= 1, KV >= 0."""
    count = as_int(count, f"{where}: request count", 0, BatchError)
    new_tokens = as_int(new_tokens, f"{where}: new tokens", None, BatchError)
    kv_len = as_int(kv_len, f"{where}: KV length", None, BatchError)
    if new_tokens < 1:
        raise BatchError(f"{where}: new tokens must be >= 1 (got {new_tokens})")
    if kv_len < 0:
        raise BatchError(f"{where}: KV length must be >= 0 (got {kv_len})")
    if count > MAX_REQUESTS:
        raise BatchError(f"{where}: {count} requests exceed the limit of {MAX_REQUESTS} per step")
    check_tokens(new_tokens, f"{where}: new tokens", BatchError)
    check_tokens(kv_len, f"{where}: KV length", BatchError)
    return Group(count, new_tokens, kv_len)


def _decode_group(count, kv_len, where: str, instead: str) -> Group:
    """A checked decode group: `_group`'s checks, and KV >= 1 (wave 41: `--decode 1x0` ran). A decode step
    generates a request's next token from its cached ones; with none cached the request has no prompt, and its one
    token is a prefill of one token (`instead`, formatted with the count), which is what the engine would run."""
    g = _group(count, 1, kv_len, where)
    if g.kv_len < 1:
        raise BatchError(f"{where}: a decode request reads its cached tokens: KV length must be >= 1 (got "
                         f"{g.kv_len}); a request with nothing cached is a one-token prefill "
                         f"({instead.format(count=g.count)})")
    return g


def _entry(spec, sizes: tuple, form: str, where: str) -> tuple:
    if isinstance(spec, (str, bytes)) or not hasattr(spec, "__len__") or len(spec) not in sizes:
        raise BatchError(f"{where} entry {spec!r}: expected {form}")
    return tuple(spec)


@dataclass
class Batch:
    """A step's requests as groups of alike requests (count x new tokens x KV length).

    The groups are checked when built; arrays one entry per request are made only by
    `arrays()`, after `n_requests` has been checked against MAX_REQUESTS.
    """

    groups: list[Group] = field(default_factory=list)

    def __post_init__(self):
        """A Batch built directly is checked like one from `build` (Request objects become
        groups of one)."""
        groups = []
        for i, g in enumerate(_iter(self.groups, "groups")):
            if isinstance(g, Request):
                groups.append(_group(1, g.new_tokens, g.kv_len, f"groups[{i}]"))
            elif isinstance(g, Group):
                groups.append(_group(g.count, g.new_tokens, g.kv_len, f"groups[{i}]"))
            else:
                raise BatchError(f"groups[{i}]: expected a Group or a Request, got {g!r:.60}")
        self.groups = groups
        self._check_size()

    @classmethod
    def _checked(cls, groups: list[Group]) -> "Batch":
        """A Batch of groups `_group` has already checked."""
        batch = cls.__new__(cls)
        batch.groups = groups
        batch._check_size()
        return batch

    @classmethod
    def build(cls, decode: Iterable = (), prefill: Iterable = (), requests: Iterable = ()) -> "Batch":
        """decode: (count, kv_len) pairs; prefill: (count, tokens) or (count, tokens, kv_len);
        requests: Request objects or (new_tokens, kv_len) pairs."""
        groups = []
        for i, r in enumerate(_iter(requests, "requests")):
            if isinstance(r, Request):
                r = (r.new_tokens, r.kv_len)
            t = _entry(r, (1, 2), "(new_tokens[, kv_len])", f"requests[{i}]")
            groups.append(_group(1, t[0], t[1] if len(t) == 2 else 0, f"requests[{i}]"))
        for i, spec in enumerate(_iter(decode, "decode")):
            count, kv = _entry(spec, (2,), "(count, kv_len)", f"decode[{i}]")
            groups.append(_decode_group(count, kv, f"decode[{i}]", "prefill=[({count}, 1)]"))
        for i, spec in enumerate(_iter(prefill, "prefill")):
            t = _entry(spec, (2, 3), "(count, tokens[, kv_len])", f"prefill[{i}]")
            groups.append(_group(t[0], t[1], t[2] if len(t) == 3 else 0, f"prefill[{i}]"))
        return cls._checked(groups)

    @classmethod
    def parse(cls, decode: Sequence[str] = (), prefill: Sequence[str] = ()) -> "Batch":
        """CLI syntax: decode 'COUNTxKV', prefill 'COUNTxTOKENS' or 'COUNTxTOKENS@KV'."""
        groups = []
        for kind, texts in (("decode", decode), ("prefill", prefill)):
            for text in _iter(texts, kind, "strings such as '32x1024'"):
                t = _parse_spec(text, kind)
                where = f"--{kind} {str(text).strip()!r}"
                groups.append(_decode_group(t[0], t[1], where, "--prefill {count}x1") if kind == "decode" else
                              _group(t[0], t[1], t[2] if len(t) == 3 else 0, where))
        return cls._checked(groups)

    @property
    def n_requests(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def requests(self) -> list[Request]:
        """One Request per request (after the MAX_REQUESTS check)."""
        self._check_size()
        return [Request(g.new_tokens, g.kv_len) for g in self.groups for _ in range(g.count)]

    def group_arrays(self):
        """(count, new_tokens, kv_len) arrays, one entry per group."""
        cols = [[g.count for g in self.groups], [g.new_tokens for g in self.groups], [g.kv_len for g in self.groups]]
        return tuple(np.asarray(c, dtype=np.int64) for c in cols)

    def arrays(self):
        """(new_tokens, kv_len) arrays, one entry per request, in the order of the groups."""
        self._check_size()
        count, new, kv = self.group_arrays()
        return np.repeat(new, count), np.repeat(kv, count)

    def _check_size(self):
        n = self.n_requests
        if n > MAX_REQUESTS:
            raise BatchError(f"{n} requests in one step exceed the limit of {MAX_REQUESTS}")


def _kind(x) -> str:
    return type(x).__name__


def _iter(x, what, items: str = "tuples"):
    if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        raise BatchError(f"{what} must be a list of {items}, got {x!r:.60}")
    return x


_SPEC = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*(?:@\s*(\d+))?\s*$")
_MAX_DIGITS = 15  # beyond every limit below (MAX_REQUESTS, any model's positions); int() of more is slow


def _parse_spec(text: str, kind: str) -> tuple:
    m = _SPEC.match(str(text))
    if not m:
        form = "COUNTxKV (e.g. 32x1024)" if kind == "decode" else "COUNTxTOKENS[@KV] (e.g. 1x2048)"
        raise BatchError(f"malformed --{kind} {text!r}: expected {form}")
    if any(g is not None and len(g.lstrip("0")) > _MAX_DIGITS for g in m.groups()):
        raise BatchError(f"--{kind} {text[:40]!r}: a number with more than {_MAX_DIGITS} digits")
    a, b, c = m.groups()
    if int(a) < 1:
        raise BatchError(f"--{kind} {text!r}: request count must be >= 1")
    if int(b) < 1 and kind == "prefill":
        raise BatchError(f"--prefill {text!r}: new tokens must be >= 1")
    if kind == "decode":
        if c is not None:
            raise BatchError(f"malformed --decode {text!r}: '@' is only for prefill chunks")
        return int(a), int(b)
    return (int(a), int(b)) if c is None else (int(a), int(b), int(c))


# ---------------------------------------------------------------------------------------
@dataclass
class StepPrediction:
    model: str
    gpu: str
    tp: int
    engine: str
    dtype: str
    kv_dtype: str
    total_ms: float
    terms_ms: dict
    hidden_ms: dict
    bound: dict
    factors: dict
    tokens: int
    requests: int
    ep: int = 1
    moe: bool = False
    calibrated: bool = True  # False: the GPU has no deploy readings (datasheet + family constants only)
    # an MoE step: whose fused-MoE laws priced the routed experts (Engine.moe_kernels: the profile's moe.kernels, or
    # the caller's --moe-kernels / with_moe_kernels) and the expert dtype those kernels run (terms.moe.kernel_dtype)
    moe_kernels: str | None = None
    moe_kernel_dtype: str | None = None
    # the kernel family of those laws that priced this GPU (moe_step.moe_law); None: the framework's tables hold none
    # for this GPU and dtype, so its all-GPU law for the dtype priced it (wave 42: said nowhere before)
    moe_kernel_family: str | None = None

    def to_dict(self) -> dict:
        d = {"model": self.model, "gpu": self.gpu, "tp": self.tp, "engine": self.engine, "dtype": self.dtype,
             "kv_dtype": self.kv_dtype, "total_ms": self.total_ms,
             "terms_ms": self.terms_ms, "hidden_ms": self.hidden_ms, "bound": self.bound,
             "factors": self.factors, "tokens": self.tokens, "requests": self.requests}
        if self.moe:
            d.update(ep=self.ep, moe=True, moe_kernels=self.moe_kernels, moe_kernel_dtype=self.moe_kernel_dtype,
                     moe_kernel_family=self.moe_kernel_family)
        d["uncalibrated"] = not self.calibrated
        return d


def validate_batch(model, gpu, new, kv, tp: int = 1, check_memory: bool = True, *, count=None,
                   kv_dtype: str = "bf16", weight_dtype: str = "bf16", ep: int = 1) -> None:
    """Check a batch against the model and the GPU: one entry per request, or per group of
    `count` alike requests (so a huge batch is checked before it is expanded)."""
    new = np.asarray(new)
    kv = np.asarray(kv)
    count = np.ones(len(new), dtype=np.int64) if count is None else np.asarray(count, dtype=np.int64)
    if len(new) == 0 or count.sum() == 0:
        raise BatchError("empty batch: give at least one --decode or --prefill request (e.g. --decode 32x1024: "
                         "32 requests decoding over 1,024 cached tokens; --prefill 1x2048: one 2,048-token prompt)")
    if int(count.sum()) > MAX_REQUESTS:
        raise BatchError(f"{int(count.sum())} requests in one step exceed the limit of {MAX_REQUESTS}")
    live = count > 0
    new, kv, count = new[live], kv[live], count[live]
    # the one row check predict_steps' rows pass too (whole numbers, new >= 1, KV >= 0, within the context)
    check_request_rows(new, kv, model, where="batch", names=("new tokens", "KV length"), row="group",
                       error=BatchError)
    total = kv + new
    tp = check_tp_heads(model, check_tp(tp, gpu, BatchError), BatchError)
    if check_memory:
        if is_moe(model):
            win = (float((np.minimum(total, model.attention_window) * count).sum()) if model.attention_window
                   else None)  # sliding-window layers hold at most the window per request
            need = moe_step.memory_bytes(model, float((total * count).sum()), tp, ep, dtype=weight_dtype,
                                         kv_dtype=kv_dtype, window_tokens=win, requests=float(count.sum()))
            layout = f"tp={tp}, ep={ep}"
        else:
            need = memory_bytes(model, float((total * count).sum()), tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype)
            layout = f"tp={tp}"
        if need > gpu.mem_bytes:
            raise MemoryFitError(
                f"{model.key} with this batch needs {need / 1e9:.1f} GB per GPU (weights + KV cache, "
                f"{layout}, {weight_dtype} weights, {kv_dtype} KV) but {gpu.key} has {gpu.mem_gb:g} GB: "
                f"{(need - gpu.mem_bytes) / 1e9:.1f} GB over{lighter_weights_hint(model, weight_dtype)}")


def memory_bytes(model, kv_tokens, tp: int = 1, bytes_per: int = 2, *, kv_dtype: str | None = None,
                 weight_dtype: str | None = None) -> float:
    """Weights plus KV cache per GPU, bytes. `bytes_per` sizes both unless `weight_dtype`
    (gemm.BYTES: fp8 = 1 byte) or `kv_dtype` (attention.KV_BYTES: fp8 = 1 byte) is given."""
    w_bytes = bytes_per if weight_dtype is None else gemm.BYTES[check_choice(weight_dtype, "weight dtype",
                                                                             tuple(gemm.BYTES))]
    kv_bytes = bytes_per if kv_dtype is None else attention.KV_BYTES[check_choice(kv_dtype, "KV-cache dtype",
                                                                                  tuple(attention.KV_BYTES))]
    kv_heads = max(1, model.num_key_value_heads // tp)
    kv = float(kv_tokens) * 2 * model.num_hidden_layers * kv_heads * model.head_dim * kv_bytes
    return model.n_params() * w_bytes / tp + kv


def layer_shapes(model, tp):
    """(n, k) of each projection GEMM of one layer at tensor-parallel degree `tp`; which dimension
    TP divides is specs/engines.yaml's tensor_parallel table (column-parallel: n, row-parallel: k)."""
    h = model.hidden_size
    full = {"qkv_proj": (model.qkv_out, h), "o_proj": (h, model.q_size),
            "gate_up_proj": (model.mlp_up_out, h), "down_proj": (h, model.intermediate_size)}
    split = tp_sharding()
    out = {}
    for name, (n, k) in full.items():
        how = split[name]["split"]
        out[name] = (n // tp if how == "split_n" else n, k // tp if how == "split_k" else k)
    return out


def check_tp(tp, gpu, error=InputError) -> int:
    """A whole tensor-parallel degree >= 1 within the GPU's `gpus_per_node` (specs/gpus.yaml): the
    all-reduce law is the in-node one, so a group spanning nodes is refused, not mispredicted."""
    tp = as_int(tp, "tensor-parallel degree tp", 1, error)
    if gpu.gpus_per_node is not None and tp > gpu.gpus_per_node:
        raise error(f"tensor-parallel degree {tp} is beyond {gpu.key}'s {gpu.gpus_per_node} GPUs per node "
                    f"(specs/gpus.yaml): steptime models the in-node all-reduce only")
    return tp


PRICED_CHECKPOINTS = ("bf16", "fp8", "fp8_block", "mxfp4")  # specs.model.checkpoint_dtype's priced readings
DENSE_CHECKPOINTS = ("bf16", "fp8")  # a dense model's GEMM laws: bf16 and per-tensor fp8 (W8A8)


def resolve_dtype(model, dtype: str | None, error=InputError) -> str:
    """The weight dtype a step is priced at: `dtype` as asked, or (None) the default: the checkpoint's own precision
    for a model read from a config.json (its quantization_config, `model.checkpoint_dtype`), bf16 for a spec-table
    entry. A quantized checkpoint is priced at its own precision only: another `dtype` is refused, as is a
    quantization steptime has no law for (AWQ / GPTQ int4, ...) and, for a dense model, block-scaled fp8 or mxfp4.
    Called by predict_step, predict_steps and the serving timers (wave 37: a quantized dense checkpoint was priced
    at bf16 without a word)."""
    ck = getattr(model, "checkpoint_dtype", None)
    if ck is None:
        return "bf16" if dtype is None else dtype
    where = f"{model.key} ({model.source})"
    if ck not in PRICED_CHECKPOINTS:
        raise error(f"{where}: its weights are quantized by {ck!r} (quantization_config.quant_method): steptime "
                    "cannot price that checkpoint (it prices bf16, fp8 per-tensor or block-scaled and mxfp4 weights; "
                    "int4/int8 weight-only methods such as AWQ, GPTQ or bitsandbytes have no GEMM law here)")
    if not is_moe(model) and ck not in DENSE_CHECKPOINTS:
        what = "block-scaled fp8 (weight_block_size)" if ck == "fp8_block" else ck
        raise error(f"{where}: its checkpoint holds {what} weights: steptime prices a dense model's GEMMs in bf16 "
                    "or per-tensor fp8 only")
    if dtype is None:
        return ck
    if ck != "bf16" and dtype != ck:
        raise error(f"dtype {dtype!r} contradicts {where}: its quantization_config holds {ck} weights, the ones an "
                    f"engine serving it runs: price it at {ck} (`steptime predict` / `serve` take it by default)")
    return dtype


def dtype_origin(model, dtype: str | None) -> str:
    """Where resolve_dtype's answer came from, for the CLI: '--dtype', 'the checkpoint's quantization_config', 'the
    checkpoint (no quantization_config)' or 'the default'."""
    if dtype is not None:
        return "--dtype"
    ck = getattr(model, "checkpoint_dtype", None)
    if ck is None:
        return "the default"
    return "the checkpoint's quantization_config" if ck != "bf16" else "the checkpoint (no quantization_config)"


def check_dense_layout(model, gpu, ep, dtype: str, error=InputError) -> None:
    """A dense model's expert-parallel degree (1: it has no experts; `error` names a wrong one) and weight dtype (one
    the GPU's tensor cores have): the dense side of moe_step.check_layout, called by predict_steps, the serving
    timers (serve.timer._checked, with ServeError) and serve.memory.kv_budget (as the predictors, InputError)."""
    if as_int(ep, "expert-parallel degree ep", 1, error) != 1:
        raise error(f"expert parallelism (ep={ep}) applies to mixture-of-experts models; {model.key} is dense")
    check_precision(gpu, dtype)


# What a row of predict_steps stands for (its `rows` argument): "requests", one request each (whole token counts,
# KV + new tokens within the model's context: the check predict_step's batches pass, validation.check_request_rows);
# "work", a row of work that is not one request (a measured step's mean request, whose lengths are fractional; the
# serving timer's table row holding a whole step's tokens, which may exceed one request's context): lengths are
# real numbers, new >= 1 and KV >= 0 still.
ROWS = ("requests", "work")


def _check_steps(model, gpu, step_id, new_tokens, kv_len, n_steps, tp, f_clk, kv_dtype, rows="requests"):
    """predict_steps' arguments, checked (vectorised: this is the fast path) and as arrays."""
    check_f_clk(f_clk, allow_boost=True)  # the API caller chose it; the CLI and predict_step gate boosts
    check_choice(kv_dtype, "KV-cache dtype kv_dtype", tuple(attention.KV_BYTES))
    check_choice(rows, "predict_steps rows", ROWS)
    tp = check_tp_heads(model, check_tp(tp, gpu))
    arrays = []
    for name, x in (("step_id", step_id), ("new_tokens", new_tokens), ("kv_len", kv_len)):
        a = np.asarray(x)
        if a.ndim != 1 or a.dtype.kind not in "iuf":
            raise InputError(f"predict_steps: {name} must be a 1-D array of numbers, got {a.dtype} of shape {a.shape}")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise InputError(f"predict_steps: {name} must be finite")
        arrays.append(a)
    if len(arrays[0]) and arrays[0].min() < 0:
        raise InputError(f"predict_steps: step_id must be >= 0, got {arrays[0].min()!r}")
    if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
        raise InputError(f"predict_steps: step_id, new_tokens and kv_len differ in length "
                         f"({len(arrays[0])}, {len(arrays[1])}, {len(arrays[2])})")
    whole = rows == "requests"
    check_request_rows(arrays[1], arrays[2], model, where="predict_steps", whole=whole, context=whole)
    if arrays[0].dtype.kind == "f" and np.any(arrays[0] != np.floor(arrays[0])):
        raise InputError("predict_steps: step_id must be whole numbers")
    sid = np.asarray(arrays[0], dtype=np.int64)  # no copy where the caller's arrays already have the dtype
    if n_steps is None:
        n_steps = int(sid.max()) + 1 if len(sid) else 0
    else:
        n_steps = as_int(n_steps, "predict_steps: n_steps", 0)
        if len(sid) and sid.max() >= n_steps:
            raise InputError(f"predict_steps: step_id {int(sid.max())} is not below n_steps={n_steps}")
    per_step = np.bincount(sid, minlength=n_steps)
    if n_steps and per_step.min() == 0:  # an empty step has no time (NaN terms, or MoE routing of no token)
        empty = int(np.flatnonzero(per_step == 0)[0])
        raise InputError(f"predict_steps: step {empty} has no rows (step_id numbers the steps 0..{n_steps - 1}, "
                         f"each at least one request's row)")
    return sid, np.asarray(arrays[1], dtype=float), np.asarray(arrays[2], dtype=float), n_steps, tp


def predict_steps(model, gpu, step_id, new_tokens, kv_len, n_steps: int | None = None, *, tp: int = 1,
                  f_clk: float | None = None, constants: Constants | None = None,
                  kv_dtype: str = "bf16", engine=None, dtype: str | None = None, ep: int = 1,
                  moe_constants=None, rows: str = "requests") -> dict:
    """Vectorised core: per-step term times in milliseconds (dict of arrays) plus totals.

    Each row is one request (`rows="requests"`, the default): whole token counts, new_tokens >= 1, kv_len >= 0
    and kv_len + new_tokens within the model's context window, the check predict_step's batches pass
    (validation.check_request_rows). `rows="work"` takes rows that are not one request each (a measured step's
    mean request with fractional lengths, the serving timer's row holding a whole step's tokens): real lengths,
    new_tokens >= 1 and kv_len >= 0, no context bound.

    engine: a profile name or Engine (default: the default engine, `vllm`); dtype: the
    projection GEMMs' precision (bf16, or fp8 W8A8 from the datasheet fp8 peak); for a
    mixture-of-experts model the expert weights' (bf16, fp8, fp8_block, nvfp4/fp4, mxfp4), with
    `ep` its expert-parallel degree and `moe_constants` (steptime.terms.moe.MoEConstants, default
    the shipped calibration/moe.yaml) the fused-MoE law's constants. dtype None: the checkpoint's own precision for a
    model read from a config.json, else bf16 (resolve_dtype).
    """
    model = get_model(model)
    dtype = resolve_dtype(model, dtype)
    gpu = get_gpu(gpu)
    check_constants(constants)
    if moe_constants is not None and not isinstance(moe_constants, MoEConstants):
        raise InputError(f"moe_constants must be a steptime.terms.moe.MoEConstants (or None for the shipped "
                         f"calibration/moe.yaml), got {_kind(moe_constants)}")
    constants = constants or Constants.default()
    step_id, new, kv, n_steps, tp = _check_steps(model, gpu, step_id, new_tokens, kv_len, n_steps, tp, f_clk, kv_dtype,
                                                 rows)
    engine = get_engine(engine, fitted=constants.engines)
    check_engine_gpu(engine, gpu)
    moe = is_moe(model)
    if not moe:
        check_dense_layout(model, gpu, ep, dtype)
    is_pref = new > 1
    any_pref = bool(is_pref.any())
    N = np.bincount(step_id, minlength=n_steps).astype(float)
    # decode rows only: every new_tokens is 1, so the token sum is the request count (the same floats)
    T = np.bincount(step_id, weights=new, minlength=n_steps) if any_pref else N.copy()
    L = model.num_hidden_layers
    out: dict[str, np.ndarray] = {}
    compute_bound: dict[str, np.ndarray] = {}
    factors: dict[str, dict] = {}
    n_pref = (np.bincount(step_id, weights=is_pref.astype(float), minlength=n_steps) if any_pref
              else np.zeros(n_steps))
    if moe:
        out, compute_bound, factors = moe_step.block_terms(
            model, gpu, step_id, new, kv, T, n_steps, tp=tp, ep=ep, dtype=dtype, kv_dtype=kv_dtype,
            constants=constants, mc=moe_constants or MoEConstants.default(), f_clk=f_clk,
            exchange=engine.moe_exchange(), engine=engine)
    shapes_fn = (partial(precision.gemm_time_shapes_fp8, engine=engine, served=True) if dtype == "fp8"  # as served
                 else gemm.gemm_time_shapes)
    for name, g in ({} if moe else shapes_fn(T, layer_shapes(model, tp), gpu, constants, f_clk=f_clk)).items():
        out[name] = L * g["t"]
        compute_bound[name] = g["compute_bound"]
        factors[name] = {f: g[f] for f in ("eta_c", "f_clk", "eta_cluster", "eta_active", "eta_duty", "eta_mem",
                                             "t_cta")}
    heads = model.num_attention_heads // tp
    kv_heads = max(1, model.num_key_value_heads // tp)
    decode = ~is_pref if any_pref else None
    for name, mask in (() if moe else (("attn_prefill", is_pref), ("attn_decode", decode))):
        if mask is None:  # every row a decode: no masked copies
            a = attention.attention_time(new, kv, heads, kv_heads, model.head_dim, gpu, constants,
                                         kv_dtype=kv_dtype, f_clk=f_clk, group=step_id, n_groups=n_steps)
            out[name] = L * a["t"]
            compute_bound[name] = a["compute_bound"]
        elif mask.any():
            a = attention.attention_time(new[mask], kv[mask], heads, kv_heads, model.head_dim, gpu, constants,
                                         kv_dtype=kv_dtype, f_clk=f_clk, group=step_id[mask], n_groups=n_steps)
            out[name] = L * a["t"]
            compute_bound[name] = a["compute_bound"]
        else:
            out[name] = np.zeros(n_steps)
            compute_bound[name] = np.zeros(n_steps, dtype=bool)
    ar_bytes = 2.0 * T * model.hidden_size  # bf16 activations
    fused = np.zeros(n_steps, dtype=bool) if moe else engine.fuses_norm(ar_bytes, tp, gpu, constants)
    n_fused = allreduces_per_layer() * L  # each fused all-reduce takes one residual add and one RMSNorm
    fused_stream = np.zeros(n_steps)
    qk_fused = engine.fuses_qk_norm_rope()  # the q/k norms run inside the engine's RoPE kernel (priced by rope)
    add_fused = engine.fuses_add_rmsnorm()  # each residual add runs inside the RMSNorm kernel after it
    law = engine.light_floor_law()  # the engine's light launch-floor law (engines.yaml light.floor_law)
    for kern in (() if moe else LIGHT_TERMS):
        if kern == "qk_norm":
            out[kern] = (np.zeros(n_steps) if qk_fused else
                         np.where(T > 0, L * light.qk_norm_time(T, model, gpu, tp, constants, floor_law=law), 0.0))
            compute_bound[kern] = np.zeros(n_steps, dtype=bool)
            continue
        nb = light.light_bytes(kern, T, model, tp)
        t = light.engine_light_time(kern, T, model, gpu, tp, constants, floor_law=law, nbytes=nb)
        reps = 1 if kern == "emb" else L * light.PER_LAYER[kern]
        if kern in FUSED_LIGHT and fused.any():  # the kernel's launch floor goes; its bytes move into the all-reduce
            floor = light.engine_light_time(kern, T, model, gpu, tp, constants, floor_law=law, nbytes=0.0 * nb)
            fused_stream = fused_stream + np.where(fused, n_fused * (t - floor), 0.0)
            reps = np.where(fused, reps - n_fused, reps)
        if add_fused and kern in FUSED_LIGHT:  # launches the all-reduce left: one add + RMSNorm kernel each
            t = (np.zeros(n_steps) if kern == "add" else
                 light.add_rmsnorm_time(T, model, gpu, tp, constants, floor_law=law))
        out[kern] = np.where(T > 0, reps * t, 0.0)
        compute_bound[kern] = np.zeros(n_steps, dtype=bool)
    g = gemm.gemm_time(N, model.vocab_size // tp, model.hidden_size, gpu, constants, f_clk=f_clk)
    out["lm_head"] = np.where(N > 0, g["t"], 0.0)
    compute_bound["lm_head"] = g["compute_bound"]
    ar = comm.engine_allreduce_time(ar_bytes, tp, gpu, engine, constants, fused=fused)
    out["allreduce"] = np.where(T > 0, allreduces_per_layer() * L * ar + fused_stream, 0.0) if tp > 1 else np.zeros(n_steps)
    compute_bound["allreduce"] = np.zeros(n_steps, dtype=bool)
    blocks = sum(out[t] for t in (moe_step.BLOCK_TERMS if moe else BLOCK_TERMS))
    disp = host.engine_dispatch_floor(L, T, n_pref == 0, gpu, engine, constants, tp,
                                      fused_kernels=np.where(fused, len(FUSED_LIGHT) * n_fused,
                                                             L * light.PER_LAYER["add"] if add_fused else 0),
                                      extra_kernels=QK_NORM_LAUNCHES * L if model.qk_norm and not qk_fused else 0,
                                      gdn_layers=model.n_linear_layers if moe else 0)
    out["dispatch_floor"] = np.maximum(0.0, disp - blocks)
    hidden_dispatch = np.minimum(disp, blocks)
    S = host.scheduler_floor(N, gpu, constants, tp, engine=engine)
    overlap = engine.get("overlap", gpu, constants) if engine.host_terms else 0.0
    out["host"], hidden_host = host.exposed_host(S, blocks + out["dispatch_floor"], overlap)
    eager_inline = host.eager_inline_time(T, gpu, engine, constants, tp,  # serial, after the exposed part
                                          gdn_layers=model.n_linear_layers if moe else 0)
    out["host"] = out["host"] + eager_inline
    # attention DP (dp = ep / tp): the idle ranks' dummy-batch launch a hybrid's step with a prefill waits for
    dp_wait = host.dp_idle_rank_time(disp, n_pref == 0, max(int(ep) // int(tp), 1) if moe else 1, gpu, engine,
                                     constants, gdn_layers=model.n_linear_layers if moe else 0)
    out["host"] = out["host"] + dp_wait
    out["sampling"] = host.sampling_time(N, gpu, constants, engine=engine)
    terms = moe_step.TERMS if moe else TERMS
    total = sum(out[t] for t in terms)
    if not np.isfinite(total).all():
        i = int(np.flatnonzero(~np.isfinite(total))[0])
        bad = next(t for t in terms if not np.isfinite(out[t][i]))
        raise InputError(f"step {i}: the predicted time is not finite (term {bad}); the inputs are outside what "
                         f"the model covers")
    ms = {k: v * 1e3 for k, v in out.items()}
    return {
        "total_ms": total * 1e3,
        "terms_ms": ms,
        "hidden_ms": {"dispatch_floor": hidden_dispatch * 1e3, "host": hidden_host * 1e3},
        "eager_inline_ms": eager_inline * 1e3,  # the part of the host term that is host.eager_inline_ms
        "dp_idle_ms": dp_wait * 1e3,  # the part of the host term that is host.dp_idle_rank_time
        "compute_bound": compute_bound,
        "factors": factors,
        "tokens": T,
        "requests": N,
        "blocks_ms": blocks * 1e3,
    }


def predict_step(model, gpu, batch: Batch | None = None, *, decode: Iterable = (), prefill: Iterable = (),
                 requests: Iterable = (), tp: int = 1, f_clk: float | None = None,
                 constants: Constants | None = None, kv_dtype: str = "bf16",
                 check_memory: bool = True, allow_boost: bool = False, engine=None,
                 dtype: str | None = None, ep: int = 1, moe_constants=None) -> StepPrediction:
    """Predict one engine step of `model` on `gpu` for `batch`, term by term.

    `f_clk` (sustained / datasheet boost clock) must lie in (0, 1]; a value above 1 runs
    compute beyond the datasheet peak and needs `allow_boost=True`. Bad input raises a
    `SteptimeError` that is also a `ValueError`, before anything per request is allocated. `dtype` None: the
    checkpoint's own precision for a model read from a config.json (its quantization_config), else bf16.

    >>> predict_step("llama-3.1-8b", "h100-sxm", decode=[(32, 1024)], prefill=[(1, 2048)])
    """
    model = get_model(model)
    dtype = resolve_dtype(model, dtype)
    gpu = get_gpu(gpu)
    for flag, v in (("check_memory", check_memory), ("allow_boost", allow_boost)):
        check_bool(v, flag)  # a string such as "no" would read as true
    check_f_clk(f_clk, allow_boost)
    check_choice(kv_dtype, "KV-cache dtype kv_dtype", tuple(attention.KV_BYTES))
    tp = check_tp(tp, gpu)
    check_constants(constants)
    constants = constants or Constants.default()
    if batch is None:
        batch = Batch.build(decode=decode, prefill=prefill, requests=requests)
    elif not isinstance(batch, Batch):
        raise InputError(f"batch must be a steptime Batch (or use decode=/prefill=/requests=), got {_kind(batch)}")
    elif any(len(list(x)) for x in (decode, prefill, requests)):
        raise InputError("give the batch either as `batch` or as decode=/prefill=/requests=, not both")
    count, g_new, g_kv = batch.group_arrays()
    moe = is_moe(model)
    if moe:
        ep = moe_step.check_layout(model, gpu, tp, ep, dtype)[1]  # dtype and layout, one line each
    else:
        check_precision(gpu, dtype)  # the one dtype check (also predict_steps'): known dtype, fp8 tensor cores
        if as_int(ep, "expert-parallel degree ep", 1) != 1:
            raise InputError(f"expert parallelism (ep={ep}) applies to mixture-of-experts models; {model.key} is dense")
    validate_batch(model, gpu, g_new, g_kv, tp, check_memory, count=count, kv_dtype=kv_dtype, weight_dtype=dtype,
                   ep=ep)
    new, kv = batch.arrays()
    engine = get_engine(engine, fitted=constants.engines)
    r = predict_steps(model, gpu, np.zeros(len(new), dtype=np.int64), new, kv, 1, tp=tp, f_clk=f_clk,
                      constants=constants, kv_dtype=kv_dtype, engine=engine, dtype=dtype, ep=ep,
                      moe_constants=moe_constants)
    terms = {k: float(v[0]) for k, v in r["terms_ms"].items()}
    bound = {}
    kinds = moe_step.TERM_KIND if moe else TERM_KIND
    for t in (moe_step.TERMS if moe else TERMS):
        kind = kinds[t]
        if kind in ("gemm", "attention", "moe"):
            bound[t] = "compute" if bool(r["compute_bound"][t][0]) else "memory"
        elif kind == "light":
            bound[t] = "memory"
        else:
            bound[t] = kind
    factors = {t: {f: float(np.asarray(v).reshape(-1)[0]) for f, v in fs.items()} for t, fs in r["factors"].items()}
    law = moe_step.moe_law(engine.moe_kernels(), dtype, gpu, ep, moe_constants) if moe else (None, None)
    return StepPrediction(
        model=model.key, gpu=gpu.key, tp=tp, engine=engine.key, dtype=dtype, kv_dtype=kv_dtype, total_ms=float(r["total_ms"][0]), terms_ms=terms,
        hidden_ms={k: float(v[0]) for k, v in r["hidden_ms"].items()}, bound=bound, factors=factors,
        tokens=int(new.sum()), requests=len(new), ep=ep, moe=moe, calibrated=constants.calibrated(gpu),
        moe_kernels=engine.moe_kernels() if moe else None, moe_kernel_dtype=law[0], moe_kernel_family=law[1])


# ---------------------------------------------------------------------------------------
# One layer as Vidur profiles it (its mlp.csv operator set), from the same term functions.
# The operator -> term map is data: specs/operators.yaml (Vidur's order of execution).
VIDUR_LAYER_OPS = tuple(vidur_operators(per="layer"))
VIDUR_STEP_OPS = tuple(vidur_operators(per="step"))  # once per forward pass, not per layer
VIDUR_GEMM = MappingProxyType(vidur_operators(kind="gemm"))
VIDUR_LIGHT = MappingProxyType(vidur_operators(kind="light"))


def vidur_layer_ops(model, gpu, tokens, *, tp: int = 1, constants: Constants | None = None,
                    f_clk: float | None = None, parts: bool = False) -> dict:
    """Per-operator times (ms, arrays over `tokens`) of ONE layer with Vidur's operator names.

    Vidur's profiled block times input_layernorm, attn_pre_proj (QKV GEMM), attn_rope,
    attn_post_proj (O GEMM), post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj
    and ONE residual add (the add after attention is not timed); `emb` runs once per step.
    A parallel-block model (models.yaml `parallel_block`, phi-2) has no post-attention norm
    and its timed `add` is two kernels. With `parts=True` each GEMM entry is the full gemm_time dict (seconds) and each
    light entry a (floor, stream) pair in seconds, for ablations.
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    constants = constants or Constants.default()
    T = np.asarray(tokens, dtype=float)
    shapes = layer_shapes(model, tp)
    times = gemm.gemm_time_shapes(T, {term: shapes[term] for term in VIDUR_GEMM.values()}, gpu, constants,
                                  f_clk=f_clk)
    out: dict = {}
    for op, term in VIDUR_GEMM.items():
        g = times[term]
        out[op] = g if parts else g["t"] * 1e3
    parallel = model.parallel_block
    for op, kern in VIDUR_LIGHT.items():
        if parallel and op == "post_attention_layernorm":
            continue
        nb = light.light_bytes(kern, T, model, tp)
        reps = 2.0 if (parallel and op == "add") else 1.0
        if parts:  # Vidur times Sarathi-Serve's kernels: the flat floor law's (terms/light.py)
            full = light.light_time(kern, nb, gpu, constants, floor_law="flat")
            stream = full - light.light_time(kern, 0.0 * nb, gpu, constants, floor_law="flat")
            out[op] = (reps * (full - stream), reps * stream, reps * nb)
        else:
            out[op] = reps * light.light_time(kern, nb, gpu, constants, floor_law="flat") * 1e3
    return out


def vidur_layer_time(model, gpu, tokens, **kw) -> np.ndarray:
    """Sum of one layer's Vidur operators (ms), emb excluded (it is per step)."""
    ops = vidur_layer_ops(model, gpu, tokens, **kw)
    return sum(v for k, v in ops.items() if k in VIDUR_LAYER_OPS)
