"""Single-operator predictions, vectorised over numpy arrays of cells.

This is the unit the experiments validate:

    predict_ops("gemm", gpu, m=..., n=..., k=...)
    predict_ops("attention_prefill", gpu, batch=..., tokens=..., kv_len=0, heads=..., kv_heads=..., head_dim=...)
    predict_ops("attention_decode", gpu, batch=..., kv_len=..., heads=..., kv_heads=..., head_dim=...)
        (attention cells take warm_l2=True to model a microbenchmark that replays one layer,
         keeping its KV cache in L2; a real forward pass streams it, the default)
    predict_ops("light", gpu, kernel="rmsnorm", nbytes=...)
    predict_ops("allreduce", gpu, nbytes=..., tp=...)

Returns a dict of arrays; `t_ms` is the prediction, the rest are its branches and factors.
"""

from __future__ import annotations

from types import MappingProxyType

import difflib

import numpy as np

from steptime.calibration import Constants, check_constants
from steptime.errors import InputError
from steptime.specs import get_gpu
from steptime.specs.engines import get_engine
from steptime.terms import attention, comm, gemm, light
from steptime.validation import MAX_DIM, as_int, check_array, check_bool, check_choice, check_f_clk
from steptime.specs.engines import check_engine_gpu, check_precision
from steptime.terms import precision

OPS = ("gemm", "attention_prefill", "attention_decode", "light", "allreduce")

# Per op: required cells, optional cells. Each cell's check: (minimum, strict, integral).
_POS_INT = (0.0, True, True)  # whole numbers >= 1
_NONNEG_INT = (0.0, False, True)  # whole numbers >= 0
_POS = (0.0, True, False)  # sizes in bytes > 0
_ATTN = MappingProxyType({"batch": _POS_INT, "heads": _POS_INT, "kv_heads": _POS_INT, "head_dim": _POS_INT})
_ARGS = MappingProxyType({
    "gemm": (MappingProxyType({"m": _POS_INT, "n": _POS_INT, "k": _POS_INT}), frozenset({"dtype"})),
    "attention_prefill": (MappingProxyType({**_ATTN, "tokens": _POS_INT}),
                          frozenset({"kv_len", "kv_dtype", "warm_l2"})),
    "attention_decode": (MappingProxyType({**_ATTN, "kv_len": _POS_INT}), frozenset({"kv_dtype", "warm_l2"})),
    "light": (MappingProxyType({"nbytes": _POS}), frozenset({"kernel"})),
    "allreduce": (MappingProxyType({"nbytes": _POS, "tp": None}), frozenset()),
})
_OPTIONAL_CHECKS = MappingProxyType({"kv_len": _NONNEG_INT})


def _ms(d: dict) -> dict:
    """Add millisecond copies of the time arrays: t -> t_ms, t_compute -> t_compute_ms, ..."""
    out = dict(d)
    for k in ("t", "t_compute", "t_memory"):
        if k in out:
            out[f"{k}_ms"] = np.asarray(out[k]) * 1e3
    return out


def _check_cells(op: str, cells: dict) -> None:
    """Every argument present, known and sane: one line naming the argument otherwise."""
    if op == "light" and "kernel" not in cells:
        raise InputError(f"predict_ops('light'): missing argument 'kernel' (one of {', '.join(light.LIGHT_KERNELS)})")
    required, optional = _ARGS[op]
    takes = [*required, *sorted(optional)]
    unknown = sorted(set(cells) - set(required) - optional)
    if unknown:  # before the missing ones: a misspelt argument (kk=, bytes=) is why its true name is missing
        close = [c for u in unknown for c in difflib.get_close_matches(u, takes, n=1, cutoff=0.5)]
        hint = f"did you mean {', '.join(dict.fromkeys(close))}? " if close else ""
        raise InputError(f"predict_ops({op!r}): unknown argument{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)} ({hint}takes {', '.join(takes)})")
    missing = [a for a in required if a not in cells]
    if missing:
        raise InputError(f"predict_ops({op!r}): missing argument{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (needs {', '.join(required)})")
    for name, rule in {**_OPTIONAL_CHECKS, **required}.items():
        if rule is None or name not in cells:
            continue
        lo, strict, integral = rule
        # a size (tokens, a dimension, heads) is at most MAX_DIM: kernels index it with 32-bit integers
        check_array(cells[name], f"predict_ops({op!r}): {name}", minimum=lo, strict=strict, integral=integral,
                    maximum=MAX_DIM if integral else None)
    shapes = {name: np.shape(cells[name]) for name, rule in {**_OPTIONAL_CHECKS, **required}.items()
              if rule is not None and name in cells}
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        raise InputError(f"predict_ops({op!r}): the sizes' array shapes do not broadcast together ("
                         + ", ".join(f"{k} {v}" for k, v in shapes.items()) + ")") from None
    if op.startswith("attention"):
        heads, kv_heads = np.asarray(cells["heads"]), np.asarray(cells["kv_heads"])
        if np.any(kv_heads > heads) or np.any(np.mod(heads, kv_heads) != 0):
            raise InputError(f"predict_ops({op!r}): heads ({cells['heads']!r}) must be a multiple of kv_heads "
                             f"({cells['kv_heads']!r})")
        check_choice(cells.get("kv_dtype", "bf16"), "KV-cache dtype kv_dtype", tuple(attention.KV_BYTES))
        check_bool(cells.get("warm_l2", False), f"predict_ops({op!r}): warm_l2")
    if op == "gemm":
        check_choice(cells.get("dtype", "bf16"), "GEMM dtype", tuple(gemm.BYTES))
    if op == "light":
        check_choice(cells["kernel"], "light kernel", light.LIGHT_KERNELS)
    if op == "allreduce":
        as_int(cells["tp"], f"predict_ops({op!r}): tensor-parallel degree tp", 1)


