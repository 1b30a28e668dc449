"""The GEMM memory ramp fitted per launch kind (issue 19 item 1, wave 31, helper l40g): the wave-launched parts
(Ampere, Ada, sm120) carry their own mem_t_half_us / l2_resident_x / l2_gain (`wave_*` fold globals; the product
reads `<name>_wave` on wave parts), the persistent parts keep the shared ones."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import ablation
from steptime_lab.experiments.gemm import folds as F
from steptime_lab.experiments.gemm import settling

C = Constants.default()
WAVE = {"wave_mem_t_half_us": 3.0, "wave_l2_resident_x": 0.1, "wave_l2_gain": 7.0}
SHARED = {"mem_t_half_us": 0.5, "l2_resident_x": 0.3, "l2_gain": 3.5}


@pytest.mark.parametrize("gpu", ["a100-sxm", "l40s", "rtx-pro-6000"])
def test_wave_parts_take_the_wave_ramp(gpu):
    p = F.with_globals(gpu, E.base_params(gpu, C), {**SHARED, **WAVE})
    assert (p["mem_t_half_us"], p["l2_resident_x"], p["l2_gain"]) == (3.0, 0.1, 7.0)
    assert not set(F.FAMILY_GLOBALS) & set(p)


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "gb300"])
def test_persistent_parts_keep_the_shared_ramp(gpu):
    p = F.with_globals(gpu, E.base_params(gpu, C), {**SHARED, **WAVE})
    assert (p["mem_t_half_us"], p["l2_resident_x"], p["l2_gain"]) == (0.5, 0.3, 3.5)


def test_scopes_follow_the_launch_kind_not_the_architecture():
    # RTX PRO 6000 is a Blackwell part but wave-launched; B200 is Blackwell and persistent
    assert F._in_scope("rtx-pro-6000", "wave") and not F._in_scope("b200", "wave")
    assert F._in_scope("rtx-pro-6000", "blackwell") and not F._in_scope("l40s", "blackwell")
    assert set(WAVE) <= set(E.FIT_GLOBALS) and all(F.FAMILY_GLOBALS[k][0] == "wave" for k in WAVE)
    # the ablations switch the ramp off on both launch kinds
    assert ablation.ABLATIONS["memory ramp t_half"] == {"mem_t_half_us": 0.0, "wave_mem_t_half_us": 0.0}
    assert ablation.ABLATIONS["L2-resident path"] == {"l2_resident_x": 0.0, "wave_l2_resident_x": 0.0}


def test_settled_as_the_product_wave_constants():
    assert settling._update_scope("wave_l2_gain") == ("global", "l2_gain_wave")
    assert settling._update_scope("hopper_clk_droop") == ("family.hopper", "clk_droop")
    assert settling._update_scope("duty_c") == ("global", "duty_c")
    assert {f"{c}_{s}" for s, c in (F.FAMILY_GLOBALS[k] for k in WAVE)} == {f"{n}_wave" for n in G.WAVE_RAMP}


def _with(constants, scope, values):
    return constants.with_overrides(values, scope=scope, provenance="FITTED", source="test")


def test_product_reads_the_wave_ramp_on_wave_parts_only():
    c = _with(C, "global", {"mem_t_half_us_wave": 3.0, "l2_gain_wave": 7.0, "l2_resident_x_wave": 0.1})
    lw, h = get_gpu("l40s"), get_gpu("h100-sxm")
    pw, ph = G.resolve(lw, c), G.resolve(h, c)
    assert (pw["mem_t_half_us"], pw["l2_gain"], pw["l2_resident_x"]) == (3.0, 7.0, 0.1)
    assert ph["mem_t_half_us"] == G.resolve(h, C)["mem_t_half_us"] != 3.0
    # the shipped constants carry the wave ramp (wave 31): the wave part reads it, the persistent part does not
    assert G.resolve(lw, C)["mem_t_half_us"] == C.get("mem_t_half_us_wave")
    assert G.resolve(h, C)["mem_t_half_us"] == C.get("mem_t_half_us", h) != C.get("mem_t_half_us_wave")
    # without the wave constants the one shared ramp applies (the old law)
    bare = Constants({s: {k: v for k, v in t.items() if k not in {f"{n}_wave" for n in G.WAVE_RAMP}}
                      for s, t in C._scopes.items()}, C.engines)
    assert G.resolve(lw, bare)["mem_t_half_us"] == bare.get("mem_t_half_us", lw) != C.get("mem_t_half_us_wave")
    # the memory branch follows: a mid-sized single-token GEMM pays a longer wave ramp
    short = _with(C, "global", {"mem_t_half_us_wave": 0.1, "l2_gain_wave": 7.0, "l2_resident_x_wave": 0.1})
    t_wave = G.gemm_time(np.array([1.0]), 4096, 4096, lw, c)["t"]
    t_short = G.gemm_time(np.array([1.0]), 4096, 4096, lw, short)["t"]
    assert t_wave[0] > t_short[0]


def test_a_gpu_scoped_value_is_not_replaced_by_a_shared_wave_one():
    # a held-out fold overlays the GPU's own ramp at gpu scope; the all-GPU wave value must not leak over it
    c = _with(C, "global", {"mem_t_half_us_wave": 3.0})
    c = _with(c, "gpu.l40s", {"mem_t_half_us": 1.25})
    assert G.resolve(get_gpu("l40s"), c)["mem_t_half_us"] == 1.25
    assert G.resolve(get_gpu("a100-sxm"), c)["mem_t_half_us"] == 3.0


def _table(gpu, t_half):
    p = E.base_params(gpu, C)
    p.update(eta_active=0.8, eta_mem_max=0.85, mem_t_half_us=t_half, kernel_floor_us=2.0)
    cells = list(E.DEPLOY_CELLS.values())
    cells += [(m, n, k) for m in (1, 4, 16, 64, 256, 2048) for n in (1024, 2048, 4096, 8192)
              for k in (1024, 4096, 8192)]
    m, n, k = (np.array(x, dtype=float) for x in zip(*cells))
    return pd.DataFrame({"gpu": gpu, "m": m.astype(int), "n": n.astype(int), "k": k.astype(int),
                         "latency_ms": E.predict(gpu, m, n, k, p)})


def test_fit_separates_the_two_ramps_and_skips_the_wave_one_without_wave_cells():
    gpus = ("h100-sxm", "a100-sxm", "l40s")
    df = pd.concat([_table(g, 0.5 if g == "h100-sxm" else 3.0) for g in gpus], ignore_index=True)
    readings = {g: E.deploy_readings(df, g) for g in gpus}
    kw = dict(constants=C, n_per_gpu=60, max_nfev=40, names=["mem_t_half_us", "wave_mem_t_half_us"])
    glob = F.fit_globals(df, list(gpus), readings, **kw)
    assert glob["mem_t_half_us"] == pytest.approx(0.5, rel=0.15)
    assert glob["wave_mem_t_half_us"] == pytest.approx(3.0, rel=0.15)
    alone = F.fit_globals(df, ["h100-sxm"], readings, **kw)  # no wave cells: no wave ramp fitted or returned
    assert "wave_mem_t_half_us" not in alone


def test_fit_scans_the_wave_residency_grid(monkeypatch):
    # the residency threshold is piecewise in the cost (the first settle left it at its start): fit_globals scores
    # every WAVE_L2_RESIDENT_GRID value and refits from a better one
    seen = []
    real = F._scan_grid

    def spy(x, names, name, grid, *a):
        seen.append((name, tuple(grid)))
        return real(x, names, name, grid, *a)

    monkeypatch.setattr(F, "_scan_grid", spy)
    gpus = ["h100-sxm", "l40s"]
    df = pd.concat([_table(g, 1.0) for g in gpus], ignore_index=True)
    readings = {g: E.deploy_readings(df, g) for g in gpus}
    F.fit_globals(df, gpus, readings, constants=C, n_per_gpu=40, max_nfev=3, names=["duty_c", "wave_l2_resident_x"])
    assert seen == [("wave_l2_resident_x", F.WAVE_L2_RESIDENT_GRID)]
    seen.clear()
    F.fit_globals(df, ["h100-sxm"], readings, constants=C, n_per_gpu=40, max_nfev=3,
                  names=["duty_c", "wave_l2_resident_x"])
    assert not seen  # no wave cells: nothing to scan


def test_grid_scan_refits_from_a_better_threshold():
    names = ["duty_c", "wave_l2_resident_x"]
    lo, hi = np.array([0.0, 0.01]), np.array([5.0, 0.95])

    def resid(x):  # best at 0.3
        return np.array([10 * (x[1] - 0.3), 0.01 * (x[0] - 0.1)])

    x = F._scan_grid(np.array([0.1, 0.15]), names, "wave_l2_resident_x", F.WAVE_L2_RESIDENT_GRID, resid,
                     lambda x0: np.array(x0), lo, hi)
    assert x[1] == pytest.approx(0.3)
