"""fp8 (W8A8) projection GEMMs: the bf16 term's factors at the datasheet fp8 peak, with the
achieved fp8 fractions relative to bf16 (E1.27).

    t_fp8 = smax(t_compute(P_fp8) / r_c, t_memory(1-byte operands) / r_m, p) + t_floor + dt_floor + t_quant

t_quant: the activation quantisation the engine's fp8 linear runs as separate kernels before the
GEMM (engines.yaml precision.fp8_act_quant_passes): a dynamic per-tensor scale is an amax reduction
pass over the bf16 input (2 m k bytes) and then the quantise pass (reads 2 m k, writes m k); a fused
per-token quantise is that last pass alone. Each pass is a light kernel (terms/light.py, the
elementwise `act` kernel's floor and achieved bandwidth): a per-call fixed cost at small m that the
GEMM's own floor does not hold (the 7-12 us small-m floor of TensorRT-LLM's fp8 table, E1.27).

amax_row_time: vLLM's dynamic per-tensor amax reduction launches one thread block per token row and each
block folds its row maximum into the ONE global scale with an atomic max (vllm-project/vllm
csrc/quantization/w8a8/fp8/common.cu as stored, commit 096d3dc9: segmented_max_reduction_strided,
grid(num_tokens), atomicMaxFloat(scale, ...) by thread 0), so the pass holds m same-address atomics that
serialise at one L2 location: a cost per token row, not per byte, that the light kernel's bandwidth law
does not carry. Priced m x amax_row_ns when the factor set carries `amax_row_ns` and the call runs the
reduction pass (passes >= 2); FITTED by E1.27 with the other three factors on the donor GPUs (issue 19
item 5, wave 28: 3.7-5.9 ns a row across the folds, against 5-11 ns (mostly 6-8) above bf16's read off the
tables' n -> 0 intercept, which also holds the passes' bytes).
A later vLLM (csrc/libtorch_stable/.../fp8/common.cu, commit db702fc8) caps that grid at 8 blocks per SM
(absmax_reduction_flat); which of the two vLLM 0.24.0 ran is not pinned by source, the tables' per-row
intercept (independent of k at k <= 2048 and of the GPU's bandwidth) is what the first one predicts.
Correction (wave 28, fp8g2, read from source): the collector's call does NOT run that CUDA kernel. It builds
its layers under a bare VllmConfig(), whose -O2 / Inductor defaults set custom_ops 'none', so vLLM's QuantFP8
CustomOp runs forward_native EAGERLY: abs, a full max, float32 casts, the scaled multiply, clamp, the fp8 cast,
about 35 bytes per element in separate kernels (engines.yaml precision.fp8_act_quant_row_cost cites the
files). amax_row_ns is the fitted price of that eager decomposition above the two light passes, a fact of the
tables' call. Where it is paid is an ENGINE FACT (engines.yaml precision.fp8_act_quant_row_cost for the
per-operator tables' call, fp8_act_quant_row_cost_served for a served step; Engine.fp8_act_quant_row_cost
reads both, act_quant_row_cost here): a served vLLM V1 step compiles the same forward_native with Inductor
into fused kernels (no eager decomposition, no per-row atomics), so its served value is 0 (DESIGN, the
served quantise). predict_ops without an engine prices the tables' call (the row cost kept); with an
engine, and predict_step always, the served call.

r_c, r_m, dt_floor: the engine's constant ({eta_c_rel, eta_mem_rel, floor_add_us}; engines.yaml
precision.fp8_gemm names it: `gemm_fp8_rel` for vLLM, `gemm_fp8_rel_trtllm`, `gemm_fp8_rel_sglang`),
FITTED by E1.27 on that engine's own fp8 tables of other GPUs (same architecture and SM-fill
paradigm where there are some): precision is a property of the engine's kernels. Without an
engine, vLLM's; without the constant, the pure datasheet form (1, 1, 0). predict_ops and
predict_step both price fp8 GEMMs here (one code path).

The memory factor comes in one of two forms, which the constant's keys name:
  eta_mem_rel   relative to the bf16 term: r_m multiplies the GPU's own achieved-bandwidth law;
  eta_mem_fp8   absolute: the fp8 kernel's achieved fraction of DRAM peak at saturation, the bf16
                law's ramp in bytes kept, i.e. r_m = eta_mem_fp8 / eta_mem_max of the GPU (the bf16
                fold's saturation level, a per-GPU deploy reading).
The absolute form is TensorRT-LLM's (E1.27, issue 19 item 5): H100 and H200 (the same GH100 die)
stream TRT-LLM's fp8 weights at nearly the same fraction of their DRAM peaks while their bf16 folds
saturate at 0.919 and 0.866, so a factor relative to the bf16 law did not transfer between them
(each Hopper's is fitted on the other's table) and left a weight-size bias (H100: +4% at 0-8 MB
to -9% at 300+ MB).

Launch (fp8_launch): the fp8 kernel library's own tile dispatch, where its source was read, in place of
the bf16 term's heuristic (the best of a tile ladder x split-K 1-8 x stream-K, gemm.sm_fill). vLLM's
CUTLASS scaled-mm picks one tile per m bucket and launches it once, with no split-K and no stream-K
(vllm-project/vllm csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh, as stored,
commit c30af866: PersistentScheduler; scaled_mm_sm100_fp8_dispatch.cuh, commit 487e7b0e: the default
scheduler; swap-AB configs at small m put the small tile side on m). The heuristic's split-K rescue of
few-tile cells (m 129-1024 on a 1-4k n) made those cells too fast (H100 -9 to -14% median) and the
fitted compute factor too low for the rest (E1.27, issue 19 item 5). The dispatch belongs to the
fitted factor set (FP8_LAUNCH: the factors were fitted with it); vLLM's sm89 and sm120 dispatches were not
read and keep the heuristic, as does TensorRT-LLM's factor set.

Cluster (issue 19 item 5, wave 30 `fp8b`): each dispatch config also fixes a ClusterShape, and CUTLASS's
persistent scheduler launches whole clusters, so the tile rows are rounded up to the cluster's extent along m
and the empty rows of a partial cluster are launched and computed (the third value of a launch, cluster_m;
gemm._forced_fill). sm90 (scaled_mm_sm90_fp8_dispatch.cuh, commit 68f442eb): m > 64 ClusterShape 2x1x1
(along m); swap-AB (m on the swapped N) M16_N1280 1x2x1, M64_N1280 1x4x1, the n > 1280 configs 1x1x1. sm100
(commit 487e7b0e): m > 64 the 2-SM pair covers the whole TileShape M, two per-SM tiles (cluster_m 2); the
swap-AB clusters (4x1) lie along n (not priced: n is a whole number of them in the tables). The tables show
it: H100 / H200 m 257 takes 1.15 / 1.27 times as long as m 512 (median over n, k), so m 256 j + 1 costs at
least a whole pair of tile rows (the excess beyond the pair is not explained: DESIGN, wave 30 `fp8b`).

SGLang (issue 19 item 5, wave 31 `sglf8`): the collector times sgl-kernel's fp8_scaled_mm (per-token scales,
CUTLASS, no split-K, no stream-K), whose dispatch is read per architecture: sm90 from sgl-kernel
cutlass_extensions/gemm/fp8_gemm_sm90_dispatch.cuh (sgl-project/sglang PR 25532, merged 2026-05-20, stored commit
812a916a: vLLM's sm90 configs and clusters less the 256-row tile), sm100 / sm103 and sm89 from
sgl-kernel/csrc/gemm/fp8_gemm_kernel.cu (stored commit 04ec0bc2). That SGLang 0.5.14's sgl-kernel carries PR 25532
is not pinned by source; the tables agree with it (SGLang's H100 / H200 fp8 time, less its priced quantise pass, is a
near-constant 0.72-0.90 (H100) / 0.75-0.88 above m 32 (H200) of vLLM's measured call at every m, the m = 256 j + 1
steps included, where the older 64x64 dispatch at m 129-256 would differ).
sm120 keeps the heuristic: the stored sm120 dispatch (256x128 at m > 128, cluster 1x1) is refuted by the RTX PRO
6000 table (3,120 of its 18,615 LLM-shaped cells, m 129-768, run faster than that tile count at the per-SM
datasheet fp8 peak allows), so what SGLang ran there is not that kernel.

SGLang's kernel factors (issue 19 item 5, wave 36 `sglf8`; DESIGN): two more factors of SGLang's fitted set, each
FITTED by E1.27 on the donor GPUs with the other three (experiments/precision.py KERNEL_FACTORS):
  cta_stream_rel  sgl-kernel's sm100 / sm103 configs at m <= 64 (TileShape 64x64x128, cluster 1x4 / 1x1, no
                  swap-AB) are 1-SM kernels whose CTA streams its 64-wide weight column alone; one CTA pulls its
                  k x 64 bytes at a rate of its own (B200, m 1, n 1,024 (16 CTAs), k 16,384-65,536: 13-15 us per MB
                  and CTA, about 5.5 times the bf16 fold's cta_stream_us_mb), a limit CONCURRENT with the device's
                  bandwidth: on those cells (`own_stream`, FP8_OWN_STREAM) the memory branch is
                  smax(t_memory / r_m, t_cta x cta_stream_rel) in place of t_memory / r_m + t_cta.
  duty_k_add      SGLang's kernels' per-tile fixed cost beyond the bf16 term's duty_k, in elements of k: the duty
                  becomes 1 / (1 + (duty_k + duty_k_add) / k_cta) (its tables run shallow k slower and deep k
                  faster than the bf16 duty predicts, m 1k-4k: -10% at k 1,024, +8% at k 6-16k on Blackwell).
A factor set without them prices as before (every other engine; shipped constants until re-settled).

Padded activation rows (issue 19 item 5, wave 36 `hopcl`; DESIGN): the sm90 CUTLASS kernel vLLM and SGLang share
loads each CTA's activation tile with TMA, tile_m rows by the CTA's k slice; the rows of a launched tile beyond m (a
partial last tile row and the empty tile rows of a partial cluster, `oob_bytes`) are out of bounds, and the tables
show them cost time that real rows do not: at n = k = 8,192 the time FALLS as m fills a 128-row tile (H100 m 129
47.6 us, 192 41.2, 224 37.5, 256 37.7), as reported of TMA's boundary handling elsewhere (deepseek-ai/DeepGEMM issue
35, a reply there: m 132 loads faster than m 68 "due to boundary check", padding the input is the cure). Per 128
padded rows and 128 k bytes of a tile column the excess is 2.3-2.6 ns (H100) / 2.3-3.5 ns (H200) once the grid fills
the device, and it fades when it does not (n <= 4,096 at m 129: 64 CTAs or fewer), i.e. a cost of the whole device's
padded bytes, not of one CTA's: t_oob = oob_bytes / oob_rate_tbs x min(1, grid / SMs), added to the kernel's time.
`oob_rate_tbs` is FITTED by E1.27 with the other factors on the donor GPUs (for a held-out Hopper the other Hopper
alone), in absolute TB/s: the two Hoppers share the die and clocks, and the per-row cost does not follow their DRAM
bandwidths. Priced for the sets whose sm90 dispatch was read (FP8_OOB_ROWS: vLLM's and SGLang's); the swap-AB
configs (m <= 64) pad the activation along their swapped N in the same way (tile 16 / 64 and its cluster).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.terms import gemm, light

IDENTITY = MappingProxyType({"eta_c_rel": 1.0, "eta_mem_rel": 1.0, "floor_add_us": 0.0})


def _vllm_cutlass_sm90(m, n, k):
    """(tile_m, tile_n, cluster_m) per cell of vLLM's sm90 fp8 CUTLASS dispatch (module note; swap-AB at m <= 64).
    cluster_m: the ClusterShape's extent along m, to which the tile rows are rounded up (module note, cluster)."""
    tm = np.where(m <= 16, 16.0, np.where(m <= 64, np.where(n <= 1280, 16.0, 64.0),
                  np.where(m <= 128, 64.0, np.where((m >= 8192) & (k >= 6144), 256.0, 128.0))))
    tn = np.where(m <= 64, 64.0, 128.0)
    # ClusterShape: m > 64 2x1x1 (along m); swap-AB (m along the swapped N): M16_N1280 1x2x1, M64_N1280 1x4x1,
    # the n > 1280 configs 1x1x1
    cm = np.where(m > 64, 2.0, np.where(n <= 1280, np.where(m <= 16, 2.0, 4.0), 1.0))
    return tm, tn, cm


