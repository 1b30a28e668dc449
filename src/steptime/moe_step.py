"""The block terms of a mixture-of-experts model's step (issue 20), for steptime.step.predict_steps.

A layer is attention (GQA, or DeepSeek's MLA: compressed projections, weight-absorbed batched GEMMs
and a latent KV cache; a sliding window on some layers where the model has one) followed by either a
dense MLP (the first `first_k_dense_replace` layers) or an MoE block:

    router (T x E GEMM) -> routed experts (fused grouped GEMM, efficiency from the tokens each
    expert gets) + permute/combine (token copies) + shared experts -> the expert exchange (EP > 1 with
    attention DP > 1: the engine's moe.exchange, vLLM's default all-gather + reduce-scatter or DeepEP's all-to-all)

Layout: `tp` GPUs shard attention by heads; `ep` > 1 is expert parallelism over ep GPUs, which run
attention data-parallel in groups of tp (dp = ep / tp, each DP rank with the given batch) and hold
num_experts / ep experts each (moe_tp = 1); with ep = 1 the experts are sliced tp ways (moe_tp = tp).
A hybrid (Qwen3.5/3.6: `full_attention_interval`) has full attention (GQA, its q projection doubled by the
output gate) on 1 of every `full_attention_interval` layers and Gated DeltaNet linear attention on the others:
`gdn_proj` (in_proj_qkvz, in_proj_ba, out_proj through the GEMM law) and `gdn_kernel` (conv1d, the gated delta
rule, the gated RMSNorm: steptime.terms.gdn); those layers keep a fixed-size state per request, no KV cache.
Every term returned is seconds per step (arrays over steps); the dense path never comes here.
"""

from __future__ import annotations

from functools import partial
from types import MappingProxyType

import numpy as np

from steptime.errors import InputError, UnsupportedError
from steptime.specs.engines import MOE_EXCHANGE_DEFAULT, MOE_EXCHANGES, check_precision
from steptime.terms import attention, comm, gdn, gemm, light, precision
from steptime.terms import moe as moe_terms
from steptime.validation import as_int

ATTN_TERMS = ("qkv_proj", "o_proj", "mla_absorb", "mla_kv_up", "attn_prefill", "attn_decode")
MLA_GEMM_TERMS = ("mla_absorb", "mla_kv_up")
GDN_TERMS = ("gdn_proj", "gdn_kernel")  # a hybrid's linear-attention layers (zero otherwise)
MOE_TERMS = ("dense_mlp", "router", "moe_experts", "moe_permute_combine", "shared_experts", "moe_a2a")
LIGHT_TERMS = ("rmsnorm", "add", "rope", "act", "kv_write", "emb")
BLOCK_TERMS = ATTN_TERMS + GDN_TERMS + MOE_TERMS + LIGHT_TERMS + ("lm_head", "allreduce")
TERMS = BLOCK_TERMS + ("dispatch_floor", "host", "sampling")
TERM_KIND = MappingProxyType({
    "qkv_proj": "gemm", "o_proj": "gemm", "mla_absorb": "gemm", "mla_kv_up": "gemm", "attn_prefill": "attention",
    "attn_decode": "attention", "gdn_proj": "gemm", "gdn_kernel": "light", "dense_mlp": "gemm", "router": "gemm", "moe_experts": "moe",
    "moe_permute_combine": "light", "shared_experts": "gemm", "moe_a2a": "comm",
    **{t: "light" for t in LIGHT_TERMS}, "lm_head": "gemm", "allreduce": "comm",
    "dispatch_floor": "launch", "host": "host", "sampling": "host"})
MOE_DTYPES = tuple(moe_terms.WEIGHT_BYTES)
ACT_BYTES = 2.0  # bf16 activations and router logits on the wire


def serving_routing(model) -> str:
    """The routing a serving step's routed experts are priced at: AIConfigurator's power-law router with the model
    family's exponent (terms.moe.routed_load 'power_law_<alpha>'; specs/moe.py ROUTER_ALPHA, DERIVED from
    AIConfigurator's per-family choice, nothing fitted)."""
    return f"power_law_{float(model.router_alpha):g}"


