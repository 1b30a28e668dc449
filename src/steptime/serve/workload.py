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
from types import MappingProxyType

import numpy as np

from steptime.errors import ServeError
from steptime.validation import MAX_TOKENS, as_int, check_tokens

# The latest arrival a workload may have, seconds. DERIVED: float64 spacing at 1e8 s is 1.5e-8 s,
# far below any engine step, so simulated times keep their resolution (a Poisson rate of 1e-300
# puts arrivals near 1e301 s, where adding a step time changes nothing and every latency reads 0).
MAX_TIME_S = 1e8
# The time resolution the simulator keeps over that horizon: float64's spacing at MAX_TIME_S (2**-26 s, 1.49e-8 s).
# The fastest Poisson rate a workload may have: one whose mean inter-arrival time is that resolution (DERIVED,
# 6.7e7 requests/s; wave 41). A faster rate's gaps are below what the clock resolves over its horizon, so its
# arrivals are no longer a Poisson process but, for any n, all at (about) t = 0: `--rate 1e308` ran as a burst
# without a word; give no rate for that.
TIME_RESOLUTION_S = float(np.spacing(MAX_TIME_S))
MAX_RATE = 1.0 / TIME_RESOLUTION_S
# The most requests one workload holds. ASSUMED: 10x the 10**7-request traces the simulator is sized
# for; `--n 10**11` is refused before 2.4 TB of arrays is asked for.
MAX_WORKLOAD_REQUESTS = 10**8

TRACE_COLUMNS = MappingProxyType({"arrival": ("arrived_at_s", "arrival_s", "arrival"),
                                  "prompt": ("num_prefill_tokens", "prompt_tokens", "input_tokens", "isl"),
                                  "output": ("num_decode_tokens", "output_tokens", "osl")})


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
        if np.any(a > MAX_TIME_S):
            i = int(np.flatnonzero(a > MAX_TIME_S)[0])
            raise ServeError(f"{self.name}: request {i} arrives at {a[i]:.3g} s, beyond the simulator's horizon of "
                             f"{MAX_TIME_S:g} s (a rate or time scale that spreads arrivals over years)")
        for col, x in (("prompt", p), ("output", o)):
            big = np.flatnonzero(np.asarray(x, dtype=float) > MAX_TOKENS)
            if big.size:
                raise ServeError(f"{self.name}: request {int(big[0])} has {col} tokens {float(x[big[0]]):.3g}, "
                                 f"beyond any model's context (limit {MAX_TOKENS})")
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
        if self.concurrency is not None and int(self.concurrency) > MAX_WORKLOAD_REQUESTS:  # wave 41: 10**20 ran
            raise ServeError(f"{self.name}: closed-loop concurrency {int(self.concurrency):.3g} is above the most "
                             f"requests a workload holds ({MAX_WORKLOAD_REQUESTS:.0e}): no more can be in flight")
        object.__setattr__(self, "arrival", a)
        object.__setattr__(self, "prompt", p.astype(np.int64))
        object.__setattr__(self, "output", o.astype(np.int64))

    def __len__(self) -> int:
        return len(self.arrival)

    def head(self, n: int) -> "Workload":
        return Workload(self.arrival[:n], self.prompt[:n], self.output[:n], self.concurrency, self.name)


def from_table(df: "pandas.DataFrame", *, name: str = "trace", n: int | None = None, time_scale: float = 1.0,
               rate: float | None = None, seed: int = 0) -> Workload:
    """A trace from a tidy table (columns: arrival, prompt tokens, output tokens; names as in
    results/data/traces.parquet or LLMServingSim's request tables).

    A table without arrival times (the arXiv length trace) needs `rate` (Poisson, requests/s).
    `time_scale` stretches (>1) or compresses (<1) the recorded arrivals. `n` takes the first n requests; an `n`
    beyond the trace's length is refused (wave 37: it took the whole trace without a word).
    """
    if not hasattr(df, "columns") or not hasattr(df, "iloc"):
        raise ServeError(f"{name}: expected a table (a pandas DataFrame with arrival, prompt and output token "
                         f"columns), got {type(df).__name__}")
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
    if n is not None and n > len(df):
        raise ServeError(f"{name}: n={n:,} requests asked but the trace holds {len(df):,}: give n <= {len(df):,} "
                         "(or leave it out for the whole trace)")
    d = df.iloc[:n] if n else df
    p = _numbers(d, cols["prompt"], name)
    o = _numbers(d, cols["output"], name)
    if rate is not None:
        arr = poisson_arrivals(len(d), rate, seed)
    else:
        arr = _numbers(d, cols["arrival"], name)
        if len(arr) and np.isnan(arr).all():  # a length-only trace (arXiv): its arrivals are to be drawn
            raise ServeError(f"{name}: the trace has no arrival times (column {cols['arrival']!r} is empty): "
                             "give a Poisson rate (--rate, requests/s)")
        if len(arr) and np.isfinite(arr[0]):
            arr = (arr - np.nanmin(arr)) * time_scale
            gap = float(np.nanmax(arr)) / (len(arr) - 1) if len(arr) > 1 else 0.0
            if time_scale != 1.0 and 0.0 < gap < TIME_RESOLUTION_S:  # wave 41: the rate's bound, for a trace's
                raise ServeError(f"{name}: time_scale {time_scale:g} puts the trace's mean inter-arrival time at "
                                 f"{gap:.3g} s, below the simulator's time resolution ({TIME_RESOLUTION_S:.3g} s): "
                                 f"at least {time_scale * TIME_RESOLUTION_S / gap:.3g}")
    return Workload(arr, p, o, name=name)


