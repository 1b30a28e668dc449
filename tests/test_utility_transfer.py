"""E2.1 transfer logic: spec-scaled ratios, scoring, the calibration contract, an end-to-end toy."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Calibration, Constants
from steptime.errors import CalibrationLeakError
from steptime.experiments import transfer as T
from steptime.specs import get_gpu


def _gemm(gpu, ms=(1, 8, 64, 512, 4096), nk=((4096, 4096), (1024, 8192), (14336, 4096))):
    rows = [{"gpu": gpu, "m": m, "n": n, "k": k} for m in ms for n, k in nk]
    return pd.DataFrame(rows)


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
    frames = []
    for g in ("a100-sxm", "h100-sxm"):
        d = _gemm(g, ms=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))
        f, b = T.gemm_work(d.m, d.n, d.k)
        d["latency_ms"] = 1.3e3 * T.roofline_s(f, b, g)
        d["tokens"] = d["m"]
        frames.append(d)
    cells = pd.concat(frames, ignore_index=True)
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
