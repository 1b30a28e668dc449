"""The split depth of the GEMM law (issue 19 item 1, E1.29, wave 30 helper splitk): with `split_min_k` on, a
launch splits k (split-K, or a stream-K launch spreading few tiles over more CTAs) only into pieces at least
that deep, and the per-CTA stream walks the launch's k piece; `split_min_k` 0 (or absent) is the old law."""
import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import ablation

C = Constants.default()
DEPTH = 4096.0


def _params(gpu: str, depth: float, c: float = 1.0) -> dict:
    p = G.resolve(get_gpu(gpu), C)
    p["split_min_k"] = depth
    p["cta_stream_us_mb"] = c
    return p


def test_few_tile_launch_keeps_its_k_loop_until_k_is_deep():
    g = get_gpu("b200")
    on = _params("b200", DEPTH)
    # TP 8 column-parallel shard (n 768, k 4096) at decode m: a few output tiles, k not deep enough to split
    r = G.gemm_time(np.array([1.0, 16.0, 128.0]), 768, 4096, g, params=on)
    assert np.all(r["k_cta"] >= 4096)  # one serial k loop per output tile
    assert np.all(r["split_k"] == 1)
    tiles = np.ceil(np.array([1.0, 16.0, 128.0]) / r["tile_m"]) * np.ceil(768 / r["tile_n"])
    assert np.all(r["grid"] <= tiles * 1.0001)  # no CTAs beyond one per tile's worth of work
    # the per-CTA stream walks that whole k piece
    np.testing.assert_allclose(r["t_cta"], r["k_cta"] * r["tile_n"] * 2 * 1e-12)
    # very deep k: split, but every piece at least DEPTH deep
    d = G.gemm_time(np.array([1.0, 16.0, 128.0]), 768, 65536, g, params=on)
    assert np.all(d["k_cta"] >= DEPTH * (1 - 1e-9))
    assert np.all(d["k_cta"] < 65536)  # it does split
    assert np.all(d["t_cta"] < 65536 * d["tile_n"] * 2 * 1e-12)  # and the stream walks the piece, not the full k


def test_old_law_spreads_k_over_the_grid_and_depth_off_is_the_old_law():
    g = get_gpu("b200")
    p = G.resolve(g, C)
    p.pop("split_min_k", None)
    old = G.gemm_time(np.array([1.0, 16.0]), 768, 4096, g, params=p)
    off = G.gemm_time(np.array([1.0, 16.0]), 768, 4096, g, params=dict(p, split_min_k=0.0))
    for key in ("t", "t_cta", "grid", "k_cta", "split_k"):
        np.testing.assert_array_equal(old[key], off[key])
    assert np.all(old["k_cta"] < 4096)  # the early split the depth rule removes
    np.testing.assert_allclose(old["t_cta"], 4096 * old["tile_n"] * 2 * float(p["cta_stream_us_mb"]) * 1e-12)


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm"])
def test_split_k_options_respect_the_depth(gpu):
    g = get_gpu(gpu)
    rng = np.random.default_rng(3)
    m = rng.integers(1, 512, 400).astype(float)
    n = rng.choice([256, 768, 1024, 2048], 400).astype(float)
    k = rng.choice([1024, 2048, 4096, 8192, 16384, 32768], 400).astype(float)
    r = G.sm_fill(m, n, k, g, params=_params(gpu, DEPTH))
    split = r["split_k"] > 1
    assert np.all(k[split] / r["split_k"][split] >= DEPTH)


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm", "a100-sxm"])
def test_broadcast_and_scan_pick_the_same_launch_with_the_depth_on(gpu):
    g = get_gpu(gpu)
    rng = np.random.default_rng(5)
    size = G.SMALL_BATCH * 3
    m = rng.integers(1, 8192, size).astype(float)
    n = rng.choice([128, 768, 1024, 2048, 4096, 14336], size).astype(float)
    k = rng.choice([512, 1024, 3072, 4096, 8192, 32768], size).astype(float)
    p = _params(gpu, DEPTH)
    scan = G.gemm_time(m, n, k, g, params=p)
    for i in range(0, size, G.SMALL_BATCH):
        sl = slice(i, i + G.SMALL_BATCH)
        bc = G.gemm_time(m[sl], n[sl], k[sl], g, params=p)
        for key in ("t", "tile_m", "tile_n", "split_k", "stream_k", "grid", "k_cta", "t_cta"):
            np.testing.assert_array_equal(scan[key][sl], bc[key], err_msg=key)


