"""The projection GEMM term: a roofline max with a factored compute efficiency.

    t_gemm = max( 2 m n k / (P_boost * eta_c),  bytes / (BW * eta_mem) ) + t_floor
    eta_c  = f_clk * eta_cluster * eta_active * eta_duty

SM fill (`eta_cluster`) comes from launch geometry, by paradigm:

* ``wave`` (Ampere, Ada, and the sm120 Blackwell RTX parts): a tile ladder; each output
  tile is one CTA, CTAs run in waves of `SMs x ctas_per_sm`; the last wave is partly
  empty. eta_cluster = useful tile area / (waves x slots x tile area), which holds both
  the padding of the edge tiles and the last-wave tail.
* ``persistent`` (Hopper, sm100/sm103 Blackwell): thread-block clusters launched as a
  persistent grid capped by GPC geometry (cudaOccupancyMaxActiveClusters x cluster size,
  e.g. 7 x 16 = 112 CTAs on a 132-SM H100). SMs beyond the cap stay dark; each CTA walks
  tiles_per_cta = tiles / grid tiles, and the tensor-pipe duty rises as its one-time
  prologue is amortised: eta_duty = r_tile / (1 + c / tiles_per_cta).

Split-K is one more launch option for the few-tile case (small m x n, long k).
The kernel choice mimics a heuristic that picks the fastest option per cell.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants

BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
SPLITK_OPTIONS = (1, 2, 4)
SPLITK_MIN_K = 1024  # each split keeps at least this much of k


def fill_paradigm(gpu) -> str:
    """Which SM-fill model applies to a GPU, and why (see module docstring)."""
    if gpu.architecture in ("ampere", "ada"):
        return "wave"
    if gpu.architecture == "hopper":
        return "persistent"
    if gpu.architecture == "blackwell":
        # sm120 (RTX PRO 6000 Blackwell) lacks the sm100 2-SM tensor-core pairs and
        # ships wave-launched cuBLAS kernels; sm100/sm103 data-centre parts persist.
        return "wave" if gpu.sm_version >= 120 else "persistent"
    raise ValueError(f"no SM-fill paradigm for architecture {gpu.architecture!r}")


def cluster_cap(gpu, cluster: int) -> int:
    """CTAs a persistent grid of `cluster`-CTA clusters can keep co-resident.

    A MEASURED cudaOccupancyMaxActiveClusters reading wins where the spec file has one;
    otherwise DERIVED from GPC geometry: clusters must sit inside one GPC, so each GPC
    holds floor(SMs in that GPC / cluster) of them, with SMs spread as evenly as the
    SM count allows over the GPCs.
    """
    if cluster in gpu.max_active_clusters:
        return gpu.max_active_clusters[cluster] * cluster
    per = gpu.sms // gpu.gpcs
    extra = gpu.sms - per * gpu.gpcs  # GPCs with one SM more
    clusters = extra * ((per + 1) // cluster) + (gpu.gpcs - extra) * (per // cluster)
    return max(cluster, clusters * cluster)


def _options(gpu, constants: Constants):
    tiles = np.asarray(constants.get("tiles", gpu), dtype=float)
    opts = [(tm, tn, r, s) for tm, tn, r in tiles for s in SPLITK_OPTIONS]
    return np.asarray(opts, dtype=float)  # (n_opt, 4)


def sm_fill(m, n, k, gpu, constants: Constants | None = None) -> dict:
    """SM fill and duty per cell for the best launch option. Arrays in, dict of arrays out."""
    constants = constants or Constants.default()
    m = np.asarray(m, dtype=float)[..., None]
    n = np.asarray(n, dtype=float)[..., None]
    k = np.asarray(k, dtype=float)[..., None]
    opts = _options(gpu, constants)
    tm, tn, rel, split = opts[:, 0], opts[:, 1], opts[:, 2], opts[:, 3]
    split_ok = (split == 1) | (k / split >= SPLITK_MIN_K)
    tiles_mn = np.ceil(m / tm) * np.ceil(n / tn)
    tiles = tiles_mn * split
    pad = (m * n) / (tiles_mn * tm * tn)
    paradigm = fill_paradigm(gpu)
    duty_c = float(constants.get("duty_c", gpu))
    if paradigm == "wave":
        slots = float(gpu.sms * int(constants.get("ctas_per_sm", gpu)))
        waves = np.ceil(tiles / slots)
        grid = np.minimum(tiles, slots)
        tail = tiles / (waves * slots)
        eta_cluster = pad * tail
        tiles_per_cta = waves
        eta_duty = rel * np.ones_like(tiles_per_cta)
    else:
        cl = int(constants.get("cluster_size", gpu))
        cap = float(cluster_cap(gpu, cl))
        grid = np.minimum(tiles, cap)
        rounds = np.ceil(tiles / grid)
        tail = tiles / (rounds * grid)
        eta_cluster = pad * tail * grid / gpu.sms
        tiles_per_cta = tiles / grid
        eta_duty = rel / (1.0 + duty_c / tiles_per_cta)
    # split-K pays a reduction pass: charge it as extra work (1 + (split-1) * m n / (m n k / k)) ~ small
    reduce_pen = 1.0 / (1.0 + (split - 1.0) * 0.5 * (tn / np.maximum(k, 1.0)))
    score = np.where(split_ok, eta_cluster * eta_duty * reduce_pen, -1.0)
    best = np.argmax(score, axis=-1)[..., None]

    def pick(a):
        a = np.broadcast_to(a, score.shape)
        return np.take_along_axis(a, best, axis=-1)[..., 0]

    return {
        "paradigm": paradigm,
        "eta_cluster": pick(eta_cluster * reduce_pen),
        "eta_duty": pick(eta_duty),
        "tile_m": pick(tm),
        "tile_n": pick(tn),
        "split_k": pick(split),
        "grid": pick(grid),
        "tiles_per_cta": pick(tiles_per_cta),
    }


def eta_mem(bytes_moved, gpu, constants: Constants | None = None):
    """Achieved fraction of peak DRAM bandwidth: eta_max * x / (x + x_half), x = bytes / L2.

    With l2_gain > 1, working sets that fit in L2 (x < 1) are served faster than DRAM
    (weights left resident by the previous replay), ramping linearly to 1 at x = 1.
    """
    constants = constants or Constants.default()
    x = np.asarray(bytes_moved, dtype=float) / gpu.l2_bytes
    e_max = float(constants.get("eta_mem_max", gpu))
    x_half = float(constants.get("mem_x_half", gpu))
    gain = float(constants.get("l2_gain", gpu))
    eta = e_max * x / (x + x_half) if x_half > 0 else np.full_like(x, e_max)
    if gain != 1.0:
        eta = eta * (1.0 + (gain - 1.0) * np.clip(1.0 - x, 0.0, 1.0))
    return eta


def gemm_time(m, n, k, gpu, constants: Constants | None = None, f_clk: float | None = None,
              dtype: str = "bf16", floor: bool = True) -> dict:
    """Time of C[m,n] = A[m,k] @ W[k,n] on `gpu`: every branch and factor, per cell (seconds)."""
    constants = constants or Constants.default()
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    if f_clk is None:
        f_clk = float(constants.get("f_clk", gpu))
    fill = sm_fill(m, n, k, gpu, constants)
    eta_active = float(constants.get("eta_active", gpu))
    eta_c = f_clk * fill["eta_cluster"] * eta_active * fill["eta_duty"]
    peak = gpu.peak_flops if dtype != "fp8" else (gpu.fp8_dense_tflops or gpu.bf16_dense_tflops) * 1e12
    flops = 2.0 * m * n * k
    t_compute = flops / (peak * eta_c)
    bpe = BYTES[dtype]
    nbytes = bpe * (m * k + k * n) + 2 * m * n  # output written in bf16
    e_mem = eta_mem(nbytes, gpu, constants)
    t_memory = nbytes / (gpu.mem_bw * e_mem)
    t_floor = float(constants.get("kernel_floor_us", gpu)) * 1e-6 if floor else 0.0
    t = np.maximum(t_compute, t_memory) + t_floor
    return {
        "t": t,
        "t_compute": t_compute,
        "t_memory": t_memory,
        "t_floor": np.full_like(t, t_floor),
        "compute_bound": t_compute >= t_memory,
        "flops": flops,
        "bytes": nbytes,
        "f_clk": np.full_like(t, f_clk),
        "eta_cluster": fill["eta_cluster"],
        "eta_active": np.full_like(t, eta_active),
        "eta_duty": fill["eta_duty"],
        "eta_c": eta_c,
        "eta_mem": e_mem,
        "tile_m": fill["tile_m"],
        "tile_n": fill["tile_n"],
        "split_k": fill["split_k"],
        "grid": fill["grid"],
        "tiles_per_cta": fill["tiles_per_cta"],
        "paradigm": fill["paradigm"],
    }
