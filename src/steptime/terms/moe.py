"""Mixture-of-experts terms (issue 20): small pure numpy functions, vectorised over cells.

    experts touched   E_t = E * (1 - (1 - k/E)^T)            (uniform routing, T tokens, top-k of E)
    routed experts    t = t0 + max(F / (P_dtype * eta_c), (W + A) / (BW * eta_mem(W)))
                      F = 6 h i T k / ep        (gate, up, down of the T*k/ep token-expert pairs a GPU gets)
                      W = E_t/ep * 3 h i * bytes_w(dtype)   (expert weights the batch touches on a GPU)
                      A = 4 h T k / ep          (bf16 activations in and out of the grouped GEMMs)
                      eta_mem(W) = eta_max * W / (W + W_half)   (a law in the weight bytes touched)
    router            a T x E GEMM (bf16), a memory-bound kernel for small T
    permute/combine   light kernels streaming the T*k token copies (bf16)
    all-to-all        dispatch + combine: t0_a2a + bytes / bw_a2a per phase, measured curves (E3.2)
    MLA decode        latent KV read: T_kv * (kv_lora + rope) bytes per layer; absorbed projections

Constants come in as a `MoEConstants` argument (never process-wide state); `MoEConstants.default()`
reads the shipped calibration/moe.yaml, each value with its provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from steptime.errors import UnsupportedError

MOE_FILE = Path(__file__).resolve().parent.parent / "calibration" / "moe.yaml"

# expert-weight bytes per element, and the tensor-core math each MoE dtype runs on
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp4": 0.5, "nvfp4": 0.5, "mxfp4": 0.5}
MATH = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "mxfp4"}
# AIConfigurator's moe_dtype names -> steptime's
AIC_DTYPE = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "w4a16_mxfp4": "mxfp4"}


def canonical_dtype(dtype: str) -> str:
    """`fp4` names NVFP4 (the Blackwell tensor-core format)."""
    return "nvfp4" if dtype == "fp4" else dtype


def check_moe_dtype(gpu, dtype: str) -> str:
    """The MoE weight dtype, refused with one line where the GPU lacks the tensor-core format."""
    if dtype not in WEIGHT_BYTES:
        raise UnsupportedError(f"unknown MoE dtype {dtype!r} (known: {', '.join(WEIGHT_BYTES)})")
    arch = gpu.architecture
    if MATH[dtype] == "fp8" and not gpu.fp8_dense_tflops:
        raise UnsupportedError(f"{gpu.key} ({arch}) has no fp8 tensor cores: {dtype} MoE weights are not supported")
    if MATH[dtype] == "fp4" and arch != "blackwell":
        raise UnsupportedError(f"{gpu.key} ({arch}) has no fp4 tensor cores: NVFP4 needs Blackwell "
                               f"(use bf16, fp8, or mxfp4 weights with bf16 math)")
    return dtype


def math_peak(gpu, dtype: str) -> float:
    """FLOP/s of the tensor-core math the dtype runs on. fp4 (NVFP4 W4A4) is taken as 2x the fp8
    peak (DERIVED: Blackwell datasheets give dense FP4 = 2x dense FP8; gpus.yaml holds no fp4 figure);
    MXFP4 weights in vLLM's gpt-oss path are dequantised into bf16 math (w4a16)."""
    m = MATH[dtype]
    if m == "fp8":
        return gpu.fp8_dense_tflops * 1e12
    if m == "fp4":
        return 2.0 * gpu.fp8_dense_tflops * 1e12
    return gpu.peak_flops


ROUTINGS = ("uniform", "balanced")


def experts_touched(tokens, num_experts, topk, routing: str = "uniform"):
    """Distinct experts a batch of T tokens routes to: under uniform random top-k routing
    E (1 - (1 - k/E)^T) (a serving step); under a balanced router (AIConfigurator's collector, which
    deals the T*k token-expert pairs round-robin over the experts) min(E, T k)."""
    T = np.asarray(tokens, dtype=float)
    E = np.asarray(num_experts, dtype=float)
    k = np.asarray(topk, dtype=float)
    if routing == "balanced":
        return np.minimum(E, T * k)
    if routing != "uniform":
        raise ValueError(f"routing must be one of {ROUTINGS}, not {routing!r}")
    return E * (1.0 - (1.0 - k / E) ** T)


