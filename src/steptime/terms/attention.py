"""Attention: prefill is causal compute work, decode is a KV-cache read; one model for both.

A batch of requests (request i: s_i new tokens over c_i cached tokens) runs as one
varlen kernel per phase. Per layer, per GPU after tensor parallelism (H_q query heads,
H_kv KV heads, head dim d, b_kv bytes per KV element):

    flops   = 4 H_q d (s c + s (s + p_tile) / 2)        causal block; p_tile = causal-shape penalty
    bytes   = (c + s) 2 H_kv d b_kv  +  4 s H_q d  +  4 s H_kv d   KV read, Q in / O out, new K/V in
    units   = H_u ceil(s / q_tile)                      CTAs (work units) the kernel launches
              H_u = H_kv (decode; prefill where attn_pf_unit is 0), H_q x attn_pf_unit (prefill otherwise)
    work    = H_q n (c / q_pf + (n + 1) / 2),  n = ceil(s / q_pf)   causal key blocks over all query tiles
    longest = c / q_pf + n                              key blocks of the longest query tile (the last one)

and, summed over the batch:

    t_compute = (flops / (P * eta_attn) + t_exp) / eta_fill,   eta_attn = f_clk * eta_ceil * s / (s + c_tok) * fp8_compute
              t_exp = flops / (4 d) * exp_cyc / (SMs * f_boost * f_clk)     softmax, not overlapped (prefill)
              eta_fill = tiles / (tiles + fill_half * SMs),   tiles = sum(work) / max(longest)  (SM fill)
                         capped at fill_tail * tiles / (fill_half * SMs) where attn_fill_tail > 0 (`fill_eta`)
    t_memory  = bytes * (hit / BW_L2 + (1 - hit) / (BW * eta_mem))          (L2 cliff)
              hit = 1 / (1 + (x / x_c)^k),   x = bytes / L2,   BW_L2 = max(l2_bpc * SMs * f_boost, BW * eta_mem)
    t_units   = units * t_cta / SMs  (* fp8_unit for an fp8 cache)          per-request cost
    t_attn    = t_floor + (t_units^p + max(t_compute, t_memory)^p)^(1/p)
              t_floor = attn_floor_us (decode) or attn_floor_us * attn_prefill_floor_rel (prefill)
              decode: t_floor *= (1 or 1 - attn_swap_copy_rel) + attn_split_rel [split-KV]

Named factors (constants in defaults.yaml, settled by E1.24):
  attn_floor_us      decode kernel floor (per-GPU deploy reading)
  attn_prefill_floor_rel  prefill kernel floor relative to the decode floor
  attn_eta_mem       achieved HBM fraction streaming a KV cache (per-GPU deploy reading)
  attn_eta_ceil      compute ceiling of long causal prefill (per-GPU deploy reading)
  attn_c_tokens      softmax-amortisation saturation, in query tokens per request
  attn_causal_tile   causal-shape penalty: diagonal-tile waste, in tokens
  attn_fill_half     critical-path weight (SM fill): a causal prefill takes work / SMs + fill_half x the
                     longest query tile's time (Brent's bound); `tiles` counts the batch's work in units
                     of its longest tile, so few heads x few short prompts (TP-split shapes) fill badly.
                     q_pf: the arch's causal prefill query tile (`prefill_q_tile`, from kernel source)
  attn_fill_tail     the share of the longest CTA's time by which a kernel launching its causal tiles shortest
                     first ends after work / SMs (`fill_eta`): fill_half = fill_tail x the longest CTA's time,
                     and the kernel never ends before that CTA, so eta_fill <= fill_tail x tiles / (fill_half
                     SMs); 0 (neutral): no such cap (lanes without it)
  attn_cta_us        SM-microseconds each (request, KV head, query tile) work unit costs
  attn_pf_unit       a prefill's work units counted per QUERY head, each this share of a unit
                     (`prefill_unit_heads`): FlashAttention-2's forward grid is (query blocks, batch,
                     H_q) and TRT-LLM-gen's context kernel also launches per query head; 0 (neutral,
                     a lane without it, e.g. FA3, which packs the GQA group): the per-KV-head count
  attn_overlap_p     how the per-unit cost overlaps streaming (1 = adds, large = max)
  attn_l2_bpc        L2 bytes per SM per clock (sets BW_L2 from the datasheet)
  attn_l2_x_c, attn_l2_sharp   where and how sharply the L2 cliff falls
  attn_fp8_unit, attn_fp8_compute   fp8-cache per-unit cost and compute-rate multipliers
  attn_swap_copy_rel the share of the decode floor that FlashAttention-2's varlen GQA query
                     transposition copy costs (`swap_copy`); lanes in SWAP_COPY_LANES only, else 0
  attn_split_rel     the share of the decode floor that the split-KV combine pass costs (`split_kv`)
  attn_split_tile    KV tokens per split-KV chunk at head dim 128 (the kernel family's KV tile)
  attn_fp8_bpc       fp8 KV bytes per SM per clock a decode kernel consumes at most (`fp8_read_bandwidth`;
                     0: no such cap)
  attn_split_us      microseconds each split-KV split adds to a decode batch (`split_count`, FlashAttention-2's
                     split heuristic; 0: no per-split cost)
  attn_split_rule    whose split count `split_count` prices: 0 (neutral) FlashAttention-2's num_splits_heuristic,
                     1 (SPLIT_RULE_TRTLLM) TRT-LLM-gen's multi-CTA KV split (`trtllm_split_count`); set per lane, not fitted
  attn_stream_gbs    GB/s one unsplit decode stream (one CTA over one (request, KV head)'s whole KV) reads,
                     on a lane whose decode API splits the KV only for a swapped GQA query (`unswapped`);
                     0 (neutral): every decode batch may split
  attn_noswap_rel    the share of the copy-free decode floor an unswapped decode saves (no output copy back
                     from the swapped layout, no split-KV set-up); lanes with attn_stream_gbs or attn_stream_clk only
  attn_stream_clk    SM clocks one unsplit decode stream's CTA spends per KV block beside the block's MMA (`stream_rate`:
                     the CTA's tile is FlashAttention-2's split-KV kernel's 64 query rows x one 64 KiB bf16 K+V block,
                     computed in full for one query row); where > 0 it sets the stream rate from the datasheet and
                     replaces attn_stream_gbs, and the bound charges the blocks after each stream's first (the
                     floor holds the first: `stream_first_bytes`); 0 (neutral): attn_stream_gbs as read
  attn_cta_gbs       GB/s one split-KV decode CTA reads of its KV chunk (`cta_read_time`): a decode batch reads at most
                     split_ctas x attn_cta_gbs, its CTAs FlashAttention-3's split grid under vLLM (`split_ctas`);
                     0 (neutral): no such bound (lanes without it)
  attn_exp_cyc       SM clocks each causal score element of a prefill costs beside its MMA (the online softmax:
                     one exponential on the SM's special-function units, 16 a clock per SM, and its bookkeeping),
                     not overlapped with the MMA (`exp_time`); 0 (neutral): the ceiling carries it

Softmax time (prefill, FlashAttention-2 lane): FlashAttention-2 runs a tile's softmax between its two MMAs in
the same warps (no warp-specialised ping-pong as in FA3 / FA4), so a prefill's time per score element is the
MMA's 4 d / (tensor FLOPs per SM per clock x eta) plus a fixed number of SM clocks for the softmax. The
AIConfigurator tables show it at long prompts: SM clocks (boost) per causal score element are linear in the head
dim with intercept 0.057 (L40S) and 0.070 (RTX PRO 6000), about one exponential at 16 a clock per SM (Hopper
0.064, B200 0.057, and B300 0.026, whose SFU doubles MUFU.EX2; the lab's `exp_cyc` window). The intercept's share of a d-128 cell depends on
the tensor rate per SM and clock, 2,049 FLOPs on A100 against 1,012 / 951 on L40S / RTX PRO 6000, so a
ceiling that folds it in does not carry from the GDDR parts to A100 through the GEMM's efficiency alone.

SM fill of a FlashAttention-2 prefill (`fill_eta`): FlashAttention-2's forward grid is (query blocks, batch,
H_q) CTAs launched in index order, query block fastest (csrc/flash_attn/src/flash_fwd_launch_template.h,
run_flash_fwd / run_flash_splitkv_fwd: dim3 grid(num_m_block, b, h); flash_fwd_kernel.h: m_block = blockIdx.x),
so each (request, head)'s causal tiles start shortest first and the last heads' longest tiles start last. A
greedy list schedule of that order (CTAs to the first free slot, a CTA's time its key blocks) ends work / slots
+ 0.56-0.67 x the longest CTA after its start from two waves up, and at the longest CTA itself below one wave
(FILL_TAIL, the lab's constant). Brent's additive form alone (fill_half fitted at 0.17-0.20 on the lane) prices
the few-CTA cells too fast: E1.29's held-out fa2 prefill errors at s >= 1,024 go from -0.04 (A100) / -0.06 (RTX
PRO 6000) above 16 waves to -0.27 / -0.27 at half to one wave (wave 35, `fa2fill`). Where
attn_fill_tail > 0 the fill is eta_fill = min(tiles / (tiles + fill_half SMs), fill_tail tiles / (fill_half
SMs)): the longest CTA takes fill_half / fill_tail longest-tile units, and the kernel lasts at least that long.
FlashAttention-2 lane only (FA3's persistent scheduler starts the longest tiles first).

fp8 KV read (decode): a decode kernel that reads an fp8 cache converts every KV element to the MMA's
input type on the SM before it can use it, so its KV stream is also bounded by an SM-side rate,
attn_fp8_bpc bytes per SM per clock: t_memory = max(t_memory, bytes / (attn_fp8_bpc SMs f_boost)) for
decode-only batches with an fp8 cache (`combine`'s `fp8_read`).

Split count (decode, FlashAttention-2 lane): the combine pass of a split-KV decode reduces every query row's
partial results over the splits one after another (flash_fwd_splitkv_combine_kernel loops over num_splits),
so beyond the fixed share attn_split_rel a decode batch pays attn_split_us per split: t_floor +=
attn_split_us x n_splits where n_splits > 1. n_splits is FlashAttention-2's own choice (`split_count`,
num_splits_heuristic in vllm-project/flash-attention csrc/flash_attn/flash_api.cpp: b H_kv ceil(g / 64)
(request, KV head, 64-row query block) CTAs against 2 x SMs slots, up to min(128, 2 SMs, KV blocks) splits,
the fewest eligible splits within 0.85 of the best wave efficiency; one split at >= 0.8 x 2 SMs CTAs). The
AIConfigurator fa2 decode tables show it: at one request x one KV head the time rises by 0.14 (L40S) to
0.2 (RTX PRO 6000) us per split from 2 to 128 splits, where the KV read is a few microseconds. The AIConfigurator decode tables show it
on Hopper (FlashAttention-3): streamed fp8 cells run at 9.1 (H100) and 9.4 (H200) B / SM / clock, the
same on both although H200's HBM is 43% faster, while bf16 reaches 11.5 / 15.6; Blackwell's TRT-LLM-gen
kernel reads fp8 at 22-23 B / SM / clock, about its bf16 rate. Prefill is not touched.

Split count (decode, TRT-LLM-gen lane): TRT-LLM-gen's generation kernel (FlashInfer's trtllm-gen FMHA, vLLM's
Blackwell decode) splits each (request, KV head)'s KV over min(ceil(kv_len / (2 x its KV step)), max(1, floor(SMs /
(b x H_kv)))) CTAs (computeNumCtas in flashinfer include/flashinfer/trtllm/fmha/fmhaKernels.cuh: the query-head group
of a KV head in one CTA, "the factor of 2 ... so the reduction overhead does not outweigh the benefits of a shorter
mainloop"; 2 x the step is the lane's split tile, 256 tokens at every head dim), and reduces the partial results per split, so a
decode batch pays attn_split_us x that count where it splits (`trtllm_split_count`; attn_split_rule 1). The
AIConfigurator tables show it on all four Blackwell GPUs: the held-out residual (measured - predicted) grows 0.09-0.11
us per split from 16 to 148 splits (B200 2.2 / 4.4 / 8.3 / 15.6 us at 17-32 / 33-64 / 65-128 / 129-148 splits): a
request of 64k tokens at one KV head (148 splits) takes 27.5 us on B200 where two such requests (74 splits each,
twice the bytes) take 23.4.

Split CTAs (decode, FlashAttention-3 lane): vLLM's FlashAttention backend runs FA3 with an ahead-of-time scheduler
and, under full CUDA graphs (its default), num_splits = 16 (_DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH,
vllm/v1/attention/backends/flash_attn.py), which FA3's varlen scheduler takes as the upper bound of each request's
dynamic split count, ceil(n_blocks / ceil(1.1 x total KV blocks x H_kv / SMs)) (hopper/flash_prepare_scheduler.cu,
vllm-project/flash-attention; a 10% margin). Its long-KV limit is min(16, ceil(SMs / (1.1 b H_kv))) splits per
(request, KV head) stream (`split_ctas`): a decode of few streams (b H_kv < SMs / 17.6: one KV head per rank at TP 8
and 1-7 requests) launches 16 CTAs per stream, far fewer than the SMs, and each CTA streams its chunk at one CTA's
rate, so t_memory = max(t_memory, bytes / (split_ctas x attn_cta_gbs)) for decode batches (`cta_read_time`). The
AIConfigurator FA3 tables show it: at one KV head x 1-4 requests and 16k-64k tokens, H100's time follows the bytes
per CTA (1 request x 16k and 4 requests x 16k, 0.5 MB per CTA either way: 18.9 and 19.7 us), about 100 GB/s per
CTA, where the HBM / L2 stream priced them 25-45% fast. At short KV the kernel splits fewer times (n_blocks < 16);
there the bound is under a microsecond either way, and the limit form keeps it a function of the streams alone.

Split-KV (flash-decoding) geometry: a decode batch whose (request, KV head) streams, batch x H_kv,
are fewer than the SMs splits each stream's KV into chunks of the kernel's KV tile over more CTAs
and then combines the partial softmax results (FlashAttention-2/3: a second, combine kernel;
TRT-LLM-gen: a multi-CTA reduction). With more than one tile of KV per request that costs a fixed
extra share of the floor (`split_kv`); a step's group uses its mean KV per request. Every GPU's
AIConfigurator decode table shows it: 1.3-5 us more at few streams between one and two tiles.

Unswapped decode (FlashAttention-2 lane, same source): mha_varlen_fwd swaps only where
H_q > H_kv (seqlenq_ngroups_swapped), and "Only apply split-k for decoding": set_params_splitkv runs
only in the swapped case. A decode of H_q == H_kv (MHA, or GQA replicated to one KV head per query
head) launches one CTA per (request, KV head) that walks its whole KV serially: no split-KV, no
combine, and no copy of the output back from the swapped layout (`unswapped`). Its stream is bounded
by one CTA's latency-bound read rate, attn_stream_gbs per (request, KV head) stream:
t_memory = max(t_memory, bytes / (streams x attn_stream_gbs)) (`stream_read_time`; a group's mean
stream, exact for equal requests); its floor is the copy-free floor x (1 - attn_noswap_rel) and it
pays no split-KV share. The AIConfigurator tables show it on every FA2 GPU: at b x H_kv <= SMs and
KV >= 4k an MHA cell reads 22.2 (A100), 27.4 (L40S), 26.2 (RTX PRO 6000) GB/s per stream, flat in
the streams, 6-8x slower than the split GQA cell of the same bytes.

Unswapped stream rate from the kernel's tile (`stream_rate`, attn_stream_clk): vLLM's KV cache is paged, and
mha_varlen_fwd runs FlashAttention-2's split-KV kernel whenever a block table is given (run_mha_fwd(params, stream,
paged_KV): force_split_kernel), with num_splits 1 on the unswapped path; that kernel's tile is kBlockM = 64 query
rows ("Fixed for all head dimensions") x kBlockN = 256 / 128 / 64 keys at head dim <= 80 / <= 128 / above
(run_mha_fwd_splitkv_dispatch, csrc/flash_attn/src/flash_fwd_launch_template.h, vllm-project/flash-attention), i.e.
one 64 KiB bf16 K+V block per main-loop step at d 64 / 128 / 256 (STREAM_BLOCK_BYTES), and the CTA computes both
MMAs over all 64 rows for its one query row: 4 x 64 x (block tokens x d) = 64 x STREAM_BLOCK_BYTES FLOPs a block. The
tables' MHA cells at b x H_kv <= SMs and KV >= 4k take, per 64 KiB block, 4,156 (A100) / 6,019 (L40S) / 6,555
(RTX PRO 6000) SM clocks at boost, of which that MMA at the datasheet's tensor rate per SM and clock is 2,047 / 4,146 /
4,411: the rest, 2,109 / 1,873 / 2,144 clocks, is near one constant in SM clocks (in ns 1,496 / 743 / 819: not a DRAM
latency), where the GB/s rates differ by 23%. So rate = STREAM_BLOCK_BYTES x f_boost / (64 x STREAM_BLOCK_BYTES /
(FLOPs per SM per clock) + attn_stream_clk) bytes/s per stream (bf16 KV; the lane has no fp8 cache).
The floor is read at one block (attn_noswap_rel from cells of KV <= 128 tokens: one main-loop step, its MMA over the
full 64-row tile included), so on this law the stream bound charges only the blocks after each stream's first:
t_memory = max(t_memory, max(bytes - streams x STREAM_BLOCK_BYTES, 0) / (streams x rate)) (`stream_first_bytes`;
wave 37, helper fa2v: fa2dec's first form charged every byte and so paid the first block twice). The lab measures
attn_stream_clk the same way: (y - floor) per block after the first. The GB/s law (attn_stream_gbs, wave 31) charges
every byte, as it was measured.

Decode launch geometry (FlashAttention-2 lane, vllm-project/flash-attention @ 04325b67,
csrc/flash_attn/flash_api.cpp, mha_varlen_fwd): with one query token and H_q > H_kv the API
swaps the query-head groups into the sequence axis, q.reshape(b, H_kv, g, d).transpose(1, 2)
.reshape(b g, H_kv, d). That reshape is a view only when b = 1 or H_kv = 1 (a size-1 axis
merges with any stride); otherwise it is a copy kernel, one more launch in the decode floor.
So a decode batch pays the copy iff H_q > H_kv >= 2 and b >= 2 (`swap_copy`); at TP 8 a
70B-class model has one KV head per rank and the copy, part of the floor read at 8 KV heads,
is gone.

The L2 term only applies with `warm_l2=True`: a microbenchmark that replays one layer
keeps its KV cache in L2, a real forward pass streams every other layer in between.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.terms.gemm import boost_mhz, smax

KV_BYTES = MappingProxyType({"bf16": 2, "bfloat16": 2, "fp16": 2, "fp8": 1})
Q_TILE = 128  # query rows per CTA of FlashAttention-class prefill kernels (DERIVED)
# Causal prefill query tile (kBlockM, head dim 128) by SM version where it is not Q_TILE: FlashAttention-2's
# run_mha_fwd_hdim128 takes 64 x 64 tiles for causal on sm86/sm89 ("is_sm8x": major 8, minor > 0) and 128 x 64
# elsewhere (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h @ 0251105a); FA3's
# tile_size_fwd_sm90 gives 128 x 128 for causal hdim 128 (hopper/tile_size.h, same commit). DERIVED.
# Blackwell datacenter parts (sm100 B200/GB200, sm103 B300/GB300): 256 query rows per CTA, two 128-row Q
# tiles ping-ponged by two softmax warpgroups over one tcgen05 MMA pipe (FlashAttention-4's
# FlashAttentionForwardSm100: q_stage = 2, cta_tiler = (q_stage * m_block_size, ...), m_block_size 128;
# Dao-AILab/flash-attention flash_attn/cute/flash_fwd_sm100.py @ 67e88650, built on CUTLASS example
# 77_blackwell_fmha). TRT-LLM-gen's context kernel (the tables' Blackwell lane) is not public and is taken to
# share that geometry: its measured time at one request is flat from 3 to 8 query heads per rank and rises
# from 10 (B200, 4,096 tokens: 128 vs 160 CTAs of 256 rows over 148 SMs), as 256-row CTAs would. DERIVED.
PREFILL_Q_TILE_BY_SM = MappingProxyType({86: 64, 87: 64, 89: 64, 100: 256, 103: 256})

FACTORS = ("attn_floor_us", "attn_prefill_floor_rel", "attn_eta_mem", "attn_eta_ceil", "attn_c_tokens", "attn_causal_tile", "attn_fill_half",
           "attn_cta_us",
           "attn_overlap_p", "attn_l2_bpc", "attn_l2_x_c", "attn_l2_sharp", "attn_fp8_unit", "attn_fp8_compute",
           "attn_swap_copy_rel", "attn_split_rel", "attn_split_tile", "attn_fp8_bpc", "attn_pf_unit", "attn_split_us",
           "attn_stream_gbs", "attn_noswap_rel", "attn_exp_cyc", "attn_fill_tail", "attn_cta_gbs",
           "attn_split_rule", "attn_stream_clk")
# kernel families whose decode API copies the swapped GQA query (FlashAttention-2's varlen API);
# FA3 packs the group inside the kernel, TRT-LLM-gen/FlashInfer take the heads as they are (DERIVED)
SWAP_COPY_LANES = ("fa2",)


def kernel_lane(kernel_source: str) -> str:
    """The kernel family of an attention kernel name (its factors are fitted per family)."""
    k = str(kernel_source).lower()
    if "trtllm" in k:
        return "trtllm"
    if "fa3" in k or "fa4" in k:
        return "fa3"
    if "flashinfer" in k or k.startswith("vllm_fi"):
        return "flashinfer"
    if "triton" in k:
        return "triton"
    return "fa2"


def attention_constants(gpu, constants: Constants | None = None) -> dict:
    """The named factors that apply to `gpu` (a dict of floats).

    A factor comes from `attn_lane_factors[lane][name]` when the GPU's kernel family
    (`attn_lane`, the kernel vLLM dispatches on it) has a fitted value, else from the
    constant of that name (per GPU > family > global).
    """
    constants = constants or Constants.default()
    fc = {f: float(_factor(constants, f, gpu)) for f in FACTORS}
    try:
        lane = str(constants.get("attn_lane", gpu))
        lanes = constants.get("attn_lane_factors", gpu) or {}
    except KeyError:
        return fc
    for f, v in (lanes.get(lane) or {}).items():
        if f in fc and f not in ("attn_floor_us", "attn_eta_mem", "attn_eta_ceil"):
            fc[f] = float(v)
    return fc


# factors a constant set from before they existed lacks (a pinned older defaults.yaml): their neutral values
OPTIONAL_FACTORS = MappingProxyType({"attn_split_rel": 0.0, "attn_split_tile": 128.0, "attn_fp8_bpc": 0.0,
                                     "attn_pf_unit": 0.0, "attn_split_us": 0.0, "attn_stream_gbs": 0.0,
                                     "attn_noswap_rel": 0.0, "attn_exp_cyc": 0.0,
                                     "attn_fill_tail": 0.0, "attn_cta_gbs": 0.0, "attn_split_rule": 0.0,
                                     "attn_stream_clk": 0.0})


def _factor(constants: Constants, name: str, gpu):
    """Constant `name` for `gpu`; an OPTIONAL_FACTORS name missing from `constants` takes its neutral value."""
    return constants.get(name, gpu, OPTIONAL_FACTORS[name]) if name in OPTIONAL_FACTORS else constants.get(name, gpu)


def prefill_q_tile(gpu):
    """Query rows per CTA of the causal prefill kernel on `gpu` (PREFILL_Q_TILE_BY_SM, else Q_TILE).
    A stand-in whose `sm_version` is an array (one GPU per cell row) gets an array."""
    sm = getattr(gpu, "sm_version", None)
    if sm is not None and np.ndim(sm):
        sm = np.asarray(sm)
        out = np.full(sm.shape, float(Q_TILE))
        for version, tile in PREFILL_Q_TILE_BY_SM.items():  # a handful of versions: one comparison each
            out[sm == version] = float(tile)
        return out
    return float(PREFILL_Q_TILE_BY_SM.get(int(sm), Q_TILE)) if sm is not None else float(Q_TILE)


def prefill_unit_heads(n_heads, n_kv_heads, fc: dict):
    """The heads a prefill's work units are counted over: H_q x attn_pf_unit where that factor is positive
    (kernels that launch per query head), else H_kv (the factor 0 or absent). Arrays broadcast."""
    f = float(fc.get("attn_pf_unit", 0.0))
    if f < 0:
        raise ValueError(f"attn_pf_unit must be >= 0 (0: per-KV-head units), got {f!r}")
    return np.asarray(n_heads, dtype=float) * f if f > 0 else np.asarray(n_kv_heads, dtype=float)


def exp_time(flops_eff, head_dim, gpu, fc: dict, f_clk=1.0):
    """Seconds a prefill's softmax takes beside its MMA: flops_eff / (4 d) score elements (the tiles the kernel
    computes) x attn_exp_cyc SM clocks each, over SMs x boost clock x f_clk; 0 where the factor is 0 or absent."""
    e = fc.get("attn_exp_cyc", 0.0)
    if np.any(np.asarray(e) < 0):
        raise ValueError(f"attn_exp_cyc must be >= 0 (0: no separate softmax time), got {e!r}")
    return np.asarray(flops_eff, dtype=float) / (4.0 * np.asarray(head_dim, dtype=float)) * e / (
        gpu.sms * boost_mhz(gpu) * 1e6 * f_clk)


_SCALAR = (int, float)  # Python numbers and numpy's float64 (a float subclass): fill_eta's scalar path


def fill_eta(tiles, sms, fc: dict):
    """SM fill of a causal prefill batch whose work is `tiles` longest-tile units on `sms` SMs: Brent's
    tiles / (tiles + attn_fill_half x SMs), capped at the critical path attn_fill_tail x tiles / (attn_fill_half x
    SMs) where attn_fill_tail and attn_fill_half are positive (module docstring); 1 where tiles <= 0 (no prefill).
    Floats or arrays (broadcast)."""
    tail = fc.get("attn_fill_tail", 0.0)
    half = fc["attn_fill_half"]
    scalar_tail = isinstance(tail, _SCALAR)
    if (tail < 0) if scalar_tail else np.any(np.asarray(tail) < 0):
        raise ValueError(f"attn_fill_tail must be >= 0 (0: no critical-path cap), got {tail!r}")
    if (scalar_tail and isinstance(tiles, _SCALAR) and isinstance(half, _SCALAR)
            and isinstance(sms, _SCALAR)):  # the serving timer's per-step call: the same IEEE operations, in floats
        t, crit = float(tiles), float(half) * sms
        if not t > 0:
            return 1.0
        eta = t / (t + crit)
        if tail > 0 and crit > 0:
            cap = float(tail) * t / crit
            eta = cap if cap < eta else eta
        return eta
    t = np.asarray(tiles, dtype=float)
    crit = np.asarray(half, dtype=float) * sms
    eta = np.divide(t, t + crit, out=np.ones(np.broadcast(t, crit).shape), where=t > 0)
    if np.any(np.asarray(tail) > 0):
        cap = np.divide(np.asarray(tail, dtype=float) * t, crit, out=np.ones(eta.shape),
                        where=(t > 0) & (crit > 0) & (np.asarray(tail) > 0))
        eta = np.minimum(eta, cap)
    return eta


def fp8_read_bandwidth(gpu, fc: dict):
    """The SM-side rate (bytes/s) at which a decode kernel consumes an fp8 KV cache: attn_fp8_bpc bytes per SM
    per clock x SMs x boost clock; 0 where the factor is 0 or absent (no cap)."""
    return float(fc.get("attn_fp8_bpc", 0.0)) * gpu.sms * boost_mhz(gpu) * 1e6


def l2_bandwidth(gpu, fc: dict):
    """BW_L2 (bytes/s) of the warm-L2 branch: attn_l2_bpc bytes per SM per clock x SMs x boost clock
    (arrays broadcast: a per-row stand-in or per-row factors)."""
    return fc["attn_l2_bpc"] * gpu.sms * boost_mhz(gpu) * 1e6


def l2_hit_bandwidth(gpu, fc: dict):
    """The rate (bytes/s) the warm-L2 branch serves its L2-resident share at: `l2_bandwidth`, but never slower than
    the HBM stream it replaces (BW x attn_eta_mem). A lane's attn_l2_bpc fitted on GPUs with a fast L2 per SM and
    clock can price another GPU's L2 below its HBM (A100 held out, fitted on L40S / RTX PRO 6000: 1.04 TB/s against
    a 1.48 TB/s stream); an L2 hit is not slower than the miss it saves."""
    return np.maximum(l2_bandwidth(gpu, fc), gpu.mem_bw * fc["attn_eta_mem"])


def prefill_tiles(new_tokens, kv_len, n_heads, q_tile: float) -> tuple[np.ndarray, np.ndarray]:
    """(work, longest) of causal prefill requests, in key blocks of `q_tile` keys: `work` over every
    (head, query tile) CTA of a request, `longest` the last query tile's (it sees the whole context).
    Decode rows (s <= 1) have neither. A batch's `tiles` (SM fill) is sum(work) / max(longest)."""
    s = np.asarray(new_tokens, dtype=float)
    c = np.asarray(kv_len, dtype=float)
    if not np.all(np.asarray(q_tile) > 0):
        raise ValueError(f"query tile must be positive, got {q_tile!r}")
    if np.any(s < 0) or np.any(c < 0):
        raise ValueError("new tokens and KV length must be non-negative")
    pre = s > 1
    n = np.ceil(s / q_tile)
    work = np.where(pre, np.asarray(n_heads, dtype=float) * n * (c / q_tile + (n + 1.0) / 2.0), 0.0)
    longest = np.where(pre, c / q_tile + n, 0.0)
    return work, longest


