"""Single-operator predictions, vectorised over numpy arrays of cells.

This is the unit the experiments validate:

    predict_ops("gemm", gpu, m=..., n=..., k=...)
    predict_ops("attention_prefill", gpu, batch=..., tokens=..., kv_len=0, heads=..., kv_heads=..., head_dim=...)
    predict_ops("attention_decode", gpu, batch=..., kv_len=..., heads=..., kv_heads=..., head_dim=...)
    predict_ops("light", gpu, kernel="rmsnorm", nbytes=...)
    predict_ops("allreduce", gpu, nbytes=..., tp=...)

Returns a dict of arrays; `t_ms` is the prediction, the rest are its branches and factors.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import attention, comm, gemm, light

OPS = ("gemm", "attention_prefill", "attention_decode", "light", "allreduce")


def _ms(d: dict) -> dict:
    """Add millisecond copies of the time arrays: t -> t_ms, t_compute -> t_compute_ms, ..."""
    out = dict(d)
    for k in ("t", "t_compute", "t_memory"):
        if k in out:
            out[f"{k}_ms"] = np.asarray(out[k]) * 1e3
    return out


def _attn_cells(batch, tokens, kv_len, heads, kv_heads, head_dim, gpu, constants, kv_dtype, f_clk):
    batch, tokens, kv_len, heads, kv_heads, head_dim = np.broadcast_arrays(
        np.asarray(batch, dtype=float), np.asarray(tokens, dtype=float), np.asarray(kv_len, dtype=float),
        np.asarray(heads, dtype=float), np.asarray(kv_heads, dtype=float), np.asarray(head_dim, dtype=float))
    # All requests of a cell are alike: per-request terms times the batch size.
    r = attention.attention_request_terms(tokens, kv_len, heads, kv_heads, head_dim, gpu, constants,
                                          kv_dtype=kv_dtype, f_clk=f_clk)
    ovh = float(constants.get("attn_req_overhead_us", gpu)) * 1e-6
    floor = float(constants.get("kernel_floor_us", gpu)) * 1e-6
    tc = batch * r["t_compute"]
    tm = batch * r["t_memory"]
    t = np.maximum(tc, tm) + batch * ovh + floor
    return {"t": t, "t_compute": tc, "t_memory": tm, "compute_bound": tc >= tm, "eta_attn": r["eta_attn"],
            "flops": batch * r["flops"], "bytes": batch * r["bytes"]}


def predict_ops(op: str, gpu, *, constants: Constants | None = None, f_clk: float | None = None, **cells) -> dict:
    gpu = get_gpu(gpu)
    constants = constants or Constants.default()
    if op == "gemm":
        r = gemm.gemm_time(cells["m"], cells["n"], cells["k"], gpu, constants, f_clk=f_clk,
                           dtype=cells.get("dtype", "bf16"))
    elif op == "attention_prefill":
        r = _attn_cells(cells["batch"], cells["tokens"], cells.get("kv_len", 0), cells["heads"],
                        cells["kv_heads"], cells["head_dim"], gpu, constants, cells.get("kv_dtype", "bf16"), f_clk)
    elif op == "attention_decode":
        r = _attn_cells(cells["batch"], 1, cells["kv_len"], cells["heads"], cells["kv_heads"], cells["head_dim"],
                        gpu, constants, cells.get("kv_dtype", "bf16"), f_clk)
    elif op == "light":
        t = light.light_time(cells["kernel"], cells["nbytes"], gpu, constants)
        r = {"t": t}
    elif op == "allreduce":
        r = {"t": comm.allreduce_time(cells["nbytes"], int(cells["tp"]), gpu, constants)}
    else:
        raise ValueError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    return _ms(r)
