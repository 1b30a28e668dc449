"""Host-side terms: the kernel-dispatch floor, the scheduler floor S(N), sampling.

    dispatch floor  N_kern * T_launch   (the GPU body cannot finish faster)
    S(N) = a + b (N - 1) + ray          scheduler/prepare/output work per step, N requests, plus
                                         the RPC to the workers (host_ray_ms; host_ray_tp_ms once TP > 1)
    exposed host    alpha * S(N)         alpha = 1 in eager mode
    sampling        t_samp + t_samp_b (N - 1)
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants

KERNELS_PER_LAYER = 12  # qkv, rope, kv_write, attn, o, 2 norms, 2 adds, gate_up, act, down
KERNELS_PER_STEP = 10   # embedding, final norm, lm head, sampling and bookkeeping kernels


def n_kernels(n_layers: int, tp: int = 1) -> int:
    return KERNELS_PER_LAYER * n_layers + KERNELS_PER_STEP + (2 * n_layers if tp > 1 else 0)


def dispatch_floor(n_layers: int, gpu, constants: Constants | None = None, tp: int = 1) -> float:
    constants = constants or Constants.default()
    return n_kernels(n_layers, tp) * float(constants.get("t_launch_us", gpu)) * 1e-6


def scheduler_floor(n_requests, gpu, constants: Constants | None = None, tp: int = 1):
    """S(N) in seconds (zero for an empty step)."""
    constants = constants or Constants.default()
    n = np.asarray(n_requests, dtype=float)
    a = float(constants.get("host_a_ms", gpu))
    b = float(constants.get("host_b_ms", gpu))
    ray = float(constants.get("host_ray_tp_ms" if tp > 1 else "host_ray_ms", gpu))
    return np.where(n > 0, (a + ray + b * np.maximum(n - 1.0, 0.0)) * 1e-3, 0.0)


def sampling_time(n_requests, gpu, constants: Constants | None = None):
    constants = constants or Constants.default()
    n = np.asarray(n_requests, dtype=float)
    a = float(constants.get("t_samp_ms", gpu))
    b = float(constants.get("t_samp_b_ms", gpu))
    return np.where(n > 0, (a + b * np.maximum(n - 1.0, 0.0)) * 1e-3, 0.0)