def swap_copy(batch, n_heads, n_kv_heads) -> np.ndarray:
    """Whether a decode batch of `batch` one-token requests runs FlashAttention-2's GQA query
    transposition copy: H_q > H_kv >= 2 and batch >= 2 (module docstring; arrays broadcast)."""
    b, hq, hkv = (np.asarray(x, dtype=float) for x in (batch, n_heads, n_kv_heads))
    if np.any(b < 0) or np.any(hkv <= 0) or np.any(hq < hkv):
        raise ValueError("swap_copy: need batch >= 0 and n_heads >= n_kv_heads >= 1")
    return (hq > hkv) & (hkv >= 2) & (b >= 2)


def split_kv(batch, n_kv_heads, kv_len, head_dim, gpu, fc: dict) -> np.ndarray:
    """Whether a decode batch runs split-KV (flash-decoding): its (request, KV head) streams,
    batch x H_kv, are fewer than the GPU's SMs, so the kernel splits each stream's KV over more
    CTAs, and the KV per request spans more than one KV tile (`split_tile`), so there is more than
    one chunk to split; the partial results are then combined (a second pass). Arrays broadcast."""
    b, hkv, c = (np.asarray(x, dtype=float) for x in (batch, n_kv_heads, kv_len))
    if np.any(b < 0) or np.any(hkv <= 0) or np.any(c < 0):
        raise ValueError("split_kv: need batch >= 0, n_kv_heads >= 1 and kv_len >= 0")
    return (b >= 1) & (b * hkv < gpu.sms) & (c > split_tile(head_dim, fc))


