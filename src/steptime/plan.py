"""`steptime plan`: the cheapest deployment that meets a latency SLO, searched over layouts.

The search runs the serving simulator (steptime.serve) on every layout of

    GPU x tensor parallelism x replicas x engine x dtype x scheduler knobs
    (max_num_seqs, token budget), aggregated (vLLM-style chunked prefill) and
    disaggregated (prefill:decode pools, DistServe-style)

drops the layouts that do not fit in memory (with the reason), scores the rest on the
workload, and ranks those meeting the SLO (TTFT and TPOT at a percentile) by cost per
million output tokens at a price per GPU-hour (specs/prices.yaml: every price with a
source and a date; `--prices FILE` replaces it), then by GPUs. Every number is simulated.

Work is spread over processes; each task gets everything it needs as arguments (model,
GPU and engine keys, the calibration constants, the workload arrays, the layouts) and
builds its own step timer, so no process-wide state is shared.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from steptime.errors import SteptimeError
from steptime.calibration import Constants
from steptime.io import yaml_load
from steptime.serve import Policy, StepTimer, Workload, engine_policy, kv_capacity_blocks, simulate_disagg, simulate_replicas
from steptime.serve.sim import same_run
from steptime.specs import get_gpu, get_model, gpu_key, model_table
from steptime.specs.engines import check_engine_gpu, check_precision, get_engine
from steptime.specs.moe import is_moe, moe_model_table
from steptime.step import GPU_TERMS, predict_steps
from steptime.validation import MAX_INSTANCES, as_int, check_bool, check_choice, check_known_fields, check_tp_heads, is_real

PRICE_FILE = Path(__file__).resolve().parent / "specs" / "prices.yaml"
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_SEQS = (64, 256)
DEFAULT_BUDGETS = (2048, 8192)
REPLICAS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
DISAGG = ((1, 1), (1, 2), (1, 3), (2, 1), (2, 3))  # prefill : decode instances
GPUS_PER_NODE_DEFAULT = 8  # ASSUMED where specs/gpus.yaml gives no gpus_per_node: an 8-GPU server


class PlanError(SteptimeError, ValueError):
    """A plan that cannot be searched or has no answer (one line says why)."""


# -- prices ---------------------------------------------------------------------------------
PRICE_FIELDS = ("usd_per_gpu_hour", "provider", "source", "date")  # a price entry's fields (load_prices)


MAX_PRICE_BYTES = 1 << 20  # a price table is a few kB; a larger file is not one


def load_prices(path=None) -> dict:
    """{gpu key: {usd_per_gpu_hour, source, date, provider}}; refuses a price without source or date."""
    import yaml

    from steptime.io import yaml_problem
    from steptime.validation import check_regular_file

    p = Path(path) if path else PRICE_FILE
    # wave 42: a device or FIFO was "no such file"; a YAML / UTF-8 error named only its class, not where
    check_regular_file(p, "--prices", MAX_PRICE_BYTES, error=PlanError)
    try:
        doc = yaml_load(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PlanError(f"--prices {str(p)!r}: not a YAML price table (not UTF-8 text: byte at offset "
                        f"{exc.start})") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"--prices {str(p)!r}: not a YAML price table ({yaml_problem(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("prices"), dict):
        raise PlanError(f"{p}: expected a `prices:` mapping of GPU -> {{usd_per_gpu_hour, source, date}}")
    check_known_fields(doc, ("prices", "sources"), str(p), PlanError)
    sources = doc.get("sources") or {}
    out = {}
    for name, e in doc["prices"].items():
        if not isinstance(e, dict):
            raise PlanError(f"{p}: price of {name!r} must be a mapping with usd_per_gpu_hour, source and date")
        check_known_fields(e, PRICE_FIELDS, f"{p}: the price of {name}", PlanError)
        v = e.get("usd_per_gpu_hour")
        if not is_real(v) or v <= 0:
            raise PlanError(f"{p}: {name}: usd_per_gpu_hour must be a number > 0 (got {v!r})")
        src, date = e.get("source"), e.get("date")
        if not src or not str(src).strip():
            raise PlanError(f"{p}: the price of {name} has no source: every price needs a source and a date")
        if not date:
            raise PlanError(f"{p}: the price of {name} has no date: every price needs a source and a date")
        try:  # the day the source states the price was read: an ISO date, not "recent"
            date = _dt.date.fromisoformat(str(date))
        except ValueError:
            raise PlanError(f"{p}: the price of {name} has date {date!r}: give the day the source was read as "
                            f"YYYY-MM-DD") from None
        try:
            key = gpu_key(str(name))
        except SteptimeError:
            raise PlanError(f"{p}: unknown GPU {name!r} in the price table (see `steptime gpus`)") from None
        out[key] = {"usd_per_gpu_hour": float(v), "source": str(sources.get(src, src)), "date": str(date),
                    "provider": str(e.get("provider", ""))}
    return out


# -- layouts --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    gpu: str
    tp: int
    engine: str
    dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    replicas: int = 1  # aggregated instances
    prefill: int = 0  # disaggregated: prefill instances ...
    decode: int = 0  # ... and decode instances
    ep: int = 1  # expert parallelism (MoE): an instance is ep GPUs, ep / tp attention data-parallel ranks

    @property
    def mode(self) -> str:
        return "disagg" if self.prefill else "agg"

    @property
    def instances(self) -> int:
        return self.prefill + self.decode if self.prefill else self.replicas

    @property
    def gpus_per_instance(self) -> int:
        return self.ep if self.ep > 1 else self.tp

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks per instance (each its own scheduler)."""
        return self.ep // self.tp if self.ep > 1 else 1

    @property
    def gpus(self) -> int:
        return self.gpus_per_instance * self.instances

    def label(self) -> str:
        inst = f"{self.prefill}P+{self.decode}D" if self.prefill else f"{self.replicas}x"
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return (f"{self.gpu} {inst} tp{self.tp}{ep} {self.engine} {self.dtype} seqs{self.max_num_seqs} "
                f"budget{self.max_num_batched_tokens}")


def gpus_per_node(gpu) -> int:
    return int(getattr(gpu, "gpus_per_node", None) or GPUS_PER_NODE_DEFAULT)


def expert_parallel_degrees(model, tp: int, eps=None) -> tuple:
    """The expert-parallel degrees searched at `tp`: 1 (experts sliced tp ways) and, for a mixture-of-experts
    model, every degree of `eps` (default DEFAULT_TP) that is a multiple of tp above it (ep = tp x data-parallel
    attention ranks); (1,) for a dense model."""
    if not is_moe(model):
        return (1,)
    return (1,) + tuple(e for e in (eps or DEFAULT_TP) if e > tp and e % tp == 0)


# ASSUMED: far above any machine's hardware threads (a two-socket server has at most a few hundred), while a typo
# such as --jobs 10**20 (an OverflowError in the process pool) is refused
MAX_JOBS = 1024


