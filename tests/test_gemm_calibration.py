"""The GEMM calibration contract as code: deploy readings, disjoint scoring, baselines."""
import json

import numpy as np
import pandas as pd
import pytest

from steptime_lab.baselines import REGISTRY as peers  # the product's peers + the lab's baselines
from steptime.calibration import Constants
from steptime.errors import CalibrationLeakError
from steptime_lab.experiments import gemm as E
from steptime.specs import get_gpu
from steptime.terms import gemm as G

GPU = "h100-sxm"
C = Constants.default()  # the constants every GEMM-chain function takes as an argument


def _synthetic_table(params, noise=0.0, seed=0):
    """A small table for one GPU: the deploy cells plus a grid, latencies from `params`."""
    cells = [c for c in E.DEPLOY_CELLS.values()]
    cells += [(m, n, k) for m in (1, 16, 256, 2048, 8192) for n in (1024, 4096) for k in (1024, 8192)]
    m, n, k = (np.array(x, dtype=float) for x in zip(*cells))
    t = E.predict(GPU, m, n, k, params)
    t = t * (1 + noise * np.random.default_rng(seed).standard_normal(t.size))
    return pd.DataFrame({"gpu": GPU, "m": m.astype(int), "n": n.astype(int), "k": k.astype(int), "latency_ms": t})


def _truth():
    p = E.base_params(GPU, C)
    p.update(eta_active=0.83, eta_mem_max=0.88, mem_t_half_us=2.5, overlap_p=3.0, kernel_floor_us=2.0)
    return p


def test_readings_recover_the_per_gpu_constants():
    truth = _truth()
    df = _synthetic_table(truth)
    start = dict(truth, eta_active=0.5, eta_mem_max=0.5, kernel_floor_us=0.0)
    p = E.apply_readings(GPU, start, E.deploy_readings(df, GPU), rounds=8)
    for name in E.DEPLOY_CELLS:
        assert p[name] == pytest.approx(truth[name], rel=2e-2), name


def test_deploy_cells_are_never_scored():
    truth = _truth()
    df = _synthetic_table(truth, noise=0.05)
    rd = E.deploy_readings(df, GPU)
    fold = {"globals": {}, "params": E.apply_readings(GPU, truth, rd), "readings": rd}
    P = E.predictions(df, {GPU: fold}, baselines=("bare_roofline",))
    scored = set(E.cell_ids(P[GPU]["df"]))
    read = {cell for cell, _ in rd.values()}
    assert read and not (scored & read)
    assert len(scored) == len(df) - len(read)


def test_check_disjoint_raises_on_a_reading_cell():
    df = _synthetic_table(_truth())
    cal = E.calibration_record({GPU: E.deploy_readings(df, GPU)})
    with pytest.raises(CalibrationLeakError):
        cal.check_disjoint(E.cell_ids(df))
    cal.check_disjoint(E.cell_ids(df.iloc[3:]))  # the three deploy cells come first


def test_at_most_three_readings_per_gpu_in_defaults_updates():
    doc = {"settings": {"seed": 0, "n_per_gpu": 10, "llm_share": 0.7}, "fixed": {}, "all": {"duty_c": 0.5},
           "all_per_gpu": {GPU: {"eta_active": 0.8, "eta_mem_max": 0.9, "kernel_floor_us": 2.0}},
           "folds": {GPU: {"readings": {nm: {"cell": [GPU, "gemm", *c], "latency_ms": 1.0}
                                        for nm, c in E.DEPLOY_CELLS.items()}}}}
    ups = E.defaults_updates(doc)
    per_gpu = [u for u in ups if u["scope"] == f"gpu.{GPU}"]
    assert len(per_gpu) <= 3
    assert all(len(u["cells"]) == 1 and u["provenance"] == "MEASURED" for u in per_gpu)


def test_loo_fit_excludes_the_held_out_gpu(monkeypatch):
    seen = []
    real = E.fit_globals

    def spy(df, gpus, readings, **kw):
        seen.append(tuple(gpus))
        return {nm: v[0] for nm, v in E.FIT_GLOBALS.items()}

    from steptime_lab.experiments.gemm import settling

    monkeypatch.setattr(settling, "fit_globals", spy)  # patched where settle() calls it
    frames = []
    for g in ("h100-sxm", "b200", "l40s"):
        t = _synthetic_table(_truth()).assign(gpu=g)
        frames.append(t)
    doc = E.settle(pd.concat(frames, ignore_index=True), constants=C)
    assert ("b200", "h100-sxm", "l40s") in seen          # the all-GPU fit
    for g in ("h100-sxm", "b200", "l40s"):
        assert tuple(x for x in ("b200", "h100-sxm", "l40s") if x != g) in seen
    assert set(doc["folds"]) == {"h100-sxm", "b200", "l40s"}
    assert real is not settling.fit_globals