def split_tile(head_dim, fc: dict) -> np.ndarray:
    """KV tokens per split-KV chunk of the decode kernel: the family's tile at head dim <= 128
    (attn_split_tile), twice that at <= 64 and half above 128 (FlashAttention-2's split-KV kBlockN
    rule, Headdim <= 64 ? 256 : Headdim <= 128 ? 128 : 64; the same scaling ASSUMED for other families)."""
    d = np.asarray(head_dim, dtype=float)
    t = float(fc.get("attn_split_tile", 128.0))
    return np.where(d <= 64, 2.0 * t, np.where(d <= 128, t, 0.5 * t))


SPLIT_MAX = 128  # FlashAttention-2's cap on num_splits (flash_api.cpp: num_splits_heuristic(..., 128)) DERIVED
SPLIT_EFF_REL = 0.85  # the heuristic takes the fewest splits within this share of the best wave efficiency
SPLIT_ONE_FILL = 0.8  # ... and one split once the CTAs fill this share of the slots (DERIVED, same source)


SPLIT_RULE_TRTLLM = 1.0  # attn_split_rule of TRT-LLM-gen's multi-CTA KV split (`trtllm_split_count`)


def trtllm_split_tile(fc: dict) -> float:
    """KV tokens per block of TRT-LLM-gen's split count (`trtllm_split_count`): the lane's attn_split_tile at every
    head dim."""
    return float(fc.get("attn_split_tile", 128.0))


