"""The serving simulator: a scheduler loop whose every iteration is steptime's step time.

Policies (each named, as the engines implement them):

  vllm     vLLM V1: one token budget per step (`max_num_batched_tokens`), at most
           `max_num_seqs` running requests, running requests first (decodes and unfinished
           prefill chunks, in arrival order), then waiting ones FCFS, chunked prefill.
  sarathi  Sarathi-Serve: the same loop with a fixed chunk (token) budget per step.
  static   static batching: up to `max_num_seqs` waiting requests start together (whole
           prompts in one step) and no request joins until the whole batch has finished.

`mixed_prefill=False` (any policy but static) runs prefill first and apart: an iteration in which a
waiting request can be admitted schedules only prompt tokens (unfinished chunks of running requests,
then waiting ones), no decodes, as SGLang does by default; the decodes resume once nothing waiting fits.
  disagg   DistServe-style prefill/decode disaggregation: a prefill pool and a decode pool
           of instances (`simulate_disagg`), KV handed over after the first token.

KV cache: the blocks left in `gpu_memory_utilization` of the GPU after the weights
(`kv_capacity_blocks`: steptime.serve.memory's one memory model), `block_size` tokens each. A running request that cannot get
a block preempts the latest-admitted running request (recompute, as vLLM V1 does), which
goes back to the front of the queue. `reserve_full` instead admits a request only with the
blocks of its whole length reserved (no preemption; the disaggregated decode pool's default).

`prefix_caching` (vLLM V1's automatic prefix caching, `enable_prefix_caching`): a preempted request's
blocks go back to the free pool still cached, and only the blocks given out again are lost. vLLM
(vllm/v1/core/single_type_kv_cache_manager.py `free`: the request's blocks freed in reverse order, "so
that the tail blocks are freed first"; block_pool.py: freed blocks keep their hash and join the back of the
free-block queue, a new block is taken from its front and only then evicted; request.py
`append_output_token_ids`: full blocks of generated tokens are hashed too) resumes the request from its
longest surviving cached prefix (at most all its tokens but one) and recomputes only the rest. Modelled
as that queue of free blocks, oldest freed first: the victim's full computed blocks join it as its own,
its partial last block (never cached) ahead of them; every block given out takes the queue's front, and a
victim's surviving blocks are always the head of its chain. ASSUMED: no prefix shared between requests.

Speed: an iteration in which every running request decodes and nothing can join repeats
with one more KV token per request; runs of such iterations (up to and including the next
finish, or up to an arrival that could join, or KV exhaustion) are timed in one vectorised
call, exactly (steptime.serve.timer). Other iterations go one by one. Memory: per-request
state is a few numpy arrays; inter-token latencies go to a bounded ItlLog.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import accumulate
from dataclasses import asdict, dataclass, fields, replace
from numbers import Real
from types import MappingProxyType

import numpy as np

from steptime.errors import ServeError
from steptime.serve.memory import check_context, kv_budget
from steptime.serve.timer import StepTimer
from steptime.serve.workload import Workload
from steptime.validation import MAX_INSTANCES, MAX_REQUESTS, MAX_TOKENS, as_int, check_bool, is_real
from steptime.serve.queueing import deadline_split

POLICIES = ("vllm", "sarathi", "static", "disagg")
# ASSUMED: vLLM's documented defaults (EngineArgs: gpu_memory_utilization 0.9, block_size 16,
# max_num_seqs 256; max_num_batched_tokens 8192 for online serving in V1).
VLLM_DEFAULTS = MappingProxyType({"max_num_batched_tokens": 8192, "max_num_seqs": 256, "block_size": 16,
                                  "gpu_memory_utilization": 0.9})
MAX_RUN = 4096  # longest run of identical-shape decode iterations timed in one call
SHORT_RUN = 24  # runs up to this many iterations are timed in Python floats (numpy's call overhead dominates)
PROGRESS_STEPS = 20000  # a progress bar's step count is refreshed every this many simulated iterations


# simulate's keywords that shape its step timer (replay_timer's): simulate_replicas builds one timer from them
TIMER_KEYS = ("tp", "constants", "f_clk", "kv_dtype", "engine", "dtype", "ep", "moe_constants")
CHUNK = "sarathi chunk (--chunk)"  # the name of sarathi's token budget in its refusals (the API's chunk=, the CLI's)


@dataclass(frozen=True)
class Policy:
    name: str = "vllm"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_blocks: int | None = None  # override the memory model's block count
    reserve_full: bool = False  # admit only with blocks for the whole request reserved (no preemption)
    # False: a step that admits waiting prompts carries no decodes (SGLang's default: a prefill batch of its own,
    # run before the decode batch whenever a waiting request can be admitted; --enable-mixed-chunk off)
    mixed_prefill: bool = True
    # vLLM V1 automatic prefix caching: a preempted request resumes from its blocks still cached (module doc)
    prefix_caching: bool = False
    # a closed-loop client's next request joins no earlier than the `join_steps`-th step counted from the one its
    # predecessor finished in (engines.yaml schedule.join_steps: 2 for a synchronous engine loop, 3 for an overlap
    # loop); 1: the very next step. An idle engine takes it at once. Open-loop arrivals are not affected.
    join_steps: int = 1
    # an open-loop arrival joins no earlier than the `read_join_steps`-th step counted from the step boundary at which
    # a busy engine first reads it (engines.yaml schedule.read_join_steps: 1 for a synchronous loop, 2 for vLLM's
    # async scheduling, whose step n + 1 is already launched when it reads the requests that came during step n);
    # an idle engine takes it at once. Closed-loop arrivals are join_steps'. The same loop gives a finished request's
    # slot and blocks back only when it processes that step's output: a request finished in step n frees them for
    # step n + read_join_steps (n + 1 for a synchronous loop), at once when nothing else runs.
    read_join_steps: int = 1

    def __post_init__(self):
        if self.name not in POLICIES:
            raise ServeError(f"unknown scheduler policy {self.name!r} (known: {', '.join(POLICIES)})")
        for what in ("max_num_batched_tokens", "max_num_seqs", "block_size", "join_steps", "read_join_steps"):
            as_int(getattr(self, what), what, 1, error=ServeError)
        # sarathi's token budget is its chunk: named as the user gave it (policy(chunk=), serve --chunk)
        budget = CHUNK if self.name == "sarathi" else "max_num_batched_tokens"
        for what, label in (("max_num_batched_tokens", budget), ("block_size", "block_size")):
            if getattr(self, what) > MAX_TOKENS:  # token counts: within any model's context
                raise ServeError(f"{label} {getattr(self, what)} tokens is beyond any model's context (limit "
                                 f"{MAX_TOKENS})")
        if self.max_num_seqs > MAX_REQUESTS:  # wave 41: a static --batch of 10**20 ran (the predictor's step limit)
            what = "static batch size (--batch)" if self.name == "static" else "max_num_seqs"
            raise ServeError(f"{what} {self.max_num_seqs:,} is above the most requests one step is priced for "
                             f"({MAX_REQUESTS:,})")
        if self.kv_blocks is not None:
            as_int(self.kv_blocks, "kv_blocks", 1, error=ServeError)
        if self.name != "static" and self.max_num_batched_tokens < self.max_num_seqs:
            raise ServeError(f"{'token budget' if budget != CHUNK else CHUNK} {self.max_num_batched_tokens} is below "
                             f"max_num_seqs {self.max_num_seqs}: every running request must fit one decode token a "
                             "step")
        u = self.gpu_memory_utilization
        if not (is_real(u) and 0 < u <= 1):
            raise ServeError(f"gpu_memory_utilization must be in (0, 1] (got {u!r})")

    @property
    def budget(self) -> int:
        return 1 << 62 if self.name == "static" else int(self.max_num_batched_tokens)


def policy(name: str = "vllm", **kw) -> Policy:
    """A named policy with the engine's defaults: vllm, sarathi (chunk=512), static (batch=...)."""
    unknown = sorted(set(kw) - {f.name for f in fields(Policy)} - {"chunk", "batch"})
    if unknown:  # a typo such as max_num_seq= would otherwise be a TypeError from the dataclass
        raise ServeError(f"unknown policy setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (known: "
                         f"{', '.join(f.name for f in fields(Policy) if f.name != 'name')}, chunk, batch)")
    if name == "sarathi":
        chunk = kw.pop("chunk", None)
        budget = kw.pop("max_num_batched_tokens", None)
        chunk = chunk if chunk is not None else budget if budget is not None else 512
        return Policy("sarathi", max_num_batched_tokens=as_int(chunk, CHUNK, 1, error=ServeError), **kw)
    if name == "static":
        b = kw.pop("batch", None)
        if b is not None:
            kw["max_num_seqs"] = as_int(b, "static batch size", 1, error=ServeError)
        kw.pop("chunk", None)
        return Policy("static", chunked_prefill=False, **kw)
    kw.pop("chunk", None)
    return Policy(name, **kw)