def test_the_gemm_chain_takes_its_constants_as_an_argument():
    """The tile ladder (a constant no fit or reading sets) comes from the constants passed down,
    never from the shipped file behind the caller's back; none passed is refused."""
    with pytest.raises(TypeError, match="constants must be"):
        E.base_params(GPU, None)
    truth = _truth()
    rd = E.deploy_readings(_synthetic_table(truth), GPU)
    glob = {nm: v[0] for nm, v in E.FIT_GLOBALS.items()}
    one_tile = C.with_overrides({"tiles": [[128, 128, 1.0]]}, scope=f"gpu.{GPU}")
    p = E.gpu_params(GPU, glob, rd, constants=C)
    q = E.gpu_params(GPU, glob, rd, constants=one_tile)
    assert p["tiles"] == C.get("tiles", get_gpu(GPU)) and q["tiles"] == [[128, 128, 1.0]]
    assert not np.allclose(E.predict(GPU, 64.0, 4096.0, 4096.0, p), E.predict(GPU, 64.0, 4096.0, 4096.0, q))
    from steptime_lab.experiments.gemm.ablation import without_tile

    dropped = without_tile(C, [GPU], 16).get("tiles", get_gpu(GPU))
    assert dropped == [t for t in C.get("tiles", get_gpu(GPU)) if t[0] != 16] and len(dropped) < len(p["tiles"])
    assert C.get("tiles", get_gpu(GPU)) == p["tiles"]  # the ablation built new constants, the run's are as they were


# ---------------------------------------------------------------- baselines
def test_bare_roofline_is_the_datasheet_max():
    g = get_gpu(GPU)
    X = pd.DataFrame({"m": [1, 8192], "n": [4096, 4096], "k": [4096, 4096]})
    t = peers.make("bare_roofline", gpu=GPU).fit(X, None).predict(X)
    m, n, k = (X[c].to_numpy(float) for c in "mnk")
    want = np.maximum(2 * m * n * k / g.peak_flops, 2 * (m * k + k * n + m * n) / g.mem_bw) * 1e3
    assert np.allclose(t, want)
    ds = peers.make("datasheet_alpha", gpu=GPU).predict(X)
    aic = peers.make("aic_empirical", gpu=GPU).predict(X)
    assert np.all(ds >= t) and np.all(aic >= t + 3e-3 - 1e-12)


def test_calibrated_roofline_recovers_its_constants():
    from steptime.rooflines import roofline_ms

    m = np.repeat([1, 16, 128, 1024, 4096, 16384], 4)
    n = np.tile([1024, 4096, 8192, 16384], 6)
    X = pd.DataFrame({"m": m, "n": n, "k": 4096})
    y = roofline_ms(m.astype(float), n.astype(float), 4096.0, GPU, 0.7, 0.85, 4.0)
    est = peers.make("calibrated_roofline", gpu=GPU).fit(X, y)
    assert est.a_c_ == pytest.approx(0.7, rel=1e-3)
    assert est.a_m_ == pytest.approx(0.85, rel=1e-3)
    assert est.t0_us_ == pytest.approx(4.0, rel=1e-2)
    assert est.in_sample


def test_stream_cell_tracks_the_typical_streaming_gemm_on_the_gpus_it_sees():
    """Two GPUs whose 16384^2 single-token GEMM is an outlier (a slow kernel on one, a fast one on
    the other) and whose 8192^2 cell sits at their median: the rule picks 8192^2; and it never
    looks at a GPU it is not given."""
    rows = []
    for g, odd in (("h100-sxm", 0.6), ("h200-sxm", 1.2)):
        bw = get_gpu(g).mem_bw
        for n, k, eff in ((8192, 8192, 0.8), (16384, 16384, 0.8 * odd), (8192, 16384, 0.79), (16384, 8192, 0.81),
                          (1024, 1024, 0.3)):  # the last is under 64 MiB: never a candidate
            rows.append({"gpu": g, "m": 1, "n": n, "k": k, "latency_ms": 2 * n * k / (eff * bw) * 1e3})
    df = pd.DataFrame(rows)
    assert E.select_stream_cell(df, ["h100-sxm", "h200-sxm"]) == (1, 8192, 8192)
    poisoned = pd.concat([df, pd.DataFrame([{"gpu": "b200", "m": 1, "n": 8192, "k": 8192, "latency_ms": 1e3}])])
    assert E.select_stream_cell(poisoned, ["h100-sxm", "h200-sxm"]) == (1, 8192, 8192)
    with pytest.raises(ValueError, match="every GPU"):  # only sub-64 MiB weights left
        E.select_stream_cell(df[df["n"] < 2048], ["h100-sxm"])