def _check_counts(values, what: str, empty: bool = False) -> tuple:
    """A search list of whole numbers in [1, MAX_INSTANCES], each once (replica counts, expert-parallel degrees);
    `empty`: an empty list searches none of that kind (replicas=(): disaggregated layouts only)."""
    if isinstance(values, str) or not hasattr(values, "__len__") or not (len(values) or empty):
        raise PlanError(f"{what} to search must be a {'' if empty else 'non-empty '}list (got {values!r:.60})")
    out = tuple(as_int(x, f"{what} to search: entry", 1, error=PlanError) for x in values)
    if out and max(out) > MAX_INSTANCES:
        raise PlanError(f"{what} to search: {max(out)} is above the limit of {MAX_INSTANCES} instances")
    _check_distinct(out, what)
    return out


def _check_pools(pools) -> tuple:
    """The disaggregated pools to search: a list of (prefill, decode) instance-count pairs, each once (empty: none)."""
    if isinstance(pools, str) or not hasattr(pools, "__len__"):
        raise PlanError(f"disaggregated pools to search must be a list of (prefill, decode) pairs "
                        f"(got {pools!r:.60})")
    out = []
    for p in pools:
        if isinstance(p, str) or not hasattr(p, "__len__") or len(p) != 2:
            raise PlanError(f"disaggregated pools to search: entry {p!r:.40} must be a (prefill, decode) pair of "
                            "instance counts")
        out.append(tuple(as_int(x, "disaggregated pools to search: instance count", 1, error=PlanError) for x in p))
        if sum(out[-1]) > MAX_INSTANCES:
            raise PlanError(f"disaggregated pools to search: {out[-1]} is above the limit of {MAX_INSTANCES} "
                            "instances")
    _check_distinct(out, "disaggregated pools")
    return tuple(out)


def _check_prices(prices) -> dict:
    """A price table given to plan(): {GPU key: {usd_per_gpu_hour > 0, ...}} (load_prices' shape)."""
    if not isinstance(prices, dict):
        raise PlanError(f"prices must be a dict of GPU -> {{usd_per_gpu_hour, source, date}} (load_prices' "
                        f"shape), got {type(prices).__name__}")
    for name, e in prices.items():
        v = e.get("usd_per_gpu_hour") if isinstance(e, dict) else None
        if not is_real(v) or v <= 0:
            raise PlanError(f"prices[{name!r}] must be a mapping with usd_per_gpu_hour > 0 (load_prices' shape), "
                            f"got {e!r:.60}")
    return prices


def _check_distinct(values, what: str) -> None:
    """Refuse a search list naming one value twice (`--tp 1,1`, `--gpus h100,h100-sxm`): each layout would be
    simulated twice and the two tie, with nothing telling them apart."""
    seen = []  # a list: an entry need not be hashable (a wrong one is refused by its own check)
    for v in values:
        if v in seen:
            raise PlanError(f"{what} to search: {v} is listed twice")
        seen.append(v)


def layouts(model, gpus, *, engines=("vllm",), max_gpus: int = 8, tps=DEFAULT_TP, seqs=DEFAULT_SEQS,
            budgets=DEFAULT_BUDGETS, dtypes=("bf16", "fp8"), disagg: bool = True, eps=None, replicas=REPLICAS,
            pools=DISAGG):
    """Every layout of the search and, for those refused before simulating, the reason. A mixture-of-experts
    model adds expert parallelism (expert_parallel_degrees) to the search.

    Returns (candidates, dropped): dropped is a list of (Layout, reason)."""
    cand, dropped = [], []
    for g in gpus:
        gs = get_gpu(g)
        for tp in tps:
            for ep in expert_parallel_degrees(model, tp, eps):
                per = ep if ep > 1 else tp
                for engine in engines:
                    for dtype in dtypes:
                        for s in seqs:
                            for b in budgets:
                                if b < s:
                                    continue
                                insts = [dict(replicas=r) for r in replicas if r * per <= max_gpus]
                                if disagg:
                                    insts += [dict(prefill=p, decode=d) for p, d in pools if (p + d) * per <= max_gpus]
                                for inst in insts:
                                    lay = Layout(gs.key, tp, engine, dtype, s, b, **inst, ep=ep)
                                    why = _static_reason(model, gs, lay)
                                    (dropped.append((lay, why)) if why else cand.append(lay))
    return cand, dropped


def _static_reason(model, gpu, lay: Layout) -> str | None:
    """Why a layout cannot run at all (before simulating), or None."""
    if lay.tp > gpus_per_node(gpu):
        return f"tp {lay.tp} exceeds the {gpus_per_node(gpu)} GPUs of a {gpu.key} node"
    try:
        check_tp_heads(model, lay.tp, PlanError)
        check_engine_gpu(get_engine(lay.engine), gpu)
        if is_moe(model):
            from steptime import moe_step

            moe_step.check_layout(model, gpu, lay.tp, lay.ep, lay.dtype)
            if lay.prefill and lay.ep > 1:
                return "disaggregated pools with expert parallelism are not simulated (data-parallel ranks per pool)"
        else:
            check_precision(gpu, lay.dtype)
    except SteptimeError as exc:
        return str(exc)
    return None


