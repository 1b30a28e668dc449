"""A launch fill found once and reused (`gemm_time(fill=...)`, the GEMM fits' `_FillCache`): the same values, to the
last bit, as the launch search every call (wave 32, helper speed1: the build-time cut of the GEMM fits)."""
import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments.gemm import contract as C
from steptime_lab.experiments.gemm import folds as F

GPUS = ["a100-sxm", "h100-sxm", "b200", "rtx-pro-6000"]


def _cells(size):
    rng = np.random.default_rng(1)
    m = np.concatenate([2.0 ** rng.integers(0, 15, size // 2), rng.integers(1, 9000, size - size // 2).astype(float)])
    n = rng.choice([32.0, 768, 2560, 4096, 14336, 128256], m.size)
    k = rng.choice([32.0, 512, 4096, 8192, 16384], m.size)
    return m, n, k


def _params(gpu):
    p = G.resolve(get_gpu(gpu))
    # every optional part on, so that each constant has something to act on
    p.update(streamk_rel=0.9, split_min_k=4096.0, cta_stream_us_mb=1.0, streamk_m_grain=16.0, duty_c=0.3,
             duty_k=64.0, clk_droop=0.2, mem_t_half_us=2.0, l2_resident_x=0.2, l2_gain=5.0, overlap_p=4.0)
    return p


def _same(a: dict, b: dict):
    for key, v in a.items():
        if isinstance(v, np.ndarray):
            assert v.dtype == b[key].dtype and np.array_equal(v, b[key], equal_nan=True), key
        else:
            assert v == b[key], key


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("paradigm", ["wave", "persistent"])
def test_the_fill_reads_only_its_constants(gpu, paradigm):
    """Moving any GEMM constant outside FILL_CONSTANTS[paradigm] leaves sm_fill as it was (so a fill is reused only
    where it is the same); moving a launch constant changes the key and, where it acts, the fill."""
    g = get_gpu(gpu)
    m, n, k = _cells(400)
    p = _params(gpu)
    ref = G.sm_fill(m, n, k, g, params=p, paradigm=paradigm)
    for name in G.GEMM_CONSTANTS:
        if name in G.FILL_CONSTANTS[paradigm] or name == "tiles":
            continue
        q = dict(p)
        q[name] = float(q[name]) * 1.7 + 0.3 if name != "cluster_size" else 1
        assert G.fill_key(q, paradigm) == G.fill_key(p, paradigm)
        _same(G.sm_fill(m, n, k, g, params=q, paradigm=paradigm), ref)
    acts = ("duty_k", "duty_c", "streamk_rel", "split_min_k") if paradigm == "persistent" else ("duty_k",)
    for name in acts:
        q = dict(p, **{name: float(p[name]) * 0.5 + 0.05})
        assert G.fill_key(q, paradigm) != G.fill_key(p, paradigm)
        assert not np.array_equal(G.sm_fill(m, n, k, g, params=q, paradigm=paradigm)["eta_duty"], ref["eta_duty"]), name
    q = dict(p, tiles=[[64, 64, 1.0]])
    assert G.fill_key(q, paradigm) != G.fill_key(p, paradigm)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("size", [3, 40, G.SMALL_BATCH + 200])  # the broadcast path and the option loop
def test_gemm_time_with_a_passed_fill_is_bit_identical(gpu, size):
    g = get_gpu(gpu)
    m, n, k = _cells(size)
    p = _params(gpu)
    fill = G.sm_fill(m, n, k, g, params=p)
    q = dict(p, eta_active=0.7, eta_mem_max=0.9, kernel_floor_us=3.0, mem_t_half_us=1.0)  # readings move these
    _same(G.gemm_time(m, n, k, g, params=q, fill=fill), G.gemm_time(m, n, k, g, params=q))


def test_a_fill_of_other_cells_is_refused():
    g = get_gpu("h100-sxm")
    m, n, k = _cells(10)
    fill = G.sm_fill(m, n, k, g, params=_params("h100-sxm"))
    with pytest.raises(ValueError, match="fill passed is for cells of shape"):
        G.gemm_time(m[:5], n[:5], k[:5], g, params=_params("h100-sxm"), fill=fill)


def test_a_fill_of_another_paradigm_is_refused():
    g = get_gpu("h100-sxm")
    m, n, k = _cells(10)
    p = _params("h100-sxm")
    other = next(q for q in G.FILL_CONSTANTS if q != G.fill_paradigm(g))
    fill = G.sm_fill(m, n, k, g, params=p, paradigm=other)
    with pytest.raises(ValueError, match=f"found under the {other!r} paradigm"):
        G.gemm_time(m, n, k, g, params=p, fill=fill)
    G.gemm_time(m, n, k, g, params=p, paradigm=other, fill=fill)  # the same paradigm asked for: accepted


def test_readings_with_a_passed_fill_equal_the_plain_readings():
    gpu = "h100-sxm"
    p = C.base_params(gpu, Constants.default())
    readings = {"eta_active": ((gpu, "x", 4096, 4096, 4096), 0.25), "eta_mem_max": ((gpu, "x", 1, 16384, 16384), 0.2),
                "kernel_floor_us": ((gpu, "x", 1, 32, 32), 0.006)}
    _, m, n, k = C.reading_cells(readings)
    fill = G.sm_fill(m, n, k, get_gpu(gpu), params=p)
    assert C.apply_readings(gpu, p, readings, rounds=3, fill=fill) == C.apply_readings(gpu, p, readings, rounds=3)


def test_the_fit_cache_returns_the_fill_of_its_key_and_keeps_the_most_recent():
    gpu = "b200"
    m, n, k = _cells(300)
    readings = {"kernel_floor_us": ((gpu, "x", 1, 32, 32), 0.006)}
    cache = F._FillCache([gpu], {gpu: readings}, {gpu: (m, n, k, np.ones_like(m))})
    p = _params(gpu)
    first = cache.get(gpu, "sample", p)
    _same(first, G.sm_fill(m, n, k, get_gpu(gpu), params=p))
    assert cache.get(gpu, "sample", dict(p, eta_active=0.5)) is first  # another constant: the same fill, reused
    for i in range(F._FillCache.SIZE):  # SIZE other launch settings push the first one out
        q = dict(p, duty_k=10.0 + i)
        _same(cache.get(gpu, "sample", q), G.sm_fill(m, n, k, get_gpu(gpu), params=q))
    assert len(cache.kept[(gpu, "sample")]) == F._FillCache.SIZE
    again = cache.get(gpu, "sample", p)
    assert again is not first
    _same(again, first)
    _same(cache.get(gpu, "readings", p), G.sm_fill(np.array([1.0]), np.array([32.0]), np.array([32.0]),
                                                    get_gpu(gpu), params=p))



@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-sxm"])
def test_the_fit_cache_keys_on_the_paradigm(gpu):
    """Two calls that differ only in the paradigm never share an entry: each gets its own paradigm's fill (the
    wave fill of a persistent part, the persistent fill of a wave part), and the default is the GPU's own."""
    m, n, k = _cells(300)
    cache = F._FillCache([gpu], {gpu: {}}, {gpu: (m, n, k, np.ones_like(m))})
    p = _params(gpu)
    own = G.fill_paradigm(get_gpu(gpu))
    other = "wave" if own == "persistent" else "persistent"
    first = cache.get(gpu, "sample", p, paradigm=other)
    assert first["paradigm"] == other
    _same(first, G.sm_fill(m, n, k, get_gpu(gpu), params=p, paradigm=other))
    mine = cache.get(gpu, "sample", p)
    assert mine is not first and mine["paradigm"] == own
    _same(mine, G.sm_fill(m, n, k, get_gpu(gpu), params=p))
    assert not np.array_equal(mine["eta_cluster"], first["eta_cluster"])
    assert cache.get(gpu, "sample", p, paradigm=own) is mine
    assert cache.get(gpu, "sample", p, paradigm=other) is first

@pytest.mark.parametrize("gpu", GPUS)
def test_the_floor_moves_no_branch(gpu):
    """apply_readings sets the floor and reads on without a new gemm_time: the floor moves t_floor (floor_time) and t
    only, never a branch."""
    g = get_gpu(gpu)
    m, n, k = _cells(30)
    p = _params(gpu)
    a = G.gemm_time(m, n, k, g, params=p)
    b = G.gemm_time(m, n, k, g, params=dict(p, kernel_floor_us=float(p["kernel_floor_us"]) * 3.0 + 1.0))
    for key in a:
        if key in ("t", "t_floor"):
            assert not np.array_equal(a[key], b[key])
        else:
            _same({key: a[key]}, {key: b[key]})
    assert np.array_equal(b["t_floor"], np.full_like(b["t"], G.floor_time(dict(p, kernel_floor_us=float(
        p["kernel_floor_us"]) * 3.0 + 1.0))))
    assert G.floor_time(p, floor=False) == 0.0