def split_count_tile(head_dim, fc: dict):
    """KV tokens per block that the lane's split count (`split_count`) is a function of: `trtllm_split_tile` on a lane
    whose attn_split_rule is SPLIT_RULE_TRTLLM, else `split_tile` (FlashAttention-2's head-dim scaling). A caller that
    caches split counts by KV blocks (the serving timer) counts its blocks in this tile."""
    if float(fc.get("attn_split_rule", 0.0)) == SPLIT_RULE_TRTLLM:
        return np.full(np.shape(head_dim), trtllm_split_tile(fc))
    return split_tile(head_dim, fc)


def trtllm_split_count(batch, n_kv_heads, kv_len, head_dim, gpu, fc: dict) -> np.ndarray:
    """TRT-LLM-gen's CTAs per (request, KV head) of a decode batch (module docstring): min(ceil(kv_len / tile),
    max(1, floor(SMs / (b H_kv)))), tile = the lane's attn_split_tile (2 x the kernel's KV step) at every head dim
    (not `split_tile`'s FlashAttention-2 scaling: the KV step is the kernel's KV tile, 64 or 128 tokens in TRT-LLM-gen's
    kernel hash, and the held-out head-dim-256 cells follow the unscaled count; chosen after seeing scores), the
    query-head group of a KV head in one CTA (ASSUMED: no GQA group wider than the kernel's query tile); an empty
    batch counts one split. Arrays broadcast (`gpu.sms` may be one per row); `head_dim` is checked, not used."""
    b, hkv, c = (np.asarray(x, dtype=float) for x in (batch, n_kv_heads, kv_len))
    if np.any(np.asarray(head_dim, dtype=float) <= 0):
        raise ValueError("trtllm_split_count: need head_dim > 0")
    blocks = np.maximum(1.0, np.ceil(c / trtllm_split_tile(fc)))
    streams = b * hkv
    fill = np.floor(np.divide(np.asarray(gpu.sms, dtype=float), streams, out=np.ones(np.broadcast(streams, gpu.sms).shape),
                              where=streams > 0))
    return np.where(streams > 0, np.minimum(blocks, np.maximum(1.0, fill)), 1.0)