# -- evaluation (runs in worker processes) ------------------------------------------------------
def _ignore_sigint():  # workers: Ctrl-C is the parent's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class Bound:
    """What the layouts meeting the SLO so far prove about the rest (open-loop workloads).

    No layout's throughput exceeds T_max = output tokens / arrival span (the makespan outlasts the last
    arrival), so a layout of g GPUs of one type spends at least g / T_max GPU-seconds per output token. A
    layout that met the SLO on g1 GPUs of that type at throughput T1 spends g1 / T1; when g > g1 and
    g / T_max >= g1 / T1, the larger layout cannot be cheaper (nor rank before it) and is not simulated.
    Across GPU types (`across`, off by default: it would leave each GPU type's own best layout unknown) the
    same holds in dollars: price x g / T_max against the cheapest priced layout met."""
    gpu: str = ""
    price: float | None = None  # this group's GPU, USD per GPU-hour (None: unpriced)
    per_tok: dict = field(default_factory=dict)  # gpu key -> (g1 / T1, g1, label) of its best met layout
    usd: tuple | None = None  # (USD per output token, label) of the cheapest priced met layout
    across: bool = False

    @classmethod
    def of(cls, b, gpu: str, price) -> "Bound":
        b = b if b is not None else cls()
        return cls(gpu, price, dict(b.per_tok), b.usd, b.across)

    def met(self, lay, tok_s: float) -> None:
        if not (tok_s > 0):
            return
        v = lay.gpus / tok_s
        if lay.gpu not in self.per_tok or v < self.per_tok[lay.gpu][0]:
            self.per_tok[lay.gpu] = (v, lay.gpus, lay.label())
        if self.price is not None:
            usd = self.price * v / 3600.0
            if self.usd is None or usd < self.usd[0]:
                self.usd = (usd, lay.label())

    def merge(self, other: "Bound") -> "Bound":
        out = Bound(self.gpu, self.price, dict(self.per_tok), self.usd, self.across)
        for g, v in other.per_tok.items():
            if g not in out.per_tok or v[0] < out.per_tok[g][0]:
                out.per_tok[g] = v
        if other.usd is not None and (out.usd is None or other.usd[0] < out.usd[0]):
            out.usd = other.usd
        return out

    def dominates(self, lay, t_max: float) -> str | None:
        """Why `lay` provably cannot be cheaper than a layout already met, or None."""
        if not math.isfinite(t_max):
            return None
        low = lay.gpus / t_max  # GPU-seconds per output token, at best
        b = self.per_tok.get(lay.gpu)
        if b is not None and lay.gpus > b[1] and low >= b[0]:
            return (f"dominated: {b[2]} meets the SLO on {b[1]} GPUs; {lay.gpus} GPUs cannot be cheaper (no layout "
                    f"exceeds {t_max:.0f} output tok/s on this workload)")
        # across GPU types: strictly dearer by more than the ranking's rounding (3 significant digits)
        if self.across and self.price is not None and self.usd is not None and \
                self.price * low / 3600.0 > self.usd[0] * 1.01:
            return (f"dominated: {self.usd[1]} meets the SLO at ${self.usd[0] * 1e6:.3g} per million output tokens; "
                    f"{lay.gpus} x {lay.gpu} at ${self.price:.4g}/GPU-hour cost at least "
                    f"${self.price * low / 3600.0 * 1e6:.3g} (no layout exceeds {t_max:.0f} output tok/s)")
        return None


