"""Tensor-parallel all-reduce, per implementation.

    x = 2 (n - 1) / n * bytes              bytes each rank moves (ring / nccl-tests bus convention)
    ring (datasheet)  t = latency + x / (link_bw * eta)
    nccl              t = smin(L + x/(a_ll B), L + d_ll128 + x/(a_ll128 B), L + d_simple + x/B)
    custom            t = smin(L + (n-1) bytes/(a_one B) + bytes/R_one, L + d_two + x/(a_two B), t_nccl)
                      (R_one, shape key r_one_gbps: the one-shot kernel's own rate, bounded by the loads its
                      fixed grid keeps in flight; absent: no such bound, the law before wave 38)
    nccl_host         t = floor + x / (eta * pcie_bw)   NCCL between PCIe GPUs without peer-to-peer: every
                      byte staged through host memory (the engine profile's host_path_floor_us and
                      host_path_eta, measured on one PCIe Gen5 host: engines.yaml vllm-no-p2p)
    (smin: a soft minimum, held at or above the floor plus the fastest regime's bandwidth term)

L (floor) and B (bus bandwidth) per GPU, implementation and TP degree; the shape constants
(a_*, d_*) per implementation and TP degree. E1.25 fits both on AIConfigurator's measured
tables (held out per GPU) and writes them into defaults.yaml (`allreduce_curve` per GPU:
{"impl/n": {L_us, B_gbps, shape}}). `impl` is the engine's implementation (specs/engines.yaml).
A GPU without an `allreduce_curve` of its own uses the datasheet ring law for nccl and custom.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.terms.comm_bounds import (  # noqa: F401  (the bounds, re-exported where E1.25 reads them)
    ETA_BUS_MIN, ETA_BUS_OWN_MIN, L_MAX_US, L_MIN_US, bound_violation, bus_bw_bounds, check_curve, check_updates,
    link_class)

IMPLS = ("ring", "nccl", "custom")  # the fitted / datasheet laws; nccl_host is an engine's (host_path_time)
SMIN_P = 8.0  # soft-minimum sharpness (p-norm of the inverse times); DERIVED: a sharp switch between regimes
SHAPE_KEYS = MappingProxyType({"nccl": ("a_ll", "d_ll128_us", "a_ll128", "d_simple_us"),
                               "custom": ("a_one", "d_two_us", "a_two", "r_one_gbps")})
# r_one_gbps (optional: a curve without it prices the one-shot branch by the link alone). vLLM's one-shot kernel
# (csrc/custom_all_reduce.cuh cross_device_reduce_1stage, launched on at most 36 blocks of 512 threads) reduces
# 16 bytes of the message per thread and round, loading them from all n ranks at once: per round about
# 36 x 512 x 16 B = 288 KiB of the message are in flight, whatever n, and a round lasts at least one remote-load
# latency. Little's law: the message moves at no more than R_one = 288 KiB / latency, a term S / R_one beside the
# link's (n - 1) S / (a_one B). The latency is not a datasheet fact: E1.25 fits R_one on the donor GPUs' tables.


def bus_bytes(nbytes, tp):
    """Bytes each rank moves on its link in a ring all-reduce of `nbytes`: 2 (p - 1) / p x nbytes."""
    tp = np.asarray(tp, dtype=float)
    return 2.0 * (tp - 1) / tp * np.asarray(nbytes, dtype=float)


def smin(*ts):
    t = np.asarray(np.broadcast_arrays(*ts), dtype=float)
    return np.sum(t ** -SMIN_P, axis=0) ** (-1.0 / SMIN_P)


def unpack(impl: str, values) -> dict:
    return {k: float(v) for k, v in zip(SHAPE_KEYS[impl], values)}


def nccl_law(x, L, B, shape: dict):
    """Microseconds; x bus bytes, L floor (us), B bus bandwidth (bytes/us)."""
    s = shape
    t = smin(L + x / (s["a_ll"] * B), L + s["d_ll128_us"] + x / (s["a_ll128"] * B), L + s["d_simple_us"] + x / B)
    return np.maximum(t, L + x / B)  # the soft minimum never beats the floor plus the bus bandwidth


def custom_law(x, n, L, B, shape: dict, t_nccl, one_shot_max=None):
    """Microseconds of vLLM's custom all-reduce of bus bytes `x` on `n` ranks.

    `one_shot_max` (message bytes; the kernel's own switch, engines.yaml allreduce.by_tp): the one-shot
    branch below it, the two-shot branch (held at or below NCCL's law) from it on, as the kernel picks.
    None: the soft minimum of both branches and NCCL (an engine whose switch is not stated)."""
    s = shape
    one = x * n / (2.0 * (n - 1)) * (n - 1)  # one-shot: each rank reads the other n-1 full buffers
    msg = x * n / (2.0 * (n - 1))  # the message bytes S
    t_one = L + one / (s["a_one"] * B) + (msg / (s["r_one_gbps"] * 1e3) if s.get("r_one_gbps") else 0.0)
    t_two = L + s["d_two_us"] + x / (s["a_two"] * B)
    floor = np.minimum(L + x / (max(1.0, s["a_two"]) * B), t_nccl)
    if one_shot_max is None:
        return np.maximum(smin(t_one, t_two, t_nccl), floor)
    two = np.maximum(smin(t_two, t_nccl), floor)
    return np.where(msg < np.asarray(one_shot_max, dtype=float), t_one, two)


def law_time(impl: str, x, n: int, L, B, shape: dict, nccl: dict | None = None, nccl_shape: dict | None = None,
             one_shot_max=None):
    """Microseconds of one all-reduce of bus bytes `x` with the fitted law of `impl` (`one_shot_max`:
    custom_law's switch)."""
    if impl == "nccl":
        return nccl_law(x, L, B, shape)
    if impl == "custom":
        t_n = nccl_law(x, nccl["L"], nccl["B"], nccl_shape)
        return custom_law(x, n, L, B, shape, t_n, one_shot_max)
    raise ValueError(f"no fitted law for all-reduce implementation {impl!r}")


def ring_time(nbytes, tp: int, gpu, constants: Constants | None = None):
    constants = constants or Constants.default()
    if gpu.link_bw <= 0:
        raise ValueError(f"{gpu.key}: no interconnect bandwidth in the spec file for tensor parallelism")
    lat = float(constants.get("allreduce_latency_us", gpu)) * 1e-6
    eta = float(constants.get("allreduce_eta", gpu))
    return lat + bus_bytes(nbytes, tp) / (gpu.link_bw * eta)


def _nearest(keys, tp: int) -> int:
    ns = sorted(keys)
    return min(ns, key=lambda n: (abs(np.log2(n) - np.log2(tp)), n))


def _curve(constants: Constants, gpu):
    try:
        c = constants.lookup("allreduce_curve", gpu)
    except KeyError:
        return None
    return c.value if c.scope.startswith("gpu.") else None


def allreduce_time(nbytes, tp: int, gpu, constants: Constants | None = None, impl: str = "ring",
                   one_shot_max=None):
    """Seconds for one all-reduce of `nbytes` per rank across `tp` GPUs with `impl`.

    nccl/custom use the measured law at the nearest measured TP degree with the GPU's own
    curve constants; a GPU without them falls back to the datasheet ring law. `one_shot_max`
    (custom only): message bytes below which the one-shot kernel runs (None: custom_law's soft minimum)."""
    constants = constants or Constants.default()
    nbytes = np.asarray(nbytes, dtype=float)
    if impl not in IMPLS:
        raise ValueError(f"unknown all-reduce implementation {impl!r} (known: {', '.join(IMPLS)})")
    if tp <= 1:
        return np.zeros_like(nbytes)
    curve = _curve(constants, gpu) if impl != "ring" else None
    if not curve:
        return ring_time(nbytes, tp, gpu, constants)
    have = {int(k.split("/")[1]) for k in curve if k.startswith(impl + "/")}
    if not have:  # e.g. custom on a PCIe GPU beyond 2 ranks: the engine would use NCCL
        impl = "nccl"
        have = {int(k.split("/")[1]) for k in curve if k.startswith("nccl/")}
    n = _nearest(have, tp)
    x = bus_bytes(nbytes, tp)
    p = curve[f"{impl}/{n}"]
    pn = curve[f"nccl/{n}"]
    t = law_time(impl, x, tp, p["L_us"], p["B_gbps"] * 1e3, p["shape"],
                 nccl={"L": pn["L_us"], "B": pn["B_gbps"] * 1e3}, nccl_shape=pn["shape"],
                 one_shot_max=one_shot_max if impl == "custom" else None)
    return t * 1e-6


def host_path_time(nbytes, tp: int, gpu, engine, constants: Constants | None = None):
    """Seconds of one NCCL all-reduce of `nbytes` per rank across `tp` PCIe GPUs WITHOUT peer-to-peer access
    (impl nccl_host): NCCL stages every byte through host memory, so the ring's bus bytes move at a fraction
    `host_path_eta` of the GPU's PCIe datasheet bandwidth (per direction) above a floor `host_path_floor_us`
    (engine profile fields; engines.yaml vllm-no-p2p names the reading they come from)."""
    nbytes = np.asarray(nbytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(nbytes)
    if not gpu.pcie_gbps:
        raise ValueError(f"{gpu.key}: no PCIe bandwidth in the spec file for a host-staged all-reduce")
    floor = engine.get("host_path_floor_us", gpu, constants) * 1e-6
    bw = engine.get("host_path_eta", gpu, constants) * gpu.pcie_gbps * 1e9
    return floor + bus_bytes(nbytes, tp) / bw


def engine_nccl_time(nbytes, ranks: int, gpu, engine=None, constants: Constants | None = None):
    """Seconds of one plain NCCL collective moving the bus bytes of an all-reduce of `nbytes` per rank across
    `ranks` GPUs, on the path `engine`'s NCCL takes: through host memory where the engine's all-reduce is
    nccl_host (PCIe GPUs without peer-to-peer: host_path_time), else E1.25's measured NCCL law (allreduce_time,
    impl nccl). The one place that decides which path an engine's NCCL takes (the all-reduce of a step and the
    MoE exchange's all-gather / reduce-scatter both ask here)."""
    if engine is not None and engine.allreduce_impl == "nccl_host":
        return host_path_time(nbytes, ranks, gpu, engine, constants)
    return allreduce_time(nbytes, ranks, gpu, constants, impl="nccl")


def engine_allreduce_time(nbytes, tp: int, gpu, engine, constants: Constants | None = None, fused=None):
    """Seconds of one all-reduce under `engine`, with the implementation the engine picks at each size.

    Without a per-TP dispatch table (or on an architecture it does not list): the implementation below
    max_bytes, the fallback from it (the profile's plain rule). With one (engines.yaml allreduce.by_tp, vLLM):
    where vLLM runs a kernel a measured table covers, its law prices it: the custom kernel below
    custom_max_bytes, with its own one-shot / two-shot switch (E1.25's tables are that kernel); a message
    fused with the residual add + RMSNorm (`fused`, Engine.fuses_norm) up to fuse_one_shot_max_bytes runs
    FlashInfer's one-shot kernel, priced with the custom one-shot branch, the nearest kernel a vendored table
    covers; it is not the same kernel (a Lamport push without start and end barriers, launched early by
    programmatic dependent launch: AIConfigurator's B300 table of it runs 1.6-1.9 us per call below the custom
    one-shot at decode sizes, DESIGN.md wave 33 `argr`; no table of it on another GPU, so no held-out price). Where vLLM runs a kernel no vendored table covers (FlashInfer's fused
    two-shot above its one-shot limit, torch symmetric memory between custom_max_bytes and
    symm_mem_max_bytes), the price stays the plain rule's: no evidence, no change."""
    nbytes = np.asarray(nbytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(nbytes)
    if engine.allreduce_impl in ("nccl", "nccl_host"):
        # plain NCCL; without peer-to-peer it runs through the host, with no custom kernel and no fusion
        return engine_nccl_time(nbytes, tp, gpu, engine, constants)
    main = allreduce_time(nbytes, tp, gpu, constants, engine.allreduce_impl)
    if engine.allreduce_impl != "custom":  # ring
        return main
    fb = allreduce_time(nbytes, tp, gpu, constants, engine.allreduce_fallback)
    plain = np.where(nbytes >= engine.get("max_bytes"), fb, main)  # custom below max_bytes (should_custom_ar)
    lim = engine.allreduce_limits(gpu, tp)
    if not lim:
        return plain
    fused = np.zeros(nbytes.shape, dtype=bool) if fused is None else np.broadcast_to(np.asarray(fused, dtype=bool),
                                                                                      nbytes.shape)
    # one-shot at every size (at 2 ranks, where the custom kernel is one-shot at every size: its soft-minimum law)
    one = allreduce_time(nbytes, tp, gpu, constants, "custom",
                         one_shot_max=None if lim["one_shot_max_bytes"] is None else np.inf)
    custom = allreduce_time(nbytes, tp, gpu, constants, "custom", one_shot_max=lim["one_shot_max_bytes"])
    return np.where(fused, np.where(nbytes <= lim["fuse_one_shot_max_bytes"], one, plain),
                    np.where(nbytes < lim["custom_max_bytes"], custom, plain))