def moe_kernel_choices(mc=None) -> tuple:
    """The fused-MoE kernel sets a step's routed experts may be priced with: specs.engines.MOE_KERNELS whose laws
    ship in `mc` (default: the shipped calibration/moe.yaml; vLLM's at its top level, another framework's under
    constants.frameworks). What `--moe-kernels` and Engine.with_moe_kernels choose among."""
    from steptime.specs.engines import MOE_KERNELS

    if mc is None:
        mc = moe_terms.MoEConstants.default()
    return tuple(k for k in MOE_KERNELS if k == "vllm" or k in mc.frameworks)


def check_moe_kernels(kernels, model, flag: str = "moe_kernels", error=InputError) -> str:
    """`kernels` checked for a step of `model` (wave 41, the CLI's --moe-kernels): one of the shipped kernel sets
    (moe_kernel_choices), and only for a mixture-of-experts model (a dense model has no routed experts: refused,
    not ignored). One line naming the value and the choices."""
    from steptime.specs.moe import is_moe

    choices = moe_kernel_choices()
    if not isinstance(kernels, str) or kernels.strip().lower() not in choices:
        raise error(f"{flag} {kernels!r}: no shipped fused-MoE laws of that name (choices: {', '.join(choices)}; "
                    "calibration/moe.yaml)")
    kernels = kernels.strip().lower()
    if not is_moe(model):
        raise error(f"{flag} {kernels}: it picks whose fused-MoE laws price a mixture-of-experts model's routed "
                    f"experts; {model.key} is dense (leave it out)")
    return kernels


def engine_with_kernels(engine, kernels, model, constants=None, flag: str = "moe_kernels", error=InputError):
    """The engine profile `engine` (a name, None for the default, or an Engine) with `constants`' fitted values
    (default: the shipped ones), its routed experts priced with framework `kernels`' fused-MoE laws
    (Engine.with_moe_kernels, after check_moe_kernels); `kernels` None: the profile as it is."""
    from steptime.specs import get_model
    from steptime.specs.engines import get_engine

    if kernels is None:
        return engine
    kernels = check_moe_kernels(kernels, get_model(model), flag, error)
    if constants is None:
        from steptime.calibration import Constants

        constants = Constants.default()
    return get_engine(engine, fitted=constants.engines).with_moe_kernels(kernels, source=f"selected by {flag}")


def moe_law(kernels: str, dtype: str, gpu, ep: int = 1, mc=None) -> tuple:
    """(kernel dtype, kernel family) of the law that prices `gpu`'s routed experts of `dtype` under framework
    `kernels`' fused-MoE laws (`mc` default: the shipped calibration/moe.yaml): the dtype those kernels run
    (terms.moe.kernel_dtype) and the GPU's own `family:<dtype>` in that framework's tables (`family_ep:<dtype>` at
    ep > 1 where shipped), as routed_experts_time reads them; family None where the framework's tables hold no kernel
    for this GPU and dtype: the framework's all-GPU law for the dtype prices it (wave 42: `--moe-kernels trtllm` on
    A100 or MI300X said nothing of it)."""
    from steptime.specs import get_gpu

    gpu = get_gpu(gpu)
    kd = moe_terms.kernel_dtype(kernels, dtype, gpu)
    own = (mc or moe_terms.MoEConstants.default()).for_kernels(kernels).per_gpu.get(gpu.key, {})
    family = own.get(f"family:{kd}") or None
    if ep > 1:
        family = own.get(f"family_ep:{kd}") or family
    return kd, family


def moe_law_text(kernels: str, cells, mc=None) -> str:
    """The one wording of whose fused-MoE laws priced the routed experts, for predict's and serve's header and plan's
    report: `cells` are (gpu, dtype[, ep]) (one for a step, every one a plan searched). "trtllm's fused-MoE laws at
    mxfp4_mxfp8" for one kernel dtype, "... at mxfp4_mxfp8 on b200; mxfp4 on h200-sxm" for several; each GPU whose
    cells the framework's tables do not hold is named (priced with the framework's all-GPU law: moe_law)."""
    from steptime.specs import get_gpu

    by_dtype, uncovered = {}, {}
    for cell in cells:
        gpu, dtype, ep = (*cell, 1)[:3]
        key = get_gpu(gpu).key
        kd, family = moe_law(kernels, dtype, key, ep, mc)
        by_dtype.setdefault(kd, []).append(key)
        if family is None:
            uncovered.setdefault(kd, []).append(key)
    at = (next(iter(by_dtype)) if len(by_dtype) == 1 else
          "; ".join(f"{kd} on {', '.join(dict.fromkeys(g))}" for kd, g in by_dtype.items()))
    text = f"{kernels}'s fused-MoE laws at {at}"
    if uncovered:
        text += " (" + "; ".join(f"{kernels}'s tables give {', '.join(dict.fromkeys(g))} no {kd} kernel family: "
                                 f"priced with {kernels}'s all-GPU {kd} law" for kd, g in uncovered.items()) + ")"
    return text