def evaluate_group(model, gpu, tp, engine, dtype, constants, wl_arrays, concurrency, lays, slo, pct,
                   exhaustive: bool = False, share: bool = True, bound: Bound | None = None,
                   price: float | None = None, search: dict | None = None) -> list[dict]:
    """Simulate layouts that share one step timer (GPU, tp, engine, dtype). Arguments only.

    Unless `exhaustive`, a layout is pruned (not simulated) when a layout already met (in this group,
    or in `bound`: what earlier groups met, passed in by the search) provably costs less (see Bound).

    Layouts that differ only in scheduler knobs (max_num_seqs, token budget) share one simulation when the
    knobs do not bind (`share`, exhaustive or not): the largest knobs are simulated first, and a layout with
    smaller ones reuses that run when the run never came near them (steptime.serve.sim.same_run: every
    check against a knob comes out the same, so the simulation would be the same bit for bit). Its row
    carries `shared_with`, the layout whose simulation it is.

    `search` (from `plan`): objective ("cost" or "max_rate", with its per-GPU `rates` and arrival `seed`),
    `attainment` (judge the SLO as the fraction of requests meeting every bound), `headroom` (each percentile
    x (1 + headroom) within its bound), `kv_blocks` (a fixed KV
    capacity per instance) and `timer_factory` (a peer's step timer instead of steptime's)."""
    search = search or {}
    arr, prompt, out = wl_arrays
    wl = Workload(arr, prompt, out, concurrency)
    rows = []
    try:
        if search.get("timer_factory") is not None:
            timer = search["timer_factory"](model, gpu, tp=tp)
        else:
            eng = (engine if search.get("moe_kernels") is None else  # --moe-kernels: whose laws price the experts
                   (constants or Constants.default()).engine(engine).with_moe_kernels(search["moe_kernels"],
                                                                      source="selected by --moe-kernels"))
            timer = StepTimer(model, gpu, tp=tp, engine=eng, dtype=dtype, constants=constants,
                              max_tokens=min(max(x.max_num_batched_tokens for x in lays), 1 << 16),
                              max_requests=max(x.max_num_seqs for x in lays),
                              **({"ep": lays[0].ep} if lays[0].ep > 1 else {}))
    except SteptimeError as exc:
        return [_row(x, dropped=str(exc)) for x in lays]
    kv_fixed = search.get("kv_blocks")
    max_rate = search.get("objective") == "max_rate"
    need = int(np.max(prompt + out))
    span = float(arr.max() - arr.min())
    t_max = float(out.sum()) / span if (span > 0 and not concurrency and not max_rate) else math.inf
    bound = Bound.of(bound, gpu, price)
    runs: dict = {}  # instances -> [(seqs, budget, run, label)] simulated so far (largest knobs first)
    # workload (None: the plan's; a rate of --max-rate) -> the prefill pools' runs on this timer, by (instances,
    # policy): disaggregated pools that differ only in their decode instances share one (simulate_disagg)
    pre_runs: dict = {}
    for lay in sorted(lays, key=lambda x: (-x.max_num_seqs, -x.max_num_batched_tokens, x.mode, x.gpus, x.prefill)):
        why = None if exhaustive else bound.dominates(lay, t_max)
        if why:
            rows.append(_row(lay, pruned=why))
            continue
        pol = engine_policy(lay.engine, max_num_batched_tokens=lay.max_num_batched_tokens,
                            max_num_seqs=lay.max_num_seqs, kv_blocks=kv_fixed)  # the engine's schedule facts
        try:
            blocks = kv_capacity_blocks(timer, pol)
        except SteptimeError as exc:
            rows.append(_row(lay, dropped=f"does not fit in memory: {exc}"))
            continue
        if -(-need // pol.block_size) > blocks:
            rows.append(_row(lay, dropped=f"does not fit in memory: the longest request ({need} tokens) needs more "
                                          f"KV than the {blocks * pol.block_size} tokens left per instance"))
            continue
        if lay.prefill and concurrency:
            rows.append(_row(lay, dropped="disaggregation is simulated for open-loop (rate) workloads only"))
            continue
        inst = (lay.mode, lay.replicas, lay.prefill, lay.decode, lay.ep)
        seqs, budget = lay.max_num_seqs, lay.max_num_batched_tokens

        def run_at(w, key, wkey=None):
            """The layout's simulation of workload `w` (`wkey`: which of the search's workloads it is), shared with
            a twin whose knobs did not bind."""
            twin = next(((r, lab) for s0, b0, r, lab in runs.get(key, ()) if share and
                         same_run(r.knobs, s0, b0, seqs, budget)), None)
            if twin is not None:
                return twin
            r = _simulate(lay, timer, w, pol, kv_fixed, pre_runs.setdefault(wkey, {}))
            runs.setdefault(key, []).append((seqs, budget, r, lay.label()))
            return r, None

        try:
            if max_rate:
                row = _max_rate(lay, timer, prompt, out, search, run_at, inst, slo, pct, blocks)
            else:
                run, twin = run_at(wl, inst)
                row = _score(lay, run, timer, slo, pct, blocks, search.get("attainment", False),
                             search.get("headroom", 0.0))
                if twin is not None:
                    row["shared_with"] = twin
        except SteptimeError as exc:
            rows.append(_row(lay, dropped=str(exc)))
            continue
        rows.append(row)
        if row["meets_slo"] and not max_rate:
            bound.met(lay, row["throughput_tok_s"])
    return rows


def _simulate(lay, timer, wl, pol, kv_blocks, prefill_runs=None):
    """One layout's run of `wl`: a disaggregated pair of pools or replicas of an aggregated instance
    (`prefill_runs`: simulate_disagg's, for this timer and workload)."""
    if lay.prefill:
        return simulate_disagg(timer.model, timer.gpu, wl, prefill_instances=lay.prefill, prefill_runs=prefill_runs,
                               decode_instances=lay.decode, tp=lay.tp, timer=timer,
                               prefill_policy=Policy("vllm", max_num_batched_tokens=lay.max_num_batched_tokens,
                                                     max_num_seqs=lay.max_num_seqs, chunked_prefill=False,
                                                     kv_blocks=kv_blocks),
                               decode_policy=Policy("vllm", max_num_batched_tokens=lay.max_num_batched_tokens,
                                                    max_num_seqs=lay.max_num_seqs, reserve_full=True,
                                                    kv_blocks=kv_blocks))
    # with expert parallelism each attention data-parallel rank is a scheduler of its own (lockstep
    # steps of equal batches assumed: steptime.serve.simulate)
    return simulate_replicas(timer.model, timer.gpu, wl, pol, lay.replicas * lay.dp, timer=timer)


def _max_rate(lay, timer, prompt, out, search, run_at, inst, slo, pct, blocks) -> dict:
    """The largest per-GPU Poisson rate of `search["rates"]` (ascending) at which `lay` meets the SLO, scanning
    up to the first rate that fails (the same requests at every rate, arrivals drawn with `search["seed"]`):
    the row of that rate's simulation, with the scan."""
    from steptime.serve import poisson_arrivals

    best, best_rate, scan = None, 0.0, []
    for r in search["rates"]:
        wl = Workload(poisson_arrivals(len(prompt), r * lay.gpus, search.get("seed", 0)), prompt, out,
                      name=f"poisson {r:g} req/s/GPU")
        run, twin = run_at(wl, (inst, float(r)), (float(r), lay.gpus))  # the arrivals: this rate x the GPUs
        row = _score(lay, run, timer, slo, pct, blocks, search.get("attainment", False),
                             search.get("headroom", 0.0))
        scan.append({"rate_per_gpu": float(r), "meets_slo": row["meets_slo"],
                     **({"attainment": row["attainment"]} if "attainment" in row else
                        {"ttft_pct_s": row["ttft_pct_s"], "tpot_pct_s": row["tpot_pct_s"]})})
        if twin is not None:
            row["shared_with"] = twin
        if not row["meets_slo"]:
            break
        best, best_rate = row, float(r)
    row = best if best is not None else row  # at no rate met: the lowest rate's simulation
    row.update(meets_slo=best is not None, max_rate_per_gpu=best_rate, max_rate_req_s=best_rate * lay.gpus,
               rate_scan=scan)
    return row


def _row(lay: Layout, **kw) -> dict:
    d = {"layout": lay.label(), **asdict(lay), "mode": lay.mode, "gpus": lay.gpus, "dropped": None, "pruned": None}
    if lay.ep == 1:  # a dense model's rows keep their columns
        del d["ep"]
    d.update(kw)
    return d


def _score(lay, run, timer, slo, pct, blocks, attainment: bool = False, headroom: float = 0.0) -> dict:
    d = run.requests
    ttft = d["ttft_s"].to_numpy()
    tpot = d["tpot_s"].to_numpy()
    tpot_f = tpot[np.isfinite(tpot)]
    span = run.makespan_s - float(d["arrival_s"].min())
    tok_s = float(d["output_tokens"].sum() / span) if span > 0 else float("nan")
    q = lambda x, p: float(np.percentile(x, p)) if x.size else float("nan")  # noqa: E731
    t_p, o_p = q(ttft, pct), q(tpot_f, pct)
    from steptime.serve.sim import weighted_quantile

    i50, i_p = (float(v) for v in weighted_quantile(run.itl_s, run.itl_w, [0.5, pct / 100.0])) if run.itl_s.size \
        else (float("nan"), float("nan"))
    extra = {}
    if attainment:  # DistServe's SLO: at least pct % of requests within every bound (TTFT and TPOT)
        att = run.summary(slo[0], slo[1])["slo"]["attainment"]
        meets, extra = att >= pct / 100.0, {"attainment": att}
    else:
        meets = _meets(slo, t_p, o_p, i_p, headroom)
    tpot50 = q(tpot_f, 50)
    row = _row(lay, simulated=True, ttft_p50_s=q(ttft, 50), ttft_pct_s=t_p, tpot_p50_s=tpot50, tpot_pct_s=o_p,
               itl_p50_s=i50, itl_pct_s=i_p,
               throughput_tok_s=tok_s, throughput_per_gpu=tok_s / lay.gpus,
               tok_s_per_user=(1.0 / tpot50) if tpot50 > 0 else float("nan"), meets_slo=bool(meets),
               preemptions=int(d["preemptions"].sum()), steps=int(run.n_steps), kv_blocks=int(blocks), **extra)
    # the limiting term comes from steptime's own terms; a peer's timer (DistServe's) has none
    row["limiting"] = _limiting(lay, run, timer, row) if isinstance(timer, StepTimer) else None
    return row


def _meets(slo, ttft_p, tpot_p, itl_p, headroom: float = 0.0) -> bool:
    """Whether the percentiles meet the SLO (TTFT, TPOT[, ITL]) with `headroom` to spare: each simulated value
    times (1 + headroom) within its bound; a bound of None is not set."""
    slo = tuple(slo) + (None,) * (3 - len(slo))
    k = 1.0 + headroom
    return bool(all(b is None or v * k <= b for b, v in zip(slo, (ttft_p, tpot_p, itl_p))))


def check_headroom(headroom) -> float:
    """`headroom` as a float in [0, 1), or a PlanError saying why not."""
    if not is_real(headroom) or not 0 <= headroom < 1:
        raise PlanError(f"headroom must be a fraction in [0, 1) of each SLO bound (got {headroom!r}; e.g. 0.05 "
                        "asks every simulated percentile to sit 5 % inside its bound)")
    return float(headroom)


def error_band(errors, quantile: float = 0.8) -> float:
    """The headroom a pick needs for the simulated latency to stay within the SLO in `quantile` of cases, read from
    held-out errors of OTHER cases (never the case being planned): `errors` are measured / predicted - 1 of a
    latency (positive: the prediction was too fast); the band is their `quantile` (1.0: the worst), at least 0
    (a predictor that runs slow is not given a looser SLO). Refuses empty, non-finite or out-of-range input."""
    if not is_real(quantile) or not 0 < quantile <= 1:
        raise PlanError(f"error band quantile must be in (0, 1] (got {quantile!r})")
    try:
        e = np.asarray(errors, dtype=float).ravel()
    except (TypeError, ValueError):
        raise PlanError("error band: errors must be numbers (measured / predicted - 1)") from None
    if e.size == 0:
        raise PlanError("error band: no held-out errors to read a band from")
    if not np.isfinite(e).all() or (e <= -1).any():
        raise PlanError("error band: every error must be finite and above -1 (measured / predicted - 1)")
    return float(max(0.0, np.quantile(e, quantile)))


def _limiting(lay, run, timer, row) -> str:
    """The term that dominates a typical decode step of this layout (compute, memory bandwidth,
    all-reduce, host), or KV capacity when requests were preempted for want of KV blocks."""
    if row["preemptions"] > 0:
        return "KV capacity"
    d = run.requests
    inst = lay.decode if lay.prefill else lay.replicas * lay.dp
    # Little's law per decode instance: requests in flight = request rate x time in system
    rate = len(d) / max(run.makespan_s - float(d["arrival_s"].min()), 1e-9) / inst
    dec_time = np.nan_to_num(d["finish_s"] - d["first_token_s"]).mean()
    n = int(min(max(1, round(rate * max(dec_time, 1e-9))), lay.max_num_seqs))
    kv = int(d["prompt_tokens"].mean() + d["output_tokens"].mean() / 2)
    r = predict_steps(timer.model, timer.gpu, np.zeros(n, dtype=np.int64), np.ones(n), np.full(n, kv), 1,
                      tp=timer.tp, engine=timer.engine, dtype=timer.dtype, constants=timer.constants,
                      **({"ep": timer.ep} if getattr(timer, "moe", False) else {}))
    terms = {k: float(v[0]) for k, v in r["terms_ms"].items()}
    cb = {k: bool(v[0]) for k, v in r["compute_bound"].items()}
    comm = ("allreduce", "moe_a2a")
    groups = {"all-reduce": terms.get("allreduce", 0.0),
              "host": sum(v for k, v in terms.items() if k not in GPU_TERMS)}  # steptime.step's split
    if "moe_a2a" in terms:
        groups["all-to-all"] = terms["moe_a2a"]
    groups["compute"] = sum(v for k, v in terms.items() if cb.get(k) and k not in comm)
    groups["memory bandwidth"] = sum(v for k, v in terms.items() if k in cb and not cb[k] and k not in comm)
    return max(groups, key=groups.get)


# -- the search -----------------------------------------------------------------------------
@dataclass
class PlanResult:
    rows: list = field(default_factory=list)  # every evaluated layout (simulated or dropped)
    interrupted: bool = False
    slo: tuple = (None, None, None)  # TTFT, TPOT, ITL (time between tokens) bounds, seconds
    percentile: float = 90.0
    prices: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    wall_s: float = 0.0

    def priced(self):
        for r in self.rows:
            p = self.prices.get(r["gpu"])
            r["usd_per_gpu_hour"] = p["usd_per_gpu_hour"] if p else None
            ok = r.get("simulated") and p and r["throughput_tok_s"] > 0
            r["usd_per_m_output_tokens"] = (p["usd_per_gpu_hour"] * r["gpus"] / 3600.0 / r["throughput_tok_s"] * 1e6
                                            if ok else None)
            r["uncalibrated"] = r["gpu"] in self.uncalibrated
        return self

    uncalibrated: frozenset = frozenset()
    objective: str = "cost"
    headroom: float = 0.0  # each simulated percentile x (1 + headroom) must meet its bound (plan's docstring)
    moe_kernels: dict = field(default_factory=dict)  # an MoE model: engine -> whose fused-MoE laws priced its experts

    def searched_cells(self, engine: str) -> list[tuple]:
        """(gpu, dtype, ep) of the layouts searched under `engine` that the step timer priced (not dropped; every
        one where all were dropped): the cells whose routed-expert law the report names (moe_step.moe_law_text)."""
        rows = [r for r in self.rows if r["engine"] == engine]
        priced = [r for r in rows if r.get("dropped") is None] or rows
        return list(dict.fromkeys((r["gpu"], r["dtype"], r.get("ep", 1)) for r in priced))

    def ranked(self) -> list[dict]:
        ok = [r for r in self.rows if r.get("meets_slo")]
        if self.objective == "max_rate":  # rate per GPU (per dollar where priced), then fewer GPUs, then name
            def per(r):
                p = r.get("usd_per_gpu_hour")
                return r["max_rate_per_gpu"] / p if p else r["max_rate_per_gpu"]

            return sorted(ok, key=lambda r: (r.get("usd_per_gpu_hour") is None, -per(r), r["gpus"], r["layout"]))
        # cost (rounded to 0.1 %: equal-cost layouts then rank on GPUs and latency), GPUs, TTFT, TPOT
        def key(r):
            c = r["usd_per_m_output_tokens"]
            return (c is None, float(f"{c:.3g}") if c else 0.0, r["gpus"], r["ttft_pct_s"], r["tpot_pct_s"], r["layout"])

        return sorted(ok, key=key)

    def with_slo(self, slo_ttft_s=None, slo_tpot_s=None, slo_itl_s=None, headroom=None) -> "PlanResult":
        """The same simulated layouts judged against another SLO at the same percentile (the
        simulations do not depend on the SLO; only the pruning of a non-exhaustive search does,
        so use this on an exhaustive one), with `headroom` (default: this result's)."""
        from dataclasses import replace

        if self.objective != "cost":
            raise PlanError("with_slo re-judges a cost search; a max-rate scan depends on its SLO: search again")
        h = self.headroom if headroom is None else check_headroom(headroom)
        if h and any("attainment" in r for r in self.rows):
            raise PlanError("headroom applies to percentile SLOs; this search judged SLO attainment")
        slo = (slo_ttft_s, slo_tpot_s, slo_itl_s)
        rows = [dict(r, meets_slo=_meets(slo, r["ttft_pct_s"], r["tpot_pct_s"], r["itl_pct_s"], h))
                if r.get("simulated") else dict(r) for r in self.rows]
        return replace(self, rows=rows, slo=slo, headroom=h)

    def simulated(self) -> list[dict]:
        return [r for r in self.rows if r.get("simulated")]

    def dropped(self) -> list[dict]:
        return [r for r in self.rows if r.get("dropped")]

    def pruned(self) -> list[dict]:
        return [r for r in self.rows if r.get("pruned")]


def plan(model, workload, *, slo_ttft_s=None, slo_tpot_s=None, slo_itl_s=None, percentile: float = 90.0,
         gpus=("h100-sxm",),
         engines=("vllm",), max_gpus: int = 8, prices=None, jobs: int | None = None, progress: bool = False,
         constants=None, tps=DEFAULT_TP, seqs=DEFAULT_SEQS, budgets=DEFAULT_BUDGETS, dtypes=("bf16", "fp8"),
         disagg: bool = True, exhaustive: bool = False, on_progress=None, eps=None, share: bool = True,
         objective: str = "cost", rates=None, seed: int = 0, attainment: bool = False, kv_blocks: int | None = None,
         timer_factory=None, replicas=REPLICAS, pools=DISAGG, prune_across_gpus: bool = False,
         headroom: float = 0.0, moe_kernels: str | None = None) -> PlanResult:
    """Search layouts for `workload` (a steptime.serve.Workload); see the module docstring.

    `objective="max_rate"` asks another question of the same search: the largest request rate each layout
    serves within the SLO. `rates` (requests/s per GPU, scanned in ascending order up to the first that
    fails) replace the workload's arrivals: at rate r a layout of g GPUs gets Poisson arrivals at r x g
    (seeded by `seed`) for the workload's requests. Layouts rank by that rate per GPU (per dollar where
    priced). `attainment=True` judges the SLO as DistServe does: at least `percentile` % of requests within
    every bound (not each bound's percentile). `kv_blocks` fixes the KV capacity of every instance (blocks
    of 16 tokens; default: the memory model). `timer_factory(model, gpu, tp=)` gives the step timer of each
    (GPU, tp) group (a peer's, e.g. DistServe's fitted model; default steptime's StepTimer). `replicas` and
    `pools` (prefill, decode instance pairs) are the aggregated and disaggregated instance counts searched.
    `prune_across_gpus` also skips layouts of one GPU type that cost more, at the workload's throughput
    ceiling, than a layout of another type already met (Bound): the overall pick is the same, but each GPU
    type's own best layout may then go unsimulated.

    `headroom` (a fraction, default 0): a layout meets the SLO only if every simulated percentile times
    (1 + headroom) is within its bound, a margin for the step predictor's own error. The default adds none: the
    error differs by engine and workload (E2.13 reads a band from held-out serving rows with `error_band`); give
    the band of your engine and GPU family where you have one.

    `moe_kernels` (a mixture-of-experts model only; one of moe_step.moe_kernel_choices()): whose fused-MoE laws
    price the routed experts under every engine searched (Engine.with_moe_kernels); None: each profile's own
    moe.kernels. The result's `moe_kernels` says which priced them, per engine.

    `share=False` simulates every layout on its own even where its knobs do not bind (see evaluate_group;
    the answers are the same, bit for bit: tests/test_plan.py).
    `prices`: a dict from load_prices (default: the shipped table). An unknown GPU is refused
    (PlanError naming it); a Ctrl-C stops the search and returns what was evaluated (interrupted=True).
    """
    import time

    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    t0 = time.perf_counter()
    if slo_ttft_s is None and slo_tpot_s is None and slo_itl_s is None:
        raise PlanError("give an SLO: --slo-ttft-ms and/or --slo-tpot-ms")
    for what, v in (("TTFT", slo_ttft_s), ("TPOT", slo_tpot_s), ("time-between-tokens", slo_itl_s)):
        if v is not None and not (is_real(v) and v > 0):
            raise PlanError(f"the {what} SLO must be a time > 0 (got {v!r})")
    if not (is_real(percentile) and 0 < percentile <= 100):
        raise PlanError(f"--percentile must be in (0, 100] (got {percentile!r})")
    if not isinstance(workload, Workload):
        raise PlanError("workload must be a steptime.serve.Workload")
    if objective not in ("cost", "max_rate"):
        raise PlanError(f"unknown objective {objective!r} (known: cost, max_rate)")
    if objective == "max_rate":
        ok = rates is not None and len(rates) and all(is_real(r) and r > 0 for r in rates)
        if not ok:
            raise PlanError("--max-rate needs request rates per GPU > 0 to scan (e.g. 0.25,0.5,1,2)")
        if workload.concurrency:
            raise PlanError("--max-rate scans open-loop arrival rates: give lengths, not a closed loop")
        rates = tuple(sorted(float(r) for r in rates))
    headroom = check_headroom(headroom)
    if attainment and headroom:
        raise PlanError("headroom applies to percentile SLOs; SLO attainment counts requests within the bounds "
                        "(drop --attainment or --headroom)")
    if attainment and slo_itl_s is not None:
        raise PlanError("SLO attainment counts requests within TTFT and TPOT; a time-between-tokens SLO is a "
                        "percentile of every gap (drop --attainment or --slo-itl-ms)")
    if kv_blocks is not None and not (isinstance(kv_blocks, int) and kv_blocks >= 1):
        raise PlanError(f"kv_blocks must be a whole number >= 1 (got {kv_blocks!r})")
    if not (isinstance(max_gpus, int) and 1 <= max_gpus <= MAX_INSTANCES):
        raise PlanError(f"--max-gpus must be a whole number in [1, {MAX_INSTANCES}] (got {max_gpus!r})")
    if rates is not None and objective == "max_rate":
        from steptime.serve.workload import MAX_RATE, TIME_RESOLUTION_S

        # a layout of g GPUs draws Poisson arrivals at rate x g: the fastest must stay a rate the clock resolves
        if rates[-1] * max_gpus > MAX_RATE:
            raise PlanError(f"--max-rate {rates[-1]:g} requests/s per GPU: a layout of {max_gpus} GPUs (--max-gpus) "
                            f"draws {max_gpus} times that, a mean inter-arrival time below the simulator's time "
                            f"resolution ({TIME_RESOLUTION_S:.3g} s): at most {MAX_RATE / max_gpus:.3g} per GPU")
    if jobs is not None and not (isinstance(jobs, int) and not isinstance(jobs, bool) and 1 <= jobs <= MAX_JOBS):
        raise PlanError(f"--jobs must be a whole number >= 1 of worker processes, at most {MAX_JOBS} (got {jobs!r})")
    for what, v in (("gpus", gpus), ("engines", engines), ("dtypes", dtypes), ("tp degrees", tps),
                    ("max_num_seqs values", seqs), ("token budgets", budgets)):
        if isinstance(v, str) or not hasattr(v, "__len__") or not len(v):  # a string: searched letter by letter
            raise PlanError(f"{what} to search must be a non-empty list (got {v!r})")
    for what, v in (("tp degrees", tps), ("max_num_seqs values", seqs), ("token budgets", budgets)):
        for x in v:  # whole numbers >= 1: 1.5 or -5 would be dropped or skipped without a word
            as_int(x, f"{what} to search: entry", 1, error=PlanError)
    for flag, v in (("progress", progress), ("disagg", disagg), ("exhaustive", exhaustive), ("share", share),
                    ("attainment", attainment), ("prune_across_gpus", prune_across_gpus)):
        check_bool(v, flag, PlanError)  # a string such as "no" would read as true
    seed = as_int(seed, "seed", 0, error=PlanError)  # 1.5 was truncated to 1
    if rates is not None and objective != "max_rate":  # only the max_rate objective scans them
        raise PlanError(f"rates apply to objective='max_rate' (--max-rate), not objective={objective!r}")
    replicas = _check_counts(replicas, "replica counts", empty=True)
    pools = _check_pools(pools)
    if eps is not None:
        eps = _check_counts(eps, "expert-parallel degrees")
    if min(tps) > max_gpus:  # no instance fits: the search would try nothing and say no reason
        raise PlanError(f"tp degrees to search ({', '.join(map(str, tps))}) all exceed --max-gpus {max_gpus}: no "
                        f"instance fits")
    m = get_model(model)
    if eps is not None and not is_moe(m):  # layouts() searches them for a mixture-of-experts model only
        raise PlanError(f"expert-parallel degrees (eps) apply to mixture-of-experts models; {m.key} is dense")
    if moe_kernels is not None:
        from steptime.moe_step import check_moe_kernels

        moe_kernels = check_moe_kernels(moe_kernels, m, "--moe-kernels", PlanError)
        if timer_factory is not None:  # a peer's timer prices its own steps: the option would be ignored
            raise PlanError(f"--moe-kernels {moe_kernels} applies to steptime's step timer, not a timer_factory's")
    if is_moe(m):
        from steptime.moe_step import MOE_DTYPES as known_dtypes
    else:
        from steptime.specs.engines import DTYPES as known_dtypes
    for d in dtypes:  # a typo would drop every layout of it, one by one, for the same reason
        check_choice(d, f"dtype to search for {m.key}", known_dtypes)
    known = []
    for g in gpus:  # a typo is refused, as an engine's or a dtype's: left out with a note (until wave 39), it narrowed
        try:        # the search without a word on the exit code, and the plan's "best" was the best of the rest
            known.append(get_gpu(g).key)
        except SteptimeError as exc:
            raise PlanError(f"GPU to search (--gpus): {exc}") from None
    for what, v in (("gpus", known),
                    ("engines", [get_engine(e).key for e in engines]), ("dtypes", dtypes), ("tp degrees", tps),
                    ("max_num_seqs values", seqs), ("token budgets", budgets)):
        _check_distinct(v, what)
    res = PlanResult(slo=(slo_ttft_s, slo_tpot_s, slo_itl_s), percentile=float(percentile), objective=objective,
                     headroom=headroom)
    res.prices = load_prices() if prices is None else _check_prices(prices)
    constants = constants or Constants.default()
    res.uncalibrated = frozenset(uncalibrated_gpus(known, constants))
    for k in sorted(res.uncalibrated):
        res.notes.append(f"{k}: uncalibrated (no deploy readings: datasheet and {get_gpu(k).architecture} family "
                         "constants only)")
    for k in known:
        if k not in res.prices:
            res.notes.append(f"{k}: no price in the price table: its layouts are reported unpriced")
    cand, dropped = layouts(m, known, engines=engines, max_gpus=max_gpus, tps=tps, seqs=seqs, budgets=budgets,
                            dtypes=dtypes, disagg=disagg, eps=eps, replicas=replicas, pools=pools)
    res.rows += [_row(x, dropped=why) for x, why in dropped]
    search = {"objective": objective, "rates": rates, "seed": int(seed), "attainment": bool(attainment),
              "kv_blocks": kv_blocks, "timer_factory": timer_factory, "headroom": headroom,
              "moe_kernels": moe_kernels}
    if is_moe(m) and timer_factory is None:
        res.moe_kernels = {k: moe_kernels or constants.engine(k).moe_kernels()
                           for k in dict.fromkeys(get_engine(e).key for e in engines)}
    groups: dict = {}
    for x in cand:
        groups.setdefault((x.gpu, x.tp, x.engine, x.dtype, x.ep), []).append(x)
    wl_arrays = (workload.arrival, workload.prompt, workload.output)
    slo = (slo_ttft_s, slo_tpot_s, slo_itl_s)
    mm = m.key if m.key in _model_keys() else m
    price = {k: (res.prices[k]["usd_per_gpu_hour"] if k in res.prices else None) for k in known}
    span = float(workload.arrival.max() - workload.arrival.min()) if len(workload) else 0.0
    t_max = float(workload.output.sum()) / span if (span > 0 and not workload.concurrency
                                                     and objective == "cost") else math.inf

    def task(key, lays, bound):
        g, tp, e, dt, _ep = key  # one task per step timer (its ep: lays[0].ep)
        return (mm, g, tp, e, dt, constants, wl_arrays, workload.concurrency, lays, slo, float(percentile),
                exhaustive, share, bound, price[g], search)

    # two waves, so that the result does not depend on which worker finishes first: the groups of the fewest
    # GPUs per instance first, then the rest with what the first wave met (Bound): whole groups the first
    # wave already dominates are pruned here without starting a worker
    least = min((lays[0].gpus_per_instance for lays in groups.values()), default=1)
    waves = [[k for k in groups if groups[k][0].gpus_per_instance == least],
             [k for k in groups if groups[k][0].gpus_per_instance != least]]
    jobs = max(1, int(jobs or min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2, 8)))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cand), unit="layout", desc="plan", leave=False, mininterval=0.5)
    ex = ProcessPoolExecutor(max_workers=jobs, initializer=_ignore_sigint) if jobs > 1 else None

    def take(rows):
        res.rows += rows
        if bar is not None:
            bar.update(len(rows))
            # the ranking is by cost: price the rows so far first (the final rows are priced on return)
            best = res.priced().ranked() if any(r.get("meets_slo") for r in rows) else None
            if best:
                bar.set_postfix_str(f"best so far {best[0]['layout']}", refresh=False)
        if on_progress:
            on_progress(res)

    try:
        for wave in waves:
            bound = Bound(across=prune_across_gpus)
            if not exhaustive:
                for r in res.rows:
                    if r.get("meets_slo"):
                        bound.price = price.get(r["gpu"])
                        bound.met(_layout_of(r), r["throughput_tok_s"])
            tasks = []
            for k in wave:
                lays, here = [], Bound.of(bound, k[0], price[k[0]])
                for x in groups[k]:
                    why = None if exhaustive else here.dominates(x, t_max)
                    (lays.append(x) if not why else res.rows.append(_row(x, pruned=why)))
                if bar is not None:
                    bar.update(len(groups[k]) - len(lays))
                if lays:
                    tasks.append(task(k, lays, bound))
            tasks.sort(key=lambda t: -len(t[8]))  # largest first: the cores finish together
            if ex is None:
                for t in tasks:
                    take(evaluate_group(*t))
            else:
                pending = {ex.submit(evaluate_group, *t) for t in tasks}
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        take(f.result())
    except KeyboardInterrupt:
        res.interrupted = True
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)
            ex = None
    finally:
        if ex is not None:
            ex.shutdown()
        if bar is not None:
            bar.close()
    res.wall_s = time.perf_counter() - t0
    return res.priced()


