"""Mixture-of-experts terms (issue 20): small pure numpy functions, vectorised over cells.

    experts touched   E_t = E * (1 - (1 - k/E)^T)            (uniform routing, T tokens, top-k of E)
    routed experts    t = t0 + max(F / (P_dtype * eta_c), (W + A) / (BW * eta_mem(W)))
                      F = 6 h i T k / ep        (gate, up, down of the T*k/ep token-expert pairs a GPU gets)
                      W = E_t/ep * 3 h i * bytes_w(dtype)   (expert weights the batch touches on a GPU)
                      A = 4 h T k / ep          (bf16 activations in and out of the grouped GEMMs)
                      eta_mem(W) = eta_max * W / (W + W_half)   (a law in the weight bytes touched)
    router            a T x E GEMM (bf16), a memory-bound kernel for small T
    permute/combine   light kernels streaming the T*k token copies (bf16)
                      (BW: HBM, or the SMs' issue rate for a family whose weight stream is SM-bound, sm_stream)
    all-to-all        dispatch + combine: t0_a2a + bytes / bw_a2a + c_tok T per phase, measured curves (E3.2);
                      low-latency: (t0^p + (bytes / (share * nvlink))^p)^(1/p), the transfer under the floor
    MLA decode        latent KV read: T_kv * (kv_lora + rope) bytes per layer; absorbed projections

Constants come in as a `MoEConstants` argument (never process-wide state); `MoEConstants.default()`
reads the shipped calibration/moe.yaml, each value with its provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import comb
from pathlib import Path
from types import MappingProxyType

import numpy as np

from steptime.errors import InputError, UnsupportedError
from steptime.io import read_yaml
from steptime.readonly import read_only
from steptime.terms.gemm import smax

MOE_FILE = Path(__file__).resolve().parent.parent / "calibration" / "moe.yaml"

# expert-weight bytes per element, and the tensor-core math each MoE dtype runs on
# mxfp4: MXFP4 weights dequantised into bf16 math (W4A16: vLLM's gpt-oss path, TensorRT-LLM's on Hopper);
# mxfp4_mxfp8: MXFP4 weights with MXFP8 activations (W4A8_MXFP4_MXFP8: TensorRT-LLM's gpt-oss path on sm 100 / 103,
# TRT-LLM-gen kernels), 0.5 weight bytes on fp8 tensor-core math (the GPU's dense fp8 peak; wave 40, trtrule)
WEIGHT_BYTES = MappingProxyType({"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp4": 0.5, "nvfp4": 0.5, "mxfp4": 0.5,
                                 "mxfp4_mxfp8": 0.5})
MATH = MappingProxyType({"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "fp4": "fp4", "nvfp4": "fp4",
                         "mxfp4": "mxfp4", "mxfp4_mxfp8": "fp8"})
# AIConfigurator's moe_dtype names -> steptime's (every engine's tables)
AIC_DTYPE = MappingProxyType({"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
                              "w4a16_mxfp4": "mxfp4"})
# an engine whose tables E3.1 reads with more of AIConfigurator's dtypes (wave 40, trtrule): TensorRT-LLM's
# w4a8_mxfp4_mxfp8 rows are the kernels its gpt-oss path runs on sm 100 / 103 (kernel_dtype); vLLM's and SGLang's
# W4A8 rows are no path steptime maps (their gpt-oss paths are priced as mxfp4 / nvfp4): they keep AIC_DTYPE
ENGINE_AIC_DTYPE = MappingProxyType({"trtllm": MappingProxyType({**AIC_DTYPE, "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8"})})


def check_framework(framework, where: str, dtype: str | None = None) -> str:
    """`framework` if it is an engine whose fused-MoE kernels steptime knows (MOE_FRAMEWORKS), else the package's
    UnsupportedError in one line naming `where`, the engine and (given) the dtype: every function here that takes an
    engine refuses an unknown one alike (wave 41: aic_dtype raised a bare ValueError where kernel_dtype raised this)."""
    if not isinstance(framework, str) or framework not in MOE_FRAMEWORKS:
        of = f" (expert dtype {dtype!r})" if dtype is not None else ""
        raise UnsupportedError(f"{where}: unknown fused-MoE kernel framework {framework!r}{of}; known engines: "
                               f"{', '.join(MOE_FRAMEWORKS)}")
    return framework


def aic_dtype(framework: str) -> MappingProxyType:
    """AIConfigurator's moe_dtype names -> steptime's for one engine's tables (ENGINE_AIC_DTYPE, else AIC_DTYPE)."""
    check_framework(framework, "aic_dtype")
    return ENGINE_AIC_DTYPE.get(framework, AIC_DTYPE)


# The expert dtype TensorRT-LLM's own kernels run for a checkpoint whose experts ship MXFP4 (quant_method mxfp4:
# gpt-oss), from its source only (wave 40, trtrule; the rule adopted from trtmap before any scoring):
# ModelConfig.get_mxfp4_quant_algo(moe_backend) (tensorrt_llm/_torch/model_config.py) gives W4A16_MXFP4 below sm 100
# and W4A8_MXFP4_MXFP8 at sm >= 100 unless the backend is TRITON; the default backend for gpt-oss (AUTO:
# resolve_moe_backend) is TRTLLM on sm 100-119 and TRITON on Hopper. So sm 100 / 103 run mxfp4_mxfp8 (TRT-LLM-gen);
# Hopper keeps mxfp4 (W4A16, TritonFusedMoE). sm 120's default backend for gpt-oss is not established: kept mxfp4.
KERNEL_DTYPE_SM = MappingProxyType({"trtllm": MappingProxyType({("mxfp4", 100): "mxfp4_mxfp8",
                                                                ("mxfp4", 103): "mxfp4_mxfp8"})})


def kernel_dtype(framework: str, dtype: str, gpu) -> str:
    """The expert dtype `framework`'s own fused-MoE kernels run for experts of `dtype` on `gpu` (KERNEL_DTYPE_SM:
    TensorRT-LLM runs an MXFP4 checkpoint as W4A8 MXFP4 / MXFP8 on sm 100 / 103); `dtype` itself elsewhere."""
    check_framework(framework, "kernel_dtype", dtype)
    if not isinstance(dtype, str) or dtype not in WEIGHT_BYTES:  # was returned as it came: priced nowhere
        raise UnsupportedError(f"kernel_dtype: unknown MoE dtype {dtype!r} for {framework}'s fused-MoE kernels "
                               f"(known: {', '.join(WEIGHT_BYTES)})")
    dtype = canonical_dtype(dtype)
    return KERNEL_DTYPE_SM.get(framework, {}).get((dtype, getattr(gpu, "sm_version", None)), dtype)


def canonical_dtype(dtype: str) -> str:
    """`fp4` names NVFP4 (the Blackwell tensor-core format)."""
    return "nvfp4" if dtype == "fp4" else dtype


def check_moe_dtype(gpu, dtype: str) -> str:
    """The MoE weight dtype, refused with one line where the GPU lacks the tensor-core format."""
    if dtype not in WEIGHT_BYTES:
        raise UnsupportedError(f"unknown MoE dtype {dtype!r} (known: {', '.join(WEIGHT_BYTES)})")
    arch = gpu.architecture
    if dtype == "mxfp4_mxfp8" and arch != "blackwell":  # MXFP8 activations: Blackwell's block-scaled tensor cores
        raise UnsupportedError(f"{gpu.key} ({arch}) has no MXFP8 (block-scaled fp8) tensor cores: W4A8 MXFP4 / MXFP8 "
                               "MoE needs Blackwell (use mxfp4: W4A16, bf16 math)")
    if MATH[dtype] == "fp8" and not gpu.fp8_dense_tflops:
        raise UnsupportedError(f"{gpu.key} ({arch}) has no fp8 tensor cores: {dtype} MoE weights are not supported")
    if MATH[dtype] == "fp4" and arch != "blackwell":  # the advice names only formats this GPU runs (wave 38)
        has = "bf16, fp8 or mxfp4" if gpu.fp8_dense_tflops else "bf16 or mxfp4"
        raise UnsupportedError(f"{gpu.key} ({arch}) has no fp4 tensor cores: NVFP4 needs Blackwell "
                               f"(use {has} weights; mxfp4 runs bf16 math)")
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


# the per-GPU readings that scale a fused-MoE law (E3.1's three bf16 readings): one set per framework's laws
KERNEL_READINGS = ("s_c", "s_mem", "d_floor_us")


def is_kernel_key(name: str) -> bool:
    """Whether a moe.yaml constant belongs to the fused-MoE kernel law of one framework's tables: a law constant
    `<name>:<dtype>[@<family>]` (a dtype of WEIGHT_BYTES), a GPU's `family:<dtype>` / `family_ep:<dtype>` or one of
    its KERNEL_READINGS;
    the all-to-all (`a2a_...:<mode>...`) and MLA constants are not."""
    head, sep, rest = str(name).partition(":")
    return name in KERNEL_READINGS or (bool(sep) and rest.split("@")[0] in WEIGHT_BYTES)


@dataclass(frozen=True)
class MoEConstants:
    """The fused-MoE law's constants: global values and per-GPU deploy readings, with provenance. `frameworks`:
    another framework's own fused-MoE kernel laws ({framework: {"values": ..., "per_gpu": ...}}, moe.yaml
    constants.frameworks; vLLM's are the top level), read through `for_kernels`."""

    values: dict = field(default_factory=dict)     # name -> value (global)
    per_gpu: dict = field(default_factory=dict)    # gpu key -> {name: value}
    provenance: dict = field(default_factory=dict)  # name -> {provenance, source}
    frameworks: dict = field(default_factory=dict)  # framework -> {"values": {...}, "per_gpu": {gpu: {...}}}

    def __post_init__(self):  # the shipped MoE constants are shared by the process: read-only
        for name in ("values", "per_gpu", "provenance", "frameworks"):
            object.__setattr__(self, name, read_only(getattr(self, name)))
        object.__setattr__(self, "_by_kernels", {})  # for_kernels' sets, built once per framework (not a field)

    def for_kernels(self, framework: str) -> "MoEConstants":
        """The constants a step of an engine that runs `framework`'s fused-MoE kernels reads (engines.yaml
        moe.kernels): 'vllm' -> these; another framework -> these with every fused-MoE kernel constant (is_kernel_key:
        the laws, each GPU's family and readings) replaced by that framework's own (moe.yaml constants.frameworks),
        the all-to-all and MLA constants kept. One law (routed_experts_time) evaluates either set. An unknown
        framework, or one whose laws the constants do not hold, is refused with one line naming it."""
        if framework == "vllm":
            return self
        if framework in self._by_kernels:
            return self._by_kernels[framework]
        check_framework(framework, "MoEConstants.for_kernels (specs/engines.yaml moe.kernels)")
        own = self.frameworks.get(framework)
        if own is None:
            raise UnsupportedError(f"no fused-MoE laws of framework {framework!r} in these MoE constants "
                                   f"(calibration/moe.yaml constants.frameworks has "
                                   f"{', '.join(sorted(self.frameworks)) or 'none'})")
        values = {k: v for k, v in self.values.items() if not is_kernel_key(k)}
        values.update(own.get("values", {}))
        gpus = set(self.per_gpu) | set(own.get("per_gpu", {}))
        per_gpu = {g: {**{k: v for k, v in self.per_gpu.get(g, {}).items() if not is_kernel_key(k)},
                       **own.get("per_gpu", {}).get(g, {})} for g in gpus}
        prov = {k: v for k, v in self.provenance.items() if not is_kernel_key(k)}
        prov.update(own.get("provenance", {}))
        self._by_kernels[framework] = MoEConstants(values=values, per_gpu=per_gpu, provenance=prov)
        return self._by_kernels[framework]

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
        """From moe.yaml's `constants` ({global, gpu[, frameworks: {name: {global, gpu}}]})."""
        vals, per, prov = _scope_values(doc)
        _check_families(vals, per, "constants")
        fws = {}
        for fw, sub in (doc.get("frameworks") or {}).items():
            if fw not in MOE_FRAMEWORKS or fw == "vllm":
                raise ValueError(f"MoE constants: frameworks.{fw} is not a framework with laws of its own "
                                 f"(known: {', '.join(f for f in MOE_FRAMEWORKS if f != 'vllm')})")
            fv, fp, fprov = _scope_values(sub or {})
            bad = sorted(k for k in [*fv, *(k for t in fp.values() for k in t)] if not is_kernel_key(k))
            if bad:
                raise ValueError(f"MoE constants: frameworks.{fw} holds {bad[0]!r}, not a fused-MoE kernel constant "
                                 "(a framework's section holds its laws, families and readings only)")
            _check_families(fv, fp, f"constants.frameworks.{fw}")
            fws[fw] = {"values": fv, "per_gpu": fp, "provenance": fprov}
        return cls(values=vals, per_gpu=per, provenance=prov, frameworks=fws)

    def with_values(self, values: dict | None = None, per_gpu: dict | None = None) -> "MoEConstants":
        return MoEConstants(values={**self.values, **(values or {})},
                            per_gpu={**self.per_gpu, **(per_gpu or {})}, provenance=dict(self.provenance),
                            frameworks=self.frameworks)