def _vllm_cutlass_sm100(m, n, k):
    """(tile_m, tile_n, cluster_m) per cell of vLLM's sm100-family fp8 CUTLASS dispatch (module note; swap-AB at
    m <= 64 except m = 64 with k < 4096; cluster_m as _vllm_cutlass_sm90, in per-SM tiles)."""
    # m > 64: TileShape 128x128 (cluster 2x1) / 256x128 (cluster 2x2) with KernelScheduleAuto; an even
    # cluster M and a TileShape M of 128 or 256 build the 2-SM UMMA (CUTLASS sm100_make_trivial_tiled_mma),
    # so each SM of the pair computes half the M mode: 64x128 / 128x128 per SM. The swap-AB configs
    # (m <= 64) are 2-SM too but keep the whole TileShape: chosen after seeing E1.27's scores (DESIGN,
    # wave 29 `fp8c`; halving them as well scored worse)
    tm = np.where(m <= 16, 32.0, np.where(m <= 64, 64.0, np.where(m <= 256, 64.0, 128.0)))
    tn = np.where((m == 64) & (k < 4096), 64.0, 128.0)
    # cluster_m: the 2-SM pair (cluster M 2) covers the whole TileShape M, two per-SM tiles; the swap-AB
    # clusters (4x1) lie along n, m = 64 at k < 4096 is 1x1
    cm = np.where(m > 64, 2.0, 1.0)
    return tm, tn, cm


