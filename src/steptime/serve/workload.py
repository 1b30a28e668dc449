"""Serving workloads: request traces, synthetic arrivals, closed loops, static batches.

A `Workload` is three arrays over requests (arrival seconds, prompt tokens, output
tokens) plus, for a closed loop, a concurrency: the first `concurrency` requests arrive at
t = 0 and each later one arrives when an earlier one finishes (its `arrival` is then
ignored). Every constructor checks its input and raises ServeError with one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np
import pandas as pd

from steptime.errors import ServeError
from steptime.validation import as_int

TRACE_COLUMNS = {"arrival": ("arrived_at_s", "arrival_s", "arrival"),
                 "prompt": ("num_prefill_tokens", "prompt_tokens", "input_tokens", "isl"),
                 "output": ("num_decode_tokens", "output_tokens", "osl")}


@dataclass(frozen=True)
class Workload:
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    concurrency: int | None = None
    name: str = "workload"

    def __post_init__(self):
        a = np.asarray(self.arrival, dtype=float)
        p = np.asarray(self.prompt)
        o = np.asarray(self.output)
        if not (len(a) == len(p) == len(o)):
            raise ServeError(f"{self.name}: arrival, prompt and output have different lengths "
                             f"({len(a)}, {len(p)}, {len(o)})")
        if len(a) == 0:
            raise ServeError(f"{self.name}: no requests")
        for col, x in (("arrival", a), ("prompt", p), ("output", o)):
            bad = np.flatnonzero(~np.isfinite(np.asarray(x, dtype=float)))
            if bad.size:
                raise ServeError(f"{self.name}: request {bad[0]} has a missing {col}")
        if np.any(a < 0):
            raise ServeError(f"{self.name}: request {int(np.flatnonzero(a < 0)[0])} has a negative arrival time")
        for col, x in (("prompt", p), ("output", o)):
            if np.any(np.asarray(x, dtype=float) != np.round(np.asarray(x, dtype=float))):
                raise ServeError(f"{self.name}: {col} token counts must be whole numbers")
            if np.any(x < 1):
                raise ServeError(f"{self.name}: request {int(np.flatnonzero(x < 1)[0])} has {col} tokens "
                                 f"{int(x[x < 1][0])} (must be >= 1)")
        if self.concurrency is None and np.any(np.diff(a) < 0):
            i = int(np.flatnonzero(np.diff(a) < 0)[0]) + 1
            raise ServeError(f"{self.name}: arrivals are not sorted (request {i} arrives at {a[i]:g} s, "
                             f"before request {i - 1} at {a[i - 1]:g} s)")
        if self.concurrency is not None and int(self.concurrency) < 1:
            raise ServeError(f"{self.name}: closed-loop concurrency must be >= 1 (got {self.concurrency})")
        object.__setattr__(self, "arrival", a)
        object.__setattr__(self, "prompt", p.astype(np.int64))
        object.__setattr__(self, "output", o.astype(np.int64))

    def __len__(self) -> int:
        return len(self.arrival)

    def head(self, n: int) -> "Workload":
        return Workload(self.arrival[:n], self.prompt[:n], self.output[:n], self.concurrency, self.name)


def from_table(df: pd.DataFrame, *, name: str = "trace", n: int | None = None, time_scale: float = 1.0,
               rate: float | None = None, seed: int = 0) -> Workload:
    """A trace from a tidy table (columns: arrival, prompt tokens, output tokens; names as in
    results/data/traces.parquet or LLMServingSim's request tables).

    A table without arrival times (the arXiv length trace) needs `rate` (Poisson, requests/s).
    `time_scale` stretches (>1) or compresses (<1) the recorded arrivals.
    """
    if n is not None:
        n = as_int(n, "number of requests n", 1, error=ServeError)
    if not (isinstance(time_scale, Real) and math.isfinite(time_scale) and time_scale > 0):
        raise ServeError(f"{name}: time_scale must be a number > 0, got {time_scale!r}")
    cols = {}
    for key, names in TRACE_COLUMNS.items():
        hit = [c for c in names if c in df.columns]
        if not hit and not (key == "arrival" and rate is not None):
            raise ServeError(f"{name}: no {key} column (looked for {', '.join(names)})")
        cols[key] = hit[0] if hit else None
    d = df.iloc[:n] if n else df
    p = d[cols["prompt"]].to_numpy(dtype=float)
    o = d[cols["output"]].to_numpy(dtype=float)
    if rate is not None:
        arr = poisson_arrivals(len(d), rate, seed)
    else:
        arr = d[cols["arrival"]].to_numpy(dtype=float)
        if len(arr) and np.isfinite(arr[0]):
            arr = (arr - np.nanmin(arr)) * time_scale
    return Workload(arr, p, o, name=name)


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> np.ndarray:
    if not rate or rate <= 0 or not np.isfinite(rate):
        raise ServeError(f"Poisson arrival rate must be > 0 requests/s (got {rate})")
    seed = as_int(seed, "seed", 0, error=ServeError)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def _lengths(spec, n: int, rng, what: str) -> np.ndarray:
    """A length distribution: an int (fixed), (lo, hi) uniform, or an array to resample."""
    if np.isscalar(spec):
        if int(spec) < 1:
            raise ServeError(f"{what} length must be >= 1 (got {spec})")
        return np.full(n, int(spec), dtype=np.int64)
    arr = np.asarray(spec)
    if arr.shape == (2,):
        lo, hi = int(arr[0]), int(arr[1])
        if lo < 1 or hi < lo:
            raise ServeError(f"{what} length range ({lo}, {hi}) must satisfy 1 <= lo <= hi")
        return rng.integers(lo, hi + 1, n)
    if arr.size == 0:
        raise ServeError(f"{what} length sample is empty")
    return rng.choice(arr.astype(np.int64), n)


def synthetic(n: int, *, isl, osl, rate: float | None = None, concurrency: int | None = None,
              seed: int = 0, name: str = "synthetic") -> Workload:
    """Poisson arrivals at `rate` requests/s, or a closed loop at `concurrency`, or (neither)
    every request at t = 0. `isl`/`osl`: int, (lo, hi) or a sample to draw from."""
    if n < 1:
        raise ServeError(f"number of requests must be >= 1 (got {n})")
    seed = as_int(seed, "seed", 0, error=ServeError)
    if rate is not None and concurrency is not None:
        raise ServeError("give a Poisson rate or a closed-loop concurrency, not both")
    rng = np.random.default_rng(seed)
    p = _lengths(isl, n, rng, "input")
    o = _lengths(osl, n, rng, "output")
    arr = poisson_arrivals(n, rate, seed + 1) if rate is not None else np.zeros(n)
    return Workload(arr, p, o, concurrency=concurrency, name=name)


def static_batch(batch: int, prompt: int, output: int) -> Workload:
    """`batch` identical requests all at t = 0 (run it with the `static` policy)."""
    return synthetic(batch, isl=prompt, osl=output, name=f"static {batch}x{prompt}+{output}")