def engine_policy(engine=None, **kw) -> Policy:
    """The `vllm` policy (continuous batching under one token budget) with the engine profile's own schedule facts
    (engines.yaml schedule: chunked_prefill, mixed_prefill, prefix_caching, read_join_steps for open-loop arrivals,
    join_steps for a closed loop's clients, absent: the next step; `engine` None: the default profile), what
    `steptime serve` and `steptime plan` simulate. Keyword arguments are the Policy's and win over the profile."""
    from steptime.specs.engines import get_engine

    eng = get_engine(engine)
    facts = {"chunked_prefill": eng.chunks_prefill(), "mixed_prefill": eng.mixes_prefill(),
             "prefix_caching": eng.caches_prefixes(), "read_join_steps": eng.read_join_steps(),
             "join_steps": eng.join_steps(absent=1)}
    return policy("vllm", **{**facts, **kw})


def kv_capacity_blocks(timer: StepTimer, pol: Policy) -> int:
    """KV-cache blocks per instance (`pol.kv_blocks` if given, else the memory model: steptime.serve.memory's
    `kv_budget(...).blocks()` at the timer's model, GPU, layout and dtypes). A block holds `block_size` tokens of
    every layer that keeps every token; a model with windowed layers (gpt-oss's sliding window, Llama 4's chunked
    attention) or a hybrid's linear-attention layers first sets aside, for `max_num_seqs` running requests, the
    window plus one block on those layers and the linear layers' fixed state."""
    from steptime.specs.engines import Engine, check_block_size

    engine = getattr(timer, "engine", None)
    if isinstance(engine, Engine):  # a peer's timer (steptime.peers) may carry none
        check_block_size(engine, pol.block_size, error=ServeError)
    if pol.kv_blocks is not None:
        check_kv_blocks(timer, pol)
        return int(pol.kv_blocks)
    return _budget(timer, pol, pol.gpu_memory_utilization).blocks()


def _budget(timer, pol: Policy, utilization: float):
    return kv_budget(timer.model, timer.gpu, tp=timer.tp, ep=getattr(timer, "ep", 1), dtype=timer.dtype,
                     kv_dtype=timer.kv_dtype, gpu_memory_utilization=utilization, block_size=pol.block_size,
                     max_num_seqs=pol.max_num_seqs)


def check_kv_blocks(timer, pol: Policy) -> None:
    """Refuse a block count `pol.kv_blocks` (--kv-blocks) above what the whole of the GPU's memory holds after the
    weights (the memory model of kv_capacity_blocks at gpu_memory_utilization 1: an override may exceed the 0.9
    default's pool, an engine can run nearer its memory's end, but never beyond it), naming the numbers."""
    b = _budget(timer, pol, 1.0)
    cap = b.blocks()
    if pol.kv_blocks > cap:
        need = pol.kv_blocks * pol.block_size * b.token_bytes + b.reserve_bytes
        raise ServeError(f"kv_blocks (--kv-blocks) {pol.kv_blocks:,} of {pol.block_size} tokens need "
                         f"{need / 1e9:,.1f} GB of KV cache per GPU, but {b.gpu}'s {b.gpu_gb:g} GB hold "
                         f"{b.free_bytes / 1e9:.1f} GB after {b.model}'s weights ({b.weight_bytes / 1e9:.1f} GB per "
                         f"GPU at {b.layout}): at most {cap:,} blocks")


def kv_capacity_requests(model, gpu, context_tokens, *, tp: int = 1, ep: int = 1, dtype: str | None = None,
                         kv_dtype: str = "bf16", pol: Policy | None = None) -> np.ndarray:
    """How many requests of `context_tokens` cached tokens each (a number or an array) one engine instance
    holds at once: the KV cache left in `pol.gpu_memory_utilization` of the GPU after the weights (sharded by
    TP, a mixture-of-experts model's experts by EP) over one request's bytes: ceil(context / block_size) blocks
    of every full-attention layer, on a windowed layer at most the window plus the block it ends in (vLLM's
    hybrid KV-cache manager), and a hybrid's linear-attention layers' fixed state. The same memory model as
    `kv_capacity_blocks` (steptime.serve.memory.kv_budget). `max_num_seqs` is not applied (an engine limit, not
    memory). Raises ServeError when the weights leave no KV cache, or a context is not finite and > 0."""
    pol = pol if pol is not None else Policy()
    check_context(context_tokens)
    return kv_budget(model, gpu, tp=tp, ep=ep, dtype=dtype, kv_dtype=kv_dtype,
                     gpu_memory_utilization=pol.gpu_memory_utilization, block_size=pol.block_size,
                     max_num_seqs=pol.max_num_seqs).requests(context_tokens)


class ItlLog:
    """Inter-token latencies as (value, weight) pairs, in bounded memory.

    Pairs are kept exactly; when more than `cap` accumulate, equal values are merged (exact:
    the weighted quantiles do not change). If the distinct values still exceed half the cap
    (a very long replay: every step time is a distinct float), values are put on a log grid
    of relative width `GRID` (0.01 %) and merged: quantiles then carry at most that relative
    error, `exact` turns False, and memory stays bounded by the grid (a few 10^5 bins).
    """

    GRID = 1e-4

    def __init__(self, cap: int = 1 << 21):
        self.cap = cap
        self.v: list = []
        self.w: list = []
        self.n = 0
        self.exact = True

    def add(self, values, weight) -> None:
        self.v.append(values)
        self.w.append(weight)
        self.n += len(values)
        if self.n > self.cap:
            self._compact()

    def _has_head(self) -> bool:
        """Whether the first chunk is a compacted head: sorted distinct values (on the grid if not exact) with
        per-value weights, then chunks with a scalar weight each."""
        return bool(self.w) and isinstance(self.w[0], np.ndarray)

    def _arrays(self):
        if not self._has_head():
            return self._tail_arrays(0)
        v, w = self._tail_arrays(1)
        return np.concatenate([self.v[0], v]).astype(float, copy=False), np.concatenate([self.w[0], w])

    def _compact(self) -> None:
        head = self._has_head()
        parts = self._tail_merged(1 if head else 0)
        if head:  # the tail's distinct values merged into the head's
            parts.insert(0, (self.v[0] if self.exact else self._grid(self.v[0]), self.w[0]))
        if len(parts) == 1 and not head:
            u, w = parts[0]
        elif parts:
            u, w = self._merge(np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]))
        else:
            u, w = np.zeros(0), np.zeros(0)
        if self.exact and u.size > self.cap // 2:
            self.exact = False
            u, w = self._merge(self._grid(u), w)
        self.v, self.w = [u], [w]
        self.n = u.size

    def _tail_merged(self, i0: int) -> list:
        """The chunks from the i0-th on (each with a scalar weight), put on the grid when not exact, merged per
        weight: [(sorted distinct values, weight x their count)] for each distinct weight. The same values and
        weight sums as merging every value with its chunk's weight (the weights are whole numbers: exact in any
        order), at the cost of a sort instead of an argsort."""
        groups = {}
        for v, w in zip(self.v[i0:], self.w[i0:]):
            groups.setdefault(float(w), []).append(v)
        out = []
        for w, vs in groups.items():
            v = np.concatenate(vs).astype(float, copy=False)
            if not self.exact:
                v = self._grid(v)
            u, cnt = np.unique(v, return_counts=True)
            out.append((u, cnt * w))
        return out

    @staticmethod
    def _merge(v, w):
        """Equal values merged, their weights summed (sorted by value). The weights are token counts (whole
        numbers), so the sums do not depend on the order they are added in."""
        u, inv = np.unique(v, return_inverse=True)
        return u, np.bincount(inv, weights=w, minlength=u.size)

    def _tail_arrays(self, i0: int):
        """(values, weights) of the chunks from the i0-th on, each chunk's scalar weight repeated."""
        if len(self.v) <= i0:
            return np.zeros(0), np.zeros(0)
        v = np.concatenate(self.v[i0:]).astype(float, copy=False)
        return v, np.repeat(np.array(self.w[i0:], dtype=float), [len(x) for x in self.v[i0:]])

    def _grid(self, v):
        pos = v > 0
        g = np.exp(np.round(np.log(np.where(pos, v, 1.0)) / self.GRID) * self.GRID)
        return np.where(pos, g, v)

    def arrays(self):
        """(values, weights), equal values merged (sorted by value)."""
        if len(self.v) > 1 or self.n > self.cap:
            self._compact()
        return self._arrays()