def _check_families(values: dict, per_gpu: dict, where: str) -> None:
    """Every GPU's `family:<dtype>` (and `family_ep:<dtype>`, its family at ep > 1) in one moe.yaml scope names a
    kernel family whose law that scope ships
    (`eta_c:<dtype>@<family>`): a family with no law (a renamed or unknown one) is refused with one line, never
    priced silently with the dtype's pooled law (wave 40: torch_flow became torch_flow_sm90 / torch_flow_sm100)."""
    for g in sorted(per_gpu):
        for k, fam in sorted(per_gpu[g].items()):
            head, _, dt = k.partition(":")
            if head in ("family", "family_ep") and fam and f"eta_c:{dt}@{fam}" not in values:
                known = sorted(n.split("@", 1)[1] for n in values if n.startswith(f"eta_c:{dt}@"))
                raise ValueError(f"MoE constants: {where} gpu {g} {head}:{dt} names kernel family {fam!r}, which has no "
                                 f"law there (families of {dt}: {', '.join(known) or 'none'})")


def _scope_values(doc: dict) -> tuple:
    """(values, per-GPU values, provenance) of one moe.yaml scope ({global, gpu})."""
    vals = {k: v["value"] for k, v in (doc.get("global") or {}).items()}
    prov = {k: {"provenance": v["provenance"], "source": v.get("source", "")}
            for k, v in (doc.get("global") or {}).items()}
    per = {g: {k: v["value"] for k, v in t.items()} for g, t in (doc.get("gpu") or {}).items()}
    return vals, per, prov


@lru_cache(maxsize=1)
def _default_moe() -> MoEConstants:
    return MoEConstants.from_doc(read_yaml(MOE_FILE)["constants"])


TILE_M = 64   # rows per grouped-GEMM tile: each expert's token rows are padded to a multiple (DERIVED: the
              # 64-row M tiles of the Triton / CUTLASS / TRT-LLM grouped GEMMs' small-batch configs)
REGIMES = ("evicted", "resident")
SM_STREAM_BYTES_PER_CLK = 64.0  # the nominal bytes per clock per SM of an SM-bound weight stream (eta_mem scales it)
# the grouped-GEMM implementations AIConfigurator's vLLM kernel-source names are matched to, in that order (the first
# whose name the source contains): "oaitriton" is the gpt-oss MXFP4 path's OpenAI triton_kernels MoE
# (`..._triton_oaitritonmxfp4expertsmonolithic`), other code than vLLM's own Triton fused-MoE kernel ("triton",
# `..._triton_tritonexperts`), so it is its own family and the GPU's bf16 readings, taken on vLLM's Triton kernel, do not
# scale it (E3.1, wave 27)
KERNEL_FAMILIES = ("trtllm", "cutlass", "marlin", "oaitriton", "triton")
# GPUs whose L2 is split in two partitions that each cache the lines their own GPCs read (DERIVED: the A100 whitepaper,
# "each L2 partition localizes and caches data for memory accesses from SMs in the GPCs directly connected to the
# partition", kept by GH100): a weight set every SM reads is held in both, so it stays resident up to half the L2.
# GA100 and GH100 (sm 80, 90); Ada's AD102/AD103 and Blackwell are taken as one L2 (B200's fitted residency reaches
# 0.8 of its 126.5 MB, E3.1).
L2_PARTITIONED_SM = frozenset({80, 90})
RAMP_REF_S = 10e-6  # the memory-efficiency ramp's unit: the bytes the weight stream moves in 10 us (E3.1, wave 11)


def l2_effective_bytes(gpu) -> float:
    """The L2 bytes a weight set read by every SM can occupy: the L2, halved where it is partitioned."""
    return gpu.l2_mb * 2**20 / (2.0 if getattr(gpu, "sm_version", None) in L2_PARTITIONED_SM else 1.0)


# TensorRT-LLM's own fused-MoE kernel sources (AIConfigurator's trtllm tables, 1.0.0 and 1.3.0rc20) and the family
# each belongs to, set from what the code is before any TRT-LLM cell was scored (E3.1, issue 20, wave 38):
# moe_torch_flow_cutlass is TRT-LLM's CUTLASS fused MoE, the code FlashInfer's CUTLASS MoE was taken from (so the same
# per-SM cutlass family as vLLM's FlashInfer CUTLASS rows); moe_torch_flow_min_latency is the TRT-LLM-gen low-latency
# kernels, the ones FlashInfer's TRT-LLM MoE runs (family trtllm); deepgemm is DeepGEMM's grouped GEMM (its own
# family); moe_torch_flow_triton_fp8_block is TRT-LLM's Triton path (not vLLM's Triton fused-MoE code: its own family);
# moe_torch_flow (the 1.0.0 A100 bf16 rows, the MXFP4 rows) names no backend (its own family, torch_flow). The
# non-gated rows (moe_torch_flow_nongated: up and down only) are no shape steptime lists: no family.
# torch_flow is named per architecture (wave 40, trtrule; from source, before scoring): the gpt-oss path it times runs
# TritonFusedMoE on Hopper and TRTLLMGenFusedMoE on Blackwell (AIConfigurator's collector/trtllm/collect_moe.py;
# ModelConfig.resolve_moe_backend), other code on each, so one law must not pool them: torch_flow_sm90 (Hopper),
# torch_flow_sm100 (sm 100 and 103, the TRT-LLM-gen kernels' sm100f family), torch_flow_sm<N> on any other SM.
TRTLLM_KERNEL_FAMILIES = MappingProxyType({
    "moe_torch_flow_cutlass": "cutlass", "moe_torch_flow_min_latency": "trtllm", "deepgemm": "deepgemm",
    "moe_torch_flow_triton_fp8_block": "trt_triton", "moe_torch_flow": "torch_flow"})
# SGLang's own fused-MoE kernel sources (AIConfigurator's sglang tables, 0.5.10 and 0.5.14: the collector's name for the
# moe_runner_backend it ran, ai-dynamo/aiconfigurator collector/sglang/collect_moe.py) and the family each belongs to,
# set from what the code is before any SGLang cell was scored (E3.1, issue 20, wave 39): sglang_fused_moe_triton is
# SGLang's Triton fused MoE (python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py, "Adapted from" vLLM's
# fused_moe.py: the Triton kernel vLLM's TritonExperts runs; family triton); sglang_flashinfer_trtllm_moe and
# sglang_mxfp4_flashinfer_trtllm_moe call FlashInfer's trtllm_*_moe (layers/moe/flashinfer_trtllm_moe.py; the
# TRT-LLM-gen kernels, family trtllm, as vLLM's FlashInfer TRT-LLM rows); sglang_flashinfer_cutlass_moe calls
# FlashInfer's cutlass_fused_moe (per-SM cutlass family, as vLLM's FlashInfer CUTLASS rows); sglang_marlin_moe is
# fused_moe_triton/fused_marlin_moe.py's moe_wna16_marlin_gemm (family marlin). The *_situ_as_silu sources are the
# same kernels timed with the silu epilogue for a SiTU-activation model (the wheel's collection_meta.yaml): their
# kernel's family.
SGLANG_KERNEL_FAMILIES = MappingProxyType({
    "sglang_fused_moe_triton": "triton", "sglang_fused_moe_triton_situ_as_silu": "triton",
    "sglang_flashinfer_trtllm_moe": "trtllm", "sglang_mxfp4_flashinfer_trtllm_moe": "trtllm",
    "sglang_flashinfer_cutlass_moe": "cutlass", "sglang_marlin_moe": "marlin", "sglang_marlin_moe_situ_as_silu": "marlin"})
# each engine's own kernel-source map (vLLM's names are matched by substring: KERNEL_FAMILIES)
ENGINE_KERNEL_FAMILIES = MappingProxyType({"trtllm": TRTLLM_KERNEL_FAMILIES, "sglang": SGLANG_KERNEL_FAMILIES})
ENGINE_NAMES = MappingProxyType({"trtllm": "TensorRT-LLM", "sglang": "SGLang"})
MOE_FRAMEWORKS = ("vllm", "trtllm", "sglang")
# kernel sources of non-gated experts (up and down projections only, no gate): not the gated layer the law prices
NONGATED_SOURCES = frozenset({"moe_torch_flow_nongated"})
# families whose code is per architecture, named with the GPU's SM family (kernel_family): the CUTLASS fused MoE per SM
# version; TensorRT-LLM's torch_flow per architecture, sm 103 in sm 100's family (SM_FAMILY)
PER_SM_FAMILIES = frozenset({"cutlass", "torch_flow"})
SM_FAMILY = MappingProxyType({"torch_flow": MappingProxyType({103: 100})})


def kernel_family(kernel_source: str, gpu=None, framework: str = "vllm") -> str:
    """The grouped-GEMM implementation a kernel-source name belongs to (AIConfigurator's vLLM names; with
    framework 'trtllm' or 'sglang', that engine's own names: TRTLLM_KERNEL_FAMILIES, SGLANG_KERNEL_FAMILIES).
    CUTLASS fused-MoE kernels are built per SM generation (FlashInfer's sm90 grouped GEMM is not its sm120 one): with
    a `gpu`, the CUTLASS family is named with its SM version (cutlass_sm90, cutlass_sm120), and TensorRT-LLM's torch_flow
    with its architecture's (torch_flow_sm90 on Hopper, torch_flow_sm100 on sm 100 and 103: PER_SM_FAMILIES)."""
    check_framework(framework, "kernel_family")
    if framework in ENGINE_KERNEL_FAMILIES:
        known = ENGINE_KERNEL_FAMILIES[framework]
        if str(kernel_source) not in known:
            raise ValueError(f"kernel_family: {ENGINE_NAMES[framework]} kernel source {kernel_source!r} has no family; "
                             f"known: {sorted(known)}")
        fam = known[str(kernel_source)]
    else:  # vllm
        fam = next((f for f in KERNEL_FAMILIES if f in str(kernel_source)), "triton")
    sm = getattr(gpu, "sm_version", None)
    if fam in PER_SM_FAMILIES and sm:
        return f"{fam}_sm{SM_FAMILY.get(fam, {}).get(sm, sm)}"
    return fam


def _fill_lowest(c: np.ndarray, units, cap) -> None:
    """Add units[i] tokens to row i of `c` (rows: one EP rank's local counts each, whole numbers; in place), one at a
    time, each to the row's expert with the fewest tokens among those below `cap` (one, or one per row; the lowest
    index on a tie): a water-fill in closed form, every row at once. Raising a row's j lowest counts to the j-th lowest costs
    j s_j - (s_1 + ... + s_j) tokens; the largest j whose cost fits sets the level L = floor((units + s_1 + ... +
    s_j) / j); what is left then goes one each to the lowest-index experts at L."""
    c2 = np.atleast_2d(c)
    rows, m = c2.shape
    cap = np.broadcast_to(np.asarray(cap, dtype=float), (rows,))  # one cap, or one per row
    room = np.maximum(cap[:, None] - c2, 0.0).sum(axis=1)
    u = np.minimum(np.broadcast_to(np.asarray(units, dtype=float), (rows,)), room)
    s = np.sort(c2, axis=1)
    P = np.cumsum(s, axis=1)
    J = ((np.arange(1, m + 1) * s - P) <= u[:, None]).sum(axis=1)  # >= 1: the lowest count costs nothing
    L = np.minimum(np.floor((u + P[np.arange(rows), J - 1]) / J), cap)
    raised = np.maximum(c2, L[:, None])
    left = u - (raised - c2).sum(axis=1)
    at = raised == L[:, None]
    c2[...] = raised + (at & (np.cumsum(at, axis=1) <= left[:, None]))


def _take_highest(c: np.ndarray, units) -> None:
    """Remove units[i] tokens from row i of `c` (rows: one EP rank's local counts each, whole numbers; in place), one
    at a time, each from the row's expert with the most tokens (the lowest index on a tie), none below 0: the mirror
    of _fill_lowest, in closed form, every row at once. Lowering a row's j highest counts to the j-th highest s_j
    costs (s_1 + ... + s_j) - j s_j tokens; the largest j whose cost fits sets the level L = ceil((s_1 + ... + s_j -
    units) / j) (at least 0); what is left then comes one each from the lowest-index experts at L."""
    c2 = np.atleast_2d(c)
    rows, m = c2.shape
    u = np.minimum(np.broadcast_to(np.asarray(units, dtype=float), (rows,)), c2.sum(axis=1))
    s = -np.sort(-c2, axis=1)
    P = np.cumsum(s, axis=1)
    J = ((P - np.arange(1, m + 1) * s) <= u[:, None]).sum(axis=1)  # >= 1: the highest count costs nothing
    L = np.maximum(np.ceil((P[np.arange(rows), J - 1] - u) / J), 0.0)
    lowered = np.minimum(c2, L[:, None])
    left = u - (c2 - lowered).sum(axis=1)
    at = (lowered == L[:, None]) & (L[:, None] > 0)
    c2[...] = lowered - (at & (np.cumsum(at, axis=1) <= left[:, None]))