def _sgl_cutlass_sm90(m, n, k):
    """(tile_m, tile_n, cluster_m) per cell of SGLang's sm90 fp8 scaled-mm (module note, SGLang): sgl-kernel's
    sm90 dispatch since sgl-project/sglang PR 25532 (cutlass_extensions/gemm/fp8_gemm_sm90_dispatch.cuh) carries
    vLLM's sm90 configs (swap-AB 64x16x256 / 64x64x256 at m <= 64 with the same clusters, m 65-128 64x128 and
    m > 128 128x128, ClusterShape 2x1x1) without vLLM's 256-row tile at m >= 8192, k >= 6144."""
    tm, tn, cm = _vllm_cutlass_sm90(m, n, k)
    return np.where(tm == 256.0, 128.0, tm), tn, cm


def _sgl_one_sm_small(m, n, k):
    """Cells sgl-kernel's sm100-family fp8 scaled-mm runs with its 1-SM small-m configs (m <= 64: TileShape
    64x64x128, cluster 1x4 / 1x1; fp8_gemm_kernel.cu sm100_fp8_dispatch_bias): their CTAs stream the weight at a rate
    of their own (module note, SGLang's kernel factors)."""
    return np.asarray(m) <= 64


def _sgl_cutlass_sm100(m, n, k):
    """(tile_m, tile_n, cluster_m) per cell of SGLang's sm100-family fp8 scaled-mm (sgl-kernel fp8_gemm_kernel.cu
    sm100_fp8_dispatch_bias, buckets by next_pow_2(m); module note, SGLang): m <= 64 TileShape 64x64x128 without
    swap-AB (cluster 1x4 along n at m <= 16, 1x1 above; a 1-SM MMA, cluster M 1); m > 64 vLLM's sm100 configs
    (128x128 cluster 2x1 to m 256, 256x128 cluster 2x2 above: the 2-SM UMMA, per-SM tiles as _vllm_cutlass_sm100)."""
    tm, tn, cm = _vllm_cutlass_sm100(m, n, k)
    small = _sgl_one_sm_small(m, n, k)
    return np.where(small, 64.0, tm), np.where(small, 64.0, tn), np.where(small, 1.0, cm)


