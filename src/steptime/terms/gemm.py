"""The projection GEMM term: a roofline with a factored compute efficiency.

    t_gemm = smax( 2 m n k / (P_boost * eta_c),  bytes / (BW * eta_mem) + t_cta ) + t_floor
    eta_c  = f_clk * eta_cluster * eta_active * eta_duty

`smax(a, b) = (a^p + b^p)^(1/p)` is the roofline max with a finite overlap exponent
`overlap_p` (p -> inf is the hard max): near the ridge neither branch hides the other.

SM fill (`eta_cluster`) comes from launch geometry, by paradigm:

* ``wave`` (Ampere, Ada, and the sm120 Blackwell RTX part): a tile ladder; each output
  tile is one CTA, CTAs run in waves of `SMs x ctas_per_sm`; the last wave is partly
  empty. eta_cluster = useful tile area / (waves x slots x tile area), which holds both
  the padding of the edge tiles and the last-wave tail.
* ``persistent`` (Hopper, sm100/sm103 Blackwell): thread-block clusters launched as a
  persistent grid capped by GPC geometry (cudaOccupancyMaxActiveClusters x cluster size,
  e.g. 7 x 16 = 112 CTAs on a 132-SM H100). SMs beyond the cap stay dark; each CTA walks
  tiles_per_cta = tiles / grid tiles, and the tensor-pipe duty rises as its one-time
  prologue is amortised: 1 / (1 + duty_c / tiles_per_cta).

In both paradigms each tile's main loop over k pays a fixed prologue/epilogue, so the
duty also carries 1 / (1 + duty_k / k_per_cta) (k per CTA after split-K). Split-K is one
more launch option for the few-tile case (small m x n, long k). The kernel choice mimics
a heuristic that picks the fastest option per cell.

Memory efficiency (`eta_mem`) is a saturation law in the working set over L2,
x = bytes / L2:  eta_max * x / (x + x_half). Working sets below `l2_resident_x` of L2
stay resident between back-to-back launches (weights re-read from L2, not DRAM); there
the achieved bandwidth is max(DRAM law, an L2 path of `l2_gain` bytes per
SM clock), which is how a GDDR part with a large L2 beats its DRAM speed.

Per-CTA stream (`t_cta`, persistent paradigm only): the CTA of one output column walks
its k loop over k x tile_n weight elements (times the columns it walks, ceil(n-tiles /
grid cap)), and one CTA does not pull DRAM at the device's rate. Its time, bytes_cta x
`cta_stream_us_mb` (microseconds per MB per CTA), is added to the memory branch. It
matters at the few-tile skinny shapes (column-parallel n = 768 at TP 8, m <= 256: one CTA
streams 1 MB of a 6 MB weight) and is a small share where many CTAs share the bytes.
`cta_stream_us_mb` = 0 turns it off; wave-launched families always keep it off (E1.29).

Throttled tensor pipe (`tensor_pipe_fraction`, from the datasheet): a tile's relative throughput `rel` in the
ladder is a cap set by what feeds the tensor pipe (operand staging of a small tile), fitted on parts whose pipe issues
at its architecture's full rate per SM clock. A part whose pipe is throttled to a fraction f of that rate (H20 1/4,
the GeForce / L20 / L40 bf16-with-fp32-accumulate 1/2) keeps the same SM data path, so a tile runs at
min(f, rel) of the full rate: `rel` / f of its own peak, at most 1 (`tile_ladder`). f is 1 on every full-rate part
(the ladder unchanged). Without it a one-token GEMM on H20 (16-row tile at rel 0.5 on a quarter-rate pipe) was
priced compute-bound (DESIGN.md, wave 33 helper `h20`).

Split depth (`split_min_k`, elements of k; 0 = off; persistent launches only): a launch splits k (split-K or a stream-K
launch spreading few tiles over more CTAs) only into pieces of at least this depth, as the
measured few-tile kernels do (DESIGN.md, wave 30 helper `splitk`: one serial k loop per output
tile up to k ~4K, split only once k is deep). With it on, the per-CTA stream walks the launch's
k piece (`k_cta`), which the depth rule keeps at least min(k, split_min_k) deep; with it off the
stream walks the full k, whatever the launch's (too early) split.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants

BYTES = MappingProxyType({"bf16": 2, "fp16": 2, "fp8": 1})
SPLITK_OPTIONS = (1, 2, 4, 8)
SPLITK_MIN_K = 512  # each split keeps at least this much of k

# Constants the term reads (resolved per GPU into a plain dict by `resolve`).
GEMM_CONSTANTS = ("tiles", "ctas_per_sm", "cluster_size", "duty_c", "duty_k", "eta_active", "f_clk",
                  "eta_mem_max", "mem_x_half", "mem_t_half_us", "l2_gain", "l2_resident_x",
                  "kernel_floor_us", "overlap_p", "streamk_rel", "clk_droop", "clk_droop_us",
                  "cta_stream_us_mb", "streamk_m_grain", "split_min_k")
# constants an older constant set may lack, with their neutral values (cluster_size 1: no clusters)
_OPTIONAL = MappingProxyType({"split_min_k": 0.0, "cta_stream_us_mb": 0.0, "streamk_m_grain": 0.0, "duty_k": 0.0, "mem_t_half_us": 0.0, "l2_resident_x": 0.0,
                              "overlap_p": float("inf"), "streamk_rel": 0.0, "clk_droop": 0.0, "clk_droop_us": 1.0,
                              "cluster_size": 1})


def fill_paradigm(gpu) -> str:
    """Which SM-fill model applies to a GPU, and why (see module docstring; E1.12)."""
    if gpu.architecture in ("ampere", "ada"):
        return "wave"
    if gpu.architecture == "hopper":
        return "persistent"
    if gpu.architecture == "blackwell":
        # sm120 (RTX PRO 6000 Blackwell) lacks the sm100 2-SM tensor-core pairs and
        # ships wave-launched kernels; sm100/sm103 data-centre parts persist.
        return "wave" if gpu.sm_version >= 120 else "persistent"
    if gpu.architecture in ("cdna3", "cdna4"):
        # ASSUMED: AMD Instinct has no thread-block clusters; hipBLASLt launches one workgroup per
        # output tile over the CUs, in waves (the wave law, CUs in place of SMs). Uncalibrated.
        return "wave"
    raise ValueError(f"no SM-fill paradigm for architecture {gpu.architecture!r}")


def cluster_cap(gpu, cluster: int) -> int:
    """CTAs a persistent grid of `cluster`-CTA clusters can keep co-resident.

    A MEASURED cudaOccupancyMaxActiveClusters reading wins where the spec file has one;
    otherwise DERIVED from GPC geometry (`geometry_cluster_cap` on `gpc_layout(gpu)`).
    """
    if cluster in gpu.max_active_clusters:
        return gpu.max_active_clusters[cluster] * cluster
    return geometry_cluster_cap(gpu.sms, gpu.gpcs, cluster, gpc_layout(gpu))


def gpc_layout(gpu) -> list:
    """SMs per GPC, DERIVED from the datasheet counts: full GPCs of `sms_per_gpc_max` SMs
    first, the harvested remainder in the last (H100 SXM: 7 x 18 + 6 = 132, which is what
    makes 16-CTA clusters fit 7 times, not 8)."""
    full = int(gpu.sms_per_gpc_max or 0)
    if full <= 0 or full * gpu.gpcs < gpu.sms:
        per = gpu.sms // gpu.gpcs
        extra = gpu.sms - per * gpu.gpcs
        return [per + 1] * extra + [per] * (gpu.gpcs - extra)
    layout, left = [], gpu.sms
    for _ in range(gpu.gpcs):
        take = min(full, left)
        layout.append(take)
        left -= take
    return layout


def geometry_cluster_cap(sms: int, gpcs: int, cluster: int, sms_per_gpc: list | None = None) -> int:
    """CTAs co-resident for GPC-local clusters: sum over GPCs of floor(SMs_gpc / cluster) x cluster.

    `sms_per_gpc` gives the layout (e.g. H100 SXM 7 x 18 + 6 = 132 -> 7 clusters of 16,
    112 CTAs); without it SMs are spread as evenly as the count allows (8 clusters, 128).
    """
    if sms_per_gpc is None:
        per = sms // gpcs
        extra = sms - per * gpcs  # GPCs with one SM more
        sms_per_gpc = [per + 1] * extra + [per] * (gpcs - extra)
    clusters = sum(s // cluster for s in sms_per_gpc)
    return max(cluster, clusters * cluster)


def blind_cluster_cap(sms: int, cluster: int) -> int:
    """The cluster-blind (whole-device) cap: floor(SMs / cluster) x cluster."""
    return max(cluster, (sms // cluster) * cluster)


# The memory-ramp constants fitted per launch kind: on a wave-launched part (`fill_paradigm` "wave") the constant
# `<name>_wave`, where the constant set has one at a scope at least as specific as `<name>`'s (gpu > family >
# global: a GPU's own value, e.g. a held-out fold's, is not replaced by a shared one), replaces `<name>`
# (absent: the one shared ramp)
WAVE_RAMP = ("mem_t_half_us", "l2_resident_x", "l2_gain")
_SCOPE_RANK = MappingProxyType({"global": 0, "family": 1, "gpu": 2})


def _wave_ramp(gpu, constants: Constants, name: str):
    """`<name>_wave`'s value where it applies to `gpu` over `<name>` (see WAVE_RAMP), else None."""
    try:
        w = constants.lookup(f"{name}_wave", gpu)
    except KeyError:
        return None
    try:
        c = constants.lookup(name, gpu)
    except KeyError:
        return w.value
    rank = _SCOPE_RANK[w.scope.partition(".")[0]]
    return w.value if rank >= _SCOPE_RANK[c.scope.partition(".")[0]] else None