def power_law_counts(tokens: int, num_experts: int, topk: int, ep: int, alpha: float, *, draws: int = 16,
                     seed: int = 0) -> np.ndarray:
    """Tokens per local expert on the busiest EP rank under AIConfigurator's power-law router (its collector's
    procedure, re-derived: collector/helper.py _generate_power_law_distribution): per expert a load drawn from a
    power law x^-alpha on [1, 0.8 T] (on [0.01, 2] when T k <= E), scaled to the T k token-expert pairs and rounded;
    each expert then capped at T pairs (a token picks an expert at most once) and the excess, then the rounding's
    remainder, dealt out one pair at a time round-robin over the EP ranks, on each rank to its least-loaded expert
    below the cap (a surplus taken back from the most-loaded); the EP rank with the most pairs measured.
    Returns (draws, E / ep) counts, seeded: the same inputs give the same counts."""
    return power_law_counts_many([tokens], num_experts, topk, ep, alpha, draws=draws, seed=seed)[0]


def power_law_counts_many(tokens, num_experts: int, topk: int, ep: int, alpha: float, *, draws: int = 16,
                          seed: int = 0) -> np.ndarray:
    """power_law_counts at every token count of `tokens` at once: (len(tokens), draws, E / ep), each slice equal to
    power_law_counts at its count (the same seeded draws: only the power law's range and the scale depend on T)."""
    T = np.asarray(tokens, dtype=np.int64).reshape(-1)
    E, k, ep = int(num_experts), int(topk), int(ep)
    m = E // ep
    rng = np.random.default_rng(seed)
    Tf = T.astype(float)
    wide = T * k > E
    lo = np.where(wide, 1.0, 0.01)
    hi = np.maximum(np.where(wide, 0.8 * Tf, 2.0), lo * (1 + 1e-9))
    a1 = 1.0 - alpha
    u = rng.random((draws, E))
    lo3, hi3 = lo[:, None, None], hi[:, None, None]
    x = ((hi3 ** a1 - lo3 ** a1) * u[None] + lo3 ** a1) ** (1.0 / a1)
    n = np.round(x / x.sum(axis=2, keepdims=True) * (Tf * k)[:, None, None])
    per_rank = n.reshape(len(T), draws, ep, m)
    np.minimum(per_rank, Tf[:, None, None, None], out=per_rank)
    # the excess over the cap and the rounding's remainder, per draw, dealt round-robin over the ranks
    delta = (T[:, None] * k - per_rank.sum(axis=(2, 3))).astype(np.int64)
    r = np.arange(ep)
    share = np.abs(delta)[..., None] // ep + (r < (np.abs(delta) % ep)[..., None])
    up = delta >= 0
    if up.any():
        sub = per_rank[up].reshape(-1, m)  # boolean indexing copies: filled, then written back
        caps = np.broadcast_to(Tf[:, None, None], (len(T), draws, ep))[up].reshape(-1)
        _fill_lowest(sub, share[up].reshape(-1), caps)
        per_rank[up] = sub.reshape(-1, ep, m)
    if not up.all():  # a rounding surplus: taken back from the most-loaded
        sub = per_rank[~up].reshape(-1, m)
        _take_highest(sub, share[~up].reshape(-1))
        per_rank[~up] = sub.reshape(-1, ep, m)
    busiest = np.argmax(per_rank.sum(axis=3), axis=2)
    return np.take_along_axis(per_rank, busiest[:, :, None, None], axis=2)[:, :, 0, :]


POWER_LAW_BLOCK = 128  # token counts computed together (a serving timer asks for every count up to its budget)


def _loads_of(c: np.ndarray, tile: int) -> tuple:
    """(pairs, experts touched, padded rows) per token count of power_law_counts_many's counts `c`, mean over the
    draws: one tuple of floats per figure."""
    return tuple(tuple(float(z) for z in v) for v in (c.sum(2).mean(1), (c > 0).sum(2).mean(1),
                                                      (np.ceil(c / tile) * tile).sum(2).mean(1)))


@lru_cache(maxsize=4096)
def _power_law_block(block: int, E: int, k: int, ep: int, alpha: float, tile: int) -> tuple:
    """(pairs, experts touched, padded rows) of the power-law router's busiest rank, mean over the draws, at each
    token count block x POWER_LAW_BLOCK + 1 ... (block + 1) x POWER_LAW_BLOCK, computed together."""
    return _loads_of(power_law_counts_many(np.arange(block * POWER_LAW_BLOCK + 1, (block + 1) * POWER_LAW_BLOCK + 1),
                                           E, k, ep, alpha), tile)


@lru_cache(maxsize=65536)
def _power_law_one(T: int, E: int, k: int, ep: int, alpha: float, tile: int) -> tuple:
    """_power_law_block's three figures at one token count (a sparse query: a kernel table's cells)."""
    return tuple(v[0] for v in _loads_of(power_law_counts_many([T], E, k, ep, alpha), tile))


POWER_LAW_BLOCK_MIN = 16  # distinct token counts of one block asked at once above which the whole block is computed


def _power_law_loads(Ts, E: int, k: int, ep: int, alpha: float, tile: int) -> np.ndarray:
    """(3, len(Ts)): pairs, experts touched and padded rows at each token count (>= 1) of `Ts`: a block of
    POWER_LAW_BLOCK counts computed together where many of its counts are asked, each count alone otherwise."""
    Ts = np.asarray(Ts, dtype=np.int64)
    if (Ts < 1).any():
        raise ValueError("power-law routing needs at least one token")
    out = np.empty((3, len(Ts)))
    blocks = (Ts - 1) // POWER_LAW_BLOCK
    for b in np.unique(blocks):
        at = blocks == b
        wanted = np.unique(Ts[at])
        if len(wanted) >= POWER_LAW_BLOCK_MIN:
            tab = np.asarray(_power_law_block(int(b), E, k, ep, alpha, tile))
            out[:, at] = tab[:, (Ts[at] - 1) % POWER_LAW_BLOCK]
        else:
            one = {int(t): _power_law_one(int(t), E, k, ep, alpha, tile) for t in wanted}
            out[:, at] = np.array([one[int(t)] for t in Ts[at]]).T
    return out


GROUPED_PREFIX = "balanced_grouped_"  # routing name: the collector's balanced router under group-limited top-k