def check_exchange(exchange) -> str:
    """The expert exchange kind (specs/engines.yaml moe.exchange), refused with one line if unknown."""
    if exchange not in MOE_EXCHANGES:
        raise UnsupportedError(f"unknown MoE expert exchange {exchange!r} (known: {', '.join(MOE_EXCHANGES)}; "
                               "specs/engines.yaml moe.exchange)")
    return exchange


def agrs_time(T, hidden: int, num_experts: int, dp: int, gpu, constants, engine=None) -> np.ndarray:
    """Seconds of one MoE layer's allgather_reducescatter exchange (vLLM's default all2all backend) with `dp`
    attention data-parallel ranks of `T` tokens each: an NCCL all-gather over the DP group of every rank's hidden
    states and router logits (dp x T x (hidden + num_experts) x 2 bytes gathered) before the experts, and an NCCL
    reduce-scatter of the expert outputs (dp x T x hidden x 2 bytes) after them.

    Each collective is priced with E1.25's measured NCCL all-reduce law (terms.comm.allreduce_time, impl nccl:
    the GPU's own curve at the nearest measured rank count, the datasheet ring law without one) at the SAME bus
    bytes: a ring all-gather or reduce-scatter of S bytes moves (n - 1) / n x S per rank, the bytes of an
    all-reduce of S / 2 (nccl-tests' bus convention; a ring all-reduce is a reduce-scatter then an all-gather).
    Two collectives, so two launch floors. No all-gather / reduce-scatter table is vendored (raw/ keeps
    AIConfigurator's all_reduce rows only), so nothing here is fitted. Under an `engine` whose all-reduce runs
    through host memory (allreduce impl nccl_host: PCIe GPUs without peer-to-peer, engines.yaml vllm-no-p2p), the
    same NCCL collectives take the same path, so each is priced with that profile's host-path law instead
    (comm.engine_nccl_time decides the path for both)."""
    T = np.asarray(T, dtype=float)
    if dp <= 1:
        return np.zeros_like(T)
    gathered = dp * T * (hidden + num_experts) * ACT_BYTES
    scattered = dp * T * hidden * ACT_BYTES
    return (comm.engine_nccl_time(gathered / 2.0, dp, gpu, engine, constants)
            + comm.engine_nccl_time(scattered / 2.0, dp, gpu, engine, constants))


def proj_dtype(dtype: str) -> str:
    """The attention / dense projections' GEMM precision for an MoE weight dtype: fp8 checkpoints run their
    projections in fp8 too; fp4 checkpoints (NVFP4, gpt-oss's MXFP4) keep attention in bf16."""
    return "fp8" if dtype in ("fp8", "fp8_block") else "bf16"


def check_layout(model, gpu, tp: int, ep, dtype: str):
    """(tp, ep, dp, moe_tp) checked: one line naming what does not fit."""
    ep = as_int(ep, "expert-parallel degree ep", 1)
    if dtype not in MOE_DTYPES:
        raise UnsupportedError(f"unknown dtype {dtype!r} for an MoE model (known: {', '.join(MOE_DTYPES)})")
    moe_terms.check_moe_dtype(gpu, dtype)
    check_precision(gpu, proj_dtype(dtype))
    E = model.num_experts
    node = getattr(gpu, "gpus_per_node", None)
    if node is not None and ep > node:
        raise InputError(f"expert-parallel degree {ep} is beyond {gpu.key}'s {node} GPUs per node (specs/gpus.yaml): "
                         "steptime's all-to-all law is the in-node one (E3.2's tables are one node)")
    if ep > 1:
        if ep % tp:
            raise InputError(f"expert-parallel degree {ep} must be a multiple of the tensor-parallel degree {tp} "
                             f"(ep = tp x attention data-parallel ranks)")
        if E % ep:
            raise InputError(f"expert-parallel degree {ep} must divide {model.key}'s {E} experts")
        return tp, ep, ep // tp, 1
    if model.moe_intermediate_size % tp:
        raise InputError(f"tensor-parallel degree {tp} must divide {model.key}'s expert width "
                         f"{model.moe_intermediate_size}")
    return tp, 1, 1, tp