def _layout_of(row: dict) -> Layout:
    """The Layout of a result row."""
    return Layout(**{k: row[k] for k in ("gpu", "tp", "engine", "dtype", "max_num_seqs", "max_num_batched_tokens",
                                          "replicas", "prefill", "decode")}, ep=row.get("ep", 1))


def uncalibrated_gpus(keys, constants) -> list[str]:
    """The GPUs among `keys` without deploy readings of their own in `constants` (no `gpu.<key>` scope):
    predicted from the datasheet and their family's constants, labelled `uncalibrated` in every output."""
    return [k for k in keys if not constants.calibrated(k)]


def _model_keys():
    return {**model_table(), **moe_model_table()}  # a table key travels to the workers by name


# -- explanations ---------------------------------------------------------------------------
def why_runner_up_lost(best: dict, second: dict) -> str:
    """One line: what makes the runner-up cost more (GPUs, price per GPU-hour, throughput)."""
    cb, cs = best.get("usd_per_m_output_tokens"), second.get("usd_per_m_output_tokens")
    if cb is None or cs is None:
        return f"needs {second['gpus']} GPUs against {best['gpus']}" if second["gpus"] > best["gpus"] else \
            "ranked after on GPUs and throughput per GPU (unpriced)"
    parts = []
    f_gpu = second["gpus"] / best["gpus"]
    f_price = second["usd_per_gpu_hour"] / best["usd_per_gpu_hour"]
    f_tput = best["throughput_tok_s"] / second["throughput_tok_s"]
    if abs(f_gpu - 1) > 1e-9:
        parts.append((f_gpu, f"{second['gpus']} GPUs against {best['gpus']}"))
    if abs(f_price - 1) > 1e-9:
        parts.append((f_price, f"${second['usd_per_gpu_hour']:.2f} against ${best['usd_per_gpu_hour']:.2f} "
                               "per GPU-hour"))
    if abs(f_tput - 1) > 1e-3:
        parts.append((f_tput, f"{second['throughput_tok_s']:.0f} against {best['throughput_tok_s']:.0f} output tok/s"))
    parts.sort(key=lambda p: -abs(math.log(p[0])))
    if abs(cs / cb - 1) < 1e-3 and second["gpus"] == best["gpus"] and \
            second["ttft_pct_s"] == best["ttft_pct_s"] and second["tpot_pct_s"] == best["tpot_pct_s"]:
        diff = [k for k in ("tp", "replicas", "prefill", "decode", "engine", "dtype", "max_num_seqs",
                            "max_num_batched_tokens") if second[k] != best[k]]
        return (f"a tie: the same simulated numbers; it differs only in {', '.join(diff)}, which does not bind "
                "on this workload (ranked by name)")
    if abs(cs / cb - 1) < 1e-3 and second["gpus"] == best["gpus"]:
        return (f"same cost and GPUs; slower: TTFT {second['ttft_pct_s'] * 1e3:.1f} against "
                f"{best['ttft_pct_s'] * 1e3:.1f} ms, TPOT {second['tpot_pct_s'] * 1e3:.2f} against "
                f"{best['tpot_pct_s'] * 1e3:.2f} ms (at the SLO percentile)")
    why = "; ".join(t for _, t in parts) or "equal cost, ranked on GPUs and latency"
    return f"costs {cs / cb - 1:+.1%} per million output tokens ({why})"


