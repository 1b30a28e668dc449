"""Stream-K's padded work counts the token rows at the MMA's N step (`streamk_m_grain`), not at whole
tiles: one token past a tile boundary costs a grain of rows, not a tile of them (E1.29, E1.23)."""
import numpy as np
import pytest

from steptime.specs import get_gpu
from steptime.terms import gemm as G


def _params(gpu, **over):
    p = G.resolve(get_gpu(gpu))
    p.update(over)
    return p


def test_streamk_tiles_whole_tiles_without_a_grain():
    p = {"streamk_m_grain": 0.0}
    assert G.streamk_tiles(np.array([513.0]), 4096.0, 128.0, 256.0, p)[0] == 5 * 16
    assert G.streamk_tiles(np.array([512.0]), 4096.0, 128.0, 256.0, p)[0] == 4 * 16


def test_streamk_tiles_pads_rows_to_the_grain_never_past_the_tile():
    p = {"streamk_m_grain": 16.0}
    # 513 rows -> 528 at a 16-row grain: 528 / 128 tile rows of 16 tile columns
    assert G.streamk_tiles(np.array([513.0]), 4096.0, 128.0, 256.0, p)[0] == pytest.approx(528 / 128 * 16)
    # a grain coarser than the tile is capped at whole tiles
    q = {"streamk_m_grain": 512.0}
    assert G.streamk_tiles(np.array([129.0]), 128.0, 128.0, 128.0, q)[0] == 2


def test_one_token_past_a_tile_costs_a_grain_on_a_stream_k_launch():
    h100 = get_gpu("h100-sxm")
    # no clock droop (Hopper ships one since wave 29): the ratios below are the padded work alone
    base = dict(tiles=[[128, 256, 1.0]], cluster_size=2, duty_c=0.0, duty_k=0.0, streamk_rel=0.99, clk_droop=0.0)
    coarse, fine = _params("h100-sxm", streamk_m_grain=0.0, **base), _params("h100-sxm", streamk_m_grain=8.0, **base)
    m = np.array([4096.0, 4097.0])
    n = 256 * 31  # 992 / 1023 tiles on 132 SMs: a partial last round at both m, so stream-K wins both
    gc = G.gemm_time(m, n, 8192, h100, params=coarse, floor=False)
    assert gc["stream_k"].all()
    tc = gc["t_compute"]
    tf = G.gemm_time(m, n, 8192, h100, params=fine, floor=False)["t_compute"]
    assert tc[1] / tc[0] == pytest.approx(33 / 32, rel=1e-6)        # a whole 128-row tile more work
    assert tf[1] / tf[0] == pytest.approx(4104 / 4096, rel=1e-6)    # 8 rows more
    assert tf[0] == pytest.approx(tc[0])                             # no change on whole tiles


def test_grain_is_off_on_wave_launches_and_the_scan_matches_the_broadcast():
    l40s = get_gpu("l40s")
    p, q = _params("l40s", streamk_m_grain=0.0), _params("l40s", streamk_m_grain=8.0)
    m = np.array([513.0, 2049.0])
    assert np.array_equal(G.gemm_time(m, 4096, 4096, l40s, params=p)["t"],
                          G.gemm_time(m, 4096, 4096, l40s, params=q)["t"])
    # the per-option scan (large batches) and the broadcast (small ones) pick the same launch with the grain on
    b200 = get_gpu("b200")
    r = _params("b200")
    assert r["streamk_m_grain"] > 0
    rng = np.random.default_rng(0)
    mm = rng.integers(1, 9000, 600).astype(float)
    nn = rng.choice([768.0, 1024.0, 4096.0, 14336.0], 600)
    kk = rng.choice([512.0, 4096.0, 8192.0], 600)
    big = G.gemm_time(mm, nn, kk, b200, params=r)["t"]
    small = np.concatenate([G.gemm_time(mm[i:i + 200], nn[i:i + 200], kk[i:i + 200], b200, params=r)["t"]
                            for i in range(0, 600, 200)])
    assert np.allclose(big, small, rtol=1e-12)


def test_grain_is_ablated_and_disclosed():
    from steptime_lab.experiments.gemm import ablation, claims, contract

    assert ablation.ABLATIONS["stream-K token grain (whole tiles instead)"] == {"streamk_m_grain": 0.0}
    assert any("streamk_m_grain" in d and "after seeing" in d for d in contract.DISCLOSED)
    an = {"b200": {"latency_factor": {"mape": 0.07}, "latency_scalar": {"mape": 0.08}, "eta_bar": 0.7,
                   "drift_abs_mean": 0.1, "drift_abs_max": 0.2}}
    ab = {"all factors": {"mean_llm_mape": 0.08, "llm_mape": {"b200": 0.08}}}
    out = claims.scalar_claims(an, ab)
    assert "streamk_m_grain" in out["metrics"]["disclosed"]
