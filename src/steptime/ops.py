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


def predict_ops(op: str, gpu, *, constants: Constants | None = None, f_clk: float | None = None, **cells) -> dict:
    gpu = get_gpu(gpu)
    constants = constants or Constants.default()
    if op == "gemm":
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
    elif op == "allreduce":
        r = {"t": comm.allreduce_time(cells["nbytes"], int(cells["tp"]), gpu, constants)}
    else:
        raise ValueError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    return _ms(r)