def resolve(gpu, constants: Constants | None = None) -> dict:
    """The GEMM constants that apply to `gpu`, as a plain dict (fast to reuse per call)."""
    constants = constants or Constants.default()
    p = {name: constants.get(name, gpu, _OPTIONAL[name]) if name in _OPTIONAL else constants.get(name, gpu)
         for name in GEMM_CONSTANTS}
    if fill_paradigm(gpu) == "wave":
        for name in WAVE_RAMP:
            v = _wave_ramp(gpu, constants, name)
            if v is not None:
                p[name] = v
    return p


# Dense bf16 tensor flops per SM per clock at the architecture's full pipe rate (an architecture fact, by sm_version;
# CDNA: per CU), against which `tensor_pipe_fraction` reads a part's datasheet rate.
TENSOR_FLOP_PER_CLK_SM = MappingProxyType({80: 2048, 86: 1024, 89: 1024, 90: 4096, 100: 8192, 103: 8192, 120: 1024,
                                           942: 2048, 950: 4096})


def tensor_pipe_fraction(gpu) -> float:
    """Fraction of its architecture's full tensor-pipe rate per SM clock at which `gpu` issues (DERIVED from the
    datasheet: bf16 dense flops / (SMs x boost clock), over `TENSOR_FLOP_PER_CLK_SM`), rounded to a power of two
    (pipe throttles are issue-rate halvings: H20 1/4, GeForce / L20 / L40 bf16 with fp32 accumulate 1/2; a quoted
    clock off the one the peak was quoted at moves the raw ratio by < 15%), at most 1. 1 where the architecture or
    the clock is unknown."""
    full = TENSOR_FLOP_PER_CLK_SM.get(getattr(gpu, "sm_version", None))
    clk = gpu.boost_mhz
    if full is None or np.ndim(clk) or not clk or not gpu.sms:
        return 1.0
    ratio = gpu.peak_flops / (gpu.sms * clk * 1e6 * full)
    if ratio <= 0:
        return 1.0
    return float(min(1.0, 2.0 ** round(math.log2(ratio))))


