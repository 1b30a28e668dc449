"""A throttled tensor pipe (wave 33, helper `h20`): a tile's ladder rel is a feed cap fitted on full-rate parts; on a
part whose pipe issues at a fraction f of its architecture's rate per SM clock it runs at min(1, rel / f) of its own
peak. Full-rate parts (every measured GPU) keep the ladder as fitted."""
from dataclasses import replace

import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import gemm as G

MEASURED = ["a100-sxm", "a40", "h100-sxm", "h200-sxm", "l40s", "b200", "gb200", "b300", "gb300", "rtx-pro-6000"]


@pytest.mark.parametrize("gpu,f", [("h20", 0.25), ("rtx-4090", 0.5), ("l20", 0.5), ("l40", 0.5), ("rtx-5090", 0.5),
                                   ("h100-nvl", 1.0), ("b100", 1.0), ("mi300x", 1.0)])
def test_pipe_fraction_from_the_datasheet(gpu, f):
    assert G.tensor_pipe_fraction(get_gpu(gpu)) == f


@pytest.mark.parametrize("gpu", MEASURED)
def test_full_rate_parts_keep_the_ladder_and_their_times(gpu, monkeypatch):
    g = get_gpu(gpu)
    p = G.resolve(g)
    assert G.tensor_pipe_fraction(g) == 1.0
    assert np.array_equal(G.tile_ladder(p, g), np.asarray(p["tiles"], dtype=float))
    m = np.array([1.0, 16, 104, 105, 512, 4096])
    law = G.gemm_time(m, 4096, 4096, g)["t"]
    monkeypatch.setattr(G, "TENSOR_FLOP_PER_CLK_SM", {})  # the pipe law off
    assert np.array_equal(law, G.gemm_time(m, 4096, 4096, g)["t"])


def test_throttled_ladder_rel_is_rel_over_the_fraction_capped_at_one():
    g = get_gpu("h20")
    p = G.resolve(g)
    raw = np.asarray(p["tiles"], dtype=float)
    lad = G.tile_ladder(p, g)
    assert np.array_equal(lad[:, :2], raw[:, :2])
    assert np.allclose(lad[:, 2], np.minimum(1.0, raw[:, 2] / 0.25))
    assert np.array_equal(np.asarray(p["tiles"], dtype=float), raw)  # the constants are not edited in place


def test_h20_one_token_gemm_is_memory_bound_and_faster_than_with_a_full_rate_ladder(monkeypatch):
    g = get_gpu("h20")
    law = G.gemm_time(np.array([1.0]), 4096, 4096, g)
    assert not law["compute_bound"][0]
    monkeypatch.setattr(G, "TENSOR_FLOP_PER_CLK_SM", {})
    old = G.gemm_time(np.array([1.0]), 4096, 4096, g)
    assert old["compute_bound"][0]  # the wave-32 defect, without the pipe law
    assert law["t_compute"][0] < 0.6 * old["t_compute"][0]
    assert law["t"][0] < old["t"][0]


def test_a_forced_launch_reads_the_throttled_ladder_too():
    g = get_gpu("rtx-4090")
    p = G.resolve(g)
    launch = lambda m, n, k: (np.full(m.shape, 16.0), np.full(m.shape, 128.0))  # noqa: E731
    f = G.sm_fill(np.array([1.0, 64.0]), 4096, 4096, g, params=p, launch=launch)
    raw = G.forced_rel(16.0, 128.0, p["tiles"])
    assert raw < 1.0
    k_duty = 1.0 / (1.0 + float(p["duty_k"]) / 4096.0)
    assert np.allclose(f["eta_duty"], min(1.0, raw / 0.5) * k_duty)


def test_pipe_fraction_is_one_without_a_known_architecture_or_clock():
    g = get_gpu("h20")
    assert G.tensor_pipe_fraction(replace(g, boost_mhz=None)) == 1.0
    assert G.tensor_pipe_fraction(replace(g, sm_version=999)) == 1.0
