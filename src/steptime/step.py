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
from typing import Iterable, Sequence

import numpy as np

from steptime.calibration import Constants
from steptime.errors import BatchError, MemoryFitError
from steptime.specs import get_gpu, get_model
from steptime.specs.engines import allreduces_per_layer, check_precision, get_engine, tp_sharding
from steptime.terms import attention, comm, gemm, host, light

PROJ_TERMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ATTN_TERMS = ("attn_prefill", "attn_decode")
LIGHT_TERMS = ("rmsnorm", "add", "rope", "act", "kv_write", "emb")
BLOCK_TERMS = PROJ_TERMS + ATTN_TERMS + LIGHT_TERMS + ("lm_head", "allreduce")
TERMS = BLOCK_TERMS + ("dispatch_floor", "host", "sampling")
TERM_KIND = {**{t: "gemm" for t in PROJ_TERMS + ("lm_head",)}, **{t: "attention" for t in ATTN_TERMS},
             **{t: "light" for t in LIGHT_TERMS}, "allreduce": "comm", "dispatch_floor": "launch",
             "host": "host", "sampling": "host"}


@dataclass(frozen=True)
class Request:
    new_tokens: int
    kv_len: int = 0


@dataclass
class Batch:
    requests: list[Request] = field(default_factory=list)

    @classmethod
    def build(cls, decode: Iterable = (), prefill: Iterable = (), requests: Iterable = ()) -> "Batch":
        """decode: (count, kv_len) pairs; prefill: (count, tokens) or (count, tokens, kv_len)."""
        reqs = [r if isinstance(r, Request) else Request(*r) for r in requests]
        for spec in decode:
            count, kv = _pair(spec, "decode")
            reqs.extend(Request(1, kv) for _ in range(count))
        for spec in prefill:
            t = tuple(spec)
            if len(t) not in (2, 3):
                raise BatchError(f"prefill entry {spec!r}: expected (count, tokens[, kv_len])")
            count, toks = int(t[0]), int(t[1])
            kv = int(t[2]) if len(t) == 3 else 0
            reqs.extend(Request(toks, kv) for _ in range(count))
        return cls(reqs)

    @classmethod
    def parse(cls, decode: Sequence[str] = (), prefill: Sequence[str] = ()) -> "Batch":
        """CLI syntax: decode 'COUNTxKV', prefill 'COUNTxTOKENS' or 'COUNTxTOKENS@KV'."""
        return cls.build(decode=[_parse_spec(s, "decode") for s in decode],
                         prefill=[_parse_spec(s, "prefill") for s in prefill])

    def arrays(self):
        new = np.fromiter((r.new_tokens for r in self.requests), dtype=np.int64, count=len(self.requests))
        kv = np.fromiter((r.kv_len for r in self.requests), dtype=np.int64, count=len(self.requests))
        return new, kv


_SPEC = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*(?:@\s*(\d+))?\s*$")


def _parse_spec(text: str, kind: str) -> tuple:
    m = _SPEC.match(str(text))
    if not m:
        form = "COUNTxKV (e.g. 32x1024)" if kind == "decode" else "COUNTxTOKENS[@KV] (e.g. 1x2048)"
        raise BatchError(f"malformed --{kind} {text!r}: expected {form}")
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


def _pair(spec, kind):
    t = tuple(spec)
    if len(t) != 2:
        raise BatchError(f"{kind} entry {spec!r}: expected (count, kv_len)")
    return int(t[0]), int(t[1])


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

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "tp": self.tp, "engine": self.engine, "dtype": self.dtype,
                "kv_dtype": self.kv_dtype, "total_ms": self.total_ms,
                "terms_ms": self.terms_ms, "hidden_ms": self.hidden_ms, "bound": self.bound,
                "factors": self.factors, "tokens": self.tokens, "requests": self.requests}


def validate_batch(model, gpu, new, kv, tp: int = 1, check_memory: bool = True, dtype: str = "bf16",
                   kv_dtype: str = "bf16") -> None:
    if len(new) == 0:
        raise BatchError("empty batch: give at least one --decode or --prefill request")
    if np.any(new <= 0):
        raise BatchError(f"new tokens must be >= 1 (got {int(new.min())})")
    if np.any(kv < 0):
        raise BatchError(f"KV length must be >= 0 (got {int(kv.min())})")
    total = kv + new
    if np.any(total > model.max_position_embeddings):
        raise BatchError(f"KV length + new tokens {int(total.max())} exceeds {model.key}'s maximum "
                         f"of {model.max_position_embeddings} positions")
    if tp < 1 or model.num_attention_heads % tp:
        raise BatchError(f"tensor-parallel degree {tp} must divide {model.key}'s "
                         f"{model.num_attention_heads} attention heads")
    if check_memory:
        need = memory_bytes(model, total.sum(), tp, weight_dtype=dtype, kv_dtype=kv_dtype)
        if need > gpu.mem_bytes:
            raise MemoryFitError(
                f"{model.key} with this batch needs {need / 1e9:.1f} GB per GPU (weights + KV cache, "
                f"tp={tp}) but {gpu.key} has {gpu.mem_gb:g} GB: {(need - gpu.mem_bytes) / 1e9:.1f} GB over")