def tile_ladder(p: dict, gpu) -> np.ndarray:
    """The tile ladder [[tile_m, tile_n, rel], ...] as it runs on `gpu`: on a throttled tensor pipe (fraction f < 1,
    `tensor_pipe_fraction`) each tile's rel becomes min(1, rel / f) (the tile's feed cap is the full-rate part's, the
    pipe is slower); the ladder of `p` unchanged where f is 1."""
    tiles = np.asarray(p["tiles"], dtype=float)
    f = tensor_pipe_fraction(gpu)
    if f < 1.0:
        tiles = tiles.copy()
        tiles[:, 2] = np.minimum(1.0, tiles[:, 2] / f)
    return tiles


def _options(p: dict, paradigm: str, gpu):
    """Launch options (tile_m, tile_n, rel, split, streamk): every tile x split-K, plus one
    stream-K (work-balanced) launch per tile when `streamk_rel` > 0 and the launch is
    persistent (the wave-launched kernels of Ampere/Ada/sm120 have no stream-K). The tiles' rel as they run on
    `gpu` (`tile_ladder`)."""
    tiles = tile_ladder(p, gpu)
    opts = [(tm, tn, r, s, 0.0) for tm, tn, r in tiles for s in SPLITK_OPTIONS]
    if float(p.get("streamk_rel", 0.0)) > 0 and paradigm == "persistent":
        opts += [(tm, tn, r * float(p["streamk_rel"]), 1.0, 1.0) for tm, tn, r in tiles]
    return np.asarray(opts, dtype=float)  # (n_opt, 5)


SPLITK_MAX_WAVES = 2.0  # split-K is considered only while a tile's output grid is under two full grids
# Below this many cells every option is scored in one (cells x options) broadcast: a
# scheduler's one-step call then pays a few numpy calls instead of one loop turn per option.
SMALL_BATCH = 256
# Above this many cells `gemm_time` runs in passes of this many (the same values; the
# temporaries of a pass stay in cache, about twice the cells per CPU-second at 10^6 cells).
CHUNK = 65536


def grid_cap(gpu, p: dict, paradigm: str) -> float:
    """Most CTAs a launch keeps resident: SMs x CTAs per SM for wave launches, the cluster
    cap of the GPC layout for persistent ones."""
    if paradigm == "wave":
        return float(gpu.sms * int(p["ctas_per_sm"]))
    return float(cluster_cap(gpu, int(p["cluster_size"])))


def split_depth(p: dict, paradigm: str) -> float:
    """Least k per piece a launch may split k into: SPLITK_MIN_K, or on persistent launches the fitted depth
    `split_min_k` when larger (the wave-launched parts' kernels split k early: the depth does not apply)."""
    if paradigm != "persistent":
        return float(SPLITK_MIN_K)
    return max(float(SPLITK_MIN_K), float(p.get("split_min_k", 0.0)))


def streamk_grid(tiles, k, grid_max: float, p: dict):
    """CTAs a stream-K launch uses: the full grid cap, or, with the split depth `split_min_k` on, only as
    many as keep each CTA's share of k at least that deep (tiles x k / split_min_k, at least one CTA per
    tile's worth of work, at most the cap). A scalar `grid_max` when the depth is off (the old launch)."""
    kmin = float(p.get("split_min_k", 0.0))
    if kmin <= 0:
        return grid_max
    return np.minimum(grid_max, tiles * np.maximum(1.0, k / kmin))


def tile_rows(m, tm, cluster_m=1.0):
    """Tile rows a launch runs along m: ceil(m / tm) rounded up to whole clusters of `cluster_m` tiles."""
    return np.ceil(np.ceil(m / tm) / cluster_m) * cluster_m


def _option_terms(m, n, k, tm, tn, rel, split, sk, paradigm: str, gpu, p: dict,
                  grid_max: float | None = None, cluster_m=1.0) -> dict:
    """Fill, duty and score of launch option(s) (arrays broadcast: cells x options or per cell).

    `grid_max` is the most CTAs a launch keeps resident (`grid_cap`), passed in by callers
    that already hold it. `cluster_m`: the launch's tile rows are rounded up to a whole number of
    clusters along m (a kernel dispatch's cluster shape, `_forced_fill`; the padded rows compute)."""
    if grid_max is None:
        grid_max = grid_cap(gpu, p, paradigm)
    is_sk = sk > 0
    tiles_mn = tile_rows(m, tm, cluster_m) * np.ceil(n / tn)
    # stream-K hands out work, not whole tiles: its padded work counts the token rows at the grain
    tiles_mn = np.where(is_sk, streamk_tiles(m, n, tm, tn, p), tiles_mn)
    tiles = tiles_mn * split
    pad = (m * n) / (tiles_mn * tm * tn)
    if paradigm == "wave":
        slots = grid_max
        waves = np.ceil(tiles / slots)
        grid = np.where(is_sk, slots, np.minimum(tiles, slots))
        tail = np.where(is_sk, 1.0, tiles / (waves * slots))
        eta_cluster = pad * tail
        tiles_per_cta = np.where(is_sk, tiles / slots, waves)
        prologue = 1.0
    elif paradigm == "persistent":
        cap = grid_max
        grid = np.where(is_sk, streamk_grid(tiles, k, cap, p), np.minimum(tiles, cap))
        rounds = np.ceil(tiles / grid)
        tail = np.where(is_sk, 1.0, tiles / (rounds * grid))
        eta_cluster = pad * tail * grid / gpu.sms
        # the critical-path CTA walks `rounds` tiles (stream-K: an even share of them)
        tiles_per_cta = np.where(is_sk, tiles / grid, rounds)
        prologue = 1.0 / (1.0 + float(p["duty_c"]) / np.maximum(tiles_per_cta, 1.0 / 8.0))
    else:
        raise ValueError(f"unknown paradigm {paradigm!r}")
    # k per CTA: split-K divides it; stream-K hands each CTA tiles x k / grid of work
    k_cta = np.where(is_sk, k * np.minimum(1.0, tiles / grid), k / split)
    eta_duty = rel / (1.0 + float(p["duty_k"]) / k_cta) * prologue
    # split-K pays a reduction pass over the (split-1) partial outputs
    reduce_pen = 1.0 / (1.0 + (split - 1.0) * 0.5 * (tn / np.maximum(k, 1.0)))
    eta_cluster = eta_cluster * reduce_pen
    return {"eta_cluster": eta_cluster, "eta_duty": eta_duty, "grid": grid, "tiles_per_cta": tiles_per_cta,
            "tiles_mn": tiles_mn, "k_cta": k_cta, "score": eta_cluster * eta_duty}