def split_count(batch, n_heads, n_kv_heads, kv_len, head_dim, gpu, fc: dict) -> np.ndarray:
    """FlashAttention-2's num_splits_heuristic for a decode batch of `batch` requests of `kv_len` cached tokens
    (module docstring): CTAs b H_kv ceil((H_q / H_kv) / 64) (the GQA group swapped into the query axis, 64-row
    blocks) against 2 x SMs slots, KV blocks ceil(kv_len / split_tile). Arrays broadcast (`gpu.sms` may be one
    per row); an empty batch counts one split. On a lane whose attn_split_rule is SPLIT_RULE_TRTLLM, TRT-LLM-gen's
    count instead (`trtllm_split_count`)."""
    b, hq, hkv, c = (np.asarray(x, dtype=float) for x in (batch, n_heads, n_kv_heads, kv_len))
    if np.any(b < 0) or np.any(hkv <= 0) or np.any(hq < hkv) or np.any(c < 0):
        raise ValueError("split_count: need batch >= 0, n_heads >= n_kv_heads >= 1 and kv_len >= 0")
    rule = float(fc.get("attn_split_rule", 0.0))
    if rule not in (0.0, SPLIT_RULE_TRTLLM):
        raise ValueError(f"attn_split_rule must be 0 (FlashAttention-2) or {SPLIT_RULE_TRTLLM:g} (TRT-LLM-gen), got {rule!r}")
    if rule == SPLIT_RULE_TRTLLM:
        return trtllm_split_count(b, hkv, c, head_dim, gpu, fc)
    ctas = b * hkv * np.ceil(np.ceil(hq / hkv) / 64.0)
    blocks = np.maximum(1.0, np.ceil(c / split_tile(head_dim, fc)))
    slots = 2.0 * np.asarray(gpu.sms, dtype=float)
    ctas, blocks, slots = np.broadcast_arrays(ctas, blocks, slots)
    most = np.minimum(np.minimum(float(SPLIT_MAX), slots), blocks)
    # the 128 candidates on a leading axis: one set of array expressions, not one per candidate
    n_c = np.arange(1.0, SPLIT_MAX + 1.0).reshape((SPLIT_MAX,) + (1,) * ctas.ndim)
    ok = (n_c <= most) & ((n_c == 1.0) | (np.ceil(blocks / n_c) != np.ceil(blocks / np.maximum(n_c - 1.0, 1.0))))
    waves = ctas * n_c / slots
    effs = np.where(ok & (waves > 0), np.divide(waves, np.ceil(waves), out=np.zeros(waves.shape), where=waves > 0),
                    -1.0)
    good = effs >= SPLIT_EFF_REL * effs.max(axis=0)
    n = 1.0 + np.argmax(good & (effs >= 0), axis=0)
    return np.where((ctas >= SPLIT_ONE_FILL * slots) | (ctas <= 0), 1.0, n)


def split_us_s(splits, fc: dict):
    """The per-split cost (seconds) of a decode batch of `splits` split-KV splits: attn_split_us x splits where
    more than one split, else 0 (the factor 0 or absent: 0)."""
    k = float(fc.get("attn_split_us", 0.0))
    if k < 0:
        raise ValueError(f"attn_split_us must be >= 0, got {k!r}")
    n = np.asarray(splits, dtype=float)
    return np.where(n > 1, k * 1e-6 * n, 0.0)


def decode_splits(fc: dict, unsw, count):
    """The split-KV split count a decode is priced at (`combine`'s `splits`; the one place of the rule): None where
    no split is priced, because the constants carry no per-split cost (attn_split_us 0 or absent) or the decode runs
    unswapped everywhere (`unsw`, from `unswapped`: FlashAttention-2's unswapped decode never splits); else 1 where
    it runs unswapped and `count()` elsewhere. `count`: a callable giving `split_count` of the batches (or
    `_group_splits` per group), called only then (the heuristic scans 128 candidates); `unsw` broadcasts against it.
    An array where the splits are priced, so `decode_splits(...) is not None` says whether they are."""
    if not fc.get("attn_split_us") or np.all(unsw):
        return None
    return np.where(unsw, 1.0, count())


def _decode_floor_rel(copy, fc: dict, split=False, unswap=False):
    """Decode-floor multiplier: 1 where the batch pays the transposition copy, else
    1 - attn_swap_copy_rel (a factor dict without it: no copy-free discount), times 1 - attn_noswap_rel where
    the decode runs unswapped (`unswap`, from `unswapped`); plus attn_split_rel where it runs split-KV (`split`,
    from split_kv / _group_split) and is not unswapped (an unswapped decode never splits)."""
    uns = np.asarray(unswap, dtype=bool)
    rel = np.where(np.asarray(copy, dtype=bool), 1.0, 1.0 - float(fc.get("attn_swap_copy_rel", 0.0)))
    rel = rel * np.where(uns, 1.0 - float(fc.get("attn_noswap_rel", 0.0)), 1.0)
    return rel + np.where(np.asarray(split, dtype=bool) & ~uns, float(fc.get("attn_split_rel", 0.0)), 0.0)


def unswapped(n_heads, n_kv_heads, fc: dict) -> np.ndarray:
    """Whether a decode of these heads runs FlashAttention-2's unswapped path (module docstring): H_q == H_kv on a
    lane with an unsplit stream rate (attn_stream_gbs > 0 or attn_stream_clk > 0); False everywhere on other lanes.
    Arrays broadcast."""
    hq, hkv = np.asarray(n_heads, dtype=float), np.asarray(n_kv_heads, dtype=float)
    rate, clk = float(fc.get("attn_stream_gbs", 0.0)), float(fc.get("attn_stream_clk", 0.0))
    if rate < 0 or clk < 0 or not 0.0 <= float(fc.get("attn_noswap_rel", 0.0)) < 1.0:
        raise ValueError("attn_stream_gbs and attn_stream_clk must be >= 0 and attn_noswap_rel in [0, 1)")
    return (hq == hkv) & ((rate > 0) | (clk > 0))


