"""The per-CTA stream term of the GEMM law (issue 19 item 1, E1.29): a persistent launch's CTA
streams k x tile_n weight bytes per output column at `cta_stream_us_mb`; added to the memory
branch, off for wave-launched parts and when the constant is 0."""
import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime.terms import precision
from steptime_lab.experiments import gemm as E

C = Constants.default()
US_MB = 1.0  # the order of the settled value (E1.29 diagnostic: 0.8-1.1 us per MB per CTA)


def _params(gpu: str, c: float) -> dict:
    p = G.resolve(get_gpu(gpu), C)
    p["cta_stream_us_mb"] = c
    return p


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_binds_at_a_few_tile_skinny_shape_not_at_a_many_tile_one(gpu):
    g = get_gpu(gpu)
    off, on = _params(gpu, 0.0), _params(gpu, US_MB)
    # column-parallel at TP 8 (n = 768, k = 4096), decode-sized: a handful of n-tiles
    few_off = G.gemm_time([1.0, 16.0], 768, 4096, g, params=off)
    few_on = G.gemm_time([1.0, 16.0], 768, 4096, g, params=on)
    # the CTA of one column walks the full k loop: k x tile_n x 2 bytes, not divided by the law's early k split; with
    # a split depth (Blackwell since wave 30, Hopper since wave 32) the launch's own k piece per CTA, never under it
    depth = float(on.get("split_min_k", 0.0))
    k_loop = few_on["k_cta"] if depth > 0 else 4096.0
    if depth > 0:
        assert np.all(few_on["k_cta"] >= min(depth, 4096.0) - 1e-9)
    want = k_loop * few_on["tile_n"] * 2 * US_MB * 1e-12
    assert np.allclose(few_on["t_cta"], want)
    # a 4096-deep, 1 MB column is > 5% of a 5-7 us GEMM; a k piece at the split depth (H100: 2781 deep) > 3%
    assert np.all(few_on["t"] / few_off["t"] > (1.03 if depth > 0 else 1.05))
    # row-parallel at TP 8 (k = 512): short k loop, a small share
    short = G.gemm_time(1.0, 4096, 512, g, params=on)
    assert float(short["t_cta"] / short["t"]) < 0.05
    # many tiles: a prefill-sized square GEMM is untouched to within 1%
    many_off = G.gemm_time(8192.0, 8192, 8192, g, params=off)
    many_on = G.gemm_time(8192.0, 8192, 8192, g, params=on)
    assert float(many_on["t"] / many_off["t"]) < 1.01


@pytest.mark.parametrize("gpu", ["a100-sxm", "l40s", "rtx-pro-6000"])
def test_off_for_wave_paradigm_parts(gpu):
    g = get_gpu(gpu)
    assert G.fill_paradigm(g) == "wave"
    a = G.gemm_time([1.0, 16.0, 4096.0], 768, 4096, g, params=_params(gpu, 0.0))
    b = G.gemm_time([1.0, 16.0, 4096.0], 768, 4096, g, params=_params(gpu, 5.0))
    assert np.all(b["t_cta"] == 0.0)
    np.testing.assert_array_equal(a["t"], b["t"])


def test_default_off_and_zero_is_off():
    g = get_gpu("h100-sxm")
    p = G.resolve(g, C)
    p.pop("cta_stream_us_mb", None)
    ref = G.gemm_time([1.0, 256.0], 768, 4096, g, params=p)
    zero = G.gemm_time([1.0, 256.0], 768, 4096, g, params=dict(p, cta_stream_us_mb=0.0))
    np.testing.assert_array_equal(ref["t"], zero["t"])
    assert np.all(zero["t_cta"] == 0.0)


def test_fp8_recombination_keeps_the_term():
    g = get_gpu("h100-sxm")
    on = Constants.default().with_overrides({"cta_stream_us_mb": US_MB}, scope="gpu.h100-sxm")
    off = Constants.default().with_overrides({"cta_stream_us_mb": 0.0}, scope="gpu.h100-sxm")
    t_on = precision.gemm_time_fp8(1.0, 768, 4096, g, on)
    t_off = precision.gemm_time_fp8(1.0, 768, 4096, g, off)
    assert float(t_on["t_cta"]) > 0
    assert float(t_on["t"] - t_off["t"]) == pytest.approx(float(t_on["t_cta"]), rel=0.35)


def test_fitted_globally_and_the_streaming_reading_subtracts_it():
    assert "cta_stream_us_mb" in E.FIT_GLOBALS and E.FIT_GLOBALS["cta_stream_us_mb"][1] == 0.0
    gpu = "h100-sxm"
    truth = dict(E.base_params(gpu, C), eta_active=0.83, eta_mem_max=0.88, mem_t_half_us=1.0, overlap_p=3.0,
                 kernel_floor_us=2.0, cta_stream_us_mb=US_MB)
    cells = list(E.DEPLOY_CELLS.values())
    m, n, k = (np.array(x, dtype=float) for x in zip(*cells))
    t = E.predict(gpu, m, n, k, truth)
    rd = {name: ((gpu, "gemm", *cell), float(ti)) for (name, cell), ti in zip(E.DEPLOY_CELLS.items(), t)}
    start = dict(truth, eta_active=0.5, eta_mem_max=0.5, kernel_floor_us=0.0)
    p = E.apply_readings(gpu, start, rd, rounds=8)
    for name in E.DEPLOY_CELLS:
        assert p[name] == pytest.approx(truth[name], rel=2e-2), name