def _sgl_cutlass_sm89(m, n, k):
    """(tile_m, tile_n) per cell of SGLang's sm89 fp8 scaled-mm (sgl-kernel fp8_gemm_kernel.cu
    sm89_fp8_dispatch_shape: CUTLASS 2.x GemmShape by m and n buckets, no split-K; module note, SGLang)."""
    m, n = np.asarray(m, dtype=float), np.asarray(n, dtype=float)
    n8, n16 = n <= 8192, n <= 16384
    tm = np.select([m <= 1, m <= 16, m <= 64, m <= 128, m <= 256],
                   [np.where(n8, 16.0, 32.0), np.where(n8, 16.0, np.where(n16, 32.0, 16.0)),
                    np.where(n16, 32.0, 16.0), np.where(n16, 64.0, 32.0),
                    np.where(n8, 128.0, np.where(n16, 64.0, 128.0))], 128.0)
    tn = np.select([m <= 128, m <= 256], [np.full_like(m * n, 64.0), np.where(n8, 64.0, np.where(n16, 128.0, 64.0))],
                   128.0)
    return tm, tn


# the kernel dispatch each fitted fp8 factor set was fitted with: {constant: {sm_version: (m, n, k) -> tiles}}
FP8_LAUNCH = MappingProxyType({
    "gemm_fp8_rel": MappingProxyType({90: _vllm_cutlass_sm90, 100: _vllm_cutlass_sm100, 103: _vllm_cutlass_sm100}),
    "gemm_fp8_rel_sglang": MappingProxyType({89: _sgl_cutlass_sm89, 90: _sgl_cutlass_sm90, 100: _sgl_cutlass_sm100,
                                             103: _sgl_cutlass_sm100}),
})