def test_datasheet_peak_and_bandwidth_are_absorbed_by_the_readings(monkeypatch):
    """A GPU's bf16 peak and DRAM bandwidth enter the GEMM term only through the products the deploy
    readings set (peak x eta_active, BW x eta_mem_max): correcting either figure moves no prediction
    once the readings are re-applied (issue 24: why no datasheet correction can reorder E2.2's GPUs)."""
    import dataclasses

    from steptime_lab.experiments.gemm import contract

    truth = dict(_truth(), clk_droop=0.0)  # the shipped droop (a droop > 0 reads the peak through the work time)
    df = _synthetic_table(truth)
    rd = E.deploy_readings(df, GPU)
    p0 = E.apply_readings(GPU, truth, rd, rounds=8)
    g0 = get_gpu(GPU)
    g1 = dataclasses.replace(g0, bf16_dense_tflops=g0.bf16_dense_tflops * 1.1, mem_bw_gbps=g0.mem_bw_gbps * 0.95)
    monkeypatch.setattr(contract, "get_gpu", lambda key: g1 if key == GPU else get_gpu(key))
    p1 = E.apply_readings(GPU, truth, rd, rounds=8)
    assert p1["eta_active"] == pytest.approx(p0["eta_active"] / 1.1, rel=1e-3)
    assert p1["eta_mem_max"] == pytest.approx(p0["eta_mem_max"] / 0.95, rel=1e-3)
    m, n, k = np.array([1.0, 16, 256, 2048, 8192]), np.array([1536.0, 4096, 7168, 4096, 8192]), np.full(5, 4096.0)
    t0 = G.gemm_time(m, n, k, g0, params=p0)["t"]
    t1 = G.gemm_time(m, n, k, g1, params=p1)["t"]
    assert t1 == pytest.approx(t0, rel=2e-3)
    # an SM count is not absorbed: it changes the launch geometry the readings do not set
    g2 = dataclasses.replace(g0, sms=g0.sms - 20)
    assert not np.allclose(G.gemm_time(m, n, k, g2, params=p0)["t"], t0, rtol=2e-3)


def test_a_fold_with_a_reading_fixed_from_elsewhere():
    """`fixed` replaces a reading: its value is kept, its cell is no longer among the fold's
    readings, and the other readings are solved around it (E1.1's Vidur compute reading)."""
    truth = _truth()
    rd = E.deploy_readings(_synthetic_table(truth), GPU)
    glob = {nm: v[0] for nm, v in E.FIT_GLOBALS.items()}
    doc = {"folds": {GPU: {"globals": glob, "readings": E._readings_json(rd)}}}
    full = E.fold_from_json(doc, GPU, constants=C)
    fixed = E.fold_from_json(doc, GPU, constants=C, fixed={"eta_active": 0.5})
    assert fixed["params"]["eta_active"] == 0.5 and full["params"]["eta_active"] != 0.5
    assert "eta_active" not in fixed["readings"] and set(full["readings"]) - set(fixed["readings"]) == {"eta_active"}
    c_full, cells_full = E.with_fold(C, GPU, doc)
    c_fixed, cells_fixed = E.with_fold(C, GPU, doc, fixed={"eta_active": 0.5})
    assert len(cells_fixed) == len(cells_full) - 1 and c_fixed.get("eta_active", get_gpu(GPU)) == 0.5
    assert E.gpu_params(GPU, glob, {}, constants=C, fixed={"eta_active": 0.6})["eta_active"] == 0.6


def test_settle_folds_in_worker_processes_equal_the_serial_folds():
    """settle(jobs=2) runs the leave-one-GPU-out folds in two processes: the same document as one after another."""
    frames = [_synthetic_table(_truth()).assign(gpu=g) for g in ("h100-sxm", "b200", "l40s")]
    df = pd.concat(frames, ignore_index=True)
    one = E.settle(df, constants=C, n_per_gpu=30, max_nfev=3)
    two = E.settle(df, constants=C, n_per_gpu=30, max_nfev=3, jobs=2)
    assert json.dumps(one, sort_keys=True, default=str) == json.dumps(two, sort_keys=True, default=str)