# FlashAttention-2's split-KV kernel, which vLLM's paged decode runs (module docstring, "Unswapped stream rate"; DERIVED
# from source): 64 query rows a CTA, and one 64 KiB K+V block (bf16, kBlockN x d = 16,384 elements each) a main-loop step
STREAM_TILE_ROWS = 64
STREAM_BLOCK_BYTES = 65536.0


def stream_rate(gpu, fc: dict):
    """Bytes/s one unsplit decode stream (one CTA over one (request, KV head)'s whole KV) reads: where attn_stream_clk
    > 0, one STREAM_BLOCK_BYTES block per (its MMA, 4 x STREAM_TILE_ROWS x block elements FLOPs at the datasheet's
    tensor FLOPs per SM per clock, + attn_stream_clk) SM clocks at boost (module docstring); else attn_stream_gbs
    GB/s; 0 where both are 0 (no bound). Arrays where `gpu` is one per row (a fit's stand-in)."""
    clk = float(fc.get("attn_stream_clk", 0.0))
    if clk < 0:
        raise ValueError(f"attn_stream_clk must be >= 0, got {clk!r}")
    if clk == 0:
        return float(fc.get("attn_stream_gbs", 0.0)) * 1e9
    f = np.asarray(boost_mhz(gpu), dtype=float) * 1e6
    per_clk = np.asarray(gpu.peak_flops, dtype=float) / (np.asarray(gpu.sms, dtype=float) * f)
    mma = 4.0 * STREAM_TILE_ROWS * (STREAM_BLOCK_BYTES / 4.0) / per_clk  # bf16 K and V: bytes / 4 elements each
    return STREAM_BLOCK_BYTES * f / (mma + clk)


def stream_first_bytes(fc: dict) -> float:
    """Bytes of each unsplit stream that the unswapped decode floor already pays and the stream bound does not charge
    again: one STREAM_BLOCK_BYTES block where attn_stream_clk > 0 (that floor, attn_noswap_rel, is read from cells of
    one block: module docstring, "Unswapped stream rate"); 0 on the GB/s law (attn_stream_gbs, as measured)."""
    clk = float(fc.get("attn_stream_clk", 0.0))
    if clk < 0:
        raise ValueError(f"attn_stream_clk must be >= 0, got {clk!r}")
    return STREAM_BLOCK_BYTES if clk > 0 else 0.0


def stream_read_time(t_memory, nbytes, streams, fc: dict, gpu=None):
    """The decode stream time with the unsplit streams' bound: max(t_memory, (bytes - streams x `stream_first_bytes`)
    / (streams x `stream_rate`)) where `streams` > 0 (an unswapped decode's (request, KV head) streams; 0 elsewhere),
    the charged bytes clipped at 0; t_memory elsewhere. `gpu` is needed only where attn_stream_clk > 0 (the rate from
    the datasheet)."""
    if not float(fc.get("attn_stream_clk", 0.0)) > 0:  # the GB/s rate as read (bit for bit as before the clocks)
        return _read_bound(t_memory, nbytes, streams, fc.get("attn_stream_gbs", 0.0))
    if gpu is None:
        raise ValueError("stream_read_time: attn_stream_clk > 0 needs the GPU (its tensor rate and clock)")
    beyond = np.maximum(np.asarray(nbytes, dtype=float) - np.asarray(streams, dtype=float) * stream_first_bytes(fc),
                        0.0)  # the floor holds each stream's first block
    return _read_bound(t_memory, beyond, streams, stream_rate(gpu, fc) / 1e9)


def _read_bound(t_memory, nbytes, readers, gbs):
    """max(t_memory, bytes / (readers x gbs GB/s)) where `readers` > 0; t_memory elsewhere, or everywhere where the
    rate is 0 or no row has a reader (`stream_read_time`, `cta_read_time`). `gbs` a number or one per row."""
    rd = np.asarray(readers, dtype=float)
    rate = np.asarray(gbs, dtype=float) * 1e9
    if not np.any(rate > 0) or not np.any(rd > 0):
        return t_memory
    ok = (rd > 0) & (rate > 0)
    bound = np.divide(np.asarray(nbytes, dtype=float), rd * rate, out=np.zeros(np.broadcast(nbytes, rd, rate).shape),
                      where=ok)
    return np.maximum(t_memory, bound)


# FlashAttention-3 under vLLM (module docstring, "Split CTAs"; DERIVED from source): vLLM's split cap under full CUDA
# graphs and the FA3 varlen scheduler's margin on the blocks per SM
CTA_SPLIT_MAX = 16
CTA_SPLIT_MARGIN = 1.1


def split_ctas(streams, gpu, fc: dict):
    """The CTAs that read a decode batch's KV on a lane with a per-CTA read rate (attn_cta_gbs > 0): `streams`
    (request, KV head) streams x min(CTA_SPLIT_MAX, max(1, ceil(SMs / (CTA_SPLIT_MARGIN x streams)))), the long-KV
    limit of FlashAttention-3's dynamic split under vLLM (module docstring); 0 where streams is 0. None where the lane
    has no such rate (nothing to bound). Arrays broadcast (`gpu.sms` may be one per row)."""
    rate = float(fc.get("attn_cta_gbs", 0.0))
    if rate < 0:
        raise ValueError(f"attn_cta_gbs must be >= 0, got {rate!r}")
    if rate == 0:
        return None
    st = np.asarray(streams, dtype=float)
    if np.any(st < 0):
        raise ValueError("split_ctas: need streams >= 0")
    per = np.ceil(np.divide(np.asarray(gpu.sms, dtype=float), CTA_SPLIT_MARGIN * st,
                            out=np.ones(np.broadcast(st, gpu.sms).shape), where=st > 0))
    return st * np.clip(per, 1.0, float(CTA_SPLIT_MAX))


def decode_ctas(streams, decode, gpu, fc: dict):
    """`combine`'s `split_ctas`: `split_ctas` of the batches where `decode` (decode-only batches that split), 0
    elsewhere; None where the lane has no per-CTA read rate (every price as without the bound)."""
    ct = split_ctas(streams, gpu, fc)
    return None if ct is None else np.where(np.asarray(decode, dtype=bool), ct, 0.0)


def cta_read_time(t_memory, nbytes, ctas, fc: dict):
    """The decode stream time with the split CTAs' bound: max(t_memory, bytes / (ctas x attn_cta_gbs)) where
    `ctas` > 0 (`split_ctas` of decode batches; 0 elsewhere); t_memory elsewhere or with no rate (0)."""
    return _read_bound(t_memory, nbytes, ctas, fc.get("attn_cta_gbs", 0.0))


def _kvb(kv_dtype):
    if isinstance(kv_dtype, str):
        if kv_dtype not in KV_BYTES:
            raise ValueError(f"unknown KV-cache dtype {kv_dtype!r} (known: {', '.join(KV_BYTES)})")
        return float(KV_BYTES[kv_dtype])
    arr = np.asarray(kv_dtype)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=float)
    if arr.dtype.kind != "U":
        arr = arr.astype(str)
    # one vector comparison per known dtype (a handful), not a dict look-up per row
    out = np.full(arr.shape, np.nan)
    for name, nbytes in KV_BYTES.items():
        out[arr == name] = float(nbytes)
    if np.isnan(out).any():
        bad = sorted(set(arr[np.isnan(out)].tolist()))
        raise ValueError(f"unknown KV-cache dtype(s) {', '.join(map(repr, bad))} (known: {', '.join(KV_BYTES)})")
    return out


