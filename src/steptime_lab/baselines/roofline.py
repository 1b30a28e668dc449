"""Peers' GEMM formulas as baselines, one interface (fit / predict on a table of cells).

Every baseline is a roofline  t = max(2 m n k / (P * a_c), bytes / (BW * a_m)) + t0  with
bytes = 2 (m k + k n + m n) (bf16), P and BW the datasheet peaks; only (a_c, a_m, t0) differ:

* ``bare_roofline``       a_c = a_m = 1, t0 = 0: LLM-Viewer; GenZ with efficiency 1;
                          AIConfigurator's speed-of-light (SOL) mode.
* ``datasheet_alpha``     a_c = 0.5, a_m = 0.8, t0 = 0: one datasheet-style efficiency per branch.
* ``aic_empirical``       a_c = 1, a_m = 0.8, t0 = 3 us: AIConfigurator's empirical SOL
                          (mem_bw_empirical_scaling_factor 0.8, mem_empirical_constant_latency 3 us).
* ``calibrated_roofline`` (a_c, a_m, t0) fitted per GPU on the cells it is then scored on
                          (IN-SAMPLE reference: the best any single 3-constant roofline does).

X: a DataFrame (or mapping) with columns m, n, k; latencies in milliseconds.
"""

from __future__ import annotations

import numpy as np

from steptime_lab.baselines import register
from steptime.specs import get_gpu


def _cols(X):
    return (np.asarray(X["m"], dtype=float), np.asarray(X["n"], dtype=float), np.asarray(X["k"], dtype=float))


def roofline_ms(m, n, k, gpu, a_c: float, a_m: float, t0_us: float) -> np.ndarray:
    g = get_gpu(gpu)
    flops = 2.0 * m * n * k
    nbytes = 2.0 * (m * k + k * n + m * n)
    t = np.maximum(flops / (g.peak_flops * a_c), nbytes / (g.mem_bw * a_m)) + t0_us * 1e-6
    return t * 1e3


class _FixedRoofline:
    a_c = 1.0
    a_m = 1.0
    t0_us = 0.0
    in_sample = False

    def __init__(self, gpu: str):
        self.gpu = gpu

    def fit(self, X=None, y=None):
        return self

    def predict(self, X) -> np.ndarray:
        m, n, k = _cols(X)
        return roofline_ms(m, n, k, self.gpu, self.a_c, self.a_m, self.t0_us)


@register("bare_roofline")
class BareRoofline(_FixedRoofline):
    """Datasheet peaks, efficiency 1 on both branches (speed of light)."""


@register("datasheet_alpha")
class DatasheetAlpha(_FixedRoofline):
    """Datasheet peaks scaled by fixed efficiencies: compute 0.5, memory 0.8."""

    a_c = 0.5
    a_m = 0.8


@register("aic_empirical")
class AICEmpirical(_FixedRoofline):
    """AIConfigurator empirical SOL: memory efficiency 0.8 plus a constant 3 us."""

    a_c = 1.0
    a_m = 0.8
    t0_us = 3.0


@register("calibrated_roofline")
class CalibratedRoofline:
    """Best single roofline per GPU: (a_c, a_m, t0) fitted on the cells given (in-sample).

    Fitted by minimising the soft-L1 relative error, close to the MAPE it is scored on.
    """

    in_sample = True

    def __init__(self, gpu: str):
        self.gpu = gpu

    def fit(self, X, y):
        from scipy.optimize import least_squares

        m, n, k = _cols(X)
        y = np.asarray(y, dtype=float)

        def resid(v):
            return (roofline_ms(m, n, k, self.gpu, v[0], v[1], v[2]) - y) / y

        r = least_squares(resid, [0.7, 0.8, 3.0], bounds=([0.05, 0.05, 0.0], [1.5, 3.0, 100.0]),
                          loss="soft_l1", f_scale=0.02)
        self.a_c_, self.a_m_, self.t0_us_ = map(float, r.x)
        return self

    def predict(self, X) -> np.ndarray:
        m, n, k = _cols(X)
        return roofline_ms(m, n, k, self.gpu, self.a_c_, self.a_m_, self.t0_us_)