def predict_ops(op: str, gpu, *, constants: Constants | None = None, f_clk: float | None = None,
                allow_boost: bool = False, engine=None, **cells) -> dict:
    """Predict operator cells (see the module docstring for each op's arguments).

    `engine` (a profile name or Engine; default vLLM's kernels) picks whose fp8 GEMM kernels an
    fp8 `gemm` cell is priced with (engines.yaml precision.fp8_gemm), as predict_step does, with the
    activation quantise the engine runs on a served checkpoint (precision.fp8_act_quant_passes_served,
    fp8_act_quant_row_cost_served). Without an engine the cell is vLLM's linear as its per-operator tables
    time it (the collector's call: precision.fp8_act_quant_passes, fp8_act_quant_row_cost); one code path.

    Sizes must be finite and positive (whole numbers where they count things); `f_clk` must
    lie in (0, 1] unless `allow_boost`. Bad input raises `InputError` (a `SteptimeError` and a
    `ValueError`) naming the argument.
    """
    check_choice(op, "op", OPS)
    gpu = get_gpu(gpu)
    check_f_clk(f_clk, allow_boost)
    _check_cells(op, cells)
    if op == "allreduce":  # the predictors' check: the all-reduce law is the in-node one
        from steptime.step import check_tp

        check_tp(cells["tp"], gpu)
    check_constants(constants)
    constants = constants or Constants.default()
    if engine is not None:
        # an unknown engine, or one that does not run on the GPU's vendor, is one clear error, whatever the op
        check_engine_gpu(get_engine(engine, fitted=constants.engines), gpu)
    if op == "gemm" and cells.get("dtype", "bf16") == "fp8":
        check_precision(gpu, "fp8")  # the one dtype check, as predict_step
        # no engine: vLLM's kernels as its per-operator tables time them; an engine: as that engine serves
        r = precision.gemm_time_fp8(cells["m"], cells["n"], cells["k"], gpu, constants, f_clk=f_clk,
                                    served=engine is not None,
                                    engine=None if engine is None else get_engine(engine, fitted=constants.engines))
    elif op == "gemm":
        r = gemm.gemm_time(cells["m"], cells["n"], cells["k"], gpu, constants, f_clk=f_clk,
                           dtype=cells.get("dtype", "bf16"))
    elif op == "attention_prefill":
        r = attention.attention_cells(cells["batch"], cells["tokens"], cells.get("kv_len", 0), cells["heads"],
                                      cells["kv_heads"], cells["head_dim"], gpu, constants,
                                      kv_dtype=cells.get("kv_dtype", "bf16"), f_clk=f_clk,
                                      warm_l2=cells.get("warm_l2", False))
    elif op == "attention_decode":
        r = attention.attention_cells(cells["batch"], 1, cells["kv_len"], cells["heads"], cells["kv_heads"],
                                      cells["head_dim"], gpu, constants, kv_dtype=cells.get("kv_dtype", "bf16"),
                                      f_clk=f_clk, warm_l2=cells.get("warm_l2", False))
    elif op == "light":
        t = light.light_time(cells["kernel"], cells["nbytes"], gpu, constants)
        r = {"t": t}
    else:  # allreduce
        r = {"t": comm.allreduce_time(cells["nbytes"], int(cells["tp"]), gpu, constants)}
    return _ms(r)