# the cells of a fitted fp8 factor set's dispatch whose CTAs stream the weight at the kernel's own rate
# (`cta_stream_rel`, module note): {constant: {sm_version: (m, n, k) -> bool per cell}}
FP8_OWN_STREAM = MappingProxyType({
    "gemm_fp8_rel_sglang": MappingProxyType({100: _sgl_one_sm_small, 103: _sgl_one_sm_small}),
})


# the fitted fp8 factor sets whose dispatch's padded activation rows are priced (`oob_rate_tbs`, module note), by
# sm_version; the rows come from the set's own dispatch (FP8_LAUNCH)
FP8_OOB_ROWS = MappingProxyType({"gemm_fp8_rel": (90,), "gemm_fp8_rel_sglang": (90,)})


def fp8_launch(gpu, engine=None):
    """The fp8 kernel dispatch of `engine`'s fp8 factor set on `gpu` (a gemm_time `launch`), or None: the
    bf16 heuristic (module note)."""
    table = FP8_LAUNCH.get(fp8_const(engine))
    if table is None:
        return None
    sm = getattr(gpu, "sm_version", None)
    if sm is None:
        raise ValueError(f"gpu {getattr(gpu, 'key', gpu)!r} has no sm_version: cannot pick its fp8 dispatch")
    return table.get(int(sm))