def memory_bytes(model, kv_tokens, tp: int = 1, bytes_per: int = 2, weight_dtype: str | None = None,
                 kv_dtype: str | None = None) -> float:
    """Weights + KV cache per GPU; fp8 weights (W8A8) or an fp8 KV cache take one byte an element."""
    w_b = gemm.BYTES[weight_dtype] if weight_dtype else bytes_per
    kv_b = attention.KV_BYTES[kv_dtype] if kv_dtype else bytes_per
    kv_heads = max(1, model.num_key_value_heads // tp)
    kv = float(kv_tokens) * 2 * model.num_hidden_layers * kv_heads * model.head_dim * kv_b
    return model.n_params() * w_b / tp + kv


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


def predict_steps(model, gpu, step_id, new_tokens, kv_len, n_steps: int | None = None, *, tp: int = 1,
                  f_clk: float | None = None, constants: Constants | None = None,
                  kv_dtype: str = "bf16", engine=None, dtype: str = "bf16") -> dict:
    """Vectorised core: per-step term times in milliseconds (dict of arrays) plus totals.

    engine: a profile name or Engine (default: the default engine, `vllm`); dtype: the
    projection GEMMs' precision (bf16, or fp8 W8A8 from the datasheet fp8 peak).
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    constants = constants or Constants.default()
    engine = get_engine(engine)
    check_precision(gpu, dtype)
    step_id = np.asarray(step_id, dtype=np.int64)
    new = np.asarray(new_tokens, dtype=float)
    kv = np.asarray(kv_len, dtype=float)
    if n_steps is None:
        n_steps = int(step_id.max()) + 1 if len(step_id) else 0
    T = np.bincount(step_id, weights=new, minlength=n_steps)
    N = np.bincount(step_id, minlength=n_steps).astype(float)
    L = model.num_hidden_layers
    out: dict[str, np.ndarray] = {}
    compute_bound: dict[str, np.ndarray] = {}
    factors: dict[str, dict] = {}
    n_pref = np.bincount(step_id, weights=(new > 1).astype(float), minlength=n_steps)
    for name, g in gemm.gemm_time_shapes(T, layer_shapes(model, tp), gpu, constants, f_clk=f_clk,
                                         dtype=dtype).items():
        out[name] = L * g["t"]
        compute_bound[name] = g["compute_bound"]
        factors[name] = {f: g[f] for f in ("eta_c", "f_clk", "eta_cluster", "eta_active", "eta_duty", "eta_mem")}
    heads = model.num_attention_heads // tp
    kv_heads = max(1, model.num_key_value_heads // tp)
    is_pref = new > 1
    for name, mask in (("attn_prefill", is_pref), ("attn_decode", ~is_pref)):
        if mask.any():
            a = attention.attention_time(new[mask], kv[mask], heads, kv_heads, model.head_dim, gpu, constants,
                                         kv_dtype=kv_dtype, f_clk=f_clk, group=step_id[mask], n_groups=n_steps)
            out[name] = L * a["t"]
            compute_bound[name] = a["compute_bound"]
        else:
            out[name] = np.zeros(n_steps)
            compute_bound[name] = np.zeros(n_steps, dtype=bool)
    for kern in LIGHT_TERMS:
        t = light.light_time(kern, light.light_bytes(kern, T, model, tp), gpu, constants)
        reps = 1 if kern == "emb" else L * light.PER_LAYER[kern]
        out[kern] = np.where(T > 0, reps * t, 0.0)
        compute_bound[kern] = np.zeros(n_steps, dtype=bool)
    g = gemm.gemm_time(N, model.vocab_size // tp, model.hidden_size, gpu, constants, f_clk=f_clk)
    out["lm_head"] = np.where(N > 0, g["t"], 0.0)
    compute_bound["lm_head"] = g["compute_bound"]
    ar = comm.engine_allreduce_time(2.0 * T * model.hidden_size, tp, gpu, engine, constants)  # bf16 activations
    out["allreduce"] = np.where(T > 0, allreduces_per_layer() * L * ar, 0.0) if tp > 1 else np.zeros(n_steps)
    compute_bound["allreduce"] = np.zeros(n_steps, dtype=bool)
    blocks = sum(out[t] for t in BLOCK_TERMS)
    disp = host.engine_dispatch_floor(L, T, n_pref == 0, gpu, engine, constants, tp)
    out["dispatch_floor"] = np.maximum(0.0, disp - blocks)
    hidden_dispatch = np.minimum(disp, blocks)
    S = host.scheduler_floor(N, gpu, constants, tp, engine=engine)
    overlap = engine.get("overlap", gpu, constants) if engine.host_terms else 0.0
    out["host"], hidden_host = host.exposed_host(S, blocks + out["dispatch_floor"], overlap)
    out["sampling"] = host.sampling_time(N, gpu, constants, engine=engine)
    total = sum(out[t] for t in TERMS)
    ms = {k: v * 1e3 for k, v in out.items()}
    return {
        "total_ms": total * 1e3,
        "terms_ms": ms,
        "hidden_ms": {"dispatch_floor": hidden_dispatch * 1e3, "host": hidden_host * 1e3},
        "compute_bound": compute_bound,
        "factors": factors,
        "tokens": T,
        "requests": N,
        "blocks_ms": blocks * 1e3,
    }


def predict_step(model, gpu, batch: Batch | None = None, *, decode: Iterable = (), prefill: Iterable = (),
                 requests: Iterable = (), tp: int = 1, f_clk: float | None = None,
                 constants: Constants | None = None, kv_dtype: str = "bf16",
                 check_memory: bool = True, engine=None, dtype: str = "bf16") -> StepPrediction:
    """Predict one engine step of `model` on `gpu` for `batch`, term by term.

    >>> predict_step("llama-3.1-8b", "h100-sxm", decode=[(32, 1024)], prefill=[(1, 2048)])
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    if batch is None:
        batch = Batch.build(decode=decode, prefill=prefill, requests=requests)
    new, kv = batch.arrays()
    engine = get_engine(engine)
    check_precision(gpu, dtype)
    validate_batch(model, gpu, new, kv, tp, check_memory, dtype=dtype, kv_dtype=kv_dtype)
    r = predict_steps(model, gpu, np.zeros(len(new), dtype=np.int64), new, kv, 1, tp=tp, f_clk=f_clk,
                      constants=constants, kv_dtype=kv_dtype, engine=engine, dtype=dtype)
    terms = {k: float(v[0]) for k, v in r["terms_ms"].items()}
    bound = {}
    for t in TERMS:
        kind = TERM_KIND[t]
        if kind in ("gemm", "attention"):
            bound[t] = "compute" if bool(r["compute_bound"][t][0]) else "memory"
        elif kind == "light":
            bound[t] = "memory"
        else:
            bound[t] = kind
    factors = {t: {f: float(v[0]) for f, v in fs.items()} for t, fs in r["factors"].items()}
    return StepPrediction(
        model=model.key, gpu=gpu.key, tp=tp, engine=engine.key, dtype=dtype, kv_dtype=kv_dtype, total_ms=float(r["total_ms"][0]), terms_ms=terms,
        hidden_ms={k: float(v[0]) for k, v in r["hidden_ms"].items()}, bound=bound, factors=factors,
        tokens=int(new.sum()), requests=len(new))


# ---------------------------------------------------------------------------------------
# One layer as Vidur profiles it (its mlp.csv operator set), from the same term functions.
VIDUR_LAYER_OPS = ("attn_pre_proj", "attn_rope", "attn_post_proj", "input_layernorm", "post_attention_layernorm",
                   "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
VIDUR_STEP_OPS = ("emb",)  # once per forward pass, not per layer
VIDUR_GEMM = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
              "mlp_down_proj": "down_proj"}
VIDUR_LIGHT = {"attn_rope": "rope", "input_layernorm": "rmsnorm", "post_attention_layernorm": "rmsnorm",
               "mlp_act": "act", "add": "add", "emb": "emb"}
# Models whose block runs attention and MLP in parallel off one norm and sums both with the
# residual in one timed region (two add kernels): Hugging Face PhiForCausalLM (phi-2).
PARALLEL_BLOCK = frozenset({"phi-2"})


def vidur_layer_ops(model, gpu, tokens, *, tp: int = 1, constants: Constants | None = None,
                    f_clk: float | None = None, parts: bool = False) -> dict:
    """Per-operator times (ms, arrays over `tokens`) of ONE layer with Vidur's operator names.

    Vidur's profiled block times input_layernorm, attn_pre_proj (QKV GEMM), attn_rope,
    attn_post_proj (O GEMM), post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj
    and ONE residual add (the add after attention is not timed); `emb` runs once per step.
    A parallel-block model (phi-2) has no post-attention norm and its timed `add` is two
    kernels. With `parts=True` each GEMM entry is the full gemm_time dict (seconds) and each
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
    parallel = model.key in PARALLEL_BLOCK
    for op, kern in VIDUR_LIGHT.items():
        if parallel and op == "post_attention_layernorm":
            continue
        nb = light.light_bytes(kern, T, model, tp)
        reps = 2.0 if (parallel and op == "add") else 1.0
        if parts:
            full = light.light_time(kern, nb, gpu, constants)
            stream = light.light_time(kern, nb, gpu, constants) - light.light_time(kern, 0.0 * nb, gpu, constants)
            out[op] = (reps * (full - stream), reps * stream, reps * nb)
        else:
            out[op] = reps * light.light_time(kern, nb, gpu, constants) * 1e3
    return out


def vidur_layer_time(model, gpu, tokens, **kw) -> np.ndarray:
    """Sum of one layer's Vidur operators (ms), emb excluded (it is per step)."""
    ops = vidur_layer_ops(model, gpu, tokens, **kw)
    return sum(v for k, v in ops.items() if k in VIDUR_LAYER_OPS)
