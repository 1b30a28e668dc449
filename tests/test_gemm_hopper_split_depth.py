"""Hopper's split depth (`hopper_split_min_k` among the GEMM globals; issue 19 item 1, wave 32 helper hop8): it sets
`split_min_k` on the Hopper parts only, is scanned over the depth grid like Blackwell's, is fixed at 0 in a fit
without Hopper cells, and ships as the family.hopper constant. On sm90 the few-tile column-parallel launch then keeps
its k loop (no stream-K spread of a 4096-deep k over 132 CTAs) and pays it through the per-CTA stream."""
import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import folds as F
from steptime_lab.experiments.gemm.settling import _update_scope

C = Constants.default()


def test_hopper_depth_sets_split_min_k_on_hopper_only():
    glob = {"cta_stream_us_mb": 1.0, "hopper_split_min_k": 4096.0, "blackwell_split_min_k": 8192.0,
            "blackwell_cta_stream_us_mb": 2.0}
    h = F.with_globals("h200-sxm", E.base_params("h200-sxm", C), glob)
    b = F.with_globals("b200", E.base_params("b200", C), glob)
    a = F.with_globals("a100-sxm", E.base_params("a100-sxm", C), glob)
    assert h["split_min_k"] == 4096.0 and h["cta_stream_us_mb"] == 1.0
    assert b["split_min_k"] == 8192.0 and b["cta_stream_us_mb"] == 2.0
    assert a.get("split_min_k", 0.0) == 0.0
    assert not set(F.FAMILY_GLOBALS) & (set(h) | set(b) | set(a))
    assert _update_scope("hopper_split_min_k") == ("family.hopper", "split_min_k")
    assert E.FIT_GLOBALS["hopper_split_min_k"][1] == G.SPLITK_MIN_K
    assert "hopper_split_min_k" in F.SPLIT_DEPTH_GLOBALS and "blackwell_split_min_k" in F.SPLIT_DEPTH_GLOBALS


def test_hopper_few_tile_launch_keeps_its_k_loop_with_the_depth_on():
    g = get_gpu("h100-sxm")
    base = E.base_params("h100-sxm", C)
    off = F.with_globals("h100-sxm", base, {"cta_stream_us_mb": 1.0, "hopper_split_min_k": 0.0})
    on = F.with_globals("h100-sxm", base, {"cta_stream_us_mb": 1.0, "hopper_split_min_k": 4096.0})
    m = np.array([1.0, 16.0, 128.0])
    r0 = G.gemm_time(m, 768, 4096, g, params=off)
    r1 = G.gemm_time(m, 768, 4096, g, params=on)
    assert np.all(r0["k_cta"] < 4096)  # without the depth, stream-K spreads k over the grid
    assert np.all(r1["k_cta"] >= 4096) and np.all(r1["split_k"] == 1)
    assert np.all(r1["t"] > r0["t"])  # the serial k loop per tile is slower
    # the fill key sees the depth: a fit's fill cache cannot reuse the depth-off launch
    assert G.fill_key(off, G.fill_paradigm(g)) != G.fill_key(on, G.fill_paradigm(g))


def test_fit_without_hopper_cells_fixes_the_depth_off(monkeypatch):
    """A fold with no Hopper GPU has no data on Hopper's depth: the fit fixes it at 0 (as Blackwell's without
    Blackwell cells), and a fold with a Hopper GPU fits it."""
    cells = (np.array([64.0, 1024.0]), np.array([4096.0, 4096.0]), np.array([4096.0, 4096.0]), np.array([0.02, 0.2]))
    monkeypatch.setattr(F, "_fit_sample", lambda df, gpus, n, seed, exclude: {g: cells for g in gpus})
    out = F.fit_globals(None, ["b200"], {"b200": {}}, constants=C, names=["duty_k"], max_nfev=1)
    assert out["hopper_split_min_k"] == 0.0 and "duty_k" in out
    out = F.fit_globals(None, ["h100-sxm"], {"h100-sxm": {}}, constants=C, names=["duty_k"], max_nfev=1)
    assert "hopper_split_min_k" not in out  # not fixed off: a Hopper fold leaves it to the fit (not named here)


def test_e1_13_ablates_the_hopper_split_depth():
    from steptime_lab.experiments.gemm import ablation

    assert ablation.ABLATIONS["Hopper split depth (k pieces >= split_min_k)"] == {"hopper_split_min_k": 0.0}