def balanced_selection(tokens: int, num_experts: int, topk: int) -> np.ndarray:
    """(T, k) expert ids AIConfigurator's balanced router gives its T tokens (its collector's balanced_logits,
    re-derived): stride s = ceil(E / k); token t's i-th expert (t + i s) mod E where T >= s, else
    (floor(t s / T) + i s) mod E: k experts per token one stride apart, every expert as often as any other."""
    T, E, k = int(tokens), int(num_experts), int(topk)
    if T < 1 or not 1 <= k <= E:
        raise ValueError(f"balanced_selection needs T >= 1 and 1 <= topk <= experts, got {T}, {k}, {E}")
    s = -(-E // k)
    t = np.arange(T)[:, None]
    base = t if T >= s else (t * s) // T
    return (base + np.arange(k)[None, :] * s) % E


@lru_cache(maxsize=1024)
def balanced_grouped_counts(tokens: int, num_experts: int, topk: int, n_group: int, topk_group: int) -> np.ndarray:
    """Token-expert pairs per expert (length E, expert order) when the balanced router's picks
    (balanced_selection: the logits of a token's k experts high, all others equal) go through group-limited top-k
    (DeepSeek-V3's routing: E experts in n_group equal groups, a group scored by the sum of its two highest
    scores, the token's top-k taken among the experts of its topk_group best groups), ties going to the lowest
    index. The balanced picks lie one stride apart, so where a group holds one of them every group ties: the
    first topk_group groups win, and the top-k slots the token's picks outside them leave go to the lowest-index
    experts of those groups. OBSERVED (E3.1): DeepSeek-V3's cells (n_group 8, topk_group 4) are no faster at EP 2
    than at EP 1 on every GPU, and t(EP) / t(EP 1) at 16,384 tokens follows the busiest rank's pairs this gives."""
    E, k, g, tg = int(num_experts), int(topk), int(n_group), int(topk_group)
    if g < 1 or E % g or not 1 <= tg <= g or tg * (E // g) < k:
        raise ValueError(f"group-limited routing needs n_group dividing {E} experts and 1 <= topk_group <= n_group "
                         f"with at least top-k experts in the chosen groups, got {g}, {tg}, top-{k}")
    sel = balanced_selection(tokens, E, k)
    T = len(sel)
    score = np.zeros((T, E), dtype=np.int8)
    np.put_along_axis(score, sel, 1, axis=1)
    per = E // g
    grp = np.sort(score.reshape(T, g, per), axis=2)[:, :, -min(2, per):].sum(axis=2)  # top-2 sum per group
    best = np.argsort(-grp, axis=1, kind="stable")[:, :tg]                           # ties: lowest group first
    allowed = np.zeros((T, g), dtype=bool)
    np.put_along_axis(allowed, best, True, axis=1)
    masked = np.where(np.repeat(allowed, per, axis=1), score.astype(np.int16), -1)
    top = np.argsort(-masked, axis=1, kind="stable")[:, :k]                          # ties: lowest expert first
    out = np.bincount(top.ravel(), minlength=E).astype(float)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=65536)
def _grouped_one(T: int, E: int, k: int, ep: int, n_group: int, topk_group: int, tile: int) -> tuple:
    """(pairs, experts touched, tile-padded rows) on EP rank 0 (experts 0 .. E/ep - 1, the rank the collector times)
    under balanced_grouped_counts at T tokens."""
    c = balanced_grouped_counts(T, E, k, n_group, topk_group)[: E // ep]
    return float(c.sum()), float((c > 0).sum()), float((np.ceil(c / tile) * tile).sum())


def _grouped_loads(Ts, E: int, k: int, ep: int, n_group: int, topk_group: int, tile: int) -> np.ndarray:
    """(3, len(Ts)): _grouped_one at each token count of Ts."""
    return np.array([_grouped_one(int(T), E, k, ep, n_group, topk_group, tile) for T in np.asarray(Ts)]).T.reshape(
        3, len(Ts))


def _loads_by_shape(T, E, k, ep, tile, loads):
    """(pairs, experts touched, padded rows) of a simulated router: `loads(token counts, E, k, ep)` -> (3, n) called
    once per distinct (E, k, ep) of the cells, touched experts at least 1 and padded rows at least one tile."""
    P, Et, R = (np.zeros_like(T) for _ in range(3))
    groups: dict = {}
    for j, key in enumerate(zip(E.astype(int), k.astype(int), ep.astype(int))):
        groups.setdefault(key, []).append(j)
    for (e_, k_, ep_), idx in groups.items():
        P[idx], Et[idx], R[idx] = loads(T[idx].astype(int), e_, k_, ep_)
    return P, np.maximum(Et, 1.0), np.maximum(R, tile)


def routed_load(tokens, num_experts, topk, ep=1, routing: str = "uniform", tile: int = TILE_M,
                unpadded_rows: float = 0.0):
    """(token-expert pairs, experts touched, tile-padded rows) on the measured GPU: uniform random routing
    (a serving step's expectation), AIConfigurator's balanced router (round-robin), its balanced router under a
    model's group-limited top-k (`balanced_grouped_<n_group>_<topk_group>`: EP rank 0, balanced_grouped_counts) or
    its power-law router (`power_law_<alpha>`: the busiest EP rank). Padded rows: each touched expert's rows rounded
    up to `tile`, except where the mean rows per touched expert are at most `unpadded_rows` (a small-batch kernel
    path that does not pad: the rows themselves)."""
    T = np.atleast_1d(np.asarray(tokens, dtype=float))
    E, k, ep = (np.broadcast_to(np.asarray(v, dtype=float), T.shape) for v in (num_experts, topk, ep))
    if routing.startswith(GROUPED_PREFIX):
        n_group, topk_group = (int(v) for v in routing[len(GROUPED_PREFIX):].split("_"))
        P, Et, R = _loads_by_shape(T, E, k, ep, tile, lambda Ts, e_, k_, ep_: _grouped_loads(
            Ts, e_, k_, ep_, n_group, topk_group, int(tile)))
    elif routing.startswith("power_law_"):
        alpha = float(routing.split("_")[-1])
        P, Et, R = _loads_by_shape(T, E, k, ep, tile,
                                   lambda Ts, e_, k_, ep_: _power_law_loads(Ts, e_, k_, ep_, alpha, int(tile)))
    else:
        Et = np.maximum(experts_touched(T, E, k, routing) / ep, 1.0)
        P = T * k / ep
        R = Et * np.ceil(P / Et / tile) * tile
    if unpadded_rows > 0:
        R = np.where(P / Et <= unpadded_rows, P, R)
    return P, Et, R


def full_tiles(pairs, touched, tile, padded=None) -> np.ndarray:
    """Whether the rows per touched expert (pairs / touched) fill whole row tiles of `tile` rows: at least one tile
    and a multiple of it (to 1e-9 of a tile); with `padded` (routed_load's tile-padded rows), also no expert padded
    (a skewed router's mean can be a multiple of the tile while its experts' rows are not)."""
    tile = float(tile)
    if not tile > 0:
        raise ValueError(f"full_tiles needs a row tile > 0, got {tile!r}")
    P = np.asarray(pairs, dtype=float)
    q = P / np.asarray(touched, dtype=float) / tile
    full = (q >= 1.0 - 1e-9) & (np.abs(q - np.round(q)) <= 1e-9)
    if padded is not None:
        full &= np.asarray(padded, dtype=float) <= P * (1.0 + 1e-9)
    return full


def routed_work(tokens, hidden, inter, topk, num_experts, tp=1, ep=1, dtype="bf16", routing="uniform"):
    """(FLOPs, weight bytes, token bytes) of the routed experts on one GPU: the local token-expert pairs'
    GEMM FLOPs, the local expert weights the batch touches, and the bf16 token copies (T*k*h*2 bytes: every
    pair is permuted and combined on every EP rank, local or not)."""
    T = np.asarray(tokens, dtype=float)
    h, i = np.asarray(hidden, dtype=float), np.asarray(inter, dtype=float) / np.asarray(tp, dtype=float)
    k = np.asarray(topk, dtype=float)
    P, Et, _ = routed_load(T, num_experts, k, ep, routing)
    F = 6.0 * h * i * P
    W = Et * 3.0 * h * i * WEIGHT_BYTES[dtype]
    A = 2.0 * h * T * k
    return F.reshape(np.shape(F)), W, A


def _law(mc: "MoEConstants", name: str, dtype: str, family, gpu=None):
    """A law constant: the (dtype, kernel family) value where one is shipped, else the dtype's."""
    if family is not None and f"{name}:{dtype}@{family}" in mc.values:
        return mc.values[f"{name}:{dtype}@{family}"]
    return mc.get(f"{name}:{dtype}")


def _has_law(mc: "MoEConstants", name: str, dtype: str, family) -> bool:
    return f"{name}:{dtype}@{family}" in mc.values or f"{name}:{dtype}" in mc.values


def routed_experts_time(tokens, hidden, inter, topk, num_experts, gpu, mc: MoEConstants, *, tp=1, ep=1,
                        dtype="bf16", routing="uniform", regime: str = "evicted", family=None,
                        load_cache: dict | None = None) -> dict:
    """The fused routed-expert kernel on one GPU (seconds), with its branches:

        t = t0 + smax_p(F_pad / (P eta_c), W_hbm / (BW eta_mem(W)) + W_l2 / BW_l2) + (a + b / ep) A / BW

    (b's bytes: local_pair_bytes, 2 h P on the timed rank under a group-limited router);

    smax_p(x, y) = (x^p + y^p)^(1/p): compute and weight streaming overlap imperfectly where they are close
    (the dense GEMM law's overlap exponent; p -> infinity is the plain max, the default without `overlap_p`);

    F_pad: GEMM FLOPs at tile granularity (each expert's rows padded to the law's `tile_m`, TILE_M where it has
    none; unpadded at or below `unpadded_rows` rows per expert where the law has it); a law with `tile_n` pads each
    TP rank's slice of the expert width to a multiple of it in F_pad and W (the grouped GEMMs' K / N tiles; E3.1
    wave 28: Hopper's fp8 CUTLASS kernels at moe_tp 8-32); W: expert weights touched;
    eta_mem(W) = eta_max x / (x + x_half), x = W / (BW x RAMP_REF_S) (a fixed latency x_half x RAMP_REF_S on the
    stream; it was W / L2, wave 11); the L2 a weight set can occupy is l2_effective_bytes (half the L2 on GA100 /
    GH100, whose two partitions each cache it);
    regime 'evicted' (a serving step: other layers' weights evict L2, every weight byte comes from HBM) or
    'resident' (AIConfigurator's collector, the same layer back to back: a weight set that fits L2 stays
    there, a share 1 / (1 + (W / (f L2))^4) read at the L2 bandwidth c * SMs * boost clock).
    A family flagged `sm_stream` streams its weights at the SMs' issue rate instead of HBM's (E3.1: Hopper's fp8
    CUTLASS and mxfp4 Triton kernels run as fast on H100 as on H200, whose HBM is 1.43x faster).
    A law with `tok_bytes_per_clk_sm` prices its per-pair token passes at smax_p(HBM time, SM-issue time) (E3.1,
    wave 27: vLLM's Triton path, whose per-pair work does not follow HBM bandwidth across H100 and H200).
    A law with `ep_floor_us` adds it to the floor at ep > 1 (the kernel families whose expert parallelism is vLLM's own
    remap of the top-k ids to the rank's local experts: a fixed cost at the same local work, E3.1 wave 18).
    A law with `expert_us` adds it per touched local expert (the CUTLASS grouped GEMM's per-group descriptor update,
    E3.1 wave 29).
    A law with `full_tile_stream` hides its weight stream (t_m = 0) where every touched expert's rows fill whole row
    tiles (full_tiles; E3.1 wave 30: Hopper's fp8 CUTLASS fused MoE at 128, 256, 384, ... rows per expert).
    The kernel family picks the (dtype, family) constants where shipped (None: the GPU's own `family:<dtype>`, or at
    ep > 1 its `family_ep:<dtype>` where shipped, else the dtype's).
    `load_cache`: a dict the caller keeps for these same cells (tokens, shapes, tp, ep): the router's loads
    (routed_load) are computed once per (routing, tile, unpadded rows) and reused, read-only, by later calls (a fit
    evaluates the law on the same cells hundreds of times); None (the default): computed on every call.
    The law is `routed_shape` (the cells' shape-only terms) and `routed_law_time` (the constants' part) composed;
    a caller that evaluates it many times on the same cells (a least-squares fit, E3.1) calls the two itself."""
    dtype = canonical_dtype(dtype)
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, not {regime!r}")
    if family is None:
        family = mc.get(f"family:{dtype}", gpu, "")
        # a GPU whose engine picks another kernel family at ep > 1 (moe.yaml family_ep:<dtype>, DERIVED from the
        # engine's source: vLLM's Hopper fp8_block, wave 41) prices those cells with that family's law
        fam_ep = mc.get(f"family_ep:{dtype}", gpu, "")
        many = np.asarray(ep, dtype=float) > 1
        if fam_ep and fam_ep != family and many.any():
            if not many.all():
                kw = dict(tp=tp, ep=ep, dtype=dtype, routing=routing, regime=regime, load_cache=load_cache)
                one = routed_experts_time(tokens, hidden, inter, topk, num_experts, gpu, mc, family=family, **kw)
                alt = routed_experts_time(tokens, hidden, inter, topk, num_experts, gpu, mc, family=fam_ep, **kw)
                return {k: np.where(many, alt[k], one[k]) for k in one}
            family = fam_ep
    family = family or None
    law = lambda n: _law(mc, n, dtype, family)  # noqa: E731
    law_or = lambda n, absent: law(n) if _has_law(mc, n, dtype, family) else absent  # noqa: E731
    # rows per grouped-GEMM tile: the (dtype, family) law's fitted choice where it has one, else TILE_M
    s = routed_shape(tokens, hidden, inter, topk, num_experts, gpu, tp=tp, ep=ep, dtype=dtype, routing=routing,
                     tile=int(law_or("tile_m", TILE_M)), unpadded_rows=float(law_or("unpadded_rows", 0.0)),
                     tile_n=float(law_or("tile_n", 0.0)), sm_stream=bool(law_or("sm_stream", False)),
                     full_tile_stream=float(law_or("full_tile_stream", 0.0)) > 0, load_cache=load_cache,
                     tactic=int(law_or("tactic", 0.0)))
    # the law's constants by plain name: those it must have, then those that add a term where it has them
    v = {n: law(n) for n in ROUTED_LAW_NEEDS + (("l2_fit",) if regime == "resident" else ())}
    v.update({n: law(n) for n in ROUTED_LAW_OPTIONAL if _has_law(mc, n, dtype, family)})
    # the GPU's three bf16 readings (s_c, s_mem, d_floor_us) scale the law only where the GPU runs the same kernel
    # family for this dtype as for bf16 (they measure that code on this GPU; another family is other code)
    fam_bf16 = mc.get("family:bf16", gpu, "")
    reads = mc if not (fam_bf16 and family and family != fam_bf16) else MoEConstants(values=mc.values)
    r = routed_law_time(s, v, regime=regime, dtype=dtype, s_c=reads.get("s_c", gpu, 1.0),
                        s_mem=reads.get("s_mem", gpu, 1.0), d_floor_us=reads.get("d_floor_us", gpu, 0.0))
    t_c, t_m = r["t_compute"], r["t_memory"]
    return {"t": r["t"], "t_compute": t_c, "t_memory": t_m, "t_tokens": r["t_tokens"], "compute_bound": t_c >= t_m,
            "weight_bytes": s["W"], "flops": s["F"], "eta_mem": r["eta_mem"], "l2_resident_share": r["res"],
            "experts_touched": s["Et"]}


# routed_law_time's constants (plain names; routed_experts_time reads them as "<name>:<dtype>[@<family>]"): those
# every law has (l2_fit too in the 'resident' regime), and those that add a term only where a law has them
ROUTED_LAW_NEEDS = ("eta_c", "l2_bytes_per_clk_sm", "eta_mem_max", "x_half", "token_passes", "local_token_passes",
                    "floor_us")
ROUTED_LAW_OPTIONAL = ("overlap_p", "tok_bytes_per_clk_sm", "quant_passes", "ep_floor_us", "batch_us", "batch_tokens",
                       "expert_us", "pair_overlap", "tile_k_extra",
                       "width_k_extra")


# The local per-pair passes' bytes on the timed rank (E3.1, issue 20, wave 42, helper sglfp4): under a group-limited
# balanced router (routing `balanced_grouped_<n>_<k>`, DeepSeek-V3's shape) the rank the collector times holds the
# router's hot experts, its token-expert pairs P (routed_load) far above T k / ep (16,384 tokens, EP 32: 69,632 against
# 4,096), and the kernel reads / writes each local pair's row: the passes are priced on 2 h P bytes there. Every other
# router keeps A / ep (uniform and balanced: P = T k / ep exactly; the power-law router's busiest rank: not taken
# here). NOT ADOPTED (off): by its pre-registered test it made TensorRT-LLM's groups worse (DESIGN.md); off, every
# router is priced on A / ep as before (wave 41).
GROUPED_LOCAL_PAIRS = False


def local_pair_bytes(h, P, routing: str):
    """The bytes of one local per-pair pass on the timed rank, 2 h P (its router's pairs), under a group-limited
    router where GROUPED_LOCAL_PAIRS; else None: the uniform share A / ep of every token's k pairs (A = 2 h T k),
    which routed_law_time prices as before."""
    if GROUPED_LOCAL_PAIRS and str(routing).startswith(GROUPED_PREFIX):
        return 2.0 * np.asarray(h, dtype=float) * np.asarray(P, dtype=float)
    return None


def routed_shape(tokens, hidden, inter, topk, num_experts, gpu, *, tp=1, ep=1, dtype="bf16", routing="uniform",
                 tile: int = TILE_M, unpadded_rows: float = 0.0, tile_n: float = 0.0, sm_stream: bool = False,
                 full_tile_stream: bool = False, load_cache: dict | None = None, tactic: int = 0) -> dict:
    """The shape-only terms of `routed_experts_time` (no fitted constant; the law's tiling flags are arguments):
    the router's loads (P pairs, Et experts touched, R tile-padded rows; `load_cache` as routed_experts_time's),
    F real FLOPs, W weight bytes and c_num padded FLOPs (the expert width per TP rank padded to `tile_n` where > 0),
    A token bytes (A_loc: local_pair_bytes, one local per-pair pass's, or None), the GPU's peak, effective L2, weight-stream rate (the SMs' issue rate where `sm_stream`) and
    ramp x, and `full` (full_tiles where `full_tile_stream`, else None). Arrays of the cells' broadcast shape.
    With `tactic` 1 or 2 (TensorRT-LLM's CUTLASS families, E3.1 wave 41): c_num is the tactic law's tile-priced work
    (tactic_compute, choice TACTIC_CHOICES[tactic - 1]) instead of the rows padded to `tile`."""
    dtype = canonical_dtype(dtype)
    T = np.asarray(tokens, dtype=float)
    h, i = np.asarray(hidden, dtype=float), np.asarray(inter, dtype=float) / np.asarray(tp, dtype=float)

    def loads(tile_, unpadded_):
        key = (routing, tile_, unpadded_)
        if load_cache is not None and key in load_cache:
            return load_cache[key]
        out = routed_load(T, num_experts, topk, ep, routing, tile_, unpadded_)
        out = tuple(np.reshape(v, np.broadcast(T, h).shape) for v in out)
        if load_cache is not None:
            for v in out:
                v.flags.writeable = False   # shared by every later call on these cells
            load_cache[key] = out
        return out

    P, Et, R = loads(tile, unpadded_rows)
    F = 6.0 * h * i * P
    # the expert width per TP rank padded to the law's width tile (`tile_n`, where it has one): the compute and the
    # weight stream work on whole tiles (the returned FLOPs stay the real ones)
    if tile_n > 0:
        i = np.ceil(i / tile_n) * tile_n
    W = Et * 3.0 * h * i * WEIGHT_BYTES[dtype]
    # the weight stream's rate: HBM bandwidth x the GPU's memory reading, or, for a kernel family whose weight
    # handling is bound by the SMs (sm_stream = 1: its time does not follow HBM bandwidth across GPUs that share
    # SMs and clock), the SMs' issue rate SM_STREAM_BYTES_PER_CLK x SMs x boost clock (no HBM reading applies)
    bw_stream = SM_STREAM_BYTES_PER_CLK * gpu.sms * gpu.boost_mhz * 1e6 if sm_stream else gpu.mem_bw
    # the efficiency ramp in the bytes the stream moves in RAMP_REF_S: W x (x + x_half) / x = W + x_half x bw x
    # RAMP_REF_S, a fixed latency of x_half x RAMP_REF_S (it was x = W / L2: a latency of x_half x L2 / BW, 5-7x
    # longer on the GDDR parts, whose L2 / bandwidth is 84-116 us against HBM parts' 15-17 us)
    c_tile = None   # the tactic law's work per K tile of GEMM1's and GEMM2's CTA tiles (cta_width_work)
    if tactic:   # the width is the kernel's own (the tile list pads it), not the law's tile_n
        c_num, _, _, *c_tile = tactic_parts(T, h, np.asarray(inter, dtype=float) / np.asarray(tp, dtype=float), topk,
                                            num_experts, ep, gpu, dtype, lambda tN: loads(int(tN), 0.0)[2] / tN,
                                            TACTIC_CHOICES[int(tactic) - 1])
    else:
        c_num = 6.0 * h * i * R
    return {"T": T, "h": h, "P": P, "Et": Et, "R": R, "F": F, "W": W, "c_num": c_num, "c_tile": c_tile,
            "A": 2.0 * h * T * np.asarray(topk, dtype=float), "ep_f": np.asarray(ep, dtype=float),
            "A_loc": local_pair_bytes(h, P, routing),
            "peak": math_peak(gpu, dtype), "l2": l2_effective_bytes(gpu), "sms": gpu.sms, "boost": gpu.boost_mhz,
            "mem_bw": gpu.mem_bw, "sm_stream": bool(sm_stream), "bw_stream": bw_stream,
            "x": W / (bw_stream * RAMP_REF_S), "full": full_tiles(P, Et, tile, R) if full_tile_stream else None}


# The tactic law (E3.1, issue 20, wave 41, helper `tactic`; an option, written before it was scored): TensorRT-LLM's
# CUTLASS TMA warp-specialized grouped GEMMs (the fused MoE's two GEMMs on sm 90 / 100 / 103) run with M and N swapped
# ("M and N transposed since we are using the #tokens as the N dimension", moe_kernels.cu): a CTA tile covers TILE_M
# of the expert's output features and TILE_N of its token rows, and the autotuner picks one CTA shape per power-of-two
# token bucket among a fixed candidate list (cutlass_heuristic.cpp: get_candidate_tiles_sm90 with GROUPED_GEMM;
# get_candidate_configs_sm100 with GROUPED_GEMM, FP4_ONLY for nvfp4; NVIDIA/TensorRT-LLM as stored at commit
# 0b53e94719f4bd566e9c75a7df32639a306dfec6). Per SM (a 2-SM cluster's CTA shape split in M over its two SMs), as
# (feature tile, token tile): {sm: {math: tiles}}; K tiles are 128 bytes of the operand (cutlass CtaShape...x128B).
TACTIC_TILES = MappingProxyType({
    90: MappingProxyType({m: ((128, 16), (128, 32), (128, 64), (128, 128), (128, 256), (256, 128))
                          for m in ("bf16", "fp8")}),
    100: MappingProxyType({"bf16": ((128, 128), (128, 256), (128, 32), (64, 64), (64, 128), (64, 256), (128, 64)),
                           "fp8": ((128, 128), (128, 256), (128, 32), (128, 16), (64, 64), (64, 128), (64, 256),
                                   (128, 64)),
                           "fp4": ((128, 128), (128, 256), (128, 64))})})
TACTIC_SM = MappingProxyType({90: 90, 100: 100, 103: 100})   # sm 103 runs sm 100's candidate list (sm >= 100, != 120)
TACTIC_DTYPES = frozenset({"bf16", "fp8", "nvfp4"})   # the TMA-WS generic grouped GEMM's dtypes (not fp8_block)
TACTIC_K_BYTES = 128.0


def tactic_tiles(gpu, dtype: str) -> tuple:
    """The (feature tile, token tile) candidates of TensorRT-LLM's CUTLASS grouped GEMM for `dtype` on `gpu`
    (TACTIC_TILES). Refused in one line: a `gpu` that is not a GPU spec or a `dtype` that is not a name (InputError),
    a GPU and dtype it has no list for (UnsupportedError, naming both; wave 42: a bare ValueError, or a TypeError for
    an unhashable dtype)."""
    if not isinstance(getattr(gpu, "sm_version", None), int) or not hasattr(gpu, "sms"):
        raise InputError(f"tactic_tiles: gpu must be a GPU spec (steptime.specs.get_gpu(name)), got "
                         f"{type(gpu).__name__}")
    if not isinstance(dtype, str):
        raise InputError(f"tactic_tiles: dtype must be a MoE dtype name ({', '.join(WEIGHT_BYTES)}), got "
                         f"{type(dtype).__name__}")
    dtype = canonical_dtype(dtype)
    sm = TACTIC_SM.get(gpu.sm_version)
    if sm is None or dtype not in TACTIC_DTYPES or MATH[dtype] not in TACTIC_TILES[sm]:
        raise UnsupportedError(f"the tactic law has no CUTLASS tile list for {dtype} on {getattr(gpu, 'name', gpu)} "
                         f"(sm {getattr(gpu, 'sm_version', None)}); it prices {sorted(TACTIC_DTYPES)} on sm "
                         f"{sorted(TACTIC_SM)}")
    return TACTIC_TILES[sm][MATH[dtype]]


def _tactic_work(n_rows, h, i, kt, sms, tM, tN, waves: bool = True, k_tiles: float | None = None):
    """FLOPs-equivalent of both grouped GEMMs at CTA tile (tM features, tN rows): `n_rows` token-row tiles (summed over
    the touched experts), each GEMM's tiles over all SMs in whole waves (a persistent tile scheduler; `waves` False:
    the tiles alone, no wave tail), each tile 2 tM tN K with K padded to `kt` elements. GEMM1: features 2i, K h;
    GEMM2: features h, K i. `k_tiles` (None: each GEMM's own): (GEMM1's, GEMM2's) K tiles per tile instead."""
    g1 = n_rows * np.ceil(2.0 * i / tM)
    g2 = n_rows * np.ceil(h / tM)
    if waves:
        g1, g2 = np.ceil(g1 / sms) * sms, np.ceil(g2 / sms) * sms
    k1, k2 = (np.ceil(h / kt), np.ceil(i / kt)) if k_tiles is None else k_tiles
    return g1 * 2.0 * tM * tN * k1 * kt + g2 * 2.0 * tM * tN * k2 * kt


TACTIC_CHOICES = ("waves", "padding")   # the tactic law's two forms (law flag `tactic` 1 and 2), both written before scoring


def tactic_compute(T, h, i, topk, num_experts, ep, gpu, dtype, rows_at, choice: str = "waves") -> tuple:
    """(FLOPs-equivalent, chosen feature tile, chosen token tile) of the tactic law per cell (tactic_parts' first
    three)."""
    return tactic_parts(T, h, i, topk, num_experts, ep, gpu, dtype, rows_at, choice)[:3]


def tactic_parts(T, h, i, topk, num_experts, ep, gpu, dtype, rows_at, choice: str = "waves") -> tuple:
    """(FLOPs-equivalent, chosen feature tile, chosen token tile, GEMM1's and GEMM2's per-K-tile work) of the tactic law
    per cell: the candidate
    (tactic_tiles) whose work (_tactic_work: with its wave tails where `choice` is 'waves', the padded tiles alone where
    'padding') is least at the cell's power-of-two token bucket (the autotuner's: 2^floor(log2 T), balanced rows per
    touched expert), ties to the larger tile (candidates taken by decreasing area, then token tile), priced in whole
    waves at the cell's own rows: `rows_at(tN)` -> the cell's token-row tiles at token tile tN (its router's
    tile-padded rows / tN)."""
    if not isinstance(choice, str) or choice not in TACTIC_CHOICES:
        raise InputError(f"tactic choice must be one of {TACTIC_CHOICES}, not {choice!r}")
    tiles = sorted(tactic_tiles(gpu, dtype), key=lambda t: (-t[0] * t[1], -t[1]))
    kt = TACTIC_K_BYTES / WEIGHT_BYTES[canonical_dtype(dtype)]
    T = np.asarray(T, dtype=float)
    Tb = np.exp2(np.floor(np.log2(np.maximum(T, 1.0))))
    Pb = Tb * np.asarray(topk, dtype=float) / np.asarray(ep, dtype=float)
    Eb = np.maximum(experts_touched(Tb, num_experts, topk, "balanced") / np.asarray(ep, dtype=float), 1.0)
    at_bucket = np.stack([_tactic_work(Eb * np.ceil(Pb / Eb / tN), h, i, kt, gpu.sms, tM, tN, choice == "waves")
                          for tM, tN in tiles])
    pick = np.argmin(at_bucket, axis=0)   # the first least: the larger tile on a tie
    work, per_k1, per_k2 = np.zeros(np.shape(T)), np.zeros(np.shape(T)), np.zeros(np.shape(T))
    for j, (tM, tN) in enumerate(tiles):
        sel = pick == j
        if np.any(sel):
            n_rows = np.broadcast_to(rows_at(tN), np.shape(T))
            work = np.where(sel, _tactic_work(n_rows, h, i, kt, gpu.sms, tM, tN), work)
            per_k1 = np.where(sel, _tactic_work(n_rows, h, i, kt, gpu.sms, tM, tN, k_tiles=(1.0, 0.0)), per_k1)
            per_k2 = np.where(sel, _tactic_work(n_rows, h, i, kt, gpu.sms, tM, tN, k_tiles=(0.0, 1.0)), per_k2)
    fm = np.array([t[0] for t in tiles], dtype=float)[pick]
    fn = np.array([t[1] for t in tiles], dtype=float)[pick]
    return work, fm, fn, per_k1, per_k2


def _no_memo(what, vals, fn):
    return fn()


def routed_law_time(s: dict, v: dict, *, regime: str = "evicted", dtype: str = "bf16", s_c=1.0, s_mem=1.0,
                    d_floor_us=0.0, memo=None) -> dict:
    """The constants' part of `routed_experts_time` on `routed_shape`'s terms `s`: the law's constants `v` by plain
    name (ROUTED_LAW_NEEDS, l2_fit in the 'resident' regime, and those of ROUTED_LAW_OPTIONAL it has), the GPU's
    readings s_c, s_mem and d_floor_us (neutral by default). Returns t and its parts (seconds), eta_mem and the
    L2-resident share `res`. `memo(what, vals, fn)`: fn() of part `what`, which reads the numbers `vals` alone, for a
    caller that keeps the parts between calls (a fit's Jacobian steps move one constant at a time); None: computed."""
    memo = memo or _no_memo
    nan = float("nan")   # a constant the law does not have, in a part's key
    p = float(v.get("overlap_p", np.inf))  # the compute / stream overlap exponent (absent: the plain max)
    key_c = (v["eta_c"], s_c, v.get("tile_k_extra", nan), v.get("width_k_extra", nan))
    t_c = memo("c", key_c, lambda: cta_width_work(s, v) / (s["peak"] * (v["eta_c"] * s_c)))

    def stream():
        W, x = s["W"], s["x"]
        # L2 a weight set can occupy: halved where the L2 is partitioned (a weight set is cached in both halves)
        res = 1.0 / (1.0 + (W / (v["l2_fit"] * s["l2"])) ** 4) if regime == "resident" else np.zeros_like(W)
        bw_l2 = v["l2_bytes_per_clk_sm"] * s["sms"] * s["boost"] * 1e6
        eta_m = v["eta_mem_max"] * (1.0 if s["sm_stream"] else s_mem) * x / (x + v["x_half"])
        t_m = W * (1.0 - res) / (s["bw_stream"] * np.maximum(eta_m, 1e-9)) + W * res / bw_l2
        # a law with `full_tile_stream` = 1 (E3.1, wave 30): where every touched expert's rows fill whole row tiles
        # (the rows per touched expert a multiple of tile_m) the weight stream is hidden under the tiles' compute
        # (t_m = 0); where a partial tile is left, the stream is paid as before. OBSERVED (H100 / H200 fp8,
        # FlashInfer's CUTLASS fused MoE): at 128, 256, 384, 512, ... rows per expert the time is n_tiles x one
        # 128-row tile's compute (Qwen3-235B-A22B EP 1, H200: 2.16 / 4.21 / 5.91 / 8.31 ms), at 1-96 rows it is the
        # weight stream's (2.9-4.2 ms) and at 192 rows one tile's compute plus that stream (5.90 ms)
        if s["full"] is not None:
            t_m = np.where(s["full"], 0.0, t_m)
        return t_m, eta_m, res

    key_m = (v.get("l2_fit", nan) if regime == "resident" else nan, v["l2_bytes_per_clk_sm"], v["eta_mem_max"],
             v["x_half"], s_mem)
    t_m, eta_m, res = memo("m", key_m, stream)
    # a law with `pair_overlap` (E3.1, wave 41, helper tacticeta): its local per-pair passes are the grouped GEMMs'
    # own activation traffic, on the memory side of their roofline (pair_overlap_split); else added after it
    lap = float(v.get("pair_overlap", 0.0)) > 0
    t_loc = memo("loc", (v["local_token_passes"],), lambda: pair_overlap_split(s, v)[0]) if lap else 0.0
    both = memo("both", key_c + key_m + (p, v["local_token_passes"] if lap else nan),
                lambda: smax(t_c, t_m + t_loc, p))

    def tokens():
        # the per-pair passes' bytes (the local passes on the timed rank's pairs where local_pair_bytes gives them)
        pass_bytes = ((v["token_passes"] + v["local_token_passes"] / s["ep_f"]) * s["A"] if s.get("A_loc") is None
                      else v["token_passes"] * s["A"] + v["local_token_passes"] * s["A_loc"])
        if lap:   # the local passes are in `both` (pair_overlap_split): the global passes alone here
            pass_bytes = pair_overlap_split(s, v)[1]
        t_tok = pass_bytes / s["mem_bw"]
        # a law with `tok_bytes_per_clk_sm` (vLLM's Triton fused-MoE path, E3.1 wave 27): the per-pair passes are
        # small scattered accesses (output tiles zero-filled for pairs another EP rank holds, the activation and the
        # top-k sum over every pair) bound by the SMs' issue rate as well as by HBM: the same bytes at
        # tok_bytes_per_clk_sm x SMs x boost clock, the two overlapped as the law's compute and weight stream are
        # (smax at overlap_p). OBSERVED: at the largest EP (one local expert) and 16,384 tokens H200 / H100 = 0.88
        # (1.50 / 1.71 ms) where HBM is 0.70
        if "tok_bytes_per_clk_sm" in v:
            t_tok_sm = pass_bytes / (v["tok_bytes_per_clk_sm"] * s["sms"] * s["boost"] * 1e6)
            t_tok = smax(t_tok, t_tok_sm, p)
        # the activations' dynamic quantization (block-scaled dtypes: per-group scales computed from every token's
        # bf16 hidden vector before the grouped GEMMs): quant_passes x the T x h bf16 input over HBM, on every EP rank
        # for every token (independent of ep and of top-k); 0 where the law has no such constant (E3.1, wave 15)
        if "quant_passes" in v:
            t_tok = t_tok + v["quant_passes"] * 2.0 * s["h"] * s["T"] / s["mem_bw"]
        return t_tok

    t_tok = memo("tok", (v["token_passes"], v["local_token_passes"], v.get("quant_passes", nan),
                         v.get("tok_bytes_per_clk_sm", nan), p, float(lap)), tokens)

    def fixed():
        t0 = max(0.0, v["floor_us"] + d_floor_us) * 1e-6
        # the expert-parallel path's fixed cost (EP > 1: the kernel family's extra work to map the global top-k ids to
        # the rank's local experts and mask the others), where the law has the constant (E3.1, wave 18)
        if "ep_floor_us" in v:
            t0 = t0 + np.where(s["ep_f"] > 1, v["ep_floor_us"] * 1e-6, 0.0)
        # the batch's own fixed cost, saturating in its tokens (E3.1, wave 23): batch_us x T / (T + batch_tokens),
        # where the law has the constants (0 otherwise). OBSERVED (AIConfigurator's tables, vLLM 0.24): on the timed EP
        # rank of the largest EP (one local expert, a row or two of local work at every T <= 32) the TRT-LLM kernels'
        # time rises from 15-17 us at 1-4 tokens to 25-27 us at 32 and then stays within a few us to 256 tokens on
        # every datacenter Blackwell GPU (nvfp4 +10 us, fp8_block +6-10, bf16 +4-8); a work per token of the whole
        # batch, not of the rank's experts, that runs in parallel over the tokens beyond a few dozen. A constant floor
        # fitted across it was 20-40% too slow at 1-2 tokens and 5-12% too fast at 32-2048.
        if "batch_us" in v:
            half = float(v["batch_tokens"])
            if not half > 0:
                raise ValueError(f"MoE law batch_tokens:{dtype} must be > 0 tokens, got {half!r}")
            t0 = t0 + v["batch_us"] * 1e-6 * s["T"] / (s["T"] + half)
        # a cost per touched local expert (E3.1, wave 29), where the law has `expert_us`: the CUTLASS ptr-array grouped
        # GEMM (FlashInfer's CUTLASS fused MoE) rewrites a CTA's TMA descriptors in global memory and fences them each
        # time the CTA moves to another group's (expert's) tile (`tensormaps_perform_update` on `did_batch_change`), a
        # latency paid per group, not per byte. OBSERVED (H100 fp8, EP 1, every expert touched, one row each):
        # Qwen3.6-35B-A3B's 256 experts of 3.1 MB take 1.5 ms (5.9 us per expert), Qwen3-235B-A22B's 128 of 18.9 MB
        # 3.7 ms (28.9 us): about 1.4 us per expert plus the bytes at 0.69 TB/s
        return t0 + float(v.get("expert_us", 0.0)) * 1e-6 * s["Et"]

    t0 = memo("fix", (v["floor_us"], d_floor_us, v.get("ep_floor_us", nan), v.get("batch_us", nan),
                      v.get("batch_tokens", nan), v.get("expert_us", nan)), fixed)
    t = np.where(s["T"] > 0, t0 + both + t_tok, 0.0)
    return {"t": t, "t_compute": t_c, "t_memory": t_m, "t_tokens": t_tok, "eta_mem": eta_m, "res": res}


def cta_width_work(s: dict, v: dict):
    """The compute term's work (FLOPs-equivalent) of routed_shape's terms `s` under the law `v`: s["c_num"], plus, for a
    law with `tile_k_extra` (E3.1, issue 20, wave 42, helper ctawidth; written before it was scored), that many K tiles
    of work on every CTA tile of both grouped GEMMs the tactic law runs (s["c_tile"]), or, for a law with
    `width_k_extra` (the second form, written after the first's scores), on GEMM2's tiles alone, whose K is the expert
    width per TP rank: each tile pays a fixed cost outside its K loop (the mainloop's pipeline fill and drain, the
    epilogue's store), so a GEMM of k K tiles runs at k / (k + extra) of its K loop's rate -- an efficiency that rises
    and saturates in the width / K tile. ValueError for such a law on terms without the tactic's tiles, or for a
    negative extra."""
    out = s["c_num"]
    for name, gemms in (("tile_k_extra", (0, 1)), ("width_k_extra", (1,))):
        if name not in v:
            continue
        extra = float(v[name])
        if not extra >= 0.0:
            raise ValueError(f"MoE law {name} must be >= 0 K tiles, got {v[name]!r}")
        if s.get("c_tile") is None:
            raise ValueError(f"a MoE law with {name} needs the tactic law's CTA tiles (the law flag `tactic`)")
        out = out + extra * sum(s["c_tile"][j] for j in gemms)
    return out


def pair_overlap_split(s: dict, v: dict) -> tuple:
    """(t_loc seconds, global pass bytes) of a law with `pair_overlap` (E3.1, issue 20, wave 41, helper tacticeta;
    written before it was scored): the local per-pair passes, local_token_passes x 2 h bytes per local token-expert
    pair (local_pair_bytes: A / ep, or 2 h P under a group-limited router), priced at HBM bandwidth as t_loc, which routed_law_time adds to the weight
    stream on the memory side of the compute roofline (smax_p(t_c, t_m + t_loc)): the grouped GEMMs read each local
    pair's activation row and write its outputs inside the same kernels as their math (TensorRT-LLM's CUTLASS fused
    MoE, moe_kernels.cu), so that traffic overlaps the math instead of adding to it; the global passes
    (token_passes x A: the per-token permute and finalize over every token on every EP rank) stay added. ValueError
    for a law that also has tok_bytes_per_clk_sm (another pricing of the same passes)."""
    if "tok_bytes_per_clk_sm" in v:
        raise ValueError("a MoE law with pair_overlap cannot also have tok_bytes_per_clk_sm (both price the per-pair "
                         "passes)")
    local = (v["local_token_passes"] / s["ep_f"] * s["A"] if s.get("A_loc") is None
             else v["local_token_passes"] * s["A_loc"])
    return local / s["mem_bw"], v["token_passes"] * s["A"]


def a2a_ht_remote_ranks(topk, ep, n_group: int = 1, topk_group: int = 1):
    """The remote ranks one token is sent to in DeepEP's normal (high-throughput) mode, which sends a token once
    per rank holding any of its top-k experts (experts split over the ep ranks in contiguous blocks), expected
    over the router's choices:

    - ungrouped routing (n_group == topk_group or n_group 1: every expert open to every token, top-k uniform):
      (ep - 1) (1 - (1 - 1/ep)^k);
    - group-limited routing (config.json's n_group / topk_group, DeepSeek-V3): the top-k is taken among the experts
      of the token's topk_group best groups, and a group's score is the sum of its strongest experts' scores, so
      each chosen group gives the token at least one expert (k >= topk_group). Groups nested in ranks (n_group a
      multiple of ep, g = n_group / ep groups per rank): a remote rank is reached where any of its groups is chosen,
      (ep - 1) (1 - C(n_group - g, topk_group) / C(n_group, topk_group)); ranks nested in groups (ep a multiple of
      n_group, r = ep / n_group ranks per group): a rank's group is chosen with probability topk_group / n_group,
      the group's best expert lands on one of its r ranks and the other k - topk_group experts fall uniformly over
      the chosen groups' experts, (ep - 1) (topk_group / n_group) (1 - (1 - 1/r) (1 - 1/(topk_group r))^(k -
      topk_group)). The two agree at ep = n_group (a simulation of DeepSeek-V3's router: within 2% at EP 4-16).

    E3.2: TensorRT-LLM's collector routes DeepSeek-V3's shape through its serving router (n_group 8, topk_group 4):
    3.5 remote ranks of 7 at EP 8 against 4.59 ungrouped (0.76x), 2.36 of 3 at EP 4 against 2.70 (0.87x); its
    normal-mode DeepSeek-V3 over Kimi-K2 time (same hidden size and top-k, ungrouped router) at 65,536 tokens is
    0.75-0.80 on the EP-8 boards and 0.87-0.90 on the EP-4 trays."""
    k, ep = np.asarray(topk, dtype=float), np.asarray(ep, dtype=float)
    g, tg = n_group, topk_group
    if isinstance(g, bool) or isinstance(tg, bool) or not (isinstance(g, int) and isinstance(tg, int) and 1 <= tg <= g):
        raise ValueError(f"a2a_ht_remote_ranks: need whole numbers 1 <= topk_group <= n_group, got n_group "
                         f"{n_group!r}, topk_group {topk_group!r}")
    if g == 1 or tg == g:
        return (ep - 1.0) * (1.0 - (1.0 - 1.0 / ep) ** k)
    if np.any(k < tg):
        raise ValueError(f"a2a_ht_remote_ranks: group-limited routing needs top-k >= topk_group ({tg}), got {topk!r}")
    nested = (g % ep == 0)    # groups nested in ranks
    spread = (ep % g == 0)    # ranks nested in groups
    if not np.all(nested | spread):
        raise ValueError(f"a2a_ht_remote_ranks: n_group ({g}) and ep ({ep!r}) must divide one another")
    per_rank = np.where(nested, g / np.maximum(ep, 1.0), 1.0).astype(int)
    p_nested = 1.0 - np.vectorize(lambda r: comb(g - int(r), tg) / comb(g, tg))(per_rank)
    per_group = np.maximum(ep / g, 1.0)   # ranks a group spans (ranks nested in groups)
    p_spread = (tg / g) * (1.0 - (1.0 - 1.0 / per_group) * (1.0 - 1.0 / (tg * per_group)) ** (k - tg))
    return (ep - 1.0) * np.where(nested, p_nested, p_spread)


def a2a_bytes(tokens, hidden, topk, ep, mode: str = "ll", n_group: int = 1, topk_group: int = 1):
    """bf16 bytes one GPU sends in one all-to-all phase. Low-latency mode sends a copy per (token, remote expert):
    T k h 2 (ep-1)/ep, whatever the router. Normal (high-throughput) mode sends a token once per remote rank that
    holds any of its top-k experts: T h 2 a2a_ht_remote_ranks(k, ep, n_group, topk_group) (uniform routing:
    T h 2 (ep-1)/ep * ep (1 - (1 - 1/ep)^k))."""
    T, h, k, ep = (np.asarray(x, dtype=float) for x in (tokens, hidden, topk, ep))
    if mode == "ht":
        return T * h * 2.0 * a2a_ht_remote_ranks(k, ep, n_group, topk_group)
    return T * k * h * 2.0 * (ep - 1.0) / ep


# The reference link the low-latency law's bandwidth share is quoted at (1e9 B/s per direction, NVLink 5): the
# transfer runs at share * A2A_LINK_REF_GBPS * (link / A2A_LINK_REF_GBPS)^link_exp (a2a_link_bw), so that
# link_exp = 1 is the share of the GPU's own link and link_exp < 1 a rate that rises more slowly than the link.
A2A_LINK_REF_GBPS = 900.0


def a2a_link_bw(link_gbps, share, link_exp=1.0):
    """The low-latency all-to-all's transfer bandwidth (B/s) on a GPU whose per-direction link is `link_gbps`
    (1e9 B/s): share * ref * (link / ref)^link_exp, ref = A2A_LINK_REF_GBPS (E3.2: DeepEP's low-latency kernels
    post fine-grained per-(token, expert) stores from a fixed set of warps, and Blackwell's 900 GB/s NVLink buys
    about 1.3-1.6x Hopper's 450 at 256 tokens, not 2x)."""
    link = np.asarray(link_gbps, dtype=float)
    if np.any(link <= 0) or share <= 0:
        raise ValueError(f"a2a_link_bw: link bandwidth and share must be > 0, got {link_gbps!r}, {share!r}")
    return share * A2A_LINK_REF_GBPS * 1e9 * (link / A2A_LINK_REF_GBPS) ** link_exp


def a2a_floor_shape(tokens, excess=0.0, excess_tokens=1.0):
    """The low-latency floor's factor at `tokens` per rank: 1 + excess * T0 / (T + T0), T0 = excess_tokens: a
    small-batch excess that relaxes over T0 tokens (E3.2: vLLM's DeepEP combine runs 12-19% slower at 1-2 tokens
    than at 8-48 on every GPU measured); 1 where excess = 0."""
    if excess_tokens <= 0:
        raise ValueError(f"a2a_floor_shape: excess_tokens must be > 0, got {excess_tokens!r}")
    T = np.asarray(tokens, dtype=float)
    return 1.0 + excess * excess_tokens / (T + excess_tokens)


def a2a_link_gbps(gpu) -> float:
    """The per-direction GPU-to-GPU bandwidth (1e9 B/s) DeepEP's low-latency all-to-all is scaled by: the GPU spec's
    nvlink_gbps (its PCIe bandwidth where it has no NVLink)."""
    if not hasattr(gpu, "nvlink_gbps"):
        from steptime.specs import get_gpu
        gpu = get_gpu(gpu)
    return float(gpu.nvlink_gbps or gpu.pcie_gbps)


def a2a_time(tokens, hidden, topk, ep, gpu, mc: MoEConstants, *, mode: str = "ll", n_group: int = 1,
             topk_group: int = 1):
    """Expert-parallel dispatch + combine on one GPU (seconds). Per phase (E3.2's measured curves), one of two laws:

    - additive: s_curve * (s_floor * floor + s_slope * (bytes / bw + c_tok * tokens)): a latency floor, the bytes
      the mode sends over the achieved all-to-all bandwidth of that (mode, phase), and a per-token cost that does
      not scale with the hidden size (DeepEP's per-token layout / bookkeeping; fitted where the evidence carries it, the
      normal "ht" mode, else 0); with `a2a_overlap_p:<mode>:<phase>` = p != 1 (E3.2's normal mode, wave 31) the
      floor and the transfer part combine as ((s_floor floor)^p + (s_slope transfer)^p)^(1/p) (the floor partly
      hidden under the transfer; p = 1, the default, adds them);
    - overlapped (where `a2a_bw_share:<mode>:<phase>` is given; E3.2's low-latency law): ((s_floor * floor *
      a2a_floor_shape(T))^p + x^p)^(1/p), x = bytes / a2a_link_bw(nvlink_gbps, bw_share, link_exp): a latency
      floor (the kernel's launch, signalling and receive-flag polling, per GPU; with a small-batch excess
      `a2a_floor_excess` relaxing over `a2a_floor_excess_tokens` tokens, 0 where not given) that the transfer
      hides under until it outgrows it (the low-latency kernels post their sends asynchronously, p the overlap
      exponent), the transfer at a share of the GPU's datasheet NVLink bandwidth (a2a_link_gbps) raised to
      `a2a_link_exp` (1 where not given).

    Per-GPU readings: `a2a_s:<mode>:<phase>` scales a whole curve, `a2a_s_slope:<mode>` the transfer part (the
    normal mode, a bandwidth regime), `a2a_s_floor:<mode>:<phase>` the floor (the low-latency mode); 1 where a GPU
    has none. A GPU's own law constants (its platform's fit, E3.2's donor rule: the normal mode) replace the global
    ones where given. `n_group` / `topk_group`: the model's group-limited routing (a2a_bytes: the normal mode's
    destination ranks; 1, 1 where the router is not group-limited)."""
    T = np.asarray(tokens, dtype=float)
    ep = float(ep)
    if ep <= 1:
        return np.zeros_like(T)
    nbytes = a2a_bytes(T, hidden, topk, ep, mode, n_group, topk_group)
    t = np.zeros_like(T)
    s_slope = mc.get(f"a2a_s_slope:{mode}", gpu, 1.0)
    for phase in ("dispatch", "combine"):
        t0 = mc.get(f"a2a_floor_us:{mode}:{phase}", gpu) * 1e-6
        share = mc.get(f"a2a_bw_share:{mode}:{phase}", gpu, 0.0)
        if share > 0:
            p = mc.get(f"a2a_overlap_p:{mode}:{phase}", gpu, 1.0)
            f = mc.get(f"a2a_s_floor:{mode}:{phase}", gpu, 1.0) * t0 * a2a_floor_shape(
                T, mc.get(f"a2a_floor_excess:{mode}:{phase}", gpu, 0.0),
                mc.get(f"a2a_floor_excess_tokens:{mode}:{phase}", gpu, 1.0))
            x = nbytes / a2a_link_bw(a2a_link_gbps(gpu), share, mc.get(f"a2a_link_exp:{mode}:{phase}", gpu, 1.0))
            t = t + smax(f, x, p)
            continue
        bw = mc.get(f"a2a_bw_gbps:{mode}:{phase}", gpu) * 1e9
        c_tok = mc.get(f"a2a_tok_us:{mode}:{phase}", gpu, 0.0) * 1e-6
        s_curve = mc.get(f"a2a_s:{mode}:{phase}", gpu, 1.0)
        s_floor = mc.get(f"a2a_s_floor:{mode}:{phase}", gpu, 1.0)
        p = mc.get(f"a2a_overlap_p:{mode}:{phase}", gpu, 1.0)
        floor, x = s_floor * t0, s_slope * (nbytes / bw + c_tok * T)
        t = t + s_curve * (floor + x if p == 1.0 else smax(floor, x, p))
    return np.where(T > 0, t, 0.0)


def mla_decode_bytes(kv_len, kv_lora_rank, rope_dim, kv_bytes: float = 2.0):
    """Latent-KV bytes one decode request reads per layer: (kv_lora + rope) per cached token, all heads sharing it."""
    return np.asarray(kv_len, dtype=float) * (kv_lora_rank + rope_dim) * kv_bytes


# MLA (DeepSeek-style) attention module, as vLLM runs it (vllm/model_executor/layers/attention/mla_attention.py
# @0.24.0; AIConfigurator's collector/vllm/collect_mla_module.py times the whole DeepseekV2MLAAttention forward in
# one CUDA graph: the q/kv down projections, their norms, RoPE, the latent-cache write, then decode = the absorbed
# W_UK BMM, the latent attention kernel and the W_UV BMM, or prefill = kv_b, the per-head K/V assembly and
# flash attention; then o_proj). The named factors, each fitted on measured tables (E3.3, calibration/moe.yaml):
#   absorbed BMMs     per launch max(floor, (activations in + out + the heads' weights) / (BW eta_bmm)): the
#                     bmm writes T*H*kv_lora (W_UK) or reads it (W_UV), so it is bound by activation bytes, not
#                     by its weights (AIConfigurator's mla_bmm table: 1.3-1.4x the bytes at datasheet bandwidth)
#   latent read       KV bytes / (BW eta_kv par), par = min(1, requests * split_ctas / SMs): split-KV gives a
#                     request at most split_ctas CTAs, so a small batch cannot draw the whole HBM bandwidth
#   head tiles        the decode kernels compute MLA_HEAD_TILE query heads per CTA (MLA_TRITON_HEAD_TILE on the
#                     Triton backend, mla_decode_head_tile; heads padded to the tile: the score FLOPs count the
#                     padded rows) and each (request, head tile) CTA costs tile_us, run in waves over the SMs; every
#                     head tile streams the request's latent, so a tile beyond the first re-reads mla_kv_reread of
#                     it from DRAM (the rest hits L2: the tiles of one request run side by side), all of it on
#                     Triton MLA once the requests outnumber the CTAs in flight (mla_triton_tile_separation)
#   activation passes the per-head tensors the module copies around its kernels (decode: q = [W_UK q_nope, q_pe]
#                     and the latent output, kv_lora + rope per head; prefill: K = [k_nope, k_pe], V and the
#                     output, qk + v + v per head) in passes of HBM traffic
#   prefill attention causal FLOPs of q.k (qk dims) and p.v (v dims) at eta_fa of the bf16 peak
#   prefill token scale  not a term here: E3.3 reads it per GPU (steptime_lab.experiments.moe.
#                     mla_prefill_token_scale_reading), the rate of the prefill module's per-token part relative to
#                     the laws; the module tables of datasheet twins differ 1.8x there (B200 against B300 / GB200 /
#                     GB300); the product applies none (scale 1)
MLA_HEAD_TILE = 64  # DERIVED: query-head rows per CTA of FlashMLA / FlashInfer-MLA / FA3-MLA decode (q_len 1)
# DERIVED: query heads per CTA of vLLM's Triton MLA decode (vllm/attention/ops/triton_decode_attention.py,
# _decode_grouped_att_m_fwd: BLOCK_H = 16, grid (requests, cdiv(heads, 16), kv splits)), the backend vLLM runs on
# NVIDIA parts without a FlashMLA / FlashInfer-MLA / FA3-MLA kernel (sm < 90 and sm >= 110; AIConfigurator's L40S and
# RTX PRO 6000 MLA tables are TRITON_MLA rows)
MLA_TRITON_HEAD_TILE = 16
# the wave-16 decode constants (E3.3, issue 20): the per-(request, head) issue cost in SM cycles
# (mla_head_issue_time) and Triton MLA's split walk: its cost at its cap, its one-head multiplier, the cap in cache
# tokens (mla_triton_walk_time), and Triton's CTAs in flight per SM (mla_triton_tile_separation); a constants file
# without them reads 0 there (the law's earlier form)
MLA_DECODE_CONSTANTS_NEW = ("mla_head_cycles", "mla_triton_walk_us", "mla_triton_walk_h1", "mla_triton_walk_cap",
                            "mla_triton_tile_slots")
MLA_CONSTANTS = ("mla_bmm_eta_mem", "mla_bmm_floor_us", "mla_eta_kv", "mla_eta_c", "mla_split_ctas", "mla_tile_us",
                 "mla_decode_passes", "mla_batch_log_us", "mla_prefill_passes", "mla_prefill_token_passes",
                 "mla_eta_fa", "mla_kv_reread") + MLA_DECODE_CONSTANTS_NEW
# the walk's cap where mla_triton_walk_cap is not set (E3.3's folds fit 440-660 tokens from starts of 128 and 2048)
MLA_TRITON_WALK_CAP = 512.0


def mla_head_issue_time(requests, heads, gpu, mc: MoEConstants) -> np.ndarray:
    """The decode path's per-(request, head) issue cost (seconds): mla_head_cycles SM cycles per request-head (the
    absorbed BMMs', latent kernel's and copies' per-row work) over the GPU's SMs at its boost clock. E3.3: at 1024
    requests the module's time per added request-head is ~1,500-1,750 SM cycles on every HBM GPU (B200, B300,
    GB200, GB300, H100, H200: 5.2-6.2 ns, flat across their 3.35-8 TB/s), the bound the activation passes'
    bandwidth law misses on Blackwell; 0 where mla_head_cycles is not set."""
    n, H = np.broadcast_arrays(np.asarray(requests, dtype=float), np.asarray(heads, dtype=float))
    cycles = mc.get("mla_head_cycles", default=0.0)
    if not cycles:
        return np.zeros(n.shape)
    return n * H * cycles / (np.asarray(gpu.sms, dtype=float) * np.asarray(gpu.boost_mhz, dtype=float) * 1e6)


def mla_triton_walk_time(requests, latent_tokens, heads, head_tile, mc: MoEConstants) -> np.ndarray:
    """Triton MLA decode's serial split walk (seconds): each (request, head tile, split) CTA walks its split of the
    request's cache in BLOCK_N-token steps, so a small batch's kernel lasts as long as one CTA's walk. OBSERVED (E3.3,
    the L40S and RTX PRO 6000 TRITON_MLA generation tables): the one-request module time grows linearly with the
    cache from ~64 to ~512 tokens and stays flat from there to 32768 (batch 1-64, every head count), which the
    kernel's uncapped seq / 4 split loop does not explain; the law takes that shape, linear in the request's cache
    up to mla_triton_walk_cap tokens (fitted, MLA_TRITON_WALK_CAP if unset) where it costs mla_triton_walk_us,
    times mla_triton_walk_h1 for one query head (vLLM then runs the non-grouped kernel: one head per CTA, 4 warps,
    BLOCK_N 64). Only on the Triton backend (`head_tile` below MLA_HEAD_TILE); 0 elsewhere and where
    mla_triton_walk_us is unset."""
    n, N, H, ht = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (requests, latent_tokens, heads,
                                                                              head_tile)))
    cap = mc.get("mla_triton_walk_cap", default=MLA_TRITON_WALK_CAP)
    per = np.minimum(N / np.maximum(n, 1.0), cap) / cap
    w = mc.get("mla_triton_walk_us", default=0.0) * per * np.where(H == 1, mc.get("mla_triton_walk_h1", default=1.0),
                                                                    1.0)
    return np.where((ht < MLA_HEAD_TILE) & (n > 0), w * 1e-6, 0.0)


