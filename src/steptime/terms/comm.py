"""Tensor-parallel all-reduce: ring algorithm over the GPU's best link.

    t = latency + 2 (p - 1) / p * bytes / (link_bw * eta)
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants


def allreduce_time(nbytes, tp: int, gpu, constants: Constants | None = None):
    constants = constants or Constants.default()
    nbytes = np.asarray(nbytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(nbytes)
    if gpu.link_bw <= 0:
        raise ValueError(f"{gpu.key}: no interconnect bandwidth in the spec file for tensor parallelism")
    lat = float(constants.get("allreduce_latency_us", gpu)) * 1e-6
    eta = float(constants.get("allreduce_eta", gpu))
    return lat + 2.0 * (tp - 1) / tp * nbytes / (gpu.link_bw * eta)
