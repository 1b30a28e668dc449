"""Tensor-parallel all-reduce, per implementation.

    ring (datasheet):  t = latency + 2 (p - 1) / p * bytes / (link_bw * eta)

`impl` is the engine's implementation (specs/engines.yaml: nccl, custom or ring); E1.25
fits the measured laws of nccl and custom on AIConfigurator's tables. Until a GPU has
those constants, nccl and custom use the datasheet ring law.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants

IMPLS = ("ring", "nccl", "custom")


def bus_bytes(nbytes, tp: int):
    """Bytes each rank moves on its link in a ring all-reduce of `nbytes`: 2 (p - 1) / p x nbytes."""
    return 2.0 * (tp - 1) / tp * np.asarray(nbytes, dtype=float)


def ring_time(nbytes, tp: int, gpu, constants: Constants | None = None):
    constants = constants or Constants.default()
    if gpu.link_bw <= 0:
        raise ValueError(f"{gpu.key}: no interconnect bandwidth in the spec file for tensor parallelism")
    lat = float(constants.get("allreduce_latency_us", gpu)) * 1e-6
    eta = float(constants.get("allreduce_eta", gpu))
    return lat + bus_bytes(nbytes, tp) / (gpu.link_bw * eta)


def allreduce_time(nbytes, tp: int, gpu, constants: Constants | None = None, impl: str = "ring"):
    """Seconds for one all-reduce of `nbytes` per rank across `tp` GPUs with `impl`."""
    constants = constants or Constants.default()
    nbytes = np.asarray(nbytes, dtype=float)
    if impl not in IMPLS:
        raise ValueError(f"unknown all-reduce implementation {impl!r} (known: {', '.join(IMPLS)})")
    if tp <= 1:
        return np.zeros_like(nbytes)
    return ring_time(nbytes, tp, gpu, constants)


def engine_allreduce_time(nbytes, tp: int, gpu, engine, constants: Constants | None = None):
    """All-reduce under `engine`: its implementation up to max_bytes, the fallback above."""
    nbytes = np.asarray(nbytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(nbytes)
    main = allreduce_time(nbytes, tp, gpu, constants, engine.allreduce_impl)
    if engine.allreduce_impl != "custom":
        return main
    fb = allreduce_time(nbytes, tp, gpu, constants, engine.allreduce_fallback)
    return np.where(nbytes > engine.get("max_bytes"), fb, main)