def mla_bmm_time(tokens, heads, nope_dim, kv_lora_rank, v_head_dim, gpu, mc: MoEConstants) -> np.ndarray:
    """The two absorbed BMMs of weight-absorbed decode (seconds): W_UK maps each head's q_nope (nope_dim) into the
    latent (kv_lora_rank), W_UV maps the latent output back to v_head_dim; one bf16 launch each of
    max(floor, bytes / (BW eta_bmm)), bytes = T H (d_in + d_out) activations plus H d_in d_out weights."""
    T, H = np.broadcast_arrays(np.asarray(tokens, dtype=float), np.asarray(heads, dtype=float))
    floor = mc.get("mla_bmm_floor_us") * 1e-6
    bw = gpu.mem_bw * mc.get("mla_bmm_eta_mem")
    t = np.zeros(T.shape)
    for d_in, d_out in ((nope_dim, kv_lora_rank), (kv_lora_rank, v_head_dim)):
        t = t + np.maximum(floor, 2.0 * (T * H * (d_in + d_out) + H * d_in * d_out) / bw)
    return np.where(T > 0, t, 0.0)


def mla_decode_head_tile(gpu) -> int:
    """Query heads per CTA of the MLA decode kernel vLLM runs on `gpu`: MLA_TRITON_HEAD_TILE on NVIDIA parts without
    a FlashMLA / FlashInfer-MLA / FA3-MLA kernel (sm < 90, sm >= 110: Triton MLA), else MLA_HEAD_TILE."""
    sm = getattr(gpu, "sm_version", None)
    if str(getattr(gpu, "vendor", "NVIDIA")).upper() == "NVIDIA" and sm is not None and (sm < 90 or sm >= 110):
        return MLA_TRITON_HEAD_TILE
    return MLA_HEAD_TILE


