"""Physics bounds on fitted all-reduce constants (bus bandwidth and floor per GPU link), checked
where E1.25 fits them, where they are settled and where `steptime calibration ship` ships them.
Apart from terms/comm so that calibration can check a settled file without importing the term
(which imports calibration)."""

from __future__ import annotations

import math

from steptime.errors import InputError
from steptime.specs import get_gpu

# Physics bounds on a fitted all-reduce constant (checked where E1.25 fits them and again where they
# are settled and shipped). Bus bandwidth B (nccl-tests' bus convention, bytes each rank moves per
# second on its link):
#   upper: the datasheet per-direction link bandwidth (specs/gpus.yaml nvlink_gbps / pcie_gbps;
#          a PCIe Gen4 x16 link is 32 GB/s raw, about 25 GB/s achieved); over NVLink with an NVSwitch
#          the switch can reduce in the network (NVLS), so each rank moves its buffer once each way
#          instead of 2 (n - 1) / n times: the bus-convention bandwidth can reach 2 (n - 1) / n x the link.
#   lower: ETA_BUS_MIN of the link. ASSUMED: an in-node ring moves its bytes over the GPUs' own links;
#          under a tenth of the link the traffic has left them (staged through host sockets or the
#          network), which the in-node law does not describe. This is the bound for a table that DONATES
#          its curve's shape to another GPU (E1.25's in_regime).
#   lower, a GPU's own readings: ETA_BUS_OWN_MIN of the link. A GPU's own NCCL readings measure its host
#          and links and are believed down to this floor (a slow PCIe topology: L40S at TP 8 moves 1.45 GB/s,
#          0.045 of its 32 GB/s link, every byte staged through host memory); check_curve / check_updates
#          (settle, ship) and E1.25's readings use it. ASSUMED: a host-staged ring whose n ranks share one
#          host path, each byte crossing it twice (down to host memory and up again), moves about
#          link / (2 n) per rank, 1/16 of the link at the largest in-node degree (8); a hundredth, about
#          6x under that, leaves room for a contended socket link, and a reading under it is a broken run,
#          not a transport (set by order of magnitude: every value from 0 to 0.045 scores E1.25 the same,
#          L40S TP 8 being the only reading under the tenth).
#   A bus bandwidth above the link bound, or not a positive finite number, is refused under either floor.
# Floor L (smallest-message time): between L_MIN_US (DERIVED: a cross-GPU handshake is a kernel
# launch plus a flag over the link, each about a microsecond or more) and L_MAX_US (ASSUMED: a
# one-node all-reduce of a few bytes never takes a millisecond).
ETA_BUS_MIN = 0.1
ETA_BUS_OWN_MIN = 0.01
L_MIN_US = 1.0
L_MAX_US = 1000.0


def link_class(gpu) -> str:
    """'nvlink' or 'pcie' (from the datasheet: a GPU without NVLink bandwidth talks over PCIe)."""
    return "nvlink" if gpu.nvlink_gbps else "pcie"


def bus_bw_bounds(gpu, n: int, eta_min: float = ETA_BUS_MIN) -> tuple[float, float]:
    """(lowest, highest) physically plausible bus bandwidth of an n-GPU all-reduce on `gpu`, GB/s; the lowest is
    `eta_min` of the link (ETA_BUS_MIN for a shape donor, ETA_BUS_OWN_MIN for the GPU's own readings)."""
    link = gpu.link_bw / 1e9
    if link <= 0:
        return 0.0, float("inf")
    hi = link * (max(1.0, 2.0 * (n - 1) / n) if link_class(gpu) == "nvlink" else 1.0)
    return eta_min * link, hi


def bound_violation(gpu, n: int, B_gbps: float | None = None, L_us: float | None = None,
                    eta_min: float = ETA_BUS_MIN) -> str | None:
    """Why a fitted bus bandwidth (GB/s) or floor (us) is outside the physics bounds, or None. `eta_min`: the
    lower bound's fraction of the link (ETA_BUS_MIN for a shape donor's table, the default; ETA_BUS_OWN_MIN for
    a GPU's own readings and the curve that ships for it)."""
    if B_gbps is not None:
        if not (math.isfinite(B_gbps) and B_gbps > 0):
            return f"bus bandwidth {B_gbps!r} GB/s at TP {n} is not a positive finite number"
        lo, hi = bus_bw_bounds(gpu, n, eta_min)
        if not (lo <= B_gbps <= hi):
            return (f"bus bandwidth {B_gbps:.3g} GB/s at TP {n} is outside {lo:.3g}-{hi:.3g} GB/s "
                    f"({eta_min:g}-{hi / (gpu.link_bw / 1e9):.3g} x {gpu.key}'s datasheet {link_class(gpu)} link)")
    if L_us is not None and not (L_MIN_US <= L_us <= L_MAX_US):
        return f"floor {L_us:.3g} us at TP {n} is outside {L_MIN_US:g}-{L_MAX_US:g} us"
    return None


def check_curve(gpu, curve: dict) -> None:
    """Refuse an `allreduce_curve` ({"impl/n": {L_us, B_gbps, shape}}) with a constant outside the
    physics bounds: one line naming the GPU, the entry and the bound. The curve is the GPU's own (its readings),
    so its bus bandwidth is held to ETA_BUS_OWN_MIN of the link, not the donors' ETA_BUS_MIN."""
    for key, p in sorted(curve.items()):
        n = int(str(key).split("/")[1])
        why = bound_violation(gpu, n, float(p["B_gbps"]), float(p["L_us"]), eta_min=ETA_BUS_OWN_MIN)
        if why:
            raise InputError(f"allreduce_curve of {gpu.key}, {key}: {why}")
        r = (p.get("shape") or {}).get("r_one_gbps")  # the custom one-shot kernel's own rate (terms/comm.py), optional
        if r is not None and not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
            raise InputError(f"allreduce_curve of {gpu.key}, {key}: the one-shot rate r_one_gbps {r!r} is not a "
                             "positive finite number of GB/s")


def check_updates(updates) -> int:
    """Refuse settled update records whose `allreduce_curve` breaks the physics bounds (the settle step
    and `steptime calibration ship` call this); returns how many curves were checked."""
    n = 0
    for u in updates:
        if u.get("name") != "allreduce_curve":
            continue
        scope = str(u.get("scope", ""))
        if not scope.startswith("gpu.") or not isinstance(u.get("value"), dict):
            raise InputError(f"allreduce_curve update with scope {scope!r}: expected gpu.<key> and a mapping")
        check_curve(get_gpu(scope[4:]), u["value"])
        n += 1
    return n