# The constants `sm_fill` reads (the launch choice and its fill and duty), per paradigm: one fill of a set of cells
# serves every parameter set that agrees with it on these (a fit whose step moves only the other constants passes it
# to `gemm_time` as `fill`). Wave launches have no clusters, no stream-K and no split depth, and pay no per-CTA
# prologue. A test moves each of the other GEMM constants and checks the fill does not change.
FILL_CONSTANTS = MappingProxyType({
    "wave": ("tiles", "ctas_per_sm", "duty_k"),
    "persistent": ("tiles", "cluster_size", "duty_c", "duty_k", "streamk_rel", "streamk_m_grain", "split_min_k"),
})


def fill_key(p: dict, paradigm: str) -> tuple:
    """The values of `FILL_CONSTANTS[paradigm]` in `p` (resolved constants), hashable: equal keys, equal `sm_fill`
    of the same cells on the same GPU under that paradigm (the heuristic launch)."""
    return (paradigm,) + tuple(repr(p.get(name)) if name == "tiles" else p.get(name)
                               for name in FILL_CONSTANTS[paradigm])


def sm_fill(m, n, k, gpu, constants: Constants | None = None, params: dict | None = None,
            paradigm: str | None = None, launch=None) -> dict:
    """SM fill and duty per cell for the best launch option. Arrays in, dict of arrays out.

    Options: each tile of the ladder with split-K 1/2/4/8 (wave or persistent launch by
    paradigm; split-K only while that tile's output grid is under SPLITK_MAX_WAVES grids
    and k / split >= `split_depth`), and, where the family has one (`streamk_rel` > 0), a
    stream-K launch that spreads the m n k work evenly over a full grid (no tail, no idle
    SMs up to the grid cap) at a relative throughput `streamk_rel` (its fix-up and
    bookkeeping cost). The best score (fill x duty) wins, as a heuristic picking the
    fastest kernel would. Small batches score every option in one broadcast, large
    ones scan the options one at a time over 1-D cell arrays; both pick the same option.

    `launch`: a kernel library's own dispatch instead of the heuristic, a callable (m, n, k) -> (tile_m,
    tile_n) or (tile_m, tile_n, cluster_m) per cell (terms/precision.py fp8_launch): that tile, no split-K,
    no stream-K, at the ladder's relative throughput of the tile nearest in shape (`forced_rel`), the tile
    rows rounded up to whole clusters of cluster_m (default 1).
    """
    p = params if params is not None else resolve(gpu, constants)
    if launch is not None:  # a kernel library's own dispatch (above)
        return _forced_fill(m, n, k, gpu, p, paradigm or fill_paradigm(gpu), launch)
    m, n, k = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(n, dtype=float),
                                  np.asarray(k, dtype=float))
    shape = m.shape
    m, n, k = m.ravel(), n.ravel(), k.ravel()
    paradigm = paradigm or fill_paradigm(gpu)
    opts = _options(p, paradigm, gpu)
    grid_max = grid_cap(gpu, p, paradigm)
    if m.size <= SMALL_BATCH:
        idx = _best_option_2d(m, n, k, opts, paradigm, gpu, p, grid_max)
    else:
        idx = _best_option_loop(m, n, k, opts, paradigm, gpu, p, grid_max)
    ch = np.ascontiguousarray(opts.T)[:, idx]  # one contiguous row per option field (tile_m, tile_n, rel, split, stream-K)
    r = _option_terms(m, n, k, ch[0], ch[1], ch[2], ch[3], ch[4], paradigm, gpu, p, grid_max)
    return {
        "paradigm": paradigm,
        "eta_cluster": r["eta_cluster"].reshape(shape),
        "eta_duty": r["eta_duty"].reshape(shape),
        "tile_m": ch[0].reshape(shape),
        "tile_n": ch[1].reshape(shape),
        "split_k": ch[3].reshape(shape),
        "stream_k": (ch[4] > 0).reshape(shape),
        "grid": r["grid"].reshape(shape),
        "tiles_per_cta": r["tiles_per_cta"].reshape(shape),
        "k_cta": np.broadcast_to(r["k_cta"], m.shape).reshape(shape),
    }


def forced_rel(tile_m, tile_n, ladder) -> np.ndarray:
    """Relative throughput of each (tile_m, tile_n) from the tile ladder [[tm, tn, rel], ...]: the ladder
    tile nearest in log tile_m, then in log tile_n."""
    lad = np.asarray(ladder, dtype=float)
    if lad.ndim != 2 or lad.shape[1] != 3 or not len(lad):
        raise ValueError(f"tile ladder must be [[tile_m, tile_n, rel], ...], got {ladder!r}")
    tm, tn = np.asarray(tile_m, dtype=float), np.asarray(tile_n, dtype=float)
    if np.any(tm <= 0) or np.any(tn <= 0):
        raise ValueError("launch tiles must be positive")
    d = (np.abs(np.log(tm[..., None]) - np.log(lad[:, 0])) * 100.0
         + np.abs(np.log(tn[..., None]) - np.log(lad[:, 1])))
    return lad[np.argmin(d, axis=-1), 2]


