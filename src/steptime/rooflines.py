"""The fixed-efficiency GEMM rooflines other predictors use, as peers (`steptime.peers`).

Every one is  t = max(2 m n k / (P * a_c), bytes / (BW * a_m)) + t0  with
bytes = 2 (m k + k n + m n) (bf16), P and BW the datasheet peaks; only (a_c, a_m, t0) differ:

* ``bare_roofline``    a_c = a_m = 1, t0 = 0: LLM-Viewer; GenZ with efficiency 1;
                       AIConfigurator's speed-of-light (SOL) mode.
* ``datasheet_alpha``  a_c = 0.5, a_m = 0.8, t0 = 0: one datasheet-style efficiency per branch.
* ``aic_empirical``    a_c = 1, a_m = 0.8, t0 = 3 us: AIConfigurator's empirical SOL
                       (mem_bw_empirical_scaling_factor 0.8, mem_empirical_constant_latency 3 us).

They need nothing measured, so they live in the product; the roofline fitted on measured cells
(`calibrated_roofline`) is the lab's (`steptime_lab.baselines.roofline`).
X: a table or mapping with columns m, n, k; latencies in milliseconds.
"""

from __future__ import annotations

import numpy as np

from steptime.specs import get_gpu


def cells_mnk(X):
    """(m, n, k) float arrays of a table or mapping of GEMM cells."""
    return (np.asarray(X["m"], dtype=float), np.asarray(X["n"], dtype=float), np.asarray(X["k"], dtype=float))


def roofline_ms(m, n, k, gpu, a_c: float, a_m: float, t0_us: float) -> np.ndarray:
    g = get_gpu(gpu)
    flops = 2.0 * m * n * k
    nbytes = 2.0 * (m * k + k * n + m * n)
    t = np.maximum(flops / (g.peak_flops * a_c), nbytes / (g.mem_bw * a_m)) + t0_us * 1e-6
    return t * 1e3


class FixedRoofline:
    """A roofline with fixed (a_c, a_m, t0): `fit` learns nothing."""

    a_c = 1.0
    a_m = 1.0
    t0_us = 0.0
    in_sample = False

    def __init__(self, gpu: str):
        self.gpu = gpu

    def fit(self, X=None, y=None):
        return self

    def predict(self, X) -> np.ndarray:
        m, n, k = cells_mnk(X)
        return roofline_ms(m, n, k, self.gpu, self.a_c, self.a_m, self.t0_us)


class BareRoofline(FixedRoofline):
    """Datasheet peaks, efficiency 1 on both branches (speed of light)."""

    name = "bare_roofline"


class DatasheetAlpha(FixedRoofline):
    """Datasheet peaks scaled by fixed efficiencies: compute 0.5, memory 0.8."""

    name = "datasheet_alpha"

    a_c = 0.5
    a_m = 0.8


class AICEmpirical(FixedRoofline):
    """AIConfigurator empirical SOL: memory efficiency 0.8 plus a constant 3 us."""

    name = "aic_empirical"

    a_c = 1.0
    a_m = 0.8
    t0_us = 3.0