def to_doc(res: PlanResult, top: int = 5) -> dict:
    if not (isinstance(top, int) and not isinstance(top, bool) and top >= 1):
        raise PlanError(f"top must be a whole number >= 1 of layouts listed (got {top!r})")
    best = res.ranked()
    doc = {"simulated": True, "objective": res.objective, "percentile": res.percentile, "headroom": res.headroom,
           "slo": {"ttft_s": res.slo[0], "tpot_s": res.slo[1], "itl_s": res.slo[2] if len(res.slo) > 2 else None},
           "evaluated": len(res.rows), "simulated_layouts": len(res.simulated()), "dropped": len(res.dropped()),
           "pruned": len(res.pruned()),
           "meeting_slo": len(best), "interrupted": res.interrupted, "wall_s": res.wall_s,
           "notes": res.notes, "best": best[:top], **({"moe_kernels": res.moe_kernels} if res.moe_kernels else {}),
           "prices": {k: v for k, v in res.prices.items() if any(r["gpu"] == k for r in res.rows)}}
    if len(best) > 1 and res.objective == "max_rate":
        doc["runner_up_lost"] = (f"serves {best[1]['max_rate_per_gpu']:g} against {best[0]['max_rate_per_gpu']:g} "
                                 "req/s per GPU within the SLO (simulated)")
    elif len(best) > 1:
        doc["runner_up_lost"] = why_runner_up_lost(best[0], best[1])
    return doc