def attention_request_terms(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu,
                            constants: Constants | None = None, kv_dtype="bf16",
                            f_clk: float | None = None, fc: dict | None = None) -> dict:
    """Per-request work (flops, bytes, units) and compute time (seconds), before batching."""
    constants = constants or Constants.default()
    fc = fc or attention_constants(gpu, constants)
    s = np.asarray(new_tokens, dtype=float)
    c = np.asarray(kv_len, dtype=float)
    hq = np.asarray(n_heads, dtype=float)
    hkv = np.asarray(n_kv_heads, dtype=float)
    d = np.asarray(head_dim, dtype=float)
    kvb = _kvb(kv_dtype)
    if f_clk is None:
        f_clk = float(constants.get("f_clk", gpu))
    pre = s > 1
    flops = 4.0 * hq * d * (s * c + s * (s + 1.0) / 2.0)
    flops_eff = 4.0 * hq * d * (s * c + s * (s + np.where(pre, fc["attn_causal_tile"], 1.0)) / 2.0)
    nbytes = (c + s) * 2.0 * hkv * d * kvb + 4.0 * s * hq * d + 4.0 * s * hkv * d * pre
    units = np.where(pre, prefill_unit_heads(hq, hkv, fc), hkv) * np.ceil(s / Q_TILE)
    work, longest = prefill_tiles(s, c, hq, prefill_q_tile(gpu))
    tiles = np.divide(work, longest, out=np.zeros(np.broadcast(work, longest).shape), where=longest > 0)
    fp8 = np.asarray(kvb) == 1.0
    # softmax amortisation saturates over the query block of a prefill; a decode (s = 1)
    # runs a split-KV kernel whose compute branch is never the bottleneck.
    eta_soft = np.where(pre, s / (s + fc["attn_c_tokens"]), 1.0)
    eta = f_clk * fc["attn_eta_ceil"] * eta_soft * np.where(fp8, fc["attn_fp8_compute"], 1.0)
    t_compute = np.where(pre, flops_eff / (gpu.peak_flops * eta) + exp_time(flops_eff, d, gpu, fc, f_clk), 0.0)
    units_cost = units * np.where(fp8, fc["attn_fp8_unit"], 1.0)
    t_memory_hbm = nbytes / (gpu.mem_bw * fc["attn_eta_mem"])  # for callers that want it per request
    return {"t_compute": t_compute, "t_memory": t_memory_hbm, "flops": flops, "flops_eff": flops_eff,
            "bytes": nbytes, "units": units_cost, "tiles": tiles, "work": work, "longest": longest,
            "eta_attn": eta, "eta_softmax": eta_soft}


def combine(t_compute, nbytes, units, n_req, gpu, fc: dict, warm_l2: bool = False, tiles=None,
            prefill=None, decode_floor_rel=None, fp8_read=None, splits=None, unsplit_streams=None,
            split_ctas=None) -> dict:
    """Batch totals -> time (seconds) with every branch; arrays in, dict of arrays out.
    `splits`: the split-KV split count of decode-only batches (`split_count`), priced by `split_us_s`;
    `decode_floor_rel`: multiplier of the floor of decode-only batches (`_decode_floor_rel`);
    `fp8_read`: where True (decode-only batches with an fp8 cache), the stream is also bounded by
    `fp8_read_bandwidth` (module docstring); `unsplit_streams`: where > 0 (unswapped decode batches, its
    (request, KV head) streams), the stream is also bounded by `stream_read_time`; `split_ctas`: where > 0 (decode
    batches on a lane with attn_cta_gbs, `decode_ctas`), by `cta_read_time`."""
    t_compute = np.asarray(t_compute, dtype=float)
    if tiles is not None:
        eta_fill = fill_eta(tiles, gpu.sms, fc)
        t_compute = t_compute / eta_fill
    else:
        eta_fill = np.ones_like(t_compute)
    nbytes = np.asarray(nbytes, dtype=float)
    units = np.asarray(units, dtype=float)
    if warm_l2:
        x = nbytes / gpu.l2_bytes
        hit = 1.0 / (1.0 + (x / fc["attn_l2_x_c"]) ** fc["attn_l2_sharp"])
        bw_l2 = l2_hit_bandwidth(gpu, fc)
        t_memory = nbytes * (hit / bw_l2 + (1.0 - hit) / (gpu.mem_bw * fc["attn_eta_mem"]))
    else:
        hit = np.zeros_like(nbytes)
        t_memory = nbytes / (gpu.mem_bw * fc["attn_eta_mem"])
    if fp8_read is not None:
        t_memory = fp8_read_time(t_memory, nbytes, fp8_read, gpu, fc)
    if unsplit_streams is not None:
        t_memory = stream_read_time(t_memory, nbytes, unsplit_streams, fc, gpu)
    if split_ctas is not None:
        t_memory = cta_read_time(t_memory, nbytes, split_ctas, fc)
    t_units = units * fc["attn_cta_us"] * 1e-6 / gpu.sms
    t_work = np.maximum(t_compute, t_memory)
    p = fc["attn_overlap_p"]
    t_body = smax(t_units, t_work, p)
    floor = fc["attn_floor_us"] * 1e-6
    if prefill is not None:
        floor = floor * np.where(np.asarray(prefill, dtype=bool), fc["attn_prefill_floor_rel"], 1.0)
    if decode_floor_rel is not None:
        dec = ~np.asarray(prefill, dtype=bool) if prefill is not None else True
        floor = floor * np.where(dec, decode_floor_rel, 1.0)
    if splits is not None and float(fc.get("attn_split_us", 0.0)):
        dec = ~np.asarray(prefill, dtype=bool) if prefill is not None else True
        floor = floor + np.where(dec, split_us_s(splits, fc), 0.0)
    t = np.where(np.asarray(n_req) > 0, floor + t_body, 0.0)
    return {"t": t, "t_compute": t_compute, "t_memory": t_memory, "t_units": t_units,
            "t_floor": np.where(np.asarray(n_req) > 0, floor, 0.0), "l2_hit": hit, "eta_fill": eta_fill,
            "compute_bound": t_compute >= t_memory}


def fp8_read_time(t_memory, nbytes, fp8_read, gpu, fc: dict):
    """The decode stream time with the fp8 KV read's SM-side bound: max(t_memory, bytes / fp8_read_bandwidth)
    where `fp8_read` (decode-only batches with an fp8 cache); t_memory elsewhere or with no cap (rate 0)."""
    rate = fp8_read_bandwidth(gpu, fc)  # one float, or one per row for the fits' per-row GPU stand-in
    if not np.any(np.asarray(rate) > 0):
        return t_memory
    capped = np.maximum(t_memory, np.divide(nbytes, rate, out=np.zeros(np.broadcast(nbytes, rate).shape),
                                            where=np.asarray(rate) > 0))
    return np.where(np.asarray(fp8_read, dtype=bool), capped, t_memory)


def attention_cells(batch, new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu,
                    constants: Constants | None = None, kv_dtype="bf16", f_clk: float | None = None,
                    warm_l2: bool = False, fc: dict | None = None, splits=None) -> dict:
    """Cells of `batch` identical requests (an operator table's rows). Seconds. `splits`: `split_count` of these
    cells, given by a caller that evaluates the same cells under many constants (a fit; the count reads the cells,
    the GPU's SMs and attn_split_tile alone); None: computed here where a split is priced."""
    constants = constants or Constants.default()
    fc = fc or attention_constants(gpu, constants)
    b = np.asarray(batch, dtype=float)
    r = attention_request_terms(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu, constants, kv_dtype,
                                f_clk, fc)
    pre = np.broadcast_to(np.asarray(new_tokens, dtype=float) > 1, np.shape(b * r["bytes"]))
    copy = swap_copy(b, n_heads, n_kv_heads)
    split = split_kv(b, n_kv_heads, kv_len, head_dim, gpu, fc)
    fp8 = np.broadcast_to(np.asarray(_kvb(kv_dtype)) == 1.0, pre.shape)
    unsw = unswapped(n_heads, n_kv_heads, fc) & ~pre
    nsplit = decode_splits(fc, unsw, lambda: split_count(b, n_heads, n_kv_heads, kv_len, head_dim, gpu, fc)
                           if splits is None else np.asarray(splits, dtype=float))
    out = combine(b * r["t_compute"], b * r["bytes"], b * r["units"], b, gpu, fc, warm_l2, tiles=b * r["tiles"],
                  prefill=pre, decode_floor_rel=_decode_floor_rel(copy, fc, split, unsw), fp8_read=fp8 & ~pre,
                  splits=nsplit, unsplit_streams=np.where(unsw, b * np.asarray(n_kv_heads, dtype=float), 0.0),
                  split_ctas=decode_ctas(b * np.asarray(n_kv_heads, dtype=float), ~pre & ~unsw, gpu, fc))
    out.update({"flops": b * r["flops"], "bytes": b * r["bytes"], "units": b * r["units"],
                "eta_attn": r["eta_attn"], "eta_softmax": r["eta_softmax"]})
    return out