def _forced_fill(m, n, k, gpu, p: dict, paradigm: str, launch) -> dict:
    """sm_fill's dict for a fixed dispatch (`launch`, sm_fill): one tile per cell, split-K 1, no stream-K."""
    m, n, k = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(n, dtype=float),
                                  np.asarray(k, dtype=float))
    shape = m.shape
    m, n, k = m.ravel(), n.ravel(), k.ravel()
    tiles = launch(m, n, k)
    if len(tiles) not in (2, 3):
        raise ValueError(f"a launch returns (tile_m, tile_n) or (tile_m, tile_n, cluster_m), got {len(tiles)} arrays")
    tm, tn, cm = (np.broadcast_to(np.asarray(v, dtype=float), m.shape) for v in (tuple(tiles) + (1.0,))[:3])
    if np.any(cm < 1):
        raise ValueError("a launch's cluster_m (tile rows per cluster) must be >= 1")
    rel = forced_rel(tm, tn, tile_ladder(p, gpu))
    one, zero = np.ones_like(m), np.zeros_like(m)
    r = _option_terms(m, n, k, tm, tn, rel, one, zero, paradigm, gpu, p, grid_cap(gpu, p, paradigm), cluster_m=cm)
    return {"paradigm": paradigm, "eta_cluster": r["eta_cluster"].reshape(shape),
            "eta_duty": r["eta_duty"].reshape(shape), "tile_m": tm.reshape(shape), "tile_n": tn.reshape(shape),
            "split_k": one.reshape(shape), "stream_k": np.zeros(shape, dtype=bool), "grid": r["grid"].reshape(shape),
            "tiles_per_cta": r["tiles_per_cta"].reshape(shape), "k_cta": np.broadcast_to(r["k_cta"], m.shape).reshape(shape)}


def cta_stream_time(n, k, fill: dict, gpu, p: dict, dtype: str = "bf16"):
    """Seconds one CTA spends streaming the weight of its output column (persistent launches only):
    k x tile_n x bytes per element for each of the ceil(n-tiles / grid cap) columns it walks,
    times `cta_stream_us_mb` (us per MB per CTA). The k loop is the launch's k piece per CTA
    (`fill["k_cta"]`) when the split depth `split_min_k` is on (the launch splits k only as deep
    as the measured kernels do); with it off it is the full k: the measured few-tile kernels
    show no rescue by the law's early split (DESIGN.md, E1.29). Zero where the constant is 0 or the launch is
    wave-paradigm (the wave-launched parts show no such cost)."""
    c = float(p.get("cta_stream_us_mb", 0.0))
    tn = fill["tile_n"]
    if c <= 0 or fill["paradigm"] != "persistent":
        return np.zeros(np.shape(tn))
    cols = np.ceil(np.ceil(n / tn) / grid_cap(gpu, p, "persistent"))
    k_loop = fill["k_cta"] if float(p.get("split_min_k", 0.0)) > 0 else k
    return k_loop * tn * BYTES[dtype] * cols * c * 1e-12


def streamk_tiles(m, n, tm, tn, p: dict):
    """Output tiles' worth of work a stream-K launch shares out: ceil(n / tn) tile columns times the token
    rows padded to `streamk_m_grain` (never past whole tiles of tm), in units of tm rows. With the grain 0
    (off) this is the whole-tile count ceil(m / tm) ceil(n / tn)."""
    g = float(p.get("streamk_m_grain", 0.0))
    rows = np.ceil(m / tm) * tm
    if g > 0:
        rows = np.minimum(np.ceil(m / g) * g, rows)
    return rows / tm * np.ceil(n / tn)


def _split1_score(tiles, mn, k, tm, tn, rel, sk, paradigm: str, gpu, grid_max: float, duty_k: float,
                  duty_c: float, dk, p: dict, tiles_sk=None):
    """Score of split-K-1 options (`tiles` = ceil(m/tm) ceil(n/tn), `dk` = 1/(1 + duty_k/k)):
    the algebra of `_option_terms` reduced to the score. `sk` may be a scalar or an array."""
    if paradigm == "wave":
        return (mn * (rel / (tm * tn * grid_max))) / np.ceil(tiles / grid_max) * dk

    def plain():
        rounds = np.ceil(tiles / grid_max)
        return (mn * (rel / (tm * tn * gpu.sms))) / rounds * dk / (1.0 + duty_c / rounds)

    def streamk():  # persistent only: a full grid (or as much of it as the split depth allows), no tail
        ts = tiles if tiles_sk is None else tiles_sk
        g = streamk_grid(ts, k, grid_max, p)
        tpc = ts / g
        kc = k * np.minimum(1.0, tpc)
        return (mn * (rel * g / (tm * tn * gpu.sms))) / ts / (1.0 + duty_k / kc) \
            / (1.0 + duty_c / np.maximum(tpc, 1.0 / 8.0))

    is_sk = np.asarray(sk) > 0
    if not is_sk.any():
        return plain()
    if is_sk.all():
        return streamk()
    return np.where(is_sk, streamk(), plain())


def _best_option_2d(m, n, k, opts, paradigm: str, gpu, p: dict, grid_max: float):
    """Index of the best launch option per cell, every option at once (small batches).
    Same scores and the same first-best tie rule as `_best_option_loop`."""
    duty_k, duty_c = float(p["duty_k"]), float(p["duty_c"])
    M, N, K = m[:, None], n[:, None], k[:, None]
    tm, tn, rel, split, sk = (opts[None, :, c] for c in range(5))
    one = opts[:, 3] == 1
    score = np.full((m.size, len(opts)), -np.inf)
    o_tm, o_tn = tm[:, one], tn[:, one]
    score[:, one] = _split1_score(np.ceil(M / o_tm) * np.ceil(N / o_tn), M * N, K, o_tm, o_tn, rel[:, one],
                                  sk[:, one], paradigm, gpu, grid_max, duty_k, duty_c, 1.0 / (1.0 + duty_k / K), p,
                                  tiles_sk=streamk_tiles(M, N, o_tm, o_tn, p))
    if np.any(~one):
        s_tm, s_tn, s_split = tm[:, ~one], tn[:, ~one], split[:, ~one]
        ok = (np.ceil(M / s_tm) * np.ceil(N / s_tn) < SPLITK_MAX_WAVES * grid_max) & (K >= split_depth(p, paradigm) * s_split)
        sc = _option_terms(M, N, K, s_tm, s_tn, rel[:, ~one], s_split, sk[:, ~one], paradigm, gpu, p,
                           grid_max)["score"]
        score[:, ~one] = np.where(ok, sc, -np.inf)
    score[np.isnan(score)] = -np.inf  # the loop never picks a NaN score either
    return np.argmax(score, axis=1)