# DERIVED: parts whose L2 is two partitions, each caching for the SMs of its own half (NVIDIA's A100 and H100
# whitepapers: "each L2 partition localizes and caches data for memory accesses from SMs in the GPCs directly
# connected to the partition"; B200 / B300 / GB200 / GB300: two dies, an L2 each): sm 80, 90, 100, 103. Data every
# SM reads (a module's weights) is held in both halves, so half the L2 holds it.
MLA_L2_TWO_PARTITION_SM = (80, 90, 100, 103)


def replay_l2_bytes(gpu) -> float:
    """Bytes of data read by every SM that the L2 can hold from one replay of a graph to the next: the datasheet L2
    over its partitions (2 on MLA_L2_TWO_PARTITION_SM parts, else 1; AD102 / GB202 have one L2)."""
    sm = getattr(gpu, "sm_version", None)
    return float(gpu.l2_mb) * 1024 * 1024 / (2.0 if sm in MLA_L2_TWO_PARTITION_SM else 1.0)


# The share of a replayed module's weights the L2 still holds at the next replay falls with how much of the cache they
# fill: 1 - (W / C)^MLA_REPLAY_HIT_EXP (C = replay_l2_bytes), 0 from W >= C. A cyclic stream that fits a hashed,
# set-associative cache still loses the lines of the sets it overfills (more of them the fuller the cache), and the
# module's activations and latent cache pass through the same L2. E3.3 (issue 20, wave 25): with the full credit up
# to C, L40S's 8-16-head rows (weights 0.5-0.8 of its 96 MB) ran 15-29% slower than predicted at small caches and RTX
# PRO 6000's 32-head rows (0.9 of 128 MB) 10-17%, against -0.05 above C. ASSUMED form (not derived: the L2's
# associativity and hash are not published), chosen after E3.3's held-out scores had been seen, exponent 2 against
# 1 (the only two tried); with it the fitted credit sits at its bound 1 in every fold.
MLA_REPLAY_HIT_EXP = 2.0