def frontier_figure(res: PlanResult, stem) -> list:
    """Throughput per GPU against tokens/s per user, one curve (Pareto front) per GPU x engine,
    the TPOT SLO marked as the interactivity it implies. PNG + PDF at `stem`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    sims = res.simulated()
    for key in sorted({(r["gpu"], r["engine"]) for r in sims}):
        pts = sorted(((r["tok_s_per_user"], r["throughput_per_gpu"]) for r in sims
                      if (r["gpu"], r["engine"]) == key and np.isfinite(r["tok_s_per_user"])), reverse=True)
        front, best = [], -1.0
        for x, y in pts:  # keep points no faster layout beats on throughput per GPU
            if y > best:
                front.append((x, y))
                best = y
        if front:
            xs, ys = zip(*sorted(front))
            ax.plot(xs, ys, marker="o", ms=3, label=f"{key[0]} ({key[1]})")
    if res.slo[1]:
        ax.axvline(1.0 / res.slo[1], color="k", ls="--", lw=1, label=f"TPOT SLO {res.slo[1] * 1e3:g} ms")
    ax.set_xlabel("tokens/s per user (1 / median TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title("simulated frontier (steptime plan)", loc="left")
    ax.legend(fontsize=7)
    stem = Path(stem)
    out = []
    from steptime.io import atomic_path

    for ext in (".png", ".pdf"):
        p = stem.with_suffix(ext)
        with atomic_path(p) as tmp:  # whole or not at all
            fig.savefig(tmp, format=ext[1:], dpi=150, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out
