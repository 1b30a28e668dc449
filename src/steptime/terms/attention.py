"""Attention: prefill is causal compute work, decode is a KV-cache read.

Per request with s new tokens over c cached tokens (per layer, per GPU after TP):

    flops = 4 * H_q * d * (s * c + s (s + 1) / 2)          (QK^T and PV, causal block)
    bytes = (c + s) * 2 * H_kv * d * b_kv + 2 * s * H_q * d * 2   (K and V read; Q in, O out)
    t_compute = flops / (P * eta_attn),  eta_attn = f_clk * ceil * s / (s + c_tok)  (s > 1)
    t_memory  = bytes / (BW * eta_mem)

A batch runs as one varlen kernel per phase: its time is max(sum t_compute, sum t_memory)
plus a per-request cost and a kernel floor.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants

KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


def attention_request_terms(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu,
                            constants: Constants | None = None, kv_dtype: str = "bf16",
                            f_clk: float | None = None) -> dict:
    """Per-request compute and memory times (seconds), before batching."""
    constants = constants or Constants.default()
    s = np.asarray(new_tokens, dtype=float)
    c = np.asarray(kv_len, dtype=float)
    if f_clk is None:
        f_clk = float(constants.get("f_clk", gpu))
    flops = 4.0 * n_heads * head_dim * (s * c + s * (s + 1.0) / 2.0)
    nbytes = (c + s) * 2.0 * n_kv_heads * head_dim * KV_BYTES[kv_dtype] + 4.0 * s * n_heads * head_dim
    ceil = float(constants.get("attn_eta_ceil", gpu))
    c_tok = float(constants.get("attn_c_tokens", gpu))
    # softmax amortisation saturates over the query block of a prefill; a decode
    # (s = 1) runs a split-KV kernel whose compute branch is never the bottleneck.
    eta = f_clk * ceil * np.where(s > 1, s / (s + c_tok), 1.0)
    t_compute = flops / (gpu.peak_flops * eta)
    t_memory = nbytes / (gpu.mem_bw * float(constants.get("eta_mem_max", gpu)))
    return {"t_compute": t_compute, "t_memory": t_memory, "flops": flops, "bytes": nbytes, "eta_attn": eta}


def attention_time(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu, constants=None,
                   kv_dtype="bf16", f_clk=None, group=None, n_groups=None) -> dict:
    """Batched attention time per group (a step, or an operator cell). Seconds.

    `group` assigns each request to a batch (0..n_groups-1); default: all one batch.
    """
    constants = constants or Constants.default()
    r = attention_request_terms(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu, constants,
                                kv_dtype, f_clk)
    if group is None:
        group = np.zeros(np.shape(r["t_compute"]), dtype=np.int64)
        n_groups = 1
    tc = np.bincount(group, weights=r["t_compute"], minlength=n_groups)
    tm = np.bincount(group, weights=r["t_memory"], minlength=n_groups)
    nreq = np.bincount(group, minlength=n_groups).astype(float)
    ovh = float(constants.get("attn_req_overhead_us", gpu)) * 1e-6
    floor = float(constants.get("kernel_floor_us", gpu)) * 1e-6
    t = np.where(nreq > 0, np.maximum(tc, tm) + nreq * ovh + floor, 0.0)
    return {"t": t, "t_compute": tc, "t_memory": tm, "compute_bound": tc >= tm, "requests": nreq}