def mla_replay_weight_credit(weight_bytes, l2_bytes, mem_bw, credit) -> np.ndarray:
    """The DRAM time (seconds) a module's weights do not cost when one module is replayed back to back in a CUDA
    graph (AIConfigurator's protocol, E3.3) and its weights fit the L2 (`l2_bytes`, replay_l2_bytes): `credit` of
    their stream at datasheet bandwidth, 0 when they do not fit (a cyclic stream larger than the cache misses it
    whole), times the share still held, 1 - (W / l2_bytes)^MLA_REPLAY_HIT_EXP (wave 25). E3.3 (issue 20 wave 16): L40S's 16 -> 32-head step (73 -> 116 MB of weights over its 96 MB L2) adds
    114 us at batch 1 against ~50 us of new weights, RTX PRO 6000's comes at 32 -> 64 heads (116 -> 202 MB over
    128 MB), on the decode and the prefill path. A property of the replayed single-module benchmark, not of a
    served step (the model's layers' weights cycle through the L2 between one layer's calls): the product's step
    model does not apply it."""
    W = np.asarray(weight_bytes, dtype=float)
    C = np.asarray(l2_bytes, dtype=float)
    if np.any(C <= 0):
        raise ValueError(f"mla_replay_weight_credit: l2_bytes must be positive, got {l2_bytes}")
    held = np.clip(1.0 - (W / C) ** MLA_REPLAY_HIT_EXP, 0.0, 1.0)
    return float(credit) * held * W / np.asarray(mem_bw, dtype=float)