def own_stream_cells(m, n, k, gpu, engine=None):
    """Per cell, whether `engine`'s fp8 dispatch runs it with a kernel whose CTAs stream the weight at the kernel's
    own rate (FP8_OWN_STREAM; the factor `cta_stream_rel` prices them), or None where no cell is (module note)."""
    fn = FP8_OWN_STREAM.get(fp8_const(engine), {}).get(getattr(gpu, "sm_version", None))
    if fn is None:
        return None
    m, n, k = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float))
    return np.asarray(fn(m, n, k), dtype=bool)


def oob_bytes(m, n, k, gpu, engine=None):
    """Per cell, the bytes of activation rows `engine`'s fp8 dispatch launches beyond m (the tile rows rounded up to
    whole tiles and clusters along m), loaded once per tile column: (launched rows - m) x k x ceil(n / tile_n)
    (FP8_OOB_ROWS; the factor `oob_rate_tbs` prices them), or None where the set prices none (module note)."""
    sm = getattr(gpu, "sm_version", None)
    if sm is None or int(sm) not in FP8_OOB_ROWS.get(fp8_const(engine), ()):
        return None
    fn = fp8_launch(gpu, engine)
    m, n, k = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float))
    tm, tn, cm = fn(m, n, k)
    return (gemm.tile_rows(m, tm, cm) * tm - m) * k * np.ceil(n / tn)


def fp8_const(engine=None) -> str:
    """The constant with `engine`'s fp8 GEMM factors (an Engine, a profile name, or None: vLLM's)."""
    if engine is None:
        from steptime.specs.engines import FP8_GEMM_DEFAULT

        return FP8_GEMM_DEFAULT
    if isinstance(engine, str):
        from steptime.specs.engines import get_engine

        engine = get_engine(engine)
    return engine.fp8_gemm_const()


def act_quant_passes(engine=None, served: bool = False) -> int:
    """Activation-quantise passes before each fp8 GEMM of `engine` (an Engine, a profile name, or None:
    vLLM's, as fp8_const): as its per-operator tables time the linear, or with `served` as the engine
    serves an fp8 checkpoint (engines.yaml precision.fp8_act_quant_passes_served; a step prices that)."""
    from steptime.specs.engines import get_engine

    if engine is None:
        engine = "vllm"
    if isinstance(engine, str):
        engine = get_engine(engine)
    return engine.fp8_act_quant_passes(served=served)


def act_quant_time(m, k, gpu, constants: Constants | None = None, passes: int = 2) -> np.ndarray:
    """Seconds: quantising an m x k bf16 activation to fp8 in `passes` separate kernels (module note)."""
    m = np.asarray(m, dtype=float)
    t = np.zeros_like(m * float(k) if np.ndim(k) == 0 else m * np.asarray(k, dtype=float))
    if passes <= 0:
        return t
    mk = m * np.asarray(k, dtype=float)
    t = t + light.light_time("act", 3.0 * mk, gpu, constants)  # the quantise pass: read bf16, write fp8
    for _ in range(int(passes) - 1):  # the reduction pass(es) of a dynamic scale: read bf16
        t = t + light.light_time("act", 2.0 * mk, gpu, constants)
    return t


def act_quant_row_cost(engine=None, served: bool = False) -> bool:
    """Whether `engine`'s activation quantise pays the per-token-row cost (amax_row_time): as its per-operator
    tables time the linear, or with `served` as it serves an fp8 checkpoint (engines.yaml
    precision.fp8_act_quant_row_cost / _served; module note). `engine`: an Engine, a profile name, or None
    (vLLM's, as act_quant_passes)."""
    from steptime.specs.engines import get_engine

    return get_engine("vllm" if engine is None else engine).fp8_act_quant_row_cost(served=served)