def test_fitted_as_a_blackwell_family_constant_and_ablated():
    from steptime_lab.experiments.gemm import folds as F

    lo, hi = E.FIT_GLOBALS["blackwell_split_min_k"][1:]
    assert lo == G.SPLITK_MIN_K and hi > 16384
    assert ablation.ABLATIONS["Blackwell split depth (k pieces >= split_min_k)"] == {"blackwell_split_min_k": 0.0}
    assert "split_min_k" in G.GEMM_CONSTANTS
    glob = {"cta_stream_us_mb": 1.1, "blackwell_split_min_k": 4096.0, "blackwell_cta_stream_us_mb": 2.0}
    b = F.with_globals("b200", E.base_params("b200", C), glob)
    h = F.with_globals("h100-sxm", E.base_params("h100-sxm", C), glob)
    assert b["split_min_k"] == 4096.0 and b["cta_stream_us_mb"] == 2.0
    # the Blackwell depth does not reach Hopper, which keeps its own (family.hopper, shipped since wave 32)
    assert h.get("split_min_k", 0.0) == C.get("split_min_k", get_gpu("h100-sxm"), 0.0) != 4096.0
    assert h["cta_stream_us_mb"] == 1.1
    hh = F.with_globals("h100-sxm", E.base_params("h100-sxm", C), {**glob, "hopper_split_min_k": 3000.0})
    assert hh["split_min_k"] == 3000.0
    assert not set(F.FAMILY_GLOBALS) & (set(b) | set(h))


def test_fit_scans_the_depth_grid_and_refits_from_the_best():
    from steptime_lab.experiments.gemm import folds as F

    names = ["duty_k", "blackwell_split_min_k"]
    lo, hi = np.array([0.0, 512.0]), np.array([2000.0, 32768.0])

    def resid(x):  # best at depth 8192 whatever duty_k is
        return np.array([np.log(x[1] / 8192.0), 0.01 * (x[0] - 100.0)])

    refits = []

    def fit(x0):
        refits.append(np.array(x0))
        return np.array([100.0, x0[1]])

    x = F._scan_grid(np.array([120.0, 4096.0]), names, "blackwell_split_min_k", F.SPLIT_DEPTH_GRID, resid, fit, lo,
                     hi)
    assert x[1] == pytest.approx(8192.0) and x[0] == 100.0 and len(refits) == 1
    refits.clear()
    kept = np.array([100.0, 8192.0])
    again = F._scan_grid(kept, names, "blackwell_split_min_k", F.SPLIT_DEPTH_GRID, resid, fit, lo, hi)
    assert again is kept and not refits  # nothing beats it
    assert 4096.0 in F.SPLIT_DEPTH_GRID and E.FIT_GLOBALS["blackwell_split_min_k"][0] == 4096.0


@pytest.mark.parametrize("gpu", ["a100-sxm", "l40s", "rtx-pro-6000"])
def test_wave_launched_parts_keep_their_early_split(gpu):
    g = get_gpu(gpu)
    m = np.array([1.0, 16.0, 128.0, 256.0])
    a = G.gemm_time(m, 768, 4096, g, params=_params(gpu, 0.0))
    b = G.gemm_time(m, 768, 4096, g, params=_params(gpu, 16384.0))
    for key in ("t", "split_k", "k_cta"):
        np.testing.assert_array_equal(a[key], b[key])
    assert np.any(b["split_k"] > 1)  # the wave kernels split 4096 deep k
