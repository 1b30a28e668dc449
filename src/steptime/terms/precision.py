"""fp8 (W8A8) projection GEMMs: the bf16 term's factors at the datasheet fp8 peak, with the
achieved fp8 fractions relative to bf16 (E1.27).

    t_fp8 = smax(t_compute(P_fp8) / r_c, t_memory(1-byte operands) / r_m, p) + t_floor + dt_floor + t_quant

t_quant: the activation quantisation the engine's fp8 linear runs as separate kernels before the
GEMM (engines.yaml precision.fp8_act_quant_passes): a dynamic per-tensor scale is an amax reduction
pass over the bf16 input (2 m k bytes) and then the quantise pass (reads 2 m k, writes m k); a fused
per-token quantise is that last pass alone. Each pass is a light kernel (terms/light.py, the
elementwise `act` kernel's floor and achieved bandwidth): a per-call fixed cost at small m that the
GEMM's own floor does not hold (the 7-12 us small-m floor of TensorRT-LLM's fp8 table, E1.27).

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
from steptime.terms import gemm, light

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


def act_quant_passes(engine=None) -> int:
    """Activation-quantise passes before each fp8 GEMM of `engine` (an Engine, a profile name, or None:
    vLLM's, as fp8_const)."""
    from steptime.specs.engines import get_engine

    if engine is None:
        engine = "vllm"
    if isinstance(engine, str):
        engine = get_engine(engine)
    return engine.fp8_act_quant_passes()


def act_quant_time(m, k, gpu, constants: Constants | None = None, passes: int = 2) -> np.ndarray:
    """Seconds: quantising an m x k bf16 activation to fp8 in `passes` separate kernels (module note)."""
    m = np.asarray(m, dtype=float)
    t = np.zeros_like(m * float(k) if np.ndim(k) == 0 else m * np.asarray(k, dtype=float))
    if passes <= 0:
        return t
    mk = m * np.asarray(k, dtype=float)
    t = t + light.light_time("act", 3.0 * mk, gpu, constants)  # the quantise pass: read bf16, write fp8
    for _ in range(int(passes) - 1):  # the reduction pass(es) of a dynamic scale: read bf16
        t = t + light.light_time("act", 2.0 * mk, gpu, constants)
    return t


def fp8_rel(gpu, constants: Constants | None = None, engine=None) -> dict:
    constants = constants or Constants.default()
    try:
        return {**IDENTITY, **constants.get(fp8_const(engine), gpu)}
    except KeyError:
        return dict(IDENTITY)


def apply_rel(g: dict, gpu, constants: Constants | None, rel: dict) -> np.ndarray:
    """Seconds: a gemm_time(dtype='fp8') dict re-combined with the relative fp8 efficiencies."""
    p = gemm.resolve(gpu, constants)
    t_mem = g["t_memory"] / rel["eta_mem_rel"] + g["t_cta"]  # plus the per-CTA stream (fp8 bytes)
    t = gemm.smax(g["t_compute"] / rel["eta_c_rel"], t_mem, float(p["overlap_p"]))
    return t + g["t_floor"] + rel["floor_add_us"] * 1e-6


def gemm_time_fp8(m, n, k, gpu, constants: Constants | None = None, rel: dict | None = None, engine=None,
                  **kw) -> dict:
    g = gemm.gemm_time(m, n, k, gpu, constants, dtype="fp8", **kw)
    rel = rel or fp8_rel(gpu, constants, engine)
    tq = act_quant_time(m, k, gpu, constants, act_quant_passes(engine))
    t = apply_rel(g, gpu, constants, rel) + tq
    return {**g, "t": t, "t_quant": tq, "compute_bound": g["t_compute"] / rel["eta_c_rel"] >= g["t_memory"] / rel["eta_mem_rel"]}


def gemm_time_shapes_fp8(m, shapes: dict, gpu, constants: Constants | None = None, engine=None, **kw) -> dict:
    out = gemm.gemm_time_shapes(m, shapes, gpu, constants, dtype="fp8", **kw)
    rel = fp8_rel(gpu, constants, engine)
    passes = act_quant_passes(engine)
    for name, g in out.items():
        g["t_quant"] = act_quant_time(m, shapes[name][1], gpu, constants, passes)
        g["t"] = apply_rel(g, gpu, constants, rel) + g["t_quant"]
        g["compute_bound"] = g["t_compute"] / rel["eta_c_rel"] >= g["t_memory"] / rel["eta_mem_rel"]
    return out