def amax_row_time(m, rel: dict, passes: int, row_cost: bool = True) -> np.ndarray:
    """Seconds: the per-token-row serial cost of a dynamic per-tensor amax reduction (module note):
    m x rel['amax_row_ns'] when the call runs that reduction (passes >= 2) in the kernel that pays it
    (`row_cost`: the engine fact act_quant_row_cost), else 0."""
    m = np.asarray(m, dtype=float)
    ns = float(rel.get("amax_row_ns", 0.0))
    if not (ns >= 0 and np.isfinite(ns)):
        raise ValueError(f"amax_row_ns must be a non-negative time per token row (ns), got {ns!r}")
    if not row_cost or int(passes) < 2 or ns == 0.0:
        return np.zeros_like(m)
    return m * ns * 1e-9


def quant_time(m, k, gpu, constants: Constants | None, rel: dict, engine=None, served: bool = False) -> np.ndarray:
    """Seconds: `engine`'s activation quantise of an m x k bf16 input before an fp8 GEMM, as its tables time the
    linear or (`served`) as it serves an fp8 checkpoint: the passes (act_quant_time) plus the per-token-row cost of
    a dynamic amax reduction (amax_row_time)."""
    passes = act_quant_passes(engine, served=served)
    return (act_quant_time(m, k, gpu, constants, passes)
            + amax_row_time(m, rel, passes, act_quant_row_cost(engine, served)))


def fp8_rel(gpu, constants: Constants | None = None, engine=None) -> dict:
    constants = constants or Constants.default()
    try:
        v = dict(constants.get(fp8_const(engine), gpu))
    except KeyError:
        return dict(IDENTITY)
    base = {k: x for k, x in IDENTITY.items() if not ("eta_mem_fp8" in v and k == "eta_mem_rel")}
    return {**base, **v}


def mem_rel(rel: dict, params: dict) -> float:
    """The factor on the bf16 term's achieved bandwidth: `eta_mem_rel` as given, or the absolute
    `eta_mem_fp8` over the GPU's `eta_mem_max` (`params`: gemm.resolve's dict; module note)."""
    if "eta_mem_fp8" in rel:
        if "eta_mem_rel" in rel:
            raise ValueError("fp8 factors carry both eta_mem_rel and eta_mem_fp8: give one memory form")
        e = float(rel["eta_mem_fp8"])
        if not (e > 0 and np.isfinite(e)):
            raise ValueError(f"eta_mem_fp8 must be a positive fraction of DRAM peak, got {e!r}")
        return e / float(params["eta_mem_max"])
    return float(rel["eta_mem_rel"])


def _kernel_factor(rel: dict, key: str, lo: float) -> float | None:
    """`rel[key]` checked finite and above `lo`, or None when the factor set has no such factor."""
    if key not in rel:
        return None
    v = float(rel[key])
    if not (np.isfinite(v) and v > lo):
        raise ValueError(f"fp8 factor {key} must be a finite number above {lo}, got {rel[key]!r}")
    return v


def apply_rel(g: dict, gpu, constants: Constants | None, rel: dict, params: dict | None = None) -> np.ndarray:
    """Seconds: a gemm_time(dtype='fp8') dict re-combined with the relative fp8 efficiencies (and the kernel
    factors `duty_k_add` / `cta_stream_rel` where the factor set has them; module note)."""
    p = params if params is not None else gemm.resolve(gpu, constants)
    t_c = g["t_compute"]
    dk_add = _kernel_factor(rel, "duty_k_add", -float(p["duty_k"]))
    if dk_add is not None:  # the kernel's per-tile fixed cost beyond the bf16 duty_k, in elements of k
        dk = float(p["duty_k"])
        t_c = t_c * (1.0 + (dk + dk_add) / g["k_cta"]) / (1.0 + dk / g["k_cta"])
    t_bw = g["t_memory"] / mem_rel(rel, p)  # the bandwidth term at the fp8 memory factor (read once)
    t_mem = t_bw + g["t_cta"]  # plus the per-CTA stream (fp8 bytes)
    own = g.get("own_stream")
    cta_rel = _kernel_factor(rel, "cta_stream_rel", 0.0)
    if cta_rel is not None and own is not None:  # the kernel's own per-CTA stream: a concurrent limit
        conc = gemm.smax(t_bw, g["t_cta"] * cta_rel, float(p["overlap_p"]))
        t_mem = np.where(own, conc, t_mem)
    t = gemm.smax(t_c / rel["eta_c_rel"], t_mem, float(p["overlap_p"]))
    oob_rate = _kernel_factor(rel, "oob_rate_tbs", 0.0)
    if oob_rate is not None and g.get("oob_bytes") is not None:  # the padded activation rows' serial cost
        t = t + oob_time(g, gpu, oob_rate)
    return t + g["t_floor"] + rel["floor_add_us"] * 1e-6


