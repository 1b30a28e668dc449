"""fp8 W8A8 GEMMs (terms/precision.py, E1.27 in experiments/precision.py)."""
import numpy as np
import pandas as pd
import pytest
from steptime.errors import SteptimeError

from steptime.calibration import Constants
from steptime_lab.experiments import precision as E
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime.terms import precision as PT


def _cells():
    m = np.array([1, 16, 128, 1024, 4096, 8192] * 3, dtype=float)
    n = np.repeat([4096.0, 14336.0, 8192.0], 6)
    k = np.repeat([4096.0, 4096.0, 8192.0], 6)
    return m, n, k


def test_relative_factors_slow_the_branches_they_name():
    g = get_gpu("h100-sxm")
    c = Constants.default()
    m, n, k = _cells()
    base = PT.gemm_time_fp8(m, n, k, g, c, rel=PT.IDENTITY)
    slow_c = PT.gemm_time_fp8(m, n, k, g, c, rel={**PT.IDENTITY, "eta_c_rel": 0.5})
    big = base["t_compute"] > 3 * base["t_memory"]
    assert np.all(slow_c["t"][big] > 1.7 * base["t"][big] - 1e-6)
    assert np.allclose(slow_c["t"][m == 1], base["t"][m == 1], rtol=0.05)  # memory-bound cells barely move
    floor = PT.gemm_time_fp8(m, n, k, g, c, rel={**PT.IDENTITY, "floor_add_us": 3.0})
    assert np.allclose(floor["t"] - base["t"], 3e-6)
    # never faster than the datasheet fp8 peak or HBM
    assert np.all(base["t"] >= 2 * m * n * k / (g.fp8_dense_tflops * 1e12))


def test_fit_recovers_the_factors_that_generated_the_data_and_never_uses_the_held_out_gpu():
    c = Constants.default()
    m, n, k = _cells()
    truth = {"eta_c_rel": 0.6, "eta_mem_rel": 0.9, "floor_add_us": 4.0}
    parts = {}
    for key in ("h100-sxm", "h200-sxm"):
        g = get_gpu(key)
        gt = G.gemm_time(m, n, k, g, c, dtype="fp8")
        parts[key] = (gt, PT.apply_rel(gt, g, c, truth) * 1e3, g, c)
    fit = E.fit_rel(parts, ["h200-sxm"])
    for name, v in truth.items():
        assert fit[name] == pytest.approx(v, rel=0.05, abs=0.2)
    assert E.donors("h100-sxm", ["h200-sxm", "b200", "l40s"]) == ["h200-sxm"]
    assert "l40s" not in E.donors("l40s", ["h100-sxm", "b200"])


def test_fp8_rel_defaults_to_the_datasheet_form_without_a_constant():
    g = get_gpu("h100-sxm")
    assert PT.fp8_rel(g, Constants({})) == PT.IDENTITY


def test_load_fp8_keeps_fp8_rows_only_and_aggregates_duplicates():
    df = pd.DataFrame({"gpu": ["h100-sxm"] * 3 + ["b200"], "m": [1, 1, 2, 1], "n": [4096] * 4, "k": [4096] * 4,
                       "dtype": ["fp8", "fp8", "fp8", "bf16"], "latency_ms": [1.0, 3.0, 2.0, 9.0]})
    d = E.load_fp8(df)
    assert len(d) == 2 and set(d["gpu"]) == {"h100-sxm"}
    assert d[d["m"] == 1]["latency_ms"].iloc[0] == 2.0


def test_predict_ops_fp8_gemm_is_the_step_fp8_gemm_one_code_path():
    """predict_ops('gemm', dtype='fp8') and predict_step(dtype='fp8') price a GEMM the same way
    (terms/precision: the fitted fp8 fractions relative to bf16), not two different laws."""
    from steptime.ops import predict_ops
    from steptime.specs import get_gpu
    from steptime.terms import precision

    g = "h200-sxm"
    m, shapes = np.array([1, 64, 4096]), {"qkv": (10240, 8192), "down": (8192, 28672)}
    step = precision.gemm_time_shapes_fp8(m, shapes, get_gpu(g))
    for name, (n, k) in shapes.items():
        ops = predict_ops("gemm", g, m=m, n=n, k=k, dtype="fp8")["t_ms"]
        assert np.allclose(ops, step[name]["t"] * 1e3, rtol=1e-12)
    with pytest.raises(SteptimeError):
        predict_ops("gemm", "a100-sxm", m=64, n=4096, k=4096, dtype="fp8")  # no fp8 tensor cores: one clear error
