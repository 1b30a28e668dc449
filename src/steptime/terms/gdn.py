"""Gated DeltaNet (linear attention) kernels of a hybrid model's linear layers (Qwen3.5/3.6; issue 20, wave 12).

One linear layer on one GPU (heads split tp ways) runs, besides its projection GEMMs (the GEMM law, in
steptime.moe_step), three light kernels per step, here one roofline term:

- the short causal conv1d over the q, k, v channels (C = 2 Hk dk + Hv dv, kernel K): reads and writes the
  new tokens' channels, and per request its conv state (the last K - 1 inputs, model dtype);
- the gated delta rule. Decode (one token per request, vLLM's recurrent update): per request the recurrent state
  S (Hv x dk x dv, in the model's mamba_ssm_dtype) is read and written, about 7 dk dv FLOPs per value head
  (decay, k^T S, the delta, the rank-1 update, q^T S). Prefill (the chunked algorithm, chunks of c = 64
  tokens): per chunk and value head, 6 c dk dv (the chunk state's read-out w S, the state update k^T v,
  the inter-chunk output q S) + 2 c^2 (3 dk + 2 dv) (k k^T, the WY factors w and u, q k^T, the intra-chunk
  output) FLOPs; the state read and written once per request and each chunk's state written and read (bf16);
- the gated RMSNorm of the output (norm(o) x silu(z)): reads o and z, writes the result.

Time per step (over the step's requests): n_kernels x floor + max(FLOPs / (peak x eta_attn), bytes /
(BW x eta_mem)). No constant is fitted here: the floor is the light kernels' launch floor (light_floor_us of
the rmsnorm, E1.1c), the memory efficiency the attention law's (attn_eta_mem: the state is read like a KV
cache), and the compute efficiency the attention law's prefill ceiling x clock (attn_eta_ceil x f_clk, with the
softmax amortisation s / (s + attn_c_tokens) of its query block), all as fitted on the other tables. DERIVED,
not checked against a measured GDN kernel (no table of one is vendored).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.terms import attention

CHUNK = 64                       # the chunk length of the chunked delta rule (FLA's chunk_gated_delta_rule)
DECODE_KERNELS = 3               # causal_conv1d_update, the fused recurrent update, the gated RMSNorm
PREFILL_KERNELS = 9              # causal_conv1d_fn, l2norm q / k, cumsum, k k^T, solve_tril, w / u, chunk_h,
                                 # chunk_o, the gated RMSNorm
# Host launches of the Gated DeltaNet op (vllm::gdn_attention_core, vLLM 0.20.1 gdn_linear_attn.py _forward_core), a
# splitting op of vLLM's piecewise CUDA graphs: it runs eagerly in every step with a prefill, and in every step above
# the largest captured size. Counted in the vllm 0.20.1 wheel (PyPI), the FLA/Triton prefill path (FlashInfer's GDN
# prefill only on sm 90), non-speculative:
PREFILL_EAGER_LAUNCHES = MappingProxyType({
    "causal_conv1d_fn": 1,                 # Triton _causal_conv1d_fwd_kernel (metadata prebuilt per step)
    "fused_post_conv_prep": 1,             # Triton: q, k, v split, l2norm, g and beta
    "initial_state_gather": 1,             # ssm_state[indices] (aten index)
    "initial_state_reset": 2,              # ~has_initial_state, then masked_fill_ (index_put_ with a bool mask)
    "chunk_local_cumsum": 1,               # FLA, autotuned
    "chunk_scaled_dot_kkt_fwd": 1,         # FLA, autotuned
    "solve_tril": 2,                       # zeros_like fill + merge_16x16_to_64x64_inverse (autotuned)
    "recompute_w_u_fwd": 1,                # FLA, autotuned
    "chunk_gated_delta_rule_fwd_h": 1,     # FLA, autotuned
    "chunk_fwd_o": 1,                      # FLA, autotuned
    "final_state_scatter": 1,              # ssm_state[indices] = final state (aten index_put_)
    "output_copy": 1,                      # core_attn_out[:n] = o (aten copy)
})
DECODE_EAGER_LAUNCHES = MappingProxyType({  # the packed decode fast path (a decode-only step run eagerly)
    "causal_conv1d_update": 1,
    "fused_recurrent_gated_delta_rule_packed_decode": 1,
})
DECODE_FLOPS_PER_HEAD = 7        # x dk dv per token per value head
ACT_BYTES = 2                    # bf16 activations and conv state
CHUNK_STATE_BYTES = 2            # chunk states h written and read in bf16


def eager_launches(prefill: bool = True) -> int:
    """Host launches of one Gated DeltaNet layer's op when it runs eagerly (a step with a prefill, or a decode-only
    step above the captured sizes)."""
    return int(sum((PREFILL_EAGER_LAUNCHES if prefill else DECODE_EAGER_LAUNCHES).values()))


def gdn_work(new_tokens, model, tp: int = 1) -> dict:
    """Per request (arrays over `new_tokens`): FLOPs and HBM bytes of one Gated DeltaNet layer's light kernels on
    one GPU; a request with one new token is a decode (the recurrent update), more is a prefill chunk."""
    s = np.asarray(new_tokens, dtype=float)
    hk, hv = model.linear_num_key_heads / tp, model.linear_num_value_heads / tp
    dk, dv, K = model.linear_key_head_dim, model.linear_value_head_dim, model.linear_conv_kernel_dim
    sb = 4.0 if model.mamba_ssm_dtype == "float32" else 2.0
    C = 2 * hk * dk + hv * dv                       # conv channels (q, k, v)
    state = hv * dk * dv * sb                       # recurrent state, one request
    pre = s > 1
    # conv1d: read x and write y over the new tokens; read and write the conv state
    conv = ACT_BYTES * (2.0 * s * C + 2.0 * C * (K - 1))
    # delta rule: q, k, v, g, beta in, o out; the state in and out; prefill's per-chunk states out and in
    chunks = np.where(pre, np.ceil(s / CHUNK), 0.0)
    rule = ACT_BYTES * s * (C + 2 * hv + hv * dv) + 2.0 * state + 2.0 * chunks * hv * dk * dv * CHUNK_STATE_BYTES
    # gated RMSNorm: o and z in, the gated output out
    norm = ACT_BYTES * 3.0 * s * hv * dv
    c = np.minimum(s, CHUNK)
    flops_pre = hv * s * (6.0 * dk * dv + 2.0 * c * (3 * dk + 2 * dv))
    flops_dec = hv * s * DECODE_FLOPS_PER_HEAD * dk * dv
    return {"flops": np.where(pre, flops_pre, flops_dec), "bytes": conv + rule + norm, "prefill": pre,
            "state_bytes": np.full(s.shape, state)}


def gdn_time(new_tokens, model, gpu, constants, tp: int = 1, group=None, n_groups: int | None = None) -> dict:
    """Seconds of one Gated DeltaNet layer's light kernels per step (`group`: each request's step, as the attention
    term's; without it one step holds every request). Returns t and its parts (floor, compute, memory, work)."""
    s = np.asarray(new_tokens, dtype=float)
    if group is None:
        group, n_groups = np.zeros(s.shape, dtype=int), 1
    w = gdn_work(s, model, tp)
    fc = attention.attention_constants(gpu, constants)
    f_clk = float(constants.get("f_clk", gpu))
    eta_c = f_clk * fc["attn_eta_ceil"] * np.where(w["prefill"], s / (s + fc["attn_c_tokens"]), 1.0)

    def per_step(x):
        return np.bincount(group, weights=np.asarray(x, dtype=float), minlength=n_groups)

    t_c = per_step(w["flops"] / (gpu.peak_flops * eta_c))
    t_m = per_step(w["bytes"]) / (gpu.mem_bw * fc["attn_eta_mem"])
    has_pre = per_step(w["prefill"]) > 0
    has_dec = per_step(~w["prefill"]) > 0
    floors = constants.get("light_floor_us", gpu)
    floor_s = float(floors["rmsnorm"] if isinstance(floors, dict) else floors) * 1e-6
    floor = floor_s * (DECODE_KERNELS * has_dec + PREFILL_KERNELS * has_pre)
    t = floor + np.maximum(t_c, t_m)
    return {"t": t, "floor": floor, "t_compute": t_c, "t_memory": t_m, "compute_bound": t_c > t_m,
            "flops": per_step(w["flops"]), "bytes": per_step(w["bytes"])}
