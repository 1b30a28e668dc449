"""fp8 (W8A8) projection GEMMs: the bf16 term's factors at the datasheet fp8 peak, with the
achieved fp8 fractions relative to bf16 (E1.27).

    t_fp8 = smax(t_compute(P_fp8) / r_c, t_memory(1-byte operands) / r_m, p) + t_floor + dt_floor

r_c, r_m, dt_floor: the engine's constant ({eta_c_rel, eta_mem_rel, floor_add_us}; engines.yaml
precision.fp8_gemm names it: `gemm_fp8_rel` for vLLM, `gemm_fp8_rel_trtllm`, `gemm_fp8_rel_sglang`),
FITTED by E1.27 on that engine's own fp8 tables of other GPUs (same architecture and SM-fill
paradigm where there are some): precision is a property of the engine's kernels. Without an
engine, vLLM's; without the constant, the pure datasheet form (1, 1, 0). predict_ops and
predict_step both price fp8 GEMMs here (one code path).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.terms import gemm

IDENTITY = MappingProxyType({"eta_c_rel": 1.0, "eta_mem_rel": 1.0, "floor_add_us": 0.0})


def fp8_const(engine=None) -> str:
    """The constant with `engine`'s fp8 GEMM factors (an Engine, a profile name, or None: vLLM's)."""
    if engine is None:
        from steptime.specs.engines import FP8_GEMM_DEFAULT

        return FP8_GEMM_DEFAULT
    if isinstance(engine, str):
        from steptime.specs.engines import get_engine

        engine = get_engine(engine)
    return engine.fp8_gemm_const()


def fp8_rel(gpu, constants: Constants | None = None, engine=None) -> dict:
    constants = constants or Constants.default()
    try:
        return {**IDENTITY, **constants.get(fp8_const(engine), gpu)}
    except KeyError:
        return dict(IDENTITY)


def apply_rel(g: dict, gpu, constants: Constants | None, rel: dict) -> np.ndarray:
    """Seconds: a gemm_time(dtype='fp8') dict re-combined with the relative fp8 efficiencies."""
    p = gemm.resolve(gpu, constants)
    t = gemm.smax(g["t_compute"] / rel["eta_c_rel"], g["t_memory"] / rel["eta_mem_rel"], float(p["overlap_p"]))
    return t + g["t_floor"] + rel["floor_add_us"] * 1e-6


def gemm_time_fp8(m, n, k, gpu, constants: Constants | None = None, rel: dict | None = None, engine=None,
                  **kw) -> dict:
    g = gemm.gemm_time(m, n, k, gpu, constants, dtype="fp8", **kw)
    rel = rel or fp8_rel(gpu, constants, engine)
    t = apply_rel(g, gpu, constants, rel)
    return {**g, "t": t, "compute_bound": g["t_compute"] / rel["eta_c_rel"] >= g["t_memory"] / rel["eta_mem_rel"]}


def gemm_time_shapes_fp8(m, shapes: dict, gpu, constants: Constants | None = None, engine=None, **kw) -> dict:
    out = gemm.gemm_time_shapes(m, shapes, gpu, constants, dtype="fp8", **kw)
    rel = fp8_rel(gpu, constants, engine)
    for name, g in out.items():
        g["t"] = apply_rel(g, gpu, constants, rel)
        g["compute_bound"] = g["t_compute"] / rel["eta_c_rel"] >= g["t_memory"] / rel["eta_mem_rel"]
    return out
