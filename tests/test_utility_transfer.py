"""E2.1 transfer logic: spec-scaled ratios, scoring, the calibration contract, an end-to-end toy."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Calibration, Constants
from steptime.errors import CalibrationLeakError
from steptime_lab.experiments import transfer as T
from steptime.specs import get_gpu


def _gemm(gpu, ms=(1, 8, 64, 512, 4096), nk=((4096, 4096), (1024, 8192), (14336, 4096))):
    rows = [{"gpu": gpu, "m": m, "n": n, "k": k} for m in ms for n, k in nk]
    return pd.DataFrame(rows)


MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def _two_gpus(latency, ms=MS):
    """Toy GEMM cells on A100 and H100 'measured' as latency(cells, gpu) ms."""
    frames = []
    for g in ("a100-sxm", "h100-sxm"):
        d = _gemm(g, ms=ms)
        d["latency_ms"] = latency(d, g)
        d["tokens"] = d["m"]
        frames.append(d)
    return pd.concat(frames, ignore_index=True)


def _roofline_x13(d, g):
    f, b = T.gemm_work(d.m, d.n, d.k)
    return 1.3e3 * T.roofline_s(f, b, g)


def test_spec_ratio_follows_the_bound_branch():
    a, h = get_gpu("a100-sxm"), get_gpu("h100-sxm")
    big = pd.DataFrame({"m": [8192], "n": [8192], "k": [8192]})
    tiny = pd.DataFrame({"m": [1], "n": [8192], "k": [8192]})
    assert T.spec_ratio("aic_gemm", big, "a100-sxm", "h100-sxm")[0] == pytest.approx(a.peak_flops / h.peak_flops)
    assert T.spec_ratio("aic_gemm", tiny, "a100-sxm", "h100-sxm")[0] == pytest.approx(a.mem_bw / h.mem_bw)


def test_step_ratio_light_ops_are_bandwidth_ratios():
    cells = pd.DataFrame({"model": ["llama-2-7b"], "tp": [1], "num_tokens": [128]})
    r = T.spec_ratio("vidur_step", cells, "a100-sxm", "a40")
    bw = get_gpu("a100-sxm").mem_bw / get_gpu("a40").mem_bw
    for op in T.LIGHT_OPS:
        assert r[op][0] == pytest.approx(bw)


def test_score_cells_split_and_interval():
    pred = np.array([1.1, 0.9, 2.0, 4.0])
    meas = np.array([1.0, 1.0, 1.0, 2.0])
    s = T.score_cells(pred, meas, tokens=[1, 16, 512, 4096], n_boot=200, seed=0)
    assert s["cells_decode"] == 2 and s["cells_prefill"] == 2
    assert s["mape_decode"] == pytest.approx(0.1)
    assert s["mape_prefill"] == pytest.approx(1.0)
    lo, hi = s["mape_all_ci"]
    assert lo <= s["mape_all"] <= hi


def test_calibration_cells_are_excluded_and_checked():
    cells = _gemm("h100-sxm")
    c = Constants.default().with_overrides({"x": 1.0}, scope="gpu.h100-sxm", provenance="MEASURED",
                                            cells=[("h100-sxm", "gemm", 4096, 4096, 4096)])
    cal = Calibration.from_constants(c)
    mask = T._calibration_mask("aic_gemm", cells.assign(m=[4096] * len(cells)), "h100-sxm", cal)
    assert mask.any()
    with pytest.raises(CalibrationLeakError):
        cal.check_disjoint([("h100-sxm", "gemm", 4096, 4096, 4096)])


def test_transfer_records_toy_gemm():
    """Home A100 'measured' as its roofline x 1.3, target H100 as its roofline x 1.3: the spec-scaled
    RF then transfers almost exactly while the verbatim RF is off by the peak ratio."""
    cells = _two_gpus(_roofline_x13)
    bundle = T.fit_home("aic_gemm", cells, "a100-sxm", seed=0)
    assert bundle["test_mask"].sum() > 0
    recs = T.transfer_records("aic_gemm", cells, bundle, ("a100-sxm", "h100-sxm"), n_boot=50)
    by = {(r["target_gpu"], r["predictor"]): r for r in recs}
    assert ("a100-sxm", "rf_home") in by and ("a100-sxm", "rf_verbatim") not in by
    assert by[("h100-sxm", "rf_spec_scaled")]["mape_all"] < by[("h100-sxm", "rf_verbatim")]["mape_all"]
    st = by[("h100-sxm", "steptime")]
    # calibration cells of the target (defaults.yaml deploy readings) are taken out of scoring
    assert st["cells"] + st["calibration_cells_excluded"] == (cells.gpu == "h100-sxm").sum()
    assert T.ratio_table(recs)[0]["target_gpu"] == "h100-sxm"


def test_steptime_scaled_profile_transfers_what_steptime_explains():
    """Measured = steptime's own prediction x 1.2 on both GPUs: the home RF carried by steptime's
    ratio then transfers almost exactly, better than the same RF carried by the roofline ratio."""
    cells = _two_gpus(lambda d, g: 1.2 * T.predict_steptime("aic_gemm", d, g))
    bundle = T.fit_home("aic_gemm", cells, "a100-sxm", seed=0)
    recs = T.transfer_records("aic_gemm", cells, bundle, ("h100-sxm",), n_boot=50)
    by = {r["predictor"]: r["mape_all"] for r in recs}
    assert by["rf_steptime_scaled"] < by["rf_spec_scaled"]
    # each cell's error is then exactly the RF's own error on the same shape at home
    tgt = cells[cells.gpu == "h100-sxm"].reset_index(drop=True)
    tgt = tgt[~T._calibration_mask("aic_gemm", tgt, "h100-sxm", Calibration.from_constants())]
    home = cells[cells.gpu == "a100-sxm"].set_index(["m", "n", "k"]).loc[list(zip(tgt.m, tgt.n, tgt.k))]
    home_err = np.mean(np.abs(T.predict_profiled(bundle, "rf", home.reset_index()) / home.latency_ms.to_numpy() - 1))
    assert by["rf_steptime_scaled"] == pytest.approx(home_err, rel=1e-6)
    row = T.ratio_table(recs)[0]
    assert row["ratio_profile_transfer"] == pytest.approx(by["rf_spec_scaled"] / by["rf_steptime_scaled"])


def test_step_ratio_per_operator_is_steptimes():
    cells = pd.DataFrame({"model": ["llama-2-7b", "phi-2"], "tp": [1, 1], "num_tokens": [128, 128]})
    r = T.steptime_ratio("vidur_step", cells, "a100-sxm", "h100-sxm")
    a = T.predict_layer_ops(cells, "a100-sxm", per_op=True)
    h = T.predict_layer_ops(cells, "h100-sxm", per_op=True)
    assert r["mlp_up_proj"][0] == pytest.approx(h["mlp_up_proj"][0] / a["mlp_up_proj"][0])
    assert r["post_attention_layernorm"][1] == 1.0  # phi-2's parallel block has no second norm
    assert sum(a.values()) == pytest.approx(T.predict_layer_ops(cells, "a100-sxm"))


def test_attention_cells_vidur_features():
    gen = pd.DataFrame({"gpu": "a100-sxm", "batch_size": [4], "isl": [1], "step": [1023], "num_heads": [32],
                        "num_kv_heads": [8], "head_dim": [128], "kv_cache_dtype": ["bfloat16"], "window_size": [0],
                        "kernel_source": ["fa"], "latency_ms": [0.05]})
    ctx = pd.DataFrame({"gpu": "a100-sxm", "batch_size": [2], "isl": [1024], "num_heads": [32], "num_kv_heads": [8],
                        "head_dim": [128], "kv_cache_dtype": ["bfloat16"], "window_size": [0], "kernel_source": ["fa"],
                        "latency_ms": [0.3]})
    c = T.attention_cells(ctx, gen).set_index("phase")
    assert c.loc["decode", "kv_cache_size"] == 1024 and c.loc["decode", "tokens"] == 4
    assert c.loc["prefill", "prefill_chunk_size_squared"] == 2 * 1024 ** 2
    assert c.loc["prefill", "kv_cache_size"] == 0


def test_profiler_gap_matches_shapes_and_splits_by_size():
    vidur = pd.DataFrame({"gpu": ["h100-sxm"] * 3, "gemm_m": [1, 1, 4096], "gemm_n": [4096] * 3,
                          "gemm_k": [4096] * 3, "latency_ms": [0.02, 0.04, 1.2], "op": ["attn_pre_proj"] * 3})
    vidur = pd.concat([vidur, pd.DataFrame({"gpu": ["h100-sxm"], "gemm_m": [np.nan], "gemm_n": [np.nan],
                                            "gemm_k": [np.nan], "latency_ms": [9.0], "op": ["add"]})])
    aic = pd.DataFrame({"gpu": ["h100-sxm", "h100-sxm", "a100-sxm"], "m": [1, 4096, 1], "n": [4096] * 3,
                        "k": [4096] * 3, "latency_ms": [0.03, 1.0, 5.0]})
    gap = T.profiler_gap(vidur, aic)
    assert set(gap) == {"h100-sxm"}  # the A100 row has no Vidur twin
    assert gap["h100-sxm"]["decode"]["median"] == pytest.approx(1.0)  # median of the two Vidur rows / 0.03
    assert gap["h100-sxm"]["prefill"] == {"cells": 1, "median": pytest.approx(1.2), "p10": pytest.approx(1.2),
                                          "p90": pytest.approx(1.2)}


def test_grid_check_compares_the_same_profile_under_two_grids():
    cells = _two_gpus(_roofline_x13, ms=(1, 4, 16, 64, 256, 1024, 4096))
    fast = T.fit_home("aic_gemm", cells, "a100-sxm", seed=0)
    # stand-in for a full-grid fit (the real one takes minutes): the same bundle, so nothing may move
    full = dict(fast, full_grid=True)
    doc = T.grid_check_document("aic_gemm", cells, fast, full, ("a100-sxm", "h100-sxm"), n_boot=20)
    assert doc["claims"][0]["value"] == 0.0 and doc["claims"][0]["met"]
    assert {r["predictor"] for r in doc["metrics"]["rows"]} == {"rf_home", "rf_verbatim", "rf_spec_scaled",
                                                              "rf_steptime_scaled"}
    with pytest.raises(ValueError, match="one fast-grid bundle and one full-grid"):
        T.grid_check_document("aic_gemm", cells, fast, fast, ("h100-sxm",), n_boot=20)
    with pytest.raises(ValueError, match="differ in home_gpu"):
        T.grid_check_document("aic_gemm", cells, fast, dict(full, home_gpu="h100-sxm"), ("h100-sxm",), n_boot=20)