def _best_option_loop(m, n, k, opts, paradigm: str, gpu, p: dict, grid_max: float):
    """Index of the best launch option per cell, one option at a time over 1-D cell arrays
    (large batches: no cells x options temporaries). The scores are `_split1_score`'s and
    `_option_terms`' to the last bit (the same operations in the same order), with what a
    tile shape's options share (its tile count, rounds, the plain launch's prologue) computed
    once, and the per-option passes written into reused buffers."""
    best = np.full(m.shape, -1.0)
    idx = np.zeros(m.shape, dtype=np.int64)
    mn = m * n
    ceil_m, ceil_n, shape = {}, {}, {}
    duty_k = float(p["duty_k"])
    duty_c = float(p["duty_c"])
    dk = 1.0 / (1.0 + duty_k / k)
    sc = np.empty(m.shape)
    better = np.empty(m.shape, dtype=bool)
    depth = split_depth(p, paradigm)
    for j, (tm, tn, rel, split, sk) in enumerate(opts):
        tiles, rounds, plain_den, few = shape.get((tm, tn)) or _tile_shape(m, n, tm, tn, ceil_m, ceil_n, paradigm,
                                                                           grid_max, duty_c, shape)
        if split > 1:
            sel = few[k[few] >= depth * split]
            if sel.size == 0:
                continue
            sc_sel = _splitk_score(mn[sel], tiles[sel], k[sel], tm, tn, rel, split, paradigm, gpu, grid_max,
                                   duty_k, duty_c)
            b = sc_sel > best[sel]
            best[sel[b]] = sc_sel[b]
            idx[sel[b]] = j
            continue
        if paradigm == "wave":  # (mn * (rel / (tm tn grid))) / ceil(tiles / grid) * dk
            np.multiply(mn, rel / (tm * tn * grid_max), out=sc)
            sc /= rounds
            sc *= dk
        elif sk > 0:  # stream-K: (mn * (rel grid / (tm tn SMs))) / tiles / (1 + duty_k / kc) / (1 + duty_c / max(tpc, 1/8))
            if float(p.get("streamk_m_grain", 0.0)) > 0:
                tiles = streamk_tiles(m, n, tm, tn, p)
            g = streamk_grid(tiles, k, grid_max, p)
            tpc = tiles / g
            kc = k * np.minimum(1.0, tpc)
            np.multiply(mn, rel * g / (tm * tn * gpu.sms), out=sc)
            sc /= tiles
            np.divide(duty_k, kc, out=kc)
            kc += 1.0
            sc /= kc
            np.maximum(tpc, 1.0 / 8.0, out=tpc)
            np.divide(duty_c, tpc, out=tpc)
            tpc += 1.0
            sc /= tpc
        else:  # persistent: (mn * (rel / (tm tn SMs))) / rounds * dk / (1 + duty_c / rounds)
            np.multiply(mn, rel / (tm * tn * gpu.sms), out=sc)
            sc /= rounds
            sc *= dk
            sc /= plain_den
        np.greater(sc, best, out=better)
        np.maximum(best, sc, out=best)
        np.putmask(idx, better, j)
    return idx


def _tile_shape(m, n, tm, tn, ceil_m: dict, ceil_n: dict, paradigm: str, grid_max: float, duty_c: float,
                shape: dict) -> tuple:
    """What every option of one tile shape shares: tiles = ceil(m/tm) ceil(n/tn), rounds =
    ceil(tiles / grid), 1 + duty_c / rounds (persistent), and the cells few enough tiles for split-K."""
    if tm not in ceil_m:
        ceil_m[tm] = np.ceil(m / tm)
    if tn not in ceil_n:
        ceil_n[tn] = np.ceil(n / tn)
    tiles = ceil_m[tm] * ceil_n[tn]
    rounds = np.ceil(tiles / grid_max)
    plain_den = 1.0 + duty_c / rounds if paradigm == "persistent" else None
    few = np.flatnonzero(tiles < SPLITK_MAX_WAVES * grid_max)
    shape[(tm, tn)] = out = (tiles, rounds, plain_den, few)
    return out


def _splitk_score(mn, tiles_mn, k, tm, tn, rel, split, paradigm: str, gpu, grid_max: float, duty_k: float,
                  duty_c: float):
    """`_option_terms(...)["score"]` of a split-K (split > 1, not stream-K) option, the same
    operations in the same order, given mn = m n and tiles_mn = ceil(m/tm) ceil(n/tn)."""
    tiles = tiles_mn * split
    pad = mn / (tiles_mn * tm * tn)
    if paradigm == "wave":
        waves = np.ceil(tiles / grid_max)
        eta_cluster = pad * (tiles / (waves * grid_max))
        prologue = 1.0
    elif paradigm == "persistent":
        grid = np.minimum(tiles, grid_max)
        rounds = np.ceil(tiles / grid)
        eta_cluster = pad * (tiles / (rounds * grid)) * grid / gpu.sms
        prologue = 1.0 / (1.0 + duty_c / np.maximum(rounds, 1.0 / 8.0))
    else:
        raise ValueError(f"unknown paradigm {paradigm!r}")
    eta_duty = rel / (1.0 + duty_k / (k / split)) * prologue
    reduce_pen = 1.0 / (1.0 + (split - 1.0) * 0.5 * (tn / np.maximum(k, 1.0)))
    return eta_cluster * reduce_pen * eta_duty


