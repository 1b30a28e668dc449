"""Light kernels: memory-bound elementwise passes, each a launch floor plus bytes over
an achieved bandwidth of its own (a scatter like the KV-cache write reaches far less).

    t_k = (floor_k^p + stream_k^p)^(1/p),   floor_k = light_floor_us[k],
                                             stream_k = bytes_k / (BW * light_bw_scale * light_eta[k])

(p = light_p[k]: 1 adds the floor to the stream, large p is a sharp max; the measured knee
sits in between.)

`light_bw_scale` is the GPU's achieved fraction of HBM bandwidth on a large RMSNorm (one
per-GPU deploy reading), `light_eta[k]` each kernel's bandwidth relative to it and
`light_floor_us[k]` its floor (both fitted on the other GPUs; E1.1c).

Bytes per kernel for T new tokens (bf16 activations, per GPU after TP):
    rmsnorm   read T h, write T h (+ weight h)          x2 per layer
    add       read 2 T h, write T h                      residual adds, x2 per layer
    rope      read and write T (q + kv)                  q and k
    act       read T I_up, write T I                     I_up = 2 I when gated
    kv_write  read T 2 kv, write T 2 kv                  into the paged cache (scatter)
    emb       read T h (gather), write T h               once per step
    qk_norm   read T q, write T q (+ weight d); then the same for k (kv)   Qwen3 only (models.yaml qk_norm)
    add_rmsnorm  read 2 T h (sublayer output, residual), write 2 T h (new residual, normed), + weight h
                 one launch in place of an add and an RMSNorm, where the engine fuses them (engines.yaml
                 fusion.add_rmsnorm): the RMSNorm launch on its own bytes plus the add's extra traffic
                 (2 T h) at the add law's bandwidth without its floor (add_rmsnorm_time), nothing fitted

qk_norm (issue 19): Qwen3 applies an RMSNorm of width head_dim to every head of q and of k
before RoPE. vLLM's Qwen3Attention.forward (vllm-project/vllm vllm/model_executor/models/qwen3.py,
commit 002456df36fc7a63ca4463f335a49d05634ab2ab) calls `self.q_norm(q_by_head)` and
`self.k_norm(k_by_head)`: two RMSNorm launches per layer, q's and k's, each moving its own
bytes. The fused split-QKV + q/k RMSNorm + RoPE kernel (`torch.ops._C.fused_qk_norm_rope`,
vLLM's `QKNormRoPEFusionPass`) sits behind `pass_config.enable_qk_norm_rope_fusion`, which is
False by default in the vLLM configs found (SGLang's `enable_fused_qk_norm_rope` likewise
defaults False), so steptime times the unfused pair for those engines. Priced with the rmsnorm law
(its floor, eta and p: the same kernel on a narrower row); nothing fitted. TensorRT-LLM's PyTorch
Qwen3 runs the norms and RoPE as one kernel (`torch.ops.trtllm.fused_qk_norm_rope`, its default):
engines.yaml fusion.qk_norm_rope, where step.py drops this term and its launches (the rope term
prices the fused kernel).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.terms.gemm import smax

LIGHT_KERNELS = ("rmsnorm", "add", "rope", "act", "kv_write", "emb")
PER_LAYER = MappingProxyType({"rmsnorm": 2, "add": 2, "rope": 1, "act": 1, "kv_write": 1})
QK_NORM_LAW = "rmsnorm"  # the constants (light_floor_us, light_eta, light_p) qk_norm's launches are priced with


def _head_widths(model, tp: int):
    """(q, kv) values per token per rank: the query heads split over TP, the KV heads too (at least one)."""
    q = model.num_attention_heads * model.head_dim / tp
    kv = max(1, model.num_key_value_heads // tp) * model.head_dim
    return q, kv


def qk_norm_bytes(tokens, model, tp: int = 1):
    """(q bytes, k bytes) of the two per-head RMSNorm launches of one layer: read and write T x
    heads/TP x head_dim bf16 values, plus the head_dim weight, for q and for k separately."""
    T = np.asarray(tokens, dtype=float)
    d = model.head_dim
    q, kv = _head_widths(model, tp)
    return 2.0 * (2 * T * q + d), 2.0 * (2 * T * kv + d)


def qk_norm_time(tokens, model, gpu, tp: int = 1, constants: Constants | None = None) -> np.ndarray:
    """Seconds per layer of a qk_norm model's q and k RMSNorms (two launches); zeros for others."""
    T = np.asarray(tokens, dtype=float)
    if not getattr(model, "qk_norm", False):
        return np.zeros_like(T)
    bq, bk = qk_norm_bytes(T, model, tp)
    return light_time(QK_NORM_LAW, bq, gpu, constants) + light_time(QK_NORM_LAW, bk, gpu, constants)


def add_rmsnorm_bytes(tokens, model, tp: int = 1):
    """Bytes of one fused residual add + RMSNorm launch: read the sublayer output and the residual, write the new
    residual and the normed activations (bf16, T x hidden each), plus the norm's weight: 2 (4 T h + h). The two
    kernels it replaces move rmsnorm's 2 (2 T h + h) and add's 2 (3 T h): the sum is not re-read."""
    T = np.asarray(tokens, dtype=float)
    h = model.hidden_size
    return 2.0 * (4 * T * h + h)


def add_rmsnorm_time(tokens, model, gpu, tp: int = 1, constants: Constants | None = None) -> np.ndarray:
    """Seconds of one fused residual add + RMSNorm launch: the RMSNorm kernel on its own bytes, plus the traffic the
    add brings into it (add_rmsnorm_bytes less the norm's: the residual read and the new residual written) streamed
    at the add law's bandwidth without the add's launch floor, as step.py prices the kernels an all-reduce absorbs.
    Never more than the two launches it replaces."""
    norm = light_bytes("rmsnorm", tokens, model, tp)
    extra = add_rmsnorm_bytes(tokens, model, tp) - norm
    return (light_time("rmsnorm", norm, gpu, constants)
            + light_time("add", extra, gpu, constants) - light_time("add", 0.0 * extra, gpu, constants))


def light_bytes(kernel: str, tokens, model, tp: int = 1):
    T = np.asarray(tokens, dtype=float)
    h = model.hidden_size
    q, kv = _head_widths(model, tp)
    inter = model.intermediate_size / tp
    if kernel == "rmsnorm":
        return 2.0 * (2 * T * h + h)
    if kernel == "add":
        return 2.0 * 3 * T * h
    if kernel == "rope":
        return 2.0 * 2 * T * (q + kv)
    if kernel == "act":
        up = 2 * inter if model.gated_mlp else inter
        return 2.0 * T * (up + inter)
    if kernel == "kv_write":
        return 2.0 * 2 * T * 2 * kv
    if kernel == "emb":
        return 2.0 * 2 * T * h
    raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(LIGHT_KERNELS)})")


def light_time(kernel: str, nbytes, gpu, constants: Constants | None = None) -> np.ndarray:
    """Seconds for one launch of `kernel` moving `nbytes`."""
    constants = constants or Constants.default()
    etas = constants.get("light_eta", gpu)
    if kernel not in etas:
        raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(sorted(etas))})")
    floors = constants.get("light_floor_us", gpu)
    floor = float(floors[kernel] if isinstance(floors, dict) else floors) * 1e-6
    ps = constants.get("light_p", gpu)
    p = float(ps[kernel] if isinstance(ps, dict) else ps)
    scale = float(constants.get("light_bw_scale", gpu))
    stream = np.asarray(nbytes, dtype=float) / (gpu.mem_bw * scale * float(etas[kernel]))
    return smax(floor, stream, p)