def _numbers(d: "pandas.DataFrame", col: str, name: str) -> np.ndarray:
    """A trace column as floats; text or other non-numbers are refused naming the column and the row."""
    try:
        return d[col].to_numpy(dtype=float)
    except (TypeError, ValueError):
        for i, v in enumerate(d[col].tolist()):
            try:
                float(v)
            except (TypeError, ValueError):
                raise ServeError(f"{name}: column {col!r} must hold numbers, row {i} has {v!r:.40}") from None
        raise ServeError(f"{name}: column {col!r} must hold numbers") from None


def check_rate(rate, what: str = "Poisson arrival rate", error=ServeError) -> float:
    """A Poisson arrival rate, requests/s: a finite number > 0 whose mean inter-arrival time the simulator's clock
    resolves (<= MAX_RATE); one line naming `what` and the value otherwise."""
    if not isinstance(rate, Real) or isinstance(rate, bool) or not rate or rate <= 0 or not np.isfinite(rate):
        raise error(f"{what} must be > 0 requests/s, a finite number (got {rate!r})")
    if not np.isfinite(1.0 / rate):
        raise error(f"{what} {rate!r} requests/s: its mean inter-arrival time overflows, beyond the simulator's "
                    f"horizon of {MAX_TIME_S:g} s")
    if rate > MAX_RATE:
        raise error(f"{what} {rate:g} requests/s: its mean inter-arrival time {1.0 / rate:.3g} s is below the "
                    f"simulator's time resolution ({TIME_RESOLUTION_S:.3g} s, float64 over its {MAX_TIME_S:g} s "
                    f"horizon): at most {MAX_RATE:.3g} requests/s (no rate: every request at t = 0)")
    return float(rate)


def _check_count(n, what: str) -> int:
    """A workload's request count: a whole number in [1, MAX_WORKLOAD_REQUESTS], else one line naming `what`."""
    n = as_int(n, what, 1, error=ServeError)
    if n > MAX_WORKLOAD_REQUESTS:
        raise ServeError(f"{what} {n} is above the limit of {MAX_WORKLOAD_REQUESTS}")
    return n


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> np.ndarray:
    """`n` Poisson arrival times (s) at `rate` requests/s, the first at 0. Each argument refused in one line (wave 42:
    n a list, a fraction, 0 or negative raised numpy's TypeError / ValueError / IndexError, and 1e20 tried to
    allocate it)."""
    n = _check_count(n, "number of arrivals n")
    rate = check_rate(rate)
    seed = as_int(seed, "seed", 0, error=ServeError)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def _lengths(spec, n: int, rng, what: str) -> np.ndarray:
    """A length distribution: an int (fixed), (lo, hi) uniform, or an array to resample."""
    if np.isscalar(spec):
        v = check_tokens(spec, f"{what} length", ServeError)
        if v < 1:
            raise ServeError(f"{what} length must be >= 1 (got {spec})")
        return np.full(n, v, dtype=np.int64)
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        spec = [check_tokens(v, f"{what} length", ServeError) for v in spec]
    arr = np.asarray(spec)
    if arr.shape == (2,):
        lo, hi = int(arr[0]), int(arr[1])
        if lo < 1 or hi < lo:
            raise ServeError(f"{what} length range ({lo}, {hi}) must satisfy 1 <= lo <= hi")
        return rng.integers(lo, hi + 1, n)
    if arr.size == 0:
        raise ServeError(f"{what} length sample is empty")
    if arr.dtype.kind not in "iuf" or not np.isfinite(arr).all() or arr.max() > MAX_TOKENS:
        raise ServeError(f"{what} length sample must hold finite token counts up to {MAX_TOKENS}")
    return rng.choice(arr.astype(np.int64), n)


def synthetic(n: int, *, isl, osl, rate: float | None = None, concurrency: int | None = None,
              seed: int = 0, name: str = "synthetic") -> Workload:
    """Poisson arrivals at `rate` requests/s, or a closed loop at `concurrency`, or (neither)
    every request at t = 0. `isl`/`osl`: int, (lo, hi) or a sample to draw from."""
    n = _check_count(n, "number of requests")
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


def min_steps(wl: Workload, budget: int, max_num_seqs: int) -> int:
    """A lower bound on the engine iterations a workload needs under a token budget per step and a
    cap on running requests: every prompt and output token is scheduled within some step's budget,
    each step emits at most `max_num_seqs` output tokens, and a request's outputs take a step each."""
    tokens = float(wl.prompt.sum()) + float(wl.output.sum())
    return int(max(math.ceil(tokens / budget), math.ceil(float(wl.output.sum()) / max_num_seqs),
                   int(wl.output.max())))