def l2_path_fraction(gpu, gain: float) -> float:
    """Bandwidth of the L2 path for resident working sets, as a fraction of DRAM peak.

    `gain` (the `l2_gain` constant) is in bytes per SM per SM clock, so the path scales
    with SMs x boost clock: 1 B/clk/SM stays below DRAM speed on every part we know (no
    L2 effect); a fitted value of a few bytes lets a GDDR part with a large L2 beat DRAM.
    """
    return gain * gpu.sms * (gpu.boost_mhz or 0.0) * 1e6 / gpu.mem_bw


def eta_mem(bytes_moved, gpu, constants: Constants | None = None, params: dict | None = None):
    """Achieved fraction of peak DRAM bandwidth (may exceed 1 for L2-resident working sets).

    DRAM law: eta_max * x / (x + x_half), x = bytes / L2, times B / (B + B_half) in the
    bytes read B, B_half = eta_max * BW * mem_t_half (a fixed ramp time: the branch becomes
    bytes / (BW eta_max) + mem_t_half). Below `l2_resident_x` of L2 the working set stays
    resident between back-to-back launches and is served at max(DRAM law, L2 path), the L2
    path being `l2_gain` bytes per SM clock (see `l2_path_fraction`).
    """
    p = params if params is not None else resolve(gpu, constants)
    b = np.asarray(bytes_moved, dtype=float)
    x = b / gpu.l2_bytes
    e_max = float(p["eta_mem_max"])
    x_half = float(p["mem_x_half"])
    eta = e_max * x / (x + x_half) if x_half > 0 else np.full_like(x, e_max)
    t_half = float(p["mem_t_half_us"]) * 1e-6
    if t_half > 0:
        eta = eta * b / (b + e_max * gpu.mem_bw * t_half)
    x_res = float(p["l2_resident_x"])
    if x_res > 0:
        eta = np.where(x <= x_res, np.maximum(eta, l2_path_fraction(gpu, float(p["l2_gain"]))), eta)
    return eta


def clock_factor(flops, gpu, params: dict):
    """Sustained clock / boost clock per cell when no clock reading is given.

    f_clk (a constant; 1 = boost) times a droop with the kernel's work: under DVFS a
    long tensor-saturating kernel runs at a lower sustained clock,
    1 - clk_droop * w / (w + clk_droop_us), w = flops / peak in microseconds.
    """
    base = float(params["f_clk"])
    d = float(params.get("clk_droop", 0.0))
    if d <= 0:
        return np.full_like(np.asarray(flops, dtype=float), base)
    w = np.asarray(flops, dtype=float) / gpu.peak_flops * 1e6
    return base * (1.0 - d * w / (w + float(params["clk_droop_us"])))


def gemm_bytes(m, n, k, dtype: str = "bf16"):
    """Bytes a GEMM must move at least: read A and W once, write C (bf16)."""
    bpe = BYTES[dtype]
    return bpe * (m * k + k * n) + 2 * m * n


def smax(a, b, p: float):
    """Roofline max with overlap exponent p ((a^p + b^p)^(1/p); hard max when p is inf; 0 where both are 0).
    The one overlap law of every term (GEMM, attention, light kernels, routed experts, the serving timer)."""
    if not np.isfinite(p):
        return np.maximum(a, b)
    hi = np.maximum(a, b)
    lo = np.minimum(a, b)
    ratio = np.divide(lo, hi, out=np.zeros(np.broadcast(lo, hi).shape), where=hi > 0)
    return hi * (1.0 + ratio ** p) ** (1.0 / p)


def boost_mhz(gpu):
    """The GPU's boost clock, MHz (1,500 where the datasheet gives none); an array for a per-row stand-in. The one
    clock every SM-rate bound reads (attention's L2 and fp8 read rates, the light kernels' SM-side stream)."""
    b = gpu.boost_mhz
    return b if np.ndim(b) else (b or 1500.0)


def smax1(a: float, b: float, p: float) -> float:
    """smax of two Python floats without numpy (the serving timer's scalar paths, which cost microseconds)."""
    hi, lo = (a, b) if a >= b else (b, a)
    if hi <= 0.0:
        return 0.0
    if math.isinf(p):
        return hi
    return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)


