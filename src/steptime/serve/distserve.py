"""DistServe's step-time model, a peer the simulator can run instead of steptime's (same interface
as StepTimer: step_arrays, decode_steps, plus model/gpu/tp/dtype/kv_dtype for the memory model;
registered as `distserve` in `steptime.peers`).

DistServeTimer: DistServe's own fitted latency model (simdistserve/estimators/
time_estimator.py; coefficients in results/data/distserve.parquet via
steptime_lab.data.load_distserve), in milliseconds:
    prefill = a + b * sum(prompt) + c * sum(prompt^2)
    decode  = a + b * sum(context) + c * batch      (small/large-batch rows split at bs_threshold)
Only pure steps exist in it (DistServe never mixes phases); a mixed step is refused.
"""

from __future__ import annotations

import numpy as np

from steptime.errors import ServeError
from steptime.specs import get_gpu, get_model
from steptime.validation import as_int


class DistServeTimer:
    """`coefficients`: the pandas DataFrame of DistServe's fitted rows (the caller's table)."""

    name = "distserve"  # its key in steptime.peers.PRODUCT

    def __init__(self, coefficients, model, gpu, *, tp: int = 1, engine: str = "distserve"):
        self.model = get_model(model)
        self.gpu = get_gpu(gpu)
        self.tp = as_int(tp, "tensor-parallel degree tp", 1, error=ServeError)  # 2.5 refused, not truncated
        self.dtype = "bf16"
        self.kv_dtype = "bf16"
        c = coefficients
        sel = c[(c["model"] == self.model.key) & (c["gpu"] == self.gpu.key) & (c["tp"] == self.tp)
                & (c["engine"] == engine)]
        if sel.empty:
            raise ServeError(f"DistServe has no fitted {engine} model for {self.model.key} on {self.gpu.key} "
                             f"at tp={self.tp}")
        ph = sel.set_index("phase")
        self.pre = tuple(float(ph.loc["prefill", k]) for k in ("a_ms", "b_ms", "c_ms"))
        self.small = tuple(float(ph.loc["decode_small_bs", k]) for k in ("a_ms", "b_ms", "c_ms"))
        self.large = tuple(float(ph.loc["decode_large_bs", k]) for k in ("a_ms", "b_ms", "c_ms"))
        self.threshold = int(ph["bs_threshold"].iloc[0])

    def _decode_ms(self, n, sum_ctx):
        a, b, c = self.small if n < self.threshold else self.large
        return a + b * sum_ctx + c * n

    def step_arrays(self, new, kv) -> float:
        new = np.asarray(new, dtype=float)
        kv = np.asarray(kv, dtype=float)
        dec = new == 1
        if dec.all():
            return self._decode_ms(len(new), float((kv + 1).sum())) * 1e-3
        if dec.any() or np.any(kv > 0):
            raise ServeError("DistServe's latency model has no mixed or chunked-prefill step: run it with "
                             "disaggregated pools and whole-prompt prefill")
        a, b, c = self.pre
        return (a + b * new.sum() + c * (new ** 2).sum()) * 1e-3

    step = step_arrays

    def decode_steps(self, n: int, sum_kv0: float, k: int) -> np.ndarray:
        return self._decode_ms(n, sum_kv0 + n + n * np.arange(k, dtype=float)) * 1e-3