def attention_geometry(model, tp: int) -> tuple:
    """(heads, KV heads, head dim) the attention kernels see on one GPU: MLA attends over the latent KV
    (one shared KV head of kv_lora_rank + rope dims, every local head reading it); GQA its K/V heads."""
    H = model.num_attention_heads // tp
    if model.attention == "mla":
        return H, 1, model.kv_lora_rank + model.qk_rope_head_dim
    return H, max(1, model.num_key_value_heads // tp), model.head_dim


def sliding_layers(model) -> int:
    """How many layers attend over a window of at most `model.attention_window` keys: gpt-oss's sliding
    window (1 of every `sliding_layers_every`) or Llama 4's attention chunk (all but 1 of every
    `global_layers_every`); 0 without one (MoEModel.n_window_layers)."""
    return model.n_window_layers


def mla_tokens(step_id, new, kv, n_steps):
    """Per step: (decode tokens, prefill latent rows up-projected) of an MLA model. Decode tokens run the
    weight-absorbed GEMMs; a prefill chunk's kv_b up-projection covers its new tokens and its cached context
    (vLLM's MLA prefill rebuilds the context's per-head K/V from the latent cache)."""
    dec = new == 1
    nd = np.bincount(step_id, weights=dec.astype(float), minlength=n_steps)
    up = np.bincount(step_id, weights=np.where(dec, 0.0, new + kv).astype(float), minlength=n_steps)
    return nd, up


def mla_gemm_times(model, gpu, tp, dec_tokens, up_tokens, *, dtype, constants, mc, f_clk=None,
                   prefill_tokens=None) -> dict:
    """One layer's MLA per-head GEMMs (seconds, arrays): `absorb` for the decode tokens (q_nope x W_UK into the
    latent space and the latent output x W_UV: two bf16 batched GEMMs over the heads, bound by their activation
    bytes, terms.moe.mla_bmm_time) and `kv_up` for the prefill rows (kv_b: latent -> per-head K nope and V, in
    the projections' precision, plus the K / V assembly copies over those rows and, for the `prefill_tokens`
    new tokens, the module's per-token passes: terms.moe.mla_prefill_copy_time)."""
    H = model.num_attention_heads // tp
    nd, up = np.asarray(dec_tokens, dtype=float), np.asarray(up_tokens, dtype=float)
    absorb = moe_terms.mla_bmm_time(nd, H, model.qk_nope_head_dim, model.kv_lora_rank, model.v_head_dim, gpu, mc)
    shapes_fn = (partial(precision.gemm_time_shapes_fp8, served=True) if proj_dtype(dtype) == "fp8"  # as served
                 else gemm.gemm_time_shapes)
    u = shapes_fn(np.maximum(up, 1.0), {"kv_b": (H * (model.qk_nope_head_dim + model.v_head_dim),
                                                 model.kv_lora_rank)}, gpu, constants, f_clk=f_clk)["kv_b"]
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    copies = moe_terms.mla_prefill_copy_time(up, H, qk, model.v_head_dim, gpu, mc)
    pt = np.zeros(up.shape) if prefill_tokens is None else np.asarray(prefill_tokens, dtype=float)
    tok = moe_terms.mla_prefill_copy_time(0.0, H, qk, model.v_head_dim, gpu, mc, tokens=pt, hidden=model.hidden_size)
    return {"absorb": np.where(nd > 0, absorb, 0.0), "absorb_bound": np.zeros(nd.shape, dtype=bool),
            "kv_up": np.where(up > 0, u["t"] + copies, 0.0), "kv_up_bound": u["compute_bound"],
            "prefill_tok": np.where(pt > 0, tok, 0.0)}


def mla_decode_time(model, gpu, tp, n_dec, sum_kv, *, kv_dtype, mc):
    """One layer's weight-absorbed MLA decode attention (seconds, arrays over steps) of `n_dec` decode requests
    over `sum_kv` cached tokens in all: each attends over its cache plus its new token, the latent read once
    (terms.moe.mla_decode_latent_time; E3.3 scores the same law)."""
    n = np.asarray(n_dec, dtype=float)
    a = moe_terms.mla_decode_latent_time(n, np.asarray(sum_kv, dtype=float) + n, model.num_attention_heads // tp,
                                         model.kv_lora_rank, model.qk_rope_head_dim, gpu, mc,
                                         kv_bytes=attention.KV_BYTES[kv_dtype])
    return np.where(n > 0, a["t"], 0.0)


def mla_prefill_time(model, gpu, tp, new, kv, *, mc):
    """One layer's non-absorbed MLA prefill attention (seconds) of chunks of `new` tokens over `kv` cached tokens
    (arrays, one per chunk): terms.moe.mla_prefill_attention_time with qk = nope + rope and v dims (E3.3)."""
    return moe_terms.mla_prefill_attention_time(new, kv, model.num_attention_heads // tp,
                                                model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim,
                                                gpu, mc)


def kv_layer_bytes(model, tp: int = 1, kv_dtype: str = "bf16") -> float:
    """KV-cache bytes one token stores in ONE layer on one GPU (MLA's latent, or GQA's K and V heads)."""
    return model.kv_elems_per_token_layer(tp) * attention.KV_BYTES[kv_dtype]


def memory_bytes(model, kv_tokens, tp: int = 1, ep: int = 1, *, dtype: str = "bf16", kv_dtype: str = "bf16",
                 window_tokens=None, requests: float = 0.0) -> float:
    """Weights plus KV cache on one GPU, bytes: attention, dense MLPs, shared experts, router and embeddings
    sharded tp ways; routed experts ep ways (ep > 1) or sliced tp ways; MLA's latent KV replicated over TP.

    KV: `kv_tokens` cached tokens in every full-attention layer. A sliding-window layer (gpt-oss: 1 of every
    `sliding_layers_every`) keeps at most the window per request: `window_tokens` = the sum over requests of
    min(tokens, window) (the engine frees blocks that fall out of the window: vLLM's hybrid KV-cache manager);
    without it every layer is charged `kv_tokens` (an upper bound). A hybrid's linear-attention layers hold no KV
    cache but `requests` fixed states each (MoEModel.gdn_state_bytes)."""
    wb = gemm.BYTES[proj_dtype(dtype)]
    eb = moe_terms.WEIGHT_BYTES[dtype]
    h = model.hidden_size
    Lm, Ld = model.n_moe_layers, model.n_dense_layers
    shard = ep if ep > 1 else tp
    Lf, Ll = model.n_full_layers, model.n_linear_layers
    w = (Lf * model.attention_params() + Ll * (model.gdn_params() if Ll else 0) + Ld * 3 * h * model.intermediate_size
         + Lm * (3 * h * model.shared_inter + h * model.num_experts)) * wb / tp
    w += Lm * model.num_experts * model.expert_params() * eb / shard
    w += model.vocab_size * h * (1 if model.tie_word_embeddings else 2) * 2.0 / tp
    n_slide = sliding_layers(model)
    win = float(kv_tokens) if window_tokens is None else min(float(window_tokens), float(kv_tokens))
    kv = (float(kv_tokens) * (Lf - n_slide) + win * n_slide) * kv_layer_bytes(model, tp, kv_dtype)
    # linear-attention layers: a fixed state per request (recurrent state + conv window), no KV cache
    state = float(requests) * Ll * model.gdn_state_bytes(tp) if Ll else 0.0
    return w + kv + state


def _other_kernels_hint(mc, kernels: str, kdt: str) -> str:
    """The tail of the no-law refusal: which other frameworks' fused-MoE laws price `kdt`, and how to select them
    (engines.yaml moe.kernels; e.g. mxfp4_mxfp8 has only TensorRT-LLM's laws, wave 40): the CLI's --moe-kernels
    first (wave 41, docs11), then Python's route."""
    others = []
    for fw in moe_terms.MOE_FRAMEWORKS:
        if fw == kernels or (fw != "vllm" and fw not in mc.frameworks):
            continue
        if mc.for_kernels(fw).has_dtype(kdt):
            others.append(fw)
    if not others:
        return ""
    fw = others[0]
    return (f"; {', '.join(others)}'s kernels have it (select them with --moe-kernels {fw} on predict / serve / "
            f"plan; a profile's moe.kernels picks whose laws it reads, `steptime constants`; from Python: "
            f"engine=steptime.specs.engines.get_engine({fw!r}).with_moe_kernels({fw!r}))")


def block_terms(model, gpu, step_id, new, kv, T, n_steps, *, tp, ep, dtype, kv_dtype, constants, mc, f_clk,
                exchange: str = MOE_EXCHANGE_DEFAULT, engine=None):
    """{term: seconds per step}, {term: compute-bound flags}, {term: factors} of the MoE model's blocks.
    `exchange`: the engine's expert exchange between attention data-parallel ranks (Engine.moe_exchange());
    `engine`: its profile, read for the collectives' path (agrs_time) and for whose fused-MoE kernels the routed
    experts run (Engine.moe_kernels: that framework's laws in `mc`, MoEConstants.for_kernels)."""
    check_exchange(exchange)
    _, ep, dp, moe_tp = check_layout(model, gpu, tp, ep, dtype)
    # the routed experts run the engine's own fused-MoE kernels: that framework's laws (engines.yaml moe.kernels;
    # MoEConstants.for_kernels), the all-to-all and MLA constants the same for every engine
    kernels = engine.moe_kernels() if engine is not None else "vllm"
    mk = mc.for_kernels(kernels)
    # and the expert dtype those kernels run (terms.moe.kernel_dtype: TensorRT-LLM runs MXFP4 experts as W4A8 MXFP4 /
    # MXFP8 on sm 100 / 103); the weights' memory and the projections keep the checkpoint's dtype
    kdt = moe_terms.kernel_dtype(kernels, dtype, gpu)
    if not mk.has_dtype(kdt):
        raise UnsupportedError(f"no fitted fused-MoE constants of {kernels}'s kernels for dtype {kdt!r} "
                               f"(calibration/moe.yaml has "
                               f"{', '.join(sorted({k.split(':')[1].split('@')[0] for k in mk.values if k.startswith('eta_c:')}))})"
                               f"{_other_kernels_hint(mc, kernels, kdt)}")
    pdt = proj_dtype(dtype)
    shapes_fn = partial(precision.gemm_time_shapes_fp8, served=True) if pdt == "fp8" else gemm.gemm_time_shapes
    L, Lm, Ld = model.num_hidden_layers, model.n_moe_layers, model.n_dense_layers
    Lf, Ll = model.n_full_layers, model.n_linear_layers  # Lf = L but for a linear-attention hybrid
    h = model.hidden_size
    out, cb, factors = {}, {}, {}
    zeros = np.zeros(n_steps)

    def put(name, t, bound=None):
        out[name] = np.where(T > 0, t, 0.0)
        cb[name] = np.zeros(n_steps, dtype=bool) if bound is None else np.asarray(bound, dtype=bool)

    # ---- attention projections
    H = model.num_attention_heads // tp
    if model.attention == "mla":
        shapes = {"q_b": (H * model.head_dim, model.q_lora_rank or h),
                  "kv_a": (model.kv_lora_rank + model.qk_rope_head_dim, h), "o": (h, H * model.v_head_dim)}
        if model.q_lora_rank:
            shapes["q_a"] = (model.q_lora_rank, h)
        g = shapes_fn(T, shapes, gpu, constants, f_clk=f_clk)
        put("qkv_proj", L * sum(g[s]["t"] for s in shapes if s != "o"), g["q_b"]["compute_bound"])
        put("o_proj", L * g["o"]["t"], g["o"]["compute_bound"])
        nd, up = mla_tokens(step_id, new, kv, n_steps)
        pt = np.bincount(step_id, weights=np.where(new > 1, new, 0).astype(float), minlength=n_steps)
        mg = mla_gemm_times(model, gpu, tp, nd, up, dtype=dtype, constants=constants, mc=mc, f_clk=f_clk,
                            prefill_tokens=pt)
        put("mla_absorb", L * mg["absorb"], mg["absorb_bound"])
        put("mla_kv_up", L * (mg["kv_up"] + mg["prefill_tok"]), mg["kv_up_bound"])
    else:
        kvh = max(1, model.num_key_value_heads // tp)
        qh = 2 * H if model.attn_output_gate else H  # the output gate doubles q_proj
        shapes = {"qkv": ((qh + 2 * kvh) * model.head_dim, h), "o": (h, H * model.head_dim)}
        g = shapes_fn(T, shapes, gpu, constants, f_clk=f_clk)
        put("qkv_proj", Lf * g["qkv"]["t"], g["qkv"]["compute_bound"])
        put("o_proj", Lf * g["o"]["t"], g["o"]["compute_bound"])
        put("mla_absorb", zeros)
        put("mla_kv_up", zeros)
    # ---- a hybrid's Gated DeltaNet layers: projections through the GEMM law, the light kernels (terms.gdn)
    if Ll:
        kd, vd, hv = model.gdn_key_dim // tp, model.gdn_value_dim // tp, model.linear_num_value_heads // tp
        gs = shapes_fn(T, {"qkvz": (2 * kd + 2 * vd, h), "ba": (2 * hv, h), "out": (h, vd)}, gpu, constants,
                       f_clk=f_clk)
        put("gdn_proj", Ll * (gs["qkvz"]["t"] + gs["ba"]["t"] + gs["out"]["t"]), gs["qkvz"]["compute_bound"])
        k = gdn.gdn_time(new, model, gpu, constants, tp, group=step_id, n_groups=n_steps)
        put("gdn_kernel", Ll * k["t"], k["compute_bound"])
    else:
        put("gdn_proj", zeros)
        put("gdn_kernel", zeros)
    a_heads, a_kv_heads, a_dim = attention_geometry(model, tp)
    for name in ("qkv_proj", "o_proj"):
        key = "q_b" if name == "qkv_proj" and model.attention == "mla" else ("o" if name == "o_proj" else "qkv")
        factors[name] = {f: g[key][f] for f in ("eta_c", "f_clk", "eta_cluster", "eta_active", "eta_duty", "eta_mem",
                                                "t_cta")}
    # ---- attention (a window on 1 of every `sliding_layers_every` layers)
    n_slide = sliding_layers(model)
    is_pref = new > 1
    for name, mask in (("attn_prefill", is_pref), ("attn_decode", ~is_pref)):
        if not mask.any():
            put(name, zeros)
            continue
        if model.attention == "mla" and name == "attn_decode":
            # weight-absorbed: the latent KV read once by every head (mla_decode_time; the serving timer's too)
            nd = np.bincount(step_id[mask], minlength=n_steps).astype(float)

            def latent(kv_m):
                skv = np.bincount(step_id[mask], weights=kv_m.astype(float), minlength=n_steps)
                return mla_decode_time(model, gpu, tp, nd, skv, kv_dtype=kv_dtype, mc=mc)

            t = (L - n_slide) * latent(kv[mask])
            if n_slide:
                t = t + n_slide * latent(np.minimum(kv[mask], model.attention_window))
            put(name, t)
            continue
        if model.attention == "mla" and name == "attn_prefill":
            # engines run MLA prefill NOT absorbed: kv_b up-projects the latent to per-head K (nope) and V, then
            # causal multi-head attention with qk = nope + rope and v dims (mla_prefill_time; the serving
            # timer's too; E3.3)
            t = np.bincount(step_id[mask], weights=mla_prefill_time(model, gpu, tp, new[mask], kv[mask], mc=mc),
                            minlength=n_steps)
            put(name, L * t, np.ones(n_steps, dtype=bool))
            continue
        heads, kv_heads, dim = a_heads, a_kv_heads, a_dim
        a = attention.attention_time(new[mask], kv[mask], heads, kv_heads, dim, gpu, constants,
                                     kv_dtype=kv_dtype, f_clk=f_clk, group=step_id[mask], n_groups=n_steps)
        t = (Lf - n_slide) * a["t"]
        if n_slide:
            w = attention.attention_time(new[mask], np.minimum(kv[mask], model.attention_window), a_heads,
                                         a_kv_heads, a_dim, gpu, constants, kv_dtype=kv_dtype, f_clk=f_clk,
                                         group=step_id[mask], n_groups=n_steps)
            t = t + n_slide * w["t"]
        put(name, t, a["compute_bound"])
    # ---- dense layers' MLP
    if Ld:
        i = model.intermediate_size // tp
        d = shapes_fn(T, {"gu": (2 * i, h), "dn": (h, i)}, gpu, constants, f_clk=f_clk)
        put("dense_mlp", Ld * (d["gu"]["t"] + d["dn"]["t"]), d["gu"]["compute_bound"])
    else:
        put("dense_mlp", zeros)
    # ---- MoE layers: the experts see every DP rank's tokens (equal batches assumed)
    r = gemm.gemm_time(T, model.num_experts, h, gpu, constants, f_clk=f_clk)
    put("router", Lm * r["t"], r["compute_bound"])
    # The router is skewed: a serving step's token-expert pairs follow AIConfigurator's power-law router at the model
    # family's exponent (model.router_alpha; specs/moe.py ROUTER_ALPHA), the busiest EP rank timed (the step waits
    # for it), its weights from HBM (regime 'evicted'); was uniform random routing (experts_touched), which touches
    # more experts than a skewed router at decode batch sizes (serving_routing)
    Tm = T * dp
    x = moe_terms.routed_experts_time(Tm, h, model.moe_intermediate_size, model.num_experts_per_tok,
                                      model.num_experts, gpu, mk, tp=moe_tp, ep=ep, dtype=kdt,
                                      routing=serving_routing(model))
    put("moe_experts", Lm * (x["t"] - x["t_tokens"]), x["compute_bound"])
    put("moe_permute_combine", Lm * x["t_tokens"])
    factors["moe_experts"] = {"eta_mem": x["eta_mem"], "weight_bytes": x["weight_bytes"],
                              "experts_touched": x["experts_touched"]}
    if model.shared_inter:
        si = model.shared_inter // tp
        s = shapes_fn(T, {"gu": (2 * si, h), "dn": (h, si)}, gpu, constants, f_clk=f_clk)
        put("shared_experts", Lm * (s["gu"]["t"] + s["dn"]["t"]), s["gu"]["compute_bound"])
    else:
        put("shared_experts", zeros)
    # All-to-all only across attention data-parallel ranks (dp > 1), each holding different tokens: with ep = tp
    # (dp = 1) every GPU already holds every token (attention TP), runs its local experts on them and the TP
    # all-reduce after the block combines them (vLLM: FusedMoEParallelConfig.use_all2all_kernels = dp_size > 1
    # and use_ep). The exchange is the engine's (engines.yaml moe.exchange): allgather_reducescatter (vLLM's
    # default: agrs_time over the dp ranks of the DP group), or DeepEP's all-to-all over the ep GPUs, its mode per
    # step: low-latency for a decode-only step, high-throughput with a prefill.
    # With attention TP > 1 inside each DP rank vLLM runs the MoE sequence-parallel (vllm/config/parallel.py
    # ParallelConfig.use_sequence_parallel_moe: allgather_reducescatter and EP and tp > 1 and dp > 1): each TP rank
    # keeps ceil(T / tp) of its DP rank's tokens and the exchange runs over the whole EP group (the all2all
    # manager's dispatch: get_ep_group() if is_sequence_parallel else get_dp_group()), ep ranks, not dp.
    if ep > 1 and dp > 1 and exchange == "allgather_reducescatter":
        seq = tp > 1  # sequence-parallel MoE: ceil(T / tp) tokens per rank over the EP group
        tokens = np.ceil(np.asarray(T, dtype=float) / tp) if seq else T
        put("moe_a2a", Lm * agrs_time(tokens, h, model.num_experts, ep if seq else dp, gpu, constants, engine))
    elif ep > 1 and dp > 1:
        decode_only = np.bincount(step_id, weights=(new > 1).astype(float), minlength=n_steps) == 0
        groups = {"n_group": model.n_group, "topk_group": model.topk_group}  # the normal mode's destination ranks
        ll = moe_terms.a2a_time(T, h, model.num_experts_per_tok, ep, gpu, mc, mode="ll", **groups)
        ht = moe_terms.a2a_time(T, h, model.num_experts_per_tok, ep, gpu, mc, mode="ht", **groups)
        put("moe_a2a", Lm * np.where(decode_only, ll, ht))
    else:
        put("moe_a2a", zeros)
    # ---- light kernels (the activation runs inside the fused MoE kernel: only dense layers pay it)
    add_fused = engine is not None and engine.fuses_add_rmsnorm()  # each residual add inside the RMSNorm after it
    law = engine.light_floor_law() if engine is not None else "flat"  # the engine's launch-floor law, as dense steps
    for kern in LIGHT_TERMS:
        if add_fused and kern == "add":
            put(kern, zeros)
            continue
        t = (light.add_rmsnorm_time(T, model, gpu, tp, constants, floor_law=law) if add_fused and kern == "rmsnorm"
             else light.engine_light_time(kern, T, model, gpu, tp, constants, floor_law=law))
        if kern == "emb":
            reps = 1
        elif kern == "act":
            reps = Ld + (Lm if model.shared_inter else 0)
        elif kern in ("rope", "kv_write"):
            reps = Lf * light.PER_LAYER[kern]  # only layers with a KV cache
        else:
            reps = L * light.PER_LAYER[kern]
        put(kern, reps * t)
    return out, cb, factors