def gemm_time(m, n, k, gpu, constants: Constants | None = None, f_clk: float | None = None,
              dtype: str = "bf16", floor: bool = True, params: dict | None = None,
              paradigm: str | None = None, launch=None, fill: dict | None = None) -> dict:
    """Time of C[m,n] = A[m,k] @ W[k,n] on `gpu`: every branch and factor, per cell (seconds).

    `params` (from `resolve`, possibly edited) bypasses the constant lookup: fits use it.
    `paradigm` forces an SM-fill model (E1.12 compares them); default `fill_paradigm(gpu)`.
    `launch` fixes the kernel dispatch (sm_fill; terms/precision.py fp8_launch); default the heuristic.
    `fill`: `sm_fill`'s dict for these very cells (same shape, GPU, paradigm and launch) under constants that agree
    with `params` on `FILL_CONSTANTS` (`fill_key`); it is used as is (a fit reuses it while only the other constants
    move: the same values, without the launch search).
    """
    p = params if params is not None else resolve(gpu, constants)
    m, n, k = np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    if fill is not None:
        m, n, k = np.broadcast_arrays(m, n, k)
        if np.shape(fill["eta_cluster"]) != m.shape:
            raise ValueError(f"gemm_time: the fill passed is for cells of shape {np.shape(fill['eta_cluster'])}, "
                             f"not {m.shape}")
        want = paradigm or fill_paradigm(gpu)
        if fill.get("paradigm", want) != want:
            raise ValueError(f"gemm_time: the fill passed was found under the {fill['paradigm']!r} paradigm, "
                             f"not {want!r}")
    elif n.size == 1 and k.size == 1 and m.size > SMALL_BATCH:  # one weight, many token counts: each distinct m once
        u, inv = np.unique(m.ravel(), return_inverse=True)
        if u.size <= m.size // 4:
            shape = np.broadcast_shapes(m.shape, n.shape, k.shape)
            g = gemm_time(u, n.ravel()[0], k.ravel()[0], gpu, f_clk=f_clk, dtype=dtype, floor=floor, params=p,
                          paradigm=paradigm, launch=launch)
            return _expand(g, inv.ravel(), shape)
    m, n, k = np.broadcast_arrays(m, n, k)
    if fill is None and m.size > CHUNK:
        return _chunked(m, n, k, gpu, f_clk, dtype, floor, p, paradigm, launch)
    flops = 2.0 * m * n * k
    if f_clk is None:
        f_clk = clock_factor(flops, gpu, p)
    else:
        f_clk = np.full_like(m, float(f_clk))
    if fill is None:
        fill = sm_fill(m, n, k, gpu, params=p, paradigm=paradigm, launch=launch)
    eta_active = float(p["eta_active"])
    eta_c = f_clk * fill["eta_cluster"] * eta_active * fill["eta_duty"]
    peak = gpu.peak_flops if dtype != "fp8" else (gpu.fp8_dense_tflops or gpu.bf16_dense_tflops) * 1e12
    t_compute = flops / (peak * eta_c)
    nbytes = gemm_bytes(m, n, k, dtype)
    e_mem = eta_mem(nbytes, gpu, params=p)
    t_memory = nbytes / (gpu.mem_bw * e_mem)
    t_cta = cta_stream_time(n, k, fill, gpu, p, dtype)
    t_floor = floor_time(p, floor)
    t = smax(t_compute, t_memory + t_cta, float(p["overlap_p"])) + t_floor
    return {
        "t": t,
        "t_compute": t_compute,
        "t_memory": t_memory,
        "t_cta": t_cta,
        "t_floor": np.full_like(t, t_floor),
        "compute_bound": t_compute >= t_memory + t_cta,
        "flops": flops,
        "bytes": nbytes,
        "f_clk": f_clk,
        "eta_cluster": fill["eta_cluster"],
        "eta_active": np.full_like(t, eta_active),
        "eta_duty": fill["eta_duty"],
        "eta_c": eta_c,
        "eta_mem": e_mem,
        "tile_m": fill["tile_m"],
        "tile_n": fill["tile_n"],
        "split_k": fill["split_k"],
        "stream_k": fill["stream_k"],
        "grid": fill["grid"],
        "tiles_per_cta": fill["tiles_per_cta"],
        "k_cta": fill["k_cta"],
        "paradigm": fill["paradigm"],
    }


def floor_time(p: dict, floor: bool = True) -> float:
    """The kernel floor `gemm_time` adds to every cell, seconds (`kernel_floor_us`; 0 with `floor` off)."""
    return float(p["kernel_floor_us"]) * 1e-6 if floor else 0.0


def _expand(g: dict, inv, shape) -> dict:
    """A gemm_time dict over distinct cells, gathered back to every cell (`inv` indexes the distinct ones)."""
    return {key: (v[inv].reshape(shape) if isinstance(v, np.ndarray) and v.ndim == 1 else v) for key, v in g.items()}


def _chunked(m, n, k, gpu, f_clk, dtype: str, floor: bool, p: dict, paradigm, launch=None) -> dict:
    """`gemm_time` over many cells, CHUNK cells per pass: every value is the one a single pass
    gives (the arithmetic is elementwise), but each pass's temporaries stay in cache."""
    shape = m.shape
    m, n, k = m.ravel(), n.ravel(), k.ravel()
    out: dict = {}
    for i in range(0, m.size, CHUNK):
        sl = slice(i, i + CHUNK)
        g = gemm_time(m[sl], n[sl], k[sl], gpu, f_clk=f_clk, dtype=dtype, floor=floor, params=p, paradigm=paradigm,
                      launch=launch)
        for key, v in g.items():
            if isinstance(v, np.ndarray):
                if key not in out:
                    out[key] = np.empty(m.size, dtype=v.dtype)
                out[key][sl] = v
            else:
                out[key] = v
    return {key: (v.reshape(shape) if isinstance(v, np.ndarray) else v) for key, v in out.items()}


def gemm_time_shapes(m, shapes: dict, gpu, constants: Constants | None = None, **kw) -> dict:
    """`gemm_time` of several weights {name: (n, k)} at the same token counts `m`, in ONE
    vectorised call (a layer's projections share one pass over the launch options, which
    is most of a one-step prediction's cost). Returns {name: gemm_time dict}; every value
    is the one `gemm_time` gives for that weight alone."""
    m = np.asarray(m, dtype=float)
    if m.size > SMALL_BATCH:  # a step's token counts repeat: time each distinct count once
        u, inv = np.unique(m.ravel(), return_inverse=True)
        if u.size <= m.size // 4:
            return {name: _expand(g, inv.ravel(), m.shape)
                    for name, g in gemm_time_shapes(u, shapes, gpu, constants, **kw).items()}
    names = list(shapes)
    size = m.size
    n = np.repeat(np.asarray([shapes[s][0] for s in names], dtype=float), size)
    k = np.repeat(np.asarray([shapes[s][1] for s in names], dtype=float), size)
    g = gemm_time(np.tile(m.ravel(), len(names)), n, k, gpu, constants, **kw)
    out = {}
    for i, name in enumerate(names):
        sl = slice(i * size, (i + 1) * size)
        out[name] = {key: (v[sl].reshape(m.shape) if isinstance(v, np.ndarray) and v.ndim == 1 else v)
                     for key, v in g.items()}
    return out