@dataclass(frozen=True)
class MoEConstants:
    """The fused-MoE law's constants: global values and per-GPU deploy readings, with provenance."""

    values: dict = field(default_factory=dict)     # name -> value (global)
    per_gpu: dict = field(default_factory=dict)    # gpu key -> {name: value}
    provenance: dict = field(default_factory=dict)  # name -> {provenance, source}

    def get(self, name: str, gpu=None, default=None):
        """A per-GPU reading's value if `gpu` has one, else the global value, else `default`."""
        key = getattr(gpu, "key", gpu)
        if key is not None and name in self.per_gpu.get(key, {}):
            return self.per_gpu[key][name]
        if name in self.values:
            return self.values[name]
        if default is None:
            raise KeyError(f"no MoE constant {name!r} (calibration/moe.yaml)")
        return default

    def has_dtype(self, dtype: str) -> bool:
        return f"eta_c:{canonical_dtype(dtype)}" in self.values

    @classmethod
    def default(cls) -> "MoEConstants":
        return _default_moe()

    @classmethod
    def from_doc(cls, doc: dict) -> "MoEConstants":
        vals = {k: v["value"] for k, v in (doc.get("global") or {}).items()}
        prov = {k: {"provenance": v["provenance"], "source": v.get("source", "")}
                for k, v in (doc.get("global") or {}).items()}
        per = {g: {k: v["value"] for k, v in t.items()} for g, t in (doc.get("gpu") or {}).items()}
        return cls(values=vals, per_gpu=per, provenance=prov)

    def with_values(self, values: dict | None = None, per_gpu: dict | None = None) -> "MoEConstants":
        return MoEConstants(values={**self.values, **(values or {})},
                            per_gpu={**self.per_gpu, **(per_gpu or {})}, provenance=dict(self.provenance))


@lru_cache(maxsize=1)
def _default_moe() -> MoEConstants:
    import yaml

    return MoEConstants.from_doc(yaml.safe_load(MOE_FILE.read_text())["constants"])


def routed_work(tokens, hidden, inter, topk, num_experts, tp=1, ep=1, dtype="bf16", routing="uniform"):
    """(FLOPs, weight bytes, token bytes) of the routed experts on one GPU: the T*k/ep local token-expert
    pairs' GEMM FLOPs, the local expert weights the batch touches, and the bf16 token copies (T*k*h*2
    bytes: every pair is permuted and combined on every EP rank, local or not)."""
    T = np.asarray(tokens, dtype=float)
    h, i = np.asarray(hidden, dtype=float), np.asarray(inter, dtype=float) / np.asarray(tp, dtype=float)
    k, E, ep = np.asarray(topk, dtype=float), np.asarray(num_experts, dtype=float), np.asarray(ep, dtype=float)
    F = 6.0 * h * i * T * k / ep
    W = experts_touched(T, E, k, routing) / ep * 3.0 * h * i * WEIGHT_BYTES[dtype]
    A = 2.0 * h * T * k
    return F, W, A


def routed_experts_time(tokens, hidden, inter, topk, num_experts, gpu, mc: MoEConstants, *, tp=1, ep=1,
                        dtype="bf16", routing="uniform") -> dict:
    """The fused routed-expert kernel on one GPU (seconds), with its branches:
    t = t0 + max(F / (P eta_c), W / (BW eta_mem(W))) + (passes + local_passes / ep) * A / BW."""
    dtype = canonical_dtype(dtype)
    F, W, A = routed_work(tokens, hidden, inter, topk, num_experts, tp, ep, dtype, routing)
    eta_c = mc.get(f"eta_c:{dtype}") * mc.get("s_c", gpu, 1.0)
    t_c = F / (math_peak(gpu, dtype) * eta_c)
    w_half = mc.get(f"w_half_mb:{dtype}") * 2**20
    eta_m = mc.get(f"eta_mem_max:{dtype}") * mc.get("s_mem", gpu, 1.0) * W / (W + w_half)
    t_m = W / (gpu.mem_bw * np.maximum(eta_m, 1e-9))
    ep_f = np.asarray(ep, dtype=float)
    t_tok = (mc.get(f"token_passes:{dtype}") + mc.get(f"local_token_passes:{dtype}") / ep_f) * A / gpu.mem_bw
    t0 = max(0.0, mc.get(f"floor_us:{dtype}") + mc.get("d_floor_us", gpu, 0.0)) * 1e-6
    T = np.asarray(tokens, dtype=float)
    t = np.where(T > 0, t0 + np.maximum(t_c, t_m) + t_tok, 0.0)
    return {"t": t, "t_compute": t_c, "t_memory": t_m, "t_tokens": t_tok, "compute_bound": t_c >= t_m,
            "weight_bytes": W, "flops": F, "eta_mem": eta_m}


def a2a_time(tokens, hidden, topk, ep, gpu, mc: MoEConstants, *, mode: str = "ll"):
    """Expert-parallel dispatch + combine on one GPU (seconds): per phase a latency floor plus the bf16
    bytes that leave the GPU over the achieved all-to-all bandwidth (E3.2's measured curves)."""
    T = np.asarray(tokens, dtype=float)
    ep = float(ep)
    if ep <= 1:
        return np.zeros_like(T)
    nbytes = T * float(topk) * float(hidden) * 2.0 * (ep - 1) / ep
    t0 = mc.get(f"a2a_floor_us:{mode}") * mc.get("a2a_s_floor", gpu, 1.0) * 1e-6
    bw = mc.get(f"a2a_bw_gbps:{mode}") * mc.get(f"a2a_s_bw:{mode}", gpu, 1.0) * 1e9
    return np.where(T > 0, 2.0 * (t0 + nbytes / bw), 0.0)


def mla_decode_bytes(kv_len, kv_lora_rank, rope_dim, kv_bytes: float = 2.0):
    """Latent-KV bytes one decode request reads per layer: (kv_lora + rope) per cached token, all heads sharing it."""
    return np.asarray(kv_len, dtype=float) * (kv_lora_rank + rope_dim) * kv_bytes