def mla_triton_tile_separation(requests, head_tile, gpu, mc: MoEConstants) -> np.ndarray:
    """The fraction of a request's head tiles that run apart from its first on Triton MLA decode, whose grid is
    (requests, head tiles, KV splits) with the requests fastest (vllm/v1/attention/ops/triton_decode_attention.py,
    _decode_grouped_att_m_fwd): a request's next head tile launches `requests` CTAs after its first, so its tiles
    run side by side (sharing the latent through L2) while the requests fit in the CTAs in flight,
    mla_triton_tile_slots per SM, and apart beyond that: 1 - slots / requests, clipped to [0, 1]. A separated tile
    re-reads the whole latent from DRAM. 0 on the other backends and where mla_triton_tile_slots is unset (E3.3,
    issue 20 wave 16: the L40S / RTX PRO 6000 128-head rows at 256-1024 requests and >= 512 tokens ran 1.7-2.5x
    the predicted time with the shared partial re-read, those at <= 64 requests within ~10%)."""
    n, ht = np.broadcast_arrays(np.asarray(requests, dtype=float), np.asarray(head_tile, dtype=float))
    slots = mc.get("mla_triton_tile_slots", default=0.0)
    if not slots:
        return np.zeros(n.shape)
    sep = np.clip(1.0 - slots * np.asarray(gpu.sms, dtype=float) / np.maximum(n, 1.0), 0.0, 1.0)
    return np.where(ht < MLA_HEAD_TILE, sep, 0.0)


def mla_decode_latent_time(requests, latent_tokens, heads, kv_lora_rank, rope_dim, gpu, mc: MoEConstants, *,
                           kv_bytes: float = 2.0, head_tile=None) -> dict:
    """Weight-absorbed MLA decode attention of `requests` decode requests over `latent_tokens` latent rows in all
    (each request's cache plus its new token), seconds: the latent read for all heads at the split-KV bandwidth,
    each head tile beyond the first re-reading mla_kv_reread of it (max with the scores' FLOPs over the heads
    padded to the kernel's tile), plus the waves of (request, head tile) CTAs, the activation passes over each
    head's latent query and output at least the request-heads' issue cost (mla_head_issue_time: a roofline per
    request-head), and on the Triton backend its split walk (mla_triton_walk_time); its head tiles run apart at
    large batch (mla_triton_tile_separation). `head_tile`: the kernel's heads per CTA (mla_decode_head_tile(gpu) if
    None; an array broadcasts)."""
    n, N, H = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (requests, latent_tokens, heads)))
    ht = np.asarray(mla_decode_head_tile(gpu) if head_tile is None else head_tile, dtype=float)
    lat = float(kv_lora_rank + rope_dim)
    sms = np.asarray(gpu.sms, dtype=float)
    par = np.minimum(1.0, n * mc.get("mla_split_ctas") / sms)
    tiles = np.ceil(H / ht)
    rr = mc.get("mla_kv_reread", default=0.0)
    sep = mla_triton_tile_separation(n, ht, gpu, mc)
    # a tile beyond the first re-reads mla_kv_reread of the latent beside the first, all of it when run apart
    nbytes = mla_decode_bytes(N, kv_lora_rank, rope_dim, kv_bytes) * (1.0 + (rr + (1.0 - rr) * sep) * (tiles - 1.0))
    t_m = nbytes / (gpu.mem_bw * mc.get("mla_eta_kv") * np.maximum(par, 1e-9))
    t_c = 2.0 * N * tiles * ht * (lat + kv_lora_rank) / (gpu.peak_flops * mc.get("mla_eta_c"))
    t_tiles = (np.ceil(n * tiles / sms) * mc.get("mla_tile_us")
               + np.log2(np.maximum(n, 1.0)) * mc.get("mla_batch_log_us")) * 1e-6
    t_pass = mc.get("mla_decode_passes") * n * H * lat * 2.0 / gpu.mem_bw
    t_issue = mla_head_issue_time(n, H, gpu, mc)
    t_act = np.maximum(t_pass, t_issue)
    t_walk = mla_triton_walk_time(n, N, H, ht, mc)
    t = np.where(n > 0, np.maximum(t_c, t_m) + t_tiles + t_act + t_walk, 0.0)
    return {"t": t, "t_compute": t_c, "t_memory": t_m, "t_tiles": t_tiles, "t_act": t_act, "t_issue": t_issue,
            "t_walk": t_walk, "compute_bound": t_c >= t_m, "bytes": nbytes}


def mla_prefill_attention_time(new_tokens, kv_len, heads, qk_dim, v_dim, gpu, mc: MoEConstants) -> np.ndarray:
    """Non-absorbed MLA prefill attention of chunks of `new_tokens` over `kv_len` cached tokens each (seconds, per
    chunk): causal q.k (qk_dim) and p.v (v_dim) FLOPs over the chunk and its context at eta_fa of the bf16 peak."""
    s, c, H = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (new_tokens, kv_len, heads)))
    flops = 2.0 * H * (qk_dim + v_dim) * (s * c + s * (s + 1.0) / 2.0)
    return np.where(s > 0, flops / (gpu.peak_flops * mc.get("mla_eta_fa")), 0.0)


def mla_prefill_copy_time(rows, heads, qk_dim, v_dim, gpu, mc: MoEConstants, *, tokens=None,
                          hidden: int = 0) -> np.ndarray:
    """The per-head K / V assembly and output copies of MLA prefill over `rows` up-projected latent rows (seconds):
    mla_prefill_passes passes over qk + v + v bf16 values per head per row; plus, for the chunk's `tokens` new
    tokens, mla_prefill_token_passes passes over their bf16 hidden state (the per-token cost the module's prefill
    pays beyond its projection GEMMs' law, E3.3: not tied to one kernel)."""
    R, H = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(heads, dtype=float))
    t = mc.get("mla_prefill_passes") * R * H * (qk_dim + 2.0 * v_dim) * 2.0 / gpu.mem_bw
    if tokens is not None:
        t = t + mc.get("mla_prefill_token_passes") * np.asarray(tokens, dtype=float) * hidden * 2.0 / gpu.mem_bw
    return t