@dataclass
class Run:
    """A finished simulation: per-request table, inter-token latencies, step log totals."""
    requests: object  # a pandas.DataFrame (pandas is imported only once a run is built: the import stays light)
    itl_s: np.ndarray
    itl_w: np.ndarray
    n_steps: int
    busy_s: float
    makespan_s: float
    kv_blocks: int
    policy: dict
    itl_exact: bool = True  # False: ITL values merged on ItlLog's 0.01 % log grid (very long runs)
    knobs: dict | None = None  # how close the run came to its scheduler knobs (see Knobs; None: not recorded)

    def summary(self, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> dict:
        return summarize(self, slo_ttft_s, slo_tpot_s)


@dataclass
class Knobs:
    """How close one run came to its scheduler knobs, recorded as it runs, so that a planner can tell that
    the same workload under a smaller `max_num_seqs` or token budget makes exactly the same decisions (and
    so the same simulation, bit for bit) without running it again (`same_run`).

    peak_running  most requests running at once (after admissions)
    peak_tokens   most tokens scheduled in one iteration
    join_demand   most (running + prompt tokens still to compute) of a waiting request checked for joining a
                  decode run (the fast path asks for min(prompt left, budget - running))
    blocked       a waiting request was refused KV blocks or a whole-prompt (unchunked) slot while the token
                  budget still had room: a smaller budget (a smaller chunk) might have let it in
    preempted     a running request was preempted (the take depends on the budget)
    """
    peak_running: int = 0
    peak_tokens: int = 0
    join_demand: int = 0
    blocked: bool = False
    preempted: bool = False

    def merge(self, other: "Knobs") -> "Knobs":
        return Knobs(max(self.peak_running, other.peak_running), max(self.peak_tokens, other.peak_tokens),
                     max(self.join_demand, other.join_demand), self.blocked or other.blocked,
                     self.preempted or other.preempted)


def same_run(knobs: dict | None, seqs: int, budget: int, seqs2: int, budget2: int) -> bool:
    """Whether a run recorded under (`seqs`, `budget`) (its `Run.knobs`) is also, decision for decision, the
    run under (`seqs2`, `budget2`) of the same workload, timer and policy otherwise: every check the
    scheduler made against a knob comes out the same under both values.

    max_num_seqs: equal, or the run never held as many requests as the smaller one allows (every
    `running < max_num_seqs` check was true under both). Token budget: equal, or no iteration scheduled more
    tokens than the smaller budget, no decode run was checked against a join that needed more, nothing was
    refused while budget was left, and nothing was preempted (so every take min(want, budget left) is the
    same under both)."""
    if not knobs:
        return False
    if seqs2 != seqs and not knobs["peak_running"] < min(seqs, seqs2):
        return False
    if budget2 != budget and (knobs["blocked"] or knobs["preempted"] or
                              max(knobs["peak_tokens"], knobs["join_demand"]) > min(budget, budget2)):
        return False
    return True


def _deadlines(deadline, n: int) -> np.ndarray:
    """Per-request first-token deadlines (absolute seconds) as a float array of the workload's length; one line
    otherwise (strings, a wrong length, NaN)."""
    try:
        d = np.asarray(deadline, dtype=float)
    except (TypeError, ValueError):
        raise ServeError(f"deadline must be per-request first-token deadlines in seconds, got {deadline!r:.60}") \
            from None
    if d.shape != (n,) or np.isnan(d).any():
        raise ServeError(f"deadline must hold one time (s, not NaN) per request of the workload: {n} expected, "
                         f"got shape {d.shape}")
    return d


class _Engine:
    """One serving instance. Per-request state in numpy arrays; the running set is an index
    array kept in admission order (the scheduler's priority order)."""

    def __init__(self, timer: StepTimer, pol: Policy, wl: Workload, *, computed0=None, gen0=None,
                 progress=None, fast: bool = True, deadline=None, estimator=None):
        self.fast = fast
        self.deadline = None if deadline is None else _deadlines(deadline, len(wl))
        self.estimator = estimator
        if (deadline is None) != (estimator is None):
            raise ServeError("deadline scheduling needs both per-request deadlines and a waiting-time estimator")
        if estimator is not None and not (callable(getattr(estimator, "units", None))
                                          and callable(getattr(estimator, "at", None))):
            raise ServeError("a waiting-time estimator needs units(tokens) and at(cum, now, n_running, ahead) "
                             "(see steptime.serve.queueing)")
        self.t = timer
        self.p = pol
        self.wl = wl
        n = len(wl)
        self.n = n
        self.blocks = kv_capacity_blocks(timer, pol)
        B = pol.block_size
        ctx = timer.model.max_position_embeddings
        total = wl.prompt + wl.output
        if np.any(total > ctx):
            i = int(np.flatnonzero(total > ctx)[0])
            raise ServeError(f"{wl.name}: request {i} needs {int(total[i])} tokens (prompt {int(wl.prompt[i])} + "
                             f"output {int(wl.output[i])}), beyond {timer.model.key}'s context of {ctx}")
        need = -(-total // B)
        if need.max() > self.blocks:
            i = int(np.argmax(need))
            raise ServeError(f"{wl.name}: request {i} needs {int(need[i])} KV blocks of {B} tokens but "
                             f"{timer.model.key} on {timer.gpu.key} (tp={timer.tp}) has room for {self.blocks}: "
                             "the workload cannot fit in KV memory")
        self.arr = wl.arrival.astype(float).copy()
        self.out = wl.output.astype(np.int64)
        self.comp = np.zeros(n, dtype=np.int64) if computed0 is None else np.asarray(computed0, dtype=np.int64).copy()
        self.gen = np.zeros(n, dtype=np.int64) if gen0 is None else np.asarray(gen0, dtype=np.int64).copy()
        self.ntok = wl.prompt.astype(np.int64) + self.gen
        self.held = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.nan)
        self.read = self.arr.copy()  # when the engine loop first read each request (open loop; run() sets it)
        self.finish = np.full(n, np.nan)
        self.last = np.full(n, np.nan)
        self.npre = np.zeros(n, dtype=np.int64)
        self.first_est = np.full(n, np.nan)
        self.itl = ItlLog()  # inter-token latencies and how many tokens each stands for
        self.progress = progress
        self._tick = PROGRESS_STEPS
        # the free blocks, oldest freed first, as [owner, count] runs (owner: a preempted request whose cached
        # blocks they are, or -1); kept only with prefix caching (None: every free block is alike)
        self._lru = deque() if pol.prefix_caching else None
        self.cached = np.zeros(n, dtype=np.int64)  # a waiting preempted request's blocks still cached
        self._free = 0
        self.free = self.blocks
        self.knobs = Knobs()
        self._hold, self._hold_slots = None, 0  # finished requests' slots and blocks not yet given back (run())
        self._short = hasattr(timer, "decode_steps_list") and not getattr(timer, "needs_kvs", False)

    @property
    def seq_slots(self) -> int:
        """The requests a step may run now: max_num_seqs less the slots of finished requests not yet given back."""
        return self.p.max_num_seqs - self._hold_slots

    @property
    def free(self) -> int:
        return self._free

    @free.setter
    def free(self, value) -> None:
        """Free blocks. With prefix caching, blocks given out come off the front of the free queue (evicting
        what they cached) and blocks given back join its end."""
        value = int(value)
        d = value - self._free
        if self._lru is not None:
            if d < 0:
                self._evict(-d)
            elif d > 0:
                self._lru.append([-1, d])
        self._free = value

    def _evict(self, k: int) -> None:
        """Take `k` blocks off the front of the free queue; a preempted request loses the cached blocks taken."""
        lru, cached = self._lru, self.cached
        while k > 0:
            if not lru:
                raise ServeError("KV accounting: more blocks given out than are free")
            run = lru[0]
            take = min(k, run[1])
            run[1] -= take
            k -= take
            if run[0] >= 0:
                cached[run[0]] -= take
                self._resume_point(run[0])
            if not run[1]:
                lru.popleft()

    def _resume_point(self, v: int) -> None:
        """A waiting preempted request's computed tokens: its cached blocks, at most all its tokens but one."""
        B = self.p.block_size
        self.comp[v] = min(int(self.cached[v]), int(self.ntok[v] - 1) // B) * B

    def _release_preempted(self, v: int) -> None:
        """Give a preempted request's blocks back: with prefix caching its full computed blocks stay cached
        (its own run at the queue's end, after its partial last block); without, its progress is lost."""
        h = int(self.held[v])
        if self._lru is None:
            self.free += h
            self.comp[v] = 0
            return
        full = min(int(self.comp[v]) // self.p.block_size, h)
        if h > full:
            self._lru.append([-1, h - full])
        if full:
            self._lru.append([int(v), full])
        self._free += h
        self.cached[v] = full
        self._resume_point(v)

    def _take_cached(self, r: int) -> int:
        """Blocks an admitted request reuses from the prefix cache (taken out of the free queue where they sit,
        not off its front); its leftover cached blocks become ordinary free ones."""
        if self._lru is None or not self.cached[r]:
            return 0
        hit = int(self.comp[r]) // self.p.block_size
        for run in self._lru:
            if run[0] == r:
                run[1] -= hit
                run[0] = -1
                break
        else:
            raise ServeError(f"KV accounting: request {r}'s cached blocks are not in the free queue")
        self._lru = deque(x for x in self._lru if x[1])
        self._free -= hit
        self.cached[r] = 0
        return hit

    def _show_steps(self, steps: int) -> None:
        """Progress by simulated iterations too (a long prefill can run for minutes before a request finishes)."""
        self.progress.set_postfix_str(f"{steps:,} steps", refresh=True)
        self._tick = steps + PROGRESS_STEPS

    def _accept_fitting(self, R, budget):
        """The leading running requests whose KV blocks fit without preempting anyone, accepted in bulk:
        exactly those `_preempt_loop`'s one-by-one walk would accept first (each takes min(left, budget)
        tokens while the budget lasts; a request fits while the blocks asked so far, released ones
        counted negative, stay within the free ones). Returns (i, ids, takes, budget left), ids and takes
        as int64 arrays."""
        comp, ntok, held, B = self.comp, self.ntok, self.held, self.p.block_size
        cR = comp[R]
        rem = ntok[R] - cR
        # ndarray methods, not numpy's module functions: the same arrays without their dispatch (called per step)
        take = np.minimum(rem, np.maximum(budget - (rem.cumsum() - rem), 0))
        need = -(-(cR + take) // B) - held[R]
        live = (budget - (take.cumsum() - take)) > 0  # the budget left before each request
        stop = (need.cumsum() > self.free) | ~live
        i = int(np.argmax(stop)) if stop.any() else len(R)
        if i:
            self.free -= int(need[:i].sum())
            nz = need[:i].nonzero()[0]  # most requests need no new block: add only where one does
            held[R[nz]] += need[nz]
            budget -= int(take[:i].sum())
        return i, R[:i], take[:i], budget

    def _preempt_loop(self, R, budget, waiting):
        """Running requests one by one, preempting from the back when KV blocks run out (the runs of requests
        that fit without preempting are accepted in bulk). The running set only loses its tail, so it stays
        R's first `nrun` entries. Returns (running, ids, takes, budget left), int64 arrays."""
        comp, ntok, held, B = self.comp, self.ntok, self.held, self.p.block_size
        i, ids_i, takes_i, budget = self._accept_fitting(R, budget)
        ids, takes = [np.asarray(ids_i, dtype=np.int64)], [np.asarray(takes_i, dtype=np.int64)]
        nrun = len(R)
        while i < nrun and budget > 0:
            r = int(R[i])
            k_new = min(int(ntok[r] - comp[r]), budget)
            need = -(-(int(comp[r]) + k_new) // B) - int(held[r])
            hit_self = False
            while need > self.free:
                nrun -= 1
                v = int(R[nrun])
                self._release_preempted(v)  # its computed tokens: 0, or its cached prefix (prefix caching)
                held[v] = 0
                self.npre[v] += 1
                waiting.appendleft(v)
                if v == r:
                    hit_self = True
                    break
            if hit_self:
                break
            self.free -= need
            held[r] += need
            ids.append(np.array([r], dtype=np.int64))
            takes.append(np.array([k_new], dtype=np.int64))
            budget -= k_new
            i += 1
            if i < nrun and budget > 0:  # the next ones that fit without preempting, in bulk again
                j, ids_j, takes_j, budget = self._accept_fitting(R[i:nrun], budget)
                ids.append(np.asarray(ids_j, dtype=np.int64))
                takes.append(np.asarray(takes_j, dtype=np.int64))
                i += j
        return R[:nrun], np.concatenate(ids), np.concatenate(takes), budget

    def run(self) -> Run:
        t, p, B = self.t, self.p, self.p.block_size
        comp, gen, ntok, held, out, arr = self.comp, self.gen, self.ntok, self.held, self.out, self.arr
        first, last = self.first, self.last
        closed = self.wl.concurrency
        n = self.n
        if closed:
            arr[:] = np.inf
            arr[:min(n, closed)] = 0.0
        released = min(n, closed) if closed else n
        # the step count a released closed-loop request waits for (join_steps), or an open-loop one read by a busy
        # engine (read_join_steps); None: it joins the next step
        self.gate = (np.zeros(n, dtype=np.int64) if (p.join_steps > 1 if closed else p.read_join_steps > 1)
                     else None)
        gate = self.gate
        # open loop: when the engine loop first read each request (the first step boundary at or after its arrival;
        # an idle engine's clock jumps to the arrival); `seen`: the requests before it have been read
        read = self.read
        seen = n if closed else 0
        J_read = p.read_join_steps
        # a finish's slot and blocks, held until the loop has processed its step's output (read_join_steps > 1: the
        # next step was scheduled before it, so they serve the read_join_steps-th step after it): (the count of
        # steps run before that step, slots, blocks), oldest first; released at once when nothing else runs
        self._hold = deque() if J_read > 1 else None
        self._hold_slots = 0
        R = np.zeros(0, dtype=np.int64)  # running, in priority order
        waiting: deque = deque()
        nxt = 0
        now = 0.0
        steps = 0
        busy = 0.0
        done = 0
        budget0 = p.budget
        static = p.name == "static"
        itl = self.itl
        last_dt = 1e-3
        merge_finish = self.deadline is None  # a deadline queue re-estimates at every iteration boundary
        arr_inf = math.inf
        # (R, comp, held, iterations to the next finish, iterations not yet written, last end, sum of comp, sum of held)
        cache = None
        while done < n:
            if self._hold and (self._hold[0][0] <= steps or not len(R)):
                self._release_held(steps, len(R) > 0)
            busy_now = gate is not None and (len(R) > 0 or bool(waiting))  # an idle engine takes an arrival at once
            if seen < n and arr[seen] <= now:  # open loop: the engine reads every request that came by this boundary
                k = int(np.searchsorted(arr, now, side="right"))
                read[seen:k] = now
                if busy_now:
                    gate[seen:k] = steps + J_read - 1
                seen = k
            while nxt < n and arr[nxt] <= now:
                if busy_now and gate[nxt] > steps:
                    break
                waiting.append(nxt)
                nxt += 1
            nr = len(R)
            if not nr and not waiting:
                now = float(arr[nxt])
                continue
            if self.deadline is not None and len(waiting) > 1:
                waiting = self._deadline_order(waiting, now, R)
            if cache is not None and cache[0] is R:  # R has only decoded since the last run
                _, cR, hR, left, pend, last_end, sR, sH = cache
                pure = True
            else:
                cR = comp[R]
                rem = ntok[R] - cR
                pure = nr and rem.max() == 1
                left = None
            # ---- fast path: a run of identical pure-decode iterations -----------------------
            if self.fast and pure:
                can_join = bool(waiting) and nr < self.seq_slots and not static
                if can_join:
                    h = waiting[0]
                    want = int(ntok[h] - comp[h])
                    if want + nr > self.knobs.join_demand:
                        self.knobs.join_demand = want + nr
                    can_join = self._admit_need(h, min(want, budget0 - nr)) <= self.free
                    if not can_join:
                        self.knobs.blocked = True
                if not can_join:
                    if left is None:
                        left = int((out[R] - gen[R]).min())  # iterations up to the next finish
                        hR = held[R]
                        pend = 0
                        sR = int(cR.sum())
                        sH = int(hR.sum())
                    k = min(left if merge_finish else left - 1, MAX_RUN)
                    if self._hold:  # stop where a held slot is released, so a waiting request may take it
                        k = min(k, self._hold[0][0] - steps)
                    joinable = nxt < n and nr < self.seq_slots and not static
                    if joinable and arr[nxt] < arr_inf:
                        # only how many iterations get timed at once; the run still stops at the arrival
                        k = min(k, int((arr[nxt] - now) / max(last_dt, 1e-6) * 1.25) + 2)
                    m = self._decode_run(R, cR, sR, sH, k, now, nxt, joinable) if k >= (1 if merge_finish else 2) else 0
                    if m >= 1:
                        dts = self._last_dts
                        end = now + self._last_span
                        if seen < n and arr[seen] <= end:  # read at the boundaries inside the run, not at its end
                            seen = self._read_in_run(seen, now, steps, dts, end)
                        d0 = float(dts[0])
                        if pend:  # every running request's last token came at `now`
                            itl.add(np.array([(now + d0) - now]), float(nr))
                        else:
                            itl.add((now + d0) - last[R], 1.0)
                        if m > 1:
                            itl.add(dts[1:], float(nr))
                        cR = cR + m
                        sR += m * nr
                        hR = np.maximum(-(-cR // B), hR)
                        sH_new = int(hR.sum())
                        self.free -= sH_new - sH
                        sH = sH_new
                        steps += m
                        busy += self._last_span
                        now = end
                        last_dt = float(dts[-1])
                        if self.progress is not None and steps >= self._tick:
                            self._show_steps(steps)
                        cache = (R, cR, hR, left - m, pend + m, end, sR, sH)
                        if m == left:  # the last iteration finished requests
                            cache = self._flush(cache)
                            f = R[gen[R] >= out[R]]
                            R, done, released = self._finish(f, R, now, done, released, steps)
                        continue
            if cache is not None:  # write the decode runs' progress back before anything else reads it
                cache = self._flush(cache)
                cR = comp[R]
                rem = ntok[R] - cR
            # ---- one iteration -------------------------------------------------------------
            budget = budget0
            preempted = False
            R_all = None
            if nr and not p.mixed_prefill and not static and self._prefill_first(R, rem, waiting, budget0):
                R_all, keep = R, rem > 1  # a prefill-only iteration: the decodes sit this one out
                R, rem, cR = R[keep], rem[keep], cR[keep]
                R_pre = R
                nr = len(R)
            if nr:
                cum = rem.cumsum()  # ndarray methods here: np.cumsum / np.flatnonzero's dispatch, per step
                take = np.minimum(np.maximum(budget - (cum - rem), 0), rem)  # np.clip, without its wrapper's cost
                need = np.maximum(-(-(cR + take) // B) - held[R], 0)
                n_need = int(need.sum())
                if n_need > self.free:
                    n_before = self.npre.sum()
                    R, s_id, s_take, budget = self._preempt_loop(R, budget, waiting)
                    preempted = self.npre.sum() > n_before
                    self.knobs.preempted |= bool(preempted)
                else:
                    self.free -= n_need
                    if n_need:  # most running requests need no new block: add only where one does
                        nz = need.nonzero()[0]
                        held[R[nz]] += need[nz]
                    sel = take > 0
                    s_id = R[sel]
                    s_take = take[sel]
                    budget -= min(budget, int(cum[-1]))  # take's sum: the budget, or every remaining token
            else:
                s_id = s_take = np.zeros(0, dtype=np.int64)
            if R_all is not None:  # back to the whole running set (admission order), the decodes kept
                R = R_all[~np.isin(R_all, np.setdiff1d(R_pre, R))] if preempted else R_all
            if not preempted and (not static or not len(R)):
                a_id, a_take = [], []
                nrun = len(R)
                while waiting and budget > 0 and nrun < self.seq_slots:
                    r = waiting[0]
                    want = int(ntok[r] - comp[r])
                    k_new = min(want, budget)
                    if k_new < want and not p.chunked_prefill:
                        self.knobs.blocked = True
                        break
                    need_r = self._admit_need(r, k_new)
                    if need_r > self.free:
                        self.knobs.blocked = True
                        break
                    waiting.popleft()
                    nrun += 1
                    hit = self._take_cached(r)  # its cached blocks come out of the free queue where they sit
                    self.free -= need_r - hit
                    held[r] += need_r
                    a_id.append(r)
                    a_take.append(k_new)
                    budget -= k_new
                if a_id:
                    a = np.array(a_id, dtype=np.int64)
                    R = np.concatenate([R, a])
                    s_id = np.concatenate([s_id, a])
                    s_take = np.concatenate([s_take, np.array(a_take, dtype=np.int64)])
            if not len(s_id):  # nothing schedulable (cannot happen for a workload that fits)
                raise ServeError("scheduler stalled: no request could be scheduled")
            kn = self.knobs
            if len(R) > kn.peak_running:
                kn.peak_running = len(R)
            tok = budget0 - budget  # s_take's sum: every take came out of the budget
            if tok > kn.peak_tokens:
                kn.peak_tokens = tok
            kv_s = comp[s_id]
            dt = t.step_arrays(s_take, kv_s)
            last_dt = dt
            now += dt
            steps += 1
            busy += dt
            if self.progress is not None and steps >= self._tick:
                self._show_steps(steps)
            kv_s = kv_s + s_take  # s_id holds each request once: the same as comp[s_id] += s_take
            comp[s_id] = kv_s
            e = s_id[kv_s == ntok[s_id]]
            if len(e):
                g = gen[e] + 1
                gen[e] = g
                ntok[e] += 1
                was = np.isfinite(first[e])
                if was.any():
                    itl.add(now - last[e[was]], 1.0)
                first[e[~was]] = now
                last[e] = now
                f = e[g >= out[e]]
                if len(f):
                    R, done, released = self._finish(f, R, now, done, released, steps)
        return self._result(steps, busy, now)

    def _release_held(self, steps: int, busy: bool) -> None:
        """Give back the finished requests' slots and blocks whose step output the loop has processed (held until
        the count of steps run reaches theirs), or all of them when nothing else runs (`busy` False)."""
        hold = self._hold
        while hold and (not busy or hold[0][0] <= steps):
            _, slots, blocks = hold.popleft()
            self._hold_slots -= slots
            self.free += blocks

    def _read_in_run(self, seen: int, now: float, steps: int, dts, end: float) -> int:
        """Open loop: the requests that arrived during a run of decode steps that started at `now` after `steps`
        steps (step times `dts`, ending at `end`) are read at the first boundary at or after their arrival, and
        join no earlier than read_join_steps steps after it. Returns the new count of requests read."""
        arr = self.arr
        k = int(np.searchsorted(arr, end, side="right"))
        ends = now + np.cumsum(np.asarray(dts, dtype=float))
        ends[-1] = end  # the run's end exactly as the caller advances to it
        idx = np.minimum(np.searchsorted(ends, arr[seen:k], side="left"), len(ends) - 1)
        self.read[seen:k] = ends[idx]
        if self.gate is not None:
            self.gate[seen:k] = steps + idx + self.p.read_join_steps  # boundary after step steps + idx + 1, less one
        return k

    def _flush(self, cache):
        """Write decode runs kept in local arrays back to the per-request state."""
        R, cR, hR, _, pend, last_end = cache[:6]
        self.comp[R] = cR
        self.gen[R] += pend
        self.ntok[R] += pend
        self.held[R] = hR
        self.last[R] = last_end
        return None

    def _finish(self, f, R, now, done, released, steps: int = 0):
        """Requests `f` finished at `now`, in step `steps`: free their blocks, drop them from the running set,
        release closed-loop arrivals (joining no earlier than step `steps` + join_steps)."""
        self.finish[f] = now
        freed = int(self.held[f].sum())
        self.held[f] = 0
        done += len(f)
        R = R[np.isnan(self.finish[R])]
        if self._hold is not None and len(R):  # busy: the slots and blocks serve step steps + read_join_steps
            self._hold.append((steps + self.p.read_join_steps - 1, len(f), freed))
            self._hold_slots += len(f)
        else:
            self.free += freed
        closed = self.wl.concurrency
        if closed and released < self.n:
            k = min(len(f), self.n - released)
            self.arr[released:released + k] = now
            if self.gate is not None:  # the step they may first join, less one (the count of steps run before it)
                self.gate[released:released + k] = steps + self.p.join_steps - 1
            released += k
        if self.progress is not None:
            self.progress.update(len(f))
        return R, done, released

    def _deadline_order(self, waiting, now: float, R) -> deque:
        """QLM-style queue: earliest first-token deadline first, except requests the estimator
        says will miss their deadline anyway, which go to the back (still in deadline order; a request's
        estimate counts only the requests served ahead of it: steptime.serve.queueing.deadline_split).
        Resumed requests (first token already out) keep the front."""
        ids = np.fromiter(waiting, dtype=np.int64, count=len(waiting))
        resumed = np.isfinite(self.first[ids])
        dl = np.where(resumed, -np.inf, self.deadline[ids])
        o = np.argsort(dl, kind="stable")
        ids, resumed = ids[o], resumed[o]
        rem = self.ntok[R] - self.comp[R]
        ahead = int(rem[rem > 1].sum())  # prefill tokens of running requests go first
        # a resumed request has no first-token deadline left to miss: never late, served (and counted) first
        est, late = deadline_split(self.estimator, self.ntok[ids] - self.comp[ids],
                                   np.where(resumed, np.inf, self.deadline[ids]), now, len(R), ahead)
        fresh = np.isnan(self.first_est[ids])
        self.first_est[ids[fresh]] = est[fresh]  # the estimate made when the request was first queued
        return deque(np.concatenate([ids[~late], ids[late]]).tolist())

    def _prefill_first(self, R, rem, waiting, budget0: int) -> bool:
        """Whether a prefill-only iteration runs now (`mixed_prefill=False`): a running request still has prompt
        tokens to compute and their next chunks' KV blocks are free, or the first waiting request can be admitted
        (a free slot, its first chunk's blocks). Otherwise the iteration is the mixed one (and preempts as it does)."""
        pre = rem > 1
        if bool(pre.any()):
            Rp, rp = R[pre], rem[pre]
            take = np.minimum(np.maximum(budget0 - (rp.cumsum() - rp), 0), rp)
            B = self.p.block_size
            return int(np.maximum(-(-(self.comp[Rp] + take) // B) - self.held[Rp], 0).sum()) <= self.free
        if not waiting or len(R) >= self.seq_slots:  # a held slot is not free yet
            return False
        h = waiting[0]
        want = int(self.ntok[h] - self.comp[h])
        if want > budget0 and not self.p.chunked_prefill:
            return False
        return self._admit_need(h, min(want, budget0)) <= self.free

    def _admit_need(self, r: int, k_new: int) -> int:
        """Blocks a waiting request needs to join with `k_new` tokens this step."""
        B = self.p.block_size
        if self.p.reserve_full:  # prompt + every output token, reserved up front
            return -(-int(self.ntok[r] - self.gen[r] + self.out[r]) // B) - int(self.held[r])
        return -(-(int(self.comp[r]) + k_new) // B) - int(self.held[r])

    def _decode_run(self, R, kvs, sum_kv: int, sum_held: int, k, now, nxt, joinable) -> int:
        """Time up to k pure-decode iterations; return how many run before an event. `sum_kv`, `sum_held`:
        the sums of `kvs` and of the requests' held blocks."""
        B = self.p.block_size
        nr = len(R)
        if k <= SHORT_RUN and self._short:  # a short run in Python floats (same values, no numpy call overhead)
            # an arrival that could join stops the run at the first iteration ending at or after it
            a = float(self.arr[nxt]) if joinable else math.inf
            dts = self.t.decode_steps_list(nr, float(sum_kv), k, a, now)
            ends = list(accumulate(dts))
            m = len(dts)
        else:
            dts = (self.t.decode_steps(nr, float(sum_kv), k, kvs=kvs) if getattr(self.t, "needs_kvs", False)
                   else self.t.decode_steps(nr, float(sum_kv), k))
            m = k
            ends = np.cumsum(dts)
            # an arrival that could join stops the run at the first iteration starting after it
            if joinable:
                a = self.arr[nxt]  # iteration j starts at now + sum(dts[:j])
                if a < math.inf:
                    m = min(m, 1 + int(np.searchsorted(ends + now, a, side="left")))
        # KV blocks: iteration j needs ceil((kv_i + j + 1) / B) blocks for request i
        if m and not self.p.reserve_full and nr * (m // B + 1) > self.free:  # else the free blocks cover any growth
            q, rem = np.divmod(kvs + 1, B)
            hist = np.bincount(rem, minlength=B)
            j = np.arange(m)
            need = q.sum() + (hist[:, None] * -(-(np.arange(B)[:, None] + j[None, :]) // B)).sum(axis=0)
            over = (need > self.free + sum_held).nonzero()[0]
            if over.size:
                m = int(over[0])
        self._last_dts = dts[:m]
        self._last_span = float(ends[m - 1]) if m else 0.0
        return m

    def _result(self, steps, busy, now) -> Run:
        wl = self.wl
        first, fin, arr = self.first, self.finish, self.arr
        out = wl.output.astype(float)
        import pandas as pd  # the run's per-request table: pandas only once a run is built (import stays light)

        df = pd.DataFrame({
            "request": np.arange(self.n), "arrival_s": arr, "prompt_tokens": wl.prompt, "output_tokens": wl.output,
            "first_token_s": first, "finish_s": fin, "ttft_s": first - arr,
            "tpot_s": np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan),
            "e2e_s": fin - arr, "preemptions": self.npre, "first_token_estimate_s": self.first_est,
            # open loop: the step boundary at which the engine loop first read the request (vLLM's QUEUED stamp);
            # a closed loop's: its arrival
            "read_s": self.read})
        itl, w = self.itl.arrays()
        return Run(df, itl, w, steps, busy, now, self.blocks, asdict(self.p), itl_exact=self.itl.exact,
                   knobs=asdict(self.knobs))


def check_workload(workload) -> None:
    """Refuse anything but a Workload (a list of lengths, a table, None) before the simulator reads it."""
    if not isinstance(workload, Workload):
        raise ServeError(f"workload must be a steptime.serve.Workload (synthetic(...), from_table(...), "
                         f"static_batch(...)), got {type(workload).__name__}")


def timer_tokens(workload: Workload, budget: int, max_num_seqs: int) -> int:
    """The step timer's first token table (StepTimer's max_tokens): no larger than the token budget (2^16 at most)
    nor than the most tokens one step of `workload` can hold, its max_num_seqs longest requests whole (prompt and
    output: a preempted request's recompute included). The table grows on demand, bit for bit the same, so this
    sizes the work, never a step time (wave 38: a static batch's unbounded budget tabulated 65,536 token counts up
    front, minutes for gpt-oss-120b's 128 experts)."""
    k = min(max_num_seqs, len(workload))
    whole = np.sort(np.asarray(workload.prompt, dtype=np.int64) + np.asarray(workload.output, dtype=np.int64))
    return int(min(budget, 1 << 16, max(int(whole[-k:].sum()), 1)))


def replay_timer(model, gpu, workloads, pol: Policy, *, tp: int = 1, constants=None, f_clk=None,
                 kv_dtype: str = "bf16", engine=None, dtype: str | None = None, ep: int = 1,
                 moe_constants=None) -> StepTimer:
    """The one step timer that replays each of `workloads` under `pol` (one instance's, or all of identical
    replicas' and data-parallel ranks' shares: their steps are timed alike, so one timer serves them all; wave 39,
    `serve --ep 8` built eight). Its first tables are sized for the largest share (timer_tokens); they grow on
    demand, bit for bit the same, so the sizing never moves a step time."""
    return StepTimer(model, gpu, tp=tp, constants=constants, f_clk=f_clk, kv_dtype=kv_dtype, engine=engine,
                     dtype=dtype, max_tokens=max(timer_tokens(w, pol.budget, pol.max_num_seqs) for w in workloads),
                     # no step runs more requests than a workload holds: a --batch of 10**5 over 10 requests
                     # asks for 10 rows
                     max_requests=min(pol.max_num_seqs, max(len(w) for w in workloads)), ep=ep,
                     moe_constants=moe_constants)


def simulate(model, gpu, workload: Workload, pol: Policy | str = "vllm", *, tp: int = 1, timer: StepTimer | None = None,
             engine=None, dtype: str | None = None, constants=None, f_clk=None, kv_dtype: str = "bf16",
             progress: bool = False, fast: bool = True, deadline=None, estimator=None, ep: int = 1,
             moe_constants=None, **policy_kw) -> Run:
    """Replay `workload` on one instance of `model` on `gpu` under a scheduler policy.

    `fast=False` times every iteration on its own (the reference the fast path is tested against).
    `deadline` (absolute first-token deadlines, seconds) with `estimator` (see steptime.serve.queueing)
    turns the waiting queue into a QLM-style deadline queue. For a mixture-of-experts model `ep` > 1 is
    expert parallelism: the instance simulated is ONE attention data-parallel rank (ep / tp of them share
    the experts), each step timed as if every rank ran a batch of the same size (steptime.moe_step).

    >>> from steptime.serve import simulate, synthetic
    >>> run = simulate("llama-3.1-8b", "h100-sxm", synthetic(200, isl=512, osl=128, rate=5.0))
    >>> run.summary()["ttft_s"]["p50"]
    """
    check_workload(workload)
    check_bool(progress, "progress", ServeError)
    check_bool(fast, "fast", ServeError)
    if isinstance(pol, Policy) and policy_kw:  # they shape a policy made from a name; a Policy is already made
        raise ServeError(f"policy settings {', '.join(sorted(policy_kw))} apply to a policy given by name; pol is "
                         "already a Policy: set them on it (Policy(..., setting=value))")
    pol = pol if isinstance(pol, Policy) else policy(pol, **policy_kw)
    if pol.name == "disagg":
        raise ServeError("the disagg policy needs two pools: use simulate_disagg")
    timer = timer or replay_timer(model, gpu, [workload], pol, tp=tp, constants=constants, f_clk=f_clk,
                                  kv_dtype=kv_dtype, engine=engine, dtype=dtype, ep=ep, moe_constants=moe_constants)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(workload), unit="req", desc="serve", leave=False, mininterval=0.5)
    try:
        return _Engine(timer, pol, workload, progress=bar, fast=fast, deadline=deadline, estimator=estimator).run()
    finally:
        if bar is not None:
            bar.close()


def check_instances(n, what: str) -> int:
    """An instance count (replicas, a disaggregated pool's instances) as an int in [1, MAX_INSTANCES]."""
    n = as_int(n, what, 1, error=ServeError)
    if n > MAX_INSTANCES:
        raise ServeError(f"{what} {n} is above the limit of {MAX_INSTANCES} instances in one deployment")
    return n


def simulate_replicas(model, gpu, workload: Workload, pol: Policy, replicas: int, **kw) -> Run:
    """`replicas` identical instances behind a round-robin router.

    A closed-loop workload's concurrency is the TOTAL number of requests in flight across the
    replicas (as a benchmark client's): it is split as evenly as it goes (C // R each, one more on
    the first C % R), each replica a closed loop of its share fed round-robin; with fewer in flight
    than replicas, only C replicas get requests."""
    check_workload(workload)
    replicas = check_instances(replicas, "replicas")
    if replicas == 1:
        return simulate(model, gpu, workload, pol, **kw)
    closed = workload.concurrency
    active = min(replicas, int(closed)) if closed else replicas
    shares = []
    for i in range(active):
        sel = np.arange(i, len(workload), active)
        share = None if not closed else int(closed) // active + (i < int(closed) % active)
        if sel.size:
            shares.append((sel, Workload(workload.arrival[sel], workload.prompt[sel], workload.output[sel], share,
                                         workload.name)))
    if kw.get("timer") is None and isinstance(pol, Policy):  # one timer for the identical replicas (wave 39)
        kw["timer"] = replay_timer(model, gpu, [sub for _, sub in shares], pol,
                                   **{k: kw[k] for k in TIMER_KEYS if k in kw})
    runs = []
    for sel, sub in shares:
        r = simulate(model, gpu, sub, pol, **kw)
        r.requests["request"] = sel
        runs.append(r)
    return _merge(runs, sort=True)


def _merge(runs, sort=False) -> Run:
    import pandas as pd  # the runs' per-request tables (pandas only here, not at import)

    df = pd.concat([r.requests for r in runs], ignore_index=True)
    if sort:
        df = df.sort_values("request", kind="stable").reset_index(drop=True)
    return Run(df, np.concatenate([r.itl_s for r in runs]), np.concatenate([r.itl_w for r in runs]),
               sum(r.n_steps for r in runs), sum(r.busy_s for r in runs), max(r.makespan_s for r in runs),
               min(r.kv_blocks for r in runs), runs[0].policy, itl_exact=all(r.itl_exact for r in runs),
               knobs=_merge_knobs(runs))


def _merge_knobs(runs) -> dict | None:
    """The knobs record of runs simulated together (replicas, pools): the largest peaks, any refusal."""
    if any(r.knobs is None for r in runs):
        return None
    k = Knobs(**runs[0].knobs)
    for r in runs[1:]:
        k = k.merge(Knobs(**r.knobs))
    return asdict(k)


def simulate_disagg(model, gpu, workload: Workload, *, prefill_instances: int = 1, decode_instances: int = 1,
                    tp: int = 1, prefill_policy: Policy | None = None, decode_policy: Policy | None = None,
                    transfer_gbps: float | None = None, constants=None, f_clk=None, kv_dtype: str = "bf16",
                    engine=None, dtype: str | None = None, timer: StepTimer | None = None, ep: int = 1,
                    prefill_runs: dict | None = None) -> Run:
    """DistServe-style disaggregation: prefill pool -> KV hand-over -> decode pool.

    Prefill instances run whole prompts (no decode), requests routed round-robin. The
    first token comes from the prefill pool; the request then joins a decode instance
    (round-robin) after its KV cache crosses the link: the prompt's KV bytes per GPU as the decode
    instance holds them (`kv_budget(...).request_bytes(prompt)`, the memory model behind the block count:
    whole blocks, a windowed layer's window, a hybrid's linear-attention state) / `transfer_gbps`
    (default: the GPU's NVLink, else PCIe figure; DATASHEET). Open loop only.

    `prefill_runs`: a dict the caller keeps for ONE workload and ONE timer (steptime.plan: the pools of one step
    timer behind the same prefill pool), holding the prefill pool's runs by (prefill instances, prefill policy):
    the prefill pool never sees the decode pool, so pools that differ only in their decode instances share its run
    (the run is read, never changed, here).
    """
    check_workload(workload)
    if workload.concurrency:
        raise ServeError("disaggregated simulation takes an open-loop workload (arrival times)")
    for what, k in (("prefill_instances", prefill_instances), ("decode_instances", decode_instances)):
        if as_int(k, what, None, error=ServeError) < 1:
            raise ServeError(f"{what} {k}: each pool needs at least one instance")
        check_instances(k, what)
    for what, p in (("prefill_policy", prefill_policy), ("decode_policy", decode_policy)):
        if p is not None and not isinstance(p, Policy):  # a name such as "sarathi" failed on an attribute
            raise ServeError(f"{what} must be a steptime.serve.Policy (e.g. Policy(\"vllm\", ...)) or None for "
                             f"the default, got {p!r:.40}")
    if prefill_runs is not None and not isinstance(prefill_runs, dict):
        raise ServeError(f"prefill_runs must be a dict (the caller's runs of the prefill pool) or None, got "
                         f"{type(prefill_runs).__name__}")
    pp = prefill_policy or Policy("vllm", max_num_batched_tokens=8192, chunked_prefill=False)
    dp = decode_policy or Policy("vllm", reserve_full=True)
    timer = timer or StepTimer(model, gpu, tp=tp, constants=constants, f_clk=f_clk, kv_dtype=kv_dtype,
                               engine=engine, dtype=dtype,
                               max_tokens=timer_tokens(workload, pp.budget, pp.max_num_seqs),
                               max_requests=min(max(pp.max_num_seqs, dp.max_num_seqs), len(workload)), ep=ep)
    n = len(workload)
    ones = np.ones(n, dtype=np.int64)
    pp_run = replace(pp, name="vllm")
    pre = None if prefill_runs is None else prefill_runs.get((prefill_instances, pp_run))
    if pre is None:
        pre = simulate_replicas(model, gpu, Workload(workload.arrival, workload.prompt, ones, name=workload.name),
                                pp_run, prefill_instances, timer=timer)
        if prefill_runs is not None:
            prefill_runs[(prefill_instances, pp_run)] = pre
    first = pre.requests["first_token_s"].to_numpy()
    gpu_s = timer.gpu
    bw = transfer_gbps or getattr(gpu_s, "nvlink_gbps", None) or getattr(gpu_s, "pcie_gbps", None) or 0.0
    # the prompt's KV as the decode instance will hold it (the one memory model, steptime.serve.memory): whole
    # blocks of the full-attention layers, a windowed layer's window plus one block, a hybrid's linear state
    budget = kv_budget(timer.model, gpu_s, tp=timer.tp, ep=getattr(timer, "ep", 1), dtype=timer.dtype,
                       kv_dtype=timer.kv_dtype, gpu_memory_utilization=dp.gpu_memory_utilization,
                       block_size=dp.block_size, max_num_seqs=dp.max_num_seqs)
    xfer = budget.request_bytes(workload.prompt) / (bw * 1e9) if bw else np.zeros(n)
    ready = first + xfer
    dec_runs = []
    for i in range(decode_instances):
        sel = np.arange(i, n, decode_instances)
        sel = sel[workload.output[sel] > 1]
        if not sel.size:
            continue
        order = sel[np.argsort(ready[sel], kind="stable")]
        sub = Workload(ready[order], workload.prompt[order], workload.output[order], name=workload.name)
        eng = _Engine(timer, dp, sub, computed0=workload.prompt[order].tolist(), gen0=[1] * len(order))
        eng.first[:] = 0.0  # the first token came from the prefill pool
        eng.last[:] = ready[order]
        r = eng.run()
        r.requests["request"] = order
        dec_runs.append(r)
    df = pre.requests.copy()
    fin = first.copy()
    itl = [pre.itl_s]
    wts = [pre.itl_w]
    steps, busy, span = pre.n_steps, pre.busy_s, pre.makespan_s
    for r in dec_runs:
        idx = r.requests["request"].to_numpy()
        fin[idx] = r.requests["finish_s"].to_numpy()
        itl.append(r.itl_s)
        wts.append(r.itl_w)
        steps += r.n_steps
        busy += r.busy_s
        span = max(span, r.makespan_s)
    arr = workload.arrival
    out = workload.output.astype(float)
    df["output_tokens"] = workload.output
    df["finish_s"] = fin
    df["e2e_s"] = fin - arr
    df["tpot_s"] = np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan)
    pol = {"name": "disagg", "prefill_instances": prefill_instances, "decode_instances": decode_instances,
           "prefill": asdict(pp), "decode": asdict(dp), "transfer_gbps": bw}
    return Run(df, np.concatenate(itl), np.concatenate(wts), steps, busy, span,
               min([pre.kv_blocks] + [r.kv_blocks for r in dec_runs]), pol,
               itl_exact=pre.itl_exact and all(r.itl_exact for r in dec_runs), knobs=_merge_knobs([pre] + dec_runs))


# which instant a request's TTFT and end-to-end latency are measured from: its arrival at the server (client) or
# the step boundary at which the engine loop first read it (engine: vLLM's QUEUED stamp, the Run's read_s)
CLOCKS = ("client", "engine")


def on_clock(requests, clock: str = "client"):
    """A copy of a Run's per-request table with ttft_s and e2e_s measured on `clock`: 'client' from the arrival (as
    the Run reports them), 'engine' from read_s, the step boundary at which the engine loop first read the request
    (open loop; equal to the arrival on an idle engine). TPOT is the same on both."""
    if clock not in CLOCKS:
        raise ServeError(f"unknown latency clock {clock!r} (known: {', '.join(CLOCKS)})")
    d = requests.copy()
    if clock == "engine":
        if "read_s" not in d:
            raise ServeError("on_clock: the requests table has no read_s column (not a steptime.serve Run's)")
        d["ttft_s"] = d["first_token_s"] - d["read_s"]
        d["e2e_s"] = d["finish_s"] - d["read_s"]
    return d


# ---------------------------------------------------------------------------------------
def weighted_quantile(x, w, qs) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    w = np.asarray(w, dtype=float)
    if x.size == 0:
        return np.full(len(qs), np.nan)
    o = np.argsort(x, kind="stable")
    cw = np.cumsum(w[o])
    idx = np.searchsorted(cw, np.asarray(qs) * cw[-1], side="left")
    return x[o][np.minimum(idx, x.size - 1)]


def _pcts(x) -> dict:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if not x.size:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


def summarize(run: Run, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> dict:
    """Percentiles (p50/p90/p99) of TTFT, TPOT, ITL and end-to-end latency; throughput;
    goodput (requests/s meeting both SLOs) when an SLO is given. Seconds throughout."""
    d = run.requests
    span = run.makespan_s - float(d["arrival_s"].min())
    q = weighted_quantile(run.itl_s, run.itl_w, [0.5, 0.9, 0.99])
    out = {
        "requests": int(len(d)),
        "ttft_s": _pcts(d["ttft_s"]), "tpot_s": _pcts(d["tpot_s"]), "e2e_s": _pcts(d["e2e_s"]),
        "itl_s": {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])},
        "makespan_s": float(run.makespan_s),
        "throughput_tok_s": float(d["output_tokens"].sum() / span) if span > 0 else None,
        "throughput_req_s": float(len(d) / span) if span > 0 else None,
        "steps": int(run.n_steps), "busy_s": float(run.busy_s), "kv_blocks": int(run.kv_blocks),
        "preemptions": int(d["preemptions"].sum()),
    }
    for what, v in (("TTFT SLO", slo_ttft_s), ("TPOT SLO", slo_tpot_s)):
        if v is not None and not (isinstance(v, Real) and math.isfinite(v) and v > 0):
            raise ServeError(f"{what} must be a time > 0, got {v!r} s")
    if slo_ttft_s is not None or slo_tpot_s is not None:
        ok = np.ones(len(d), dtype=bool)
        if slo_ttft_s is not None:
            ok &= d["ttft_s"].to_numpy() <= slo_ttft_s
        if slo_tpot_s is not None:
            ok &= np.nan_to_num(d["tpot_s"].to_numpy(), nan=0.0) <= slo_tpot_s
        out["slo"] = {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s, "attainment": float(ok.mean()),
                      "goodput_req_s": float(ok.sum() / span) if span > 0 else None}
    return out
