"""Synthetic GEMM tables for the grey-box tests (test_greybox, test_greybox_explain): steptime's own
default prediction times a known law, so a fitted correction has a known answer."""
import numpy as np
import pandas as pd

from steptime.calibration import Calibration, Constants
from steptime_lab.experiments.ratios import predict_steptime


def gemm_cells(gpus, law):
    """GEMM cells whose latency is steptime's default prediction times law(m, gpu)."""
    m, n, k = np.meshgrid(2.0 ** np.arange(0, 13, 2), 2.0 ** np.arange(10, 15), 2.0 ** np.arange(10, 15))
    base = pd.DataFrame({"m": m.ravel(), "n": n.ravel(), "k": k.ravel()})
    out = []
    for g in gpus:
        d = base.copy()
        d["gpu"] = g
        d["latency_ms"] = predict_steptime("aic_gemm", d, g) * law(d["m"].to_numpy(), g)
        d["tokens"] = d["m"]
        out.append(d)
    return pd.concat(out, ignore_index=True)


def default_constants(gpu):
    """The `defaults` callable a GreyBox takes: the shipped constants and their calibration."""
    c = Constants.default()
    return c, Calibration.from_constants(c)