def attention_time(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu, constants=None,
                   kv_dtype="bf16", f_clk=None, group=None, n_groups=None, warm_l2: bool = False) -> dict:
    """Batched attention time per group (a step, or an operator cell). Seconds.

    `group` assigns each request to a batch (0..n_groups-1); default: all one batch.
    """
    constants = constants or Constants.default()
    fc = attention_constants(gpu, constants)
    s = np.asarray(new_tokens, dtype=float)
    if (group is not None and s.ndim == 1 and s.size > 256 and np.shape(kv_len) == s.shape == np.shape(group)
            and isinstance(kv_dtype, str) and all(np.ndim(x) == 0 for x in (n_heads, n_kv_heads, head_dim))
            and not np.any(s != 1.0)):  # decode rows only, one group (step) each
        return _decode_time(kv_len, n_heads, n_kv_heads, head_dim, gpu, kv_dtype, group, n_groups, warm_l2, fc)
    r = attention_request_terms(new_tokens, kv_len, n_heads, n_kv_heads, head_dim, gpu, constants, kv_dtype,
                                f_clk, fc)
    if group is None:
        group = np.zeros(np.shape(r["t_compute"]), dtype=np.int64)
        n_groups = 1
    tc = np.bincount(group, weights=r["t_compute"], minlength=n_groups)
    nb = np.bincount(group, weights=r["bytes"], minlength=n_groups)
    un = np.bincount(group, weights=r["units"], minlength=n_groups)
    wk = np.bincount(group, weights=r["work"], minlength=n_groups)
    lg = np.zeros(n_groups)
    np.maximum.at(lg, group, np.broadcast_to(r["longest"], np.shape(group)))
    ti = np.divide(wk, lg, out=np.zeros(n_groups), where=lg > 0)  # the batch's work in longest-tile units
    nreq = np.bincount(group, minlength=n_groups).astype(float)
    pre = np.bincount(group, weights=(np.asarray(new_tokens, dtype=float) > 1).astype(float), minlength=n_groups) > 0
    gqa = np.broadcast_to(swap_copy(2, n_heads, n_kv_heads), np.shape(r["t_compute"])).astype(float)
    copy = (np.bincount(group, weights=gqa, minlength=n_groups) > 0) & (nreq >= 2)
    split = _group_split(group, n_groups, nreq, n_kv_heads, kv_len, head_dim, gpu, fc, np.shape(r["t_compute"]))
    fp8 = np.broadcast_to((np.asarray(_kvb(kv_dtype)) == 1.0).astype(float), np.shape(r["t_compute"]))
    fp8_read = ~pre & (nreq > 0) & (np.bincount(group, weights=fp8, minlength=n_groups) == nreq)  # decode, all fp8
    shape = np.shape(r["t_compute"])
    uns = np.broadcast_to(unswapped(n_heads, n_kv_heads, fc), shape).astype(float)
    unsw = ~pre & (nreq > 0) & (np.bincount(group, weights=uns, minlength=n_groups) == nreq)  # decode, all unswapped
    streams = np.bincount(group, weights=np.broadcast_to(np.asarray(n_kv_heads, dtype=float), shape), minlength=n_groups)
    nsplit = decode_splits(fc, unsw, lambda: _group_splits(group, n_groups, nreq, n_heads, n_kv_heads, kv_len, head_dim,
                                                           gpu, fc, shape))
    out = combine(tc, nb, un, nreq, gpu, fc, warm_l2, tiles=ti, prefill=pre,
                  decode_floor_rel=_decode_floor_rel(copy, fc, split, unsw), fp8_read=fp8_read, splits=nsplit,
                  unsplit_streams=np.where(unsw, streams, 0.0),
                  split_ctas=decode_ctas(streams, ~pre & (nreq > 0) & ~unsw, gpu, fc))
    out["requests"] = nreq
    return out


def _group_splits(group, n_groups, nreq, n_heads, n_kv_heads, kv_len, head_dim, gpu, fc: dict, shape) -> np.ndarray:
    """`split_count` per group of requests, by the group rule of `_group_split`: its requests at their mean KV
    length, mean query and KV heads and head dim (for equal requests, `split_count` of the batch)."""
    def mean(v):
        w = np.broadcast_to(np.asarray(v, dtype=float), shape)
        return np.divide(np.bincount(group, weights=w, minlength=n_groups), nreq, out=np.ones(n_groups),
                         where=nreq > 0)
    return split_count(nreq, mean(n_heads), mean(n_kv_heads), np.where(nreq > 0, mean(kv_len), 0.0),
                       mean(head_dim), gpu, fc)


def _group_split(group, n_groups, nreq, n_kv_heads, kv_len, head_dim, gpu, fc: dict, shape) -> np.ndarray:
    """`split_kv` per group of requests: its (request, KV head) streams (the sum of the requests' KV heads)
    below the SMs and its mean KV per request past one split tile (for equal lengths, `split_kv`'s rule)."""
    hkv = np.broadcast_to(np.asarray(n_kv_heads, dtype=float), shape)
    over = np.broadcast_to(np.asarray(kv_len, dtype=float) - split_tile(head_dim, fc), shape)
    streams = np.bincount(group, weights=hkv, minlength=n_groups)
    mean_over = np.divide(np.bincount(group, weights=over, minlength=n_groups), nreq, out=np.zeros(n_groups),
                          where=nreq > 0)
    return (nreq >= 1) & (streams < gpu.sms) & (mean_over > 0)


def _decode_time(kv_len, n_heads, n_kv_heads, head_dim, gpu, kv_dtype: str, group, n_groups, warm_l2: bool,
                 fc: dict) -> dict:
    """`attention_time` of decode requests only (one new token each), per group: the same values
    as the general path, which this is `attention_request_terms` reduced to (s = 1: no compute
    branch, no tiles, one work unit per KV head), without its per-request temporaries."""
    c = np.asarray(kv_len, dtype=float)
    hq, hkv, d = (np.asarray(x, dtype=float) for x in (n_heads, n_kv_heads, head_dim))
    kvb = _kvb(kv_dtype)
    nbytes = c + 1.0  # (c + s) 2 H_kv d b_kv + 4 s H_q d (+ 0: a decode writes no new K/V of its own)
    nbytes *= 2.0
    nbytes *= hkv
    nbytes *= d
    nbytes *= kvb
    nbytes += 4.0 * 1.0 * hq * d
    unit = hkv * np.ceil(1.0 / Q_TILE) * (fc["attn_fp8_unit"] if kvb == 1.0 else 1.0)
    nreq = np.bincount(group, minlength=n_groups).astype(float)
    nb = np.bincount(group, weights=nbytes, minlength=n_groups)
    unit = float(unit)
    if unit.is_integer() and unit * c.size < 2.0 ** 53:  # a sum of whole numbers below 2^53 is exact: count x unit
        un = nreq * unit
    else:
        un = np.bincount(group, weights=np.full(c.shape, unit), minlength=n_groups)
    zero = np.zeros(n_groups)
    copy = swap_copy(nreq, hq, hkv)
    split = _group_split(group, n_groups, nreq, hkv, c, d, gpu, fc, c.shape)
    unsw = np.broadcast_to(unswapped(hq, hkv, fc), (n_groups,)) & (nreq > 0)
    nsplit = decode_splits(fc, unsw, lambda: _group_splits(group, n_groups, nreq, hq, hkv, c, d, gpu, fc, c.shape))
    out = combine(zero, nb, un, nreq, gpu, fc, warm_l2, tiles=zero, prefill=np.zeros(n_groups, dtype=bool),
                  decode_floor_rel=_decode_floor_rel(copy, fc, split, unsw), fp8_read=np.full(n_groups, kvb == 1.0),
                  splits=nsplit, unsplit_streams=np.where(unsw, nreq * hkv, 0.0),
                  split_ctas=decode_ctas(nreq * hkv, (nreq > 0) & ~unsw, gpu, fc))
    out["requests"] = nreq
    return out
