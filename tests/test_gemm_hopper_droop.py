"""Hopper's work-dependent clock droop (`hopper_clk_droop` among the GEMM globals): it sets `clk_droop` on
Hopper parts only, over any global droop, and ships as the family.hopper constant (issue 19, wave 29)."""
import numpy as np
import pytest

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments.gemm.contract import apply_readings, base_params
from steptime_lab.experiments.gemm.folds import FAMILY_GLOBALS, HOPPER_GLOBALS, with_globals
from steptime_lab.experiments.gemm.settling import defaults_updates


@pytest.fixture(scope="module")
def constants():
    return Constants.load(DEFAULTS_FILE)


@pytest.mark.parametrize("order", ["hopper_first", "global_first"])
def test_hopper_droop_sets_clk_droop_on_hopper_only(constants, order):
    glob = {"clk_droop": 0.0, "hopper_clk_droop": 0.15, "hopper_cluster_size": 2}
    if order == "global_first":
        glob = dict(reversed(list(glob.items())))
    h = with_globals("h100-sxm", base_params("h100-sxm", constants), glob)
    b = with_globals("b200", base_params("b200", constants), glob)
    assert h["clk_droop"] == pytest.approx(0.15) and h["cluster_size"] == 2
    assert b["clk_droop"] == 0.0
    # the family keys never reach the GEMM term's parameters
    assert not set(HOPPER_GLOBALS) & (set(h) | set(b))
    assert not set(FAMILY_GLOBALS) & (set(h) | set(b))


def test_hopper_droop_slows_long_kernels_relative_to_the_reading(constants):
    """The 4096^3 reading re-reads eta_active under the droop: its own cell is unchanged, a longer kernel
    gets slower, a shorter one faster."""
    g = "h100-sxm"
    rd = {"eta_active": ((g, "gemm", 4096, 4096, 4096), 0.166)}
    m = np.array([512.0, 4096.0, 16384.0])
    t = {}
    for d in (0.0, 0.15):
        p = apply_readings(g, with_globals(g, base_params(g, constants), {"hopper_clk_droop": d, "clk_droop_us": 1000.0}), rd)
        t[d] = G.gemm_time(m, 4096, 4096, get_gpu(g), params=p)["t"]
    ratio = t[0.15] / t[0.0]
    assert ratio[1] == pytest.approx(1.0, abs=2e-3)
    assert ratio[0] < 0.995 and ratio[2] > 1.03


def test_defaults_updates_ship_the_hopper_droop_as_a_family_constant():
    doc = {"settings": {"seed": 0, "n_per_gpu": 10, "llm_share": 0.7}, "fixed": {"hopper_cluster_size": 2},
           "all": {"duty_c": 0.03, "hopper_clk_droop": 0.15, "hopper_cluster_size": 2},
           "folds": {}, "all_per_gpu": {}}
    ups = {(u["scope"], u["name"]): u["value"] for u in defaults_updates(doc) if u["scope"] != "global"
           or u["name"] in ("duty_c", "clk_droop", "hopper_clk_droop")}
    assert ups[("family.hopper", "clk_droop")] == pytest.approx(0.15)
    assert ("global", "hopper_clk_droop") not in ups and ("global", "clk_droop") not in ups
    assert ups[("global", "duty_c")] == pytest.approx(0.03)


def test_a_fit_without_hopper_cells_applies_no_hopper_droop(constants):
    """Only Hopper cells inform `hopper_clk_droop`: a fit on other GPUs fixes it at 0, not at its start."""
    import pandas as pd

    from steptime_lab.experiments.gemm.folds import fit_globals

    rng = np.random.default_rng(0)
    m = rng.choice([16.0, 256.0, 2048.0], 40)
    df = pd.DataFrame({"gpu": "a100-sxm", "m": m, "n": 4096.0, "k": 4096.0, "latency_ms": 1e-3 + m * 4096 * 4096 * 2 / 2.5e14 * 1e3})
    glob = fit_globals(df, ["a100-sxm"], {"a100-sxm": {}}, constants=constants, n_per_gpu=20, max_nfev=3,
                       names=["duty_c", "hopper_clk_droop"])
    assert glob["hopper_clk_droop"] == 0.0