def oob_time(g: dict, gpu, oob_rate_tbs: float) -> np.ndarray:
    """Seconds: the padded activation rows of a launch (`oob_bytes`) at `oob_rate_tbs` TB/s, scaled by the launch's
    fill of the device (grid / SMs, at most 1; module note)."""
    fill = np.minimum(1.0, np.asarray(g["grid"], dtype=float) / float(gpu.sms))
    return np.asarray(g["oob_bytes"], dtype=float) / (oob_rate_tbs * 1e12) * fill


def _compute_bound(g: dict, rel: dict, params: dict):
    return g["t_compute"] / rel["eta_c_rel"] >= g["t_memory"] / mem_rel(rel, params)


def gemm_time_fp8(m, n, k, gpu, constants: Constants | None = None, rel: dict | None = None, engine=None,
                  served: bool = False, **kw) -> dict:
    """Seconds and parts of fp8 W8A8 GEMMs of `engine`; `served`: with the activation quantise passes
    of the engine's served checkpoint (act_quant_passes), as the public functions price them."""
    g = gemm.gemm_time(m, n, k, gpu, constants, dtype="fp8", launch=fp8_launch(gpu, engine), **kw)
    own = own_stream_cells(m, n, k, gpu, engine)
    if own is not None:
        g["own_stream"] = own.reshape(np.shape(g["t"]))
    oob = oob_bytes(m, n, k, gpu, engine)
    if oob is not None:
        g["oob_bytes"] = oob.reshape(np.shape(g["t"]))
    rel = rel or fp8_rel(gpu, constants, engine)
    tq = quant_time(m, k, gpu, constants, rel, engine, served)
    p = gemm.resolve(gpu, constants)
    t = apply_rel(g, gpu, constants, rel, p) + tq
    return {**g, "t": t, "t_quant": tq, "compute_bound": _compute_bound(g, rel, p)}


def gemm_time_shapes_fp8(m, shapes: dict, gpu, constants: Constants | None = None, engine=None,
                         served: bool = False, **kw) -> dict:
    """gemm_time_fp8 for every shape of a layer; `served`: the activation quantise passes of the engine's
    served checkpoint (act_quant_passes), as a step runs them, not the tables' call."""
    out = gemm.gemm_time_shapes(m, shapes, gpu, constants, dtype="fp8", launch=fp8_launch(gpu, engine), **kw)
    rel = fp8_rel(gpu, constants, engine)
    p = gemm.resolve(gpu, constants)
    for name, g in out.items():
        own = own_stream_cells(m, shapes[name][0], shapes[name][1], gpu, engine)
        if own is not None:
            g["own_stream"] = own.reshape(np.shape(g["t"]))
        oob = oob_bytes(m, shapes[name][0], shapes[name][1], gpu, engine)
        if oob is not None:
            g["oob_bytes"] = oob.reshape(np.shape(g["t"]))
        g["t_quant"] = quant_time(m, shapes[name][1], gpu, constants, rel, engine, served)
        g["t"] = apply_rel(g, gpu, constants, rel, p) + g["t_quant"]
        g["compute_bound"] = _compute_bound(g, rel, p)
    return out
