"""`steptime serve`: simulate a workload on a model, GPU, engine and scheduler policy.

    steptime serve --model llama-3.1-8b --gpu h100-sxm --trace splitwise_conv --n 2000
    steptime serve --model llama-3.1-8b --gpu h100-sxm --rate 8 --isl 128:2048 --osl 16:512 --n 1000 --json
    steptime serve --model llama-3.1-8b --gpu h100-sxm --concurrency 32 --isl 1024 --osl 256 --policy sarathi --chunk 512
    steptime serve ... --policy disagg --prefill-instances 1 --decode-instances 2
    steptime serve ... --csv requests.csv --fig serve.png --slo-ttft-ms 500 --slo-tpot-ms 50

Every number it prints is simulated (scheduler model + predicted step times).
"""

from __future__ import annotations

# Imports stay inside each command function: a CLI command loads only what it runs.

import sys
from pathlib import Path

import numpy as np

from steptime.errors import ServeError
from steptime.serve.sim import VLLM_DEFAULTS

TRACES = ("splitwise_conv", "splitwise_code", "arxiv")
PROGRESS_MIN = 5000  # requests from which a progress bar is shown ...
PROGRESS_MIN_STEPS = 100_000  # ... or simulated iterations (a lower bound: workload.min_steps)
# The most engine iterations one run may need. ASSUMED: at ~30 us a simulated iteration (one
# request's prefill chunk at a time) 10**8 iterations is close to an hour; a budget that needs
# more (e.g. --max-num-batched-tokens 1 --max-num-seqs 1 --isl 100000, 10**8 prefill chunks)
# is refused before the run starts.
MAX_SIM_STEPS = 10**8


def bound_help() -> dict:
    """{option: the sentence of its --help that states its upper bound}, from the constants that enforce them
    (serve.workload, validation; wave 41's bounds, documented by docs11); shared with `steptime plan`."""
    from steptime.serve.workload import MAX_RATE, MAX_WORKLOAD_REQUESTS, TIME_RESOLUTION_S
    from steptime.validation import MAX_REQUESTS

    clock = f"the simulator clock's resolution, {TIME_RESOLUTION_S:.3g} s over its horizon"
    return {"rate": f"Poisson arrivals, requests/s: > 0, at most {MAX_RATE:.3g} (a mean gap above {clock})",
            "concurrency": f"at most {MAX_WORKLOAD_REQUESTS:.0e}, the most requests a workload holds",
            "time_scale": f"> 0; a trace's mean gap times it stays above {clock}",
            "step": f"at most {MAX_REQUESTS:,}, the most requests one step is priced for"}


def add_parser(sub) -> None:
    from steptime.moe_step import MOE_DTYPES

    bounds = bound_help()
    s = sub.add_parser("serve", help="simulate serving a workload (TTFT, TPOT, throughput; simulated)")
    s.add_argument("--model", required=True, help="model key, HF id, or path to config.json")
    s.add_argument("--gpu", required=True, help="GPU key or alias (see `steptime gpus`)")
    s.add_argument("--engine", default=None, help="engine profile (default vllm; see `steptime engines`)")
    s.add_argument("--dtype", default=None, choices=MOE_DTYPES,  # every MoE dtype predict takes (mxfp4_mxfp8, docs11)
                   help="projection GEMM precision (dense: bf16 or fp8); for a mixture-of-experts model the expert "
                        "weights' dtype, what each runs and on which GPUs as `steptime predict --help` says "
                        "(default: a config.json's quantization_config, else bf16)")
    s.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"], help="KV-cache precision (default "
                   "%(default)s)")
    s.add_argument("--tp", type=int, default=1, help="tensor-parallel degree, GPUs per instance (default %(default)s)")
    s.add_argument("--ep", type=int, default=1,
                   help="expert-parallel degree (MoE models): an instance is ep GPUs, ep / tp attention data-parallel "
                        "ranks sharing the experts (default %(default)s)")
    s.add_argument("--policy", default="vllm", choices=["vllm", "sarathi", "static", "disagg"],
                   help="vllm: continuous batching under --max-num-batched-tokens with the engine profile's schedule "
                        "(engines.yaml schedule: chunked prefill, prefill mixed into decode steps, prefix caching of "
                        "a preempted request's blocks); sarathi: a fixed chunk; static: whole batches; disagg: "
                        "prefill and decode pools (default %(default)s)")
    s.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help=f"token budget of one engine step, tokens (--policy vllm or disagg; default "
                        f"{VLLM_DEFAULTS['max_num_batched_tokens']})")
    s.add_argument("--max-num-seqs", type=int, default=256, help=f"most requests running at once, {bounds['step']} "
                                                                           "(default %(default)s)")
    s.add_argument("--chunk", type=int, default=None, help="sarathi chunk (token budget per step; --policy sarathi)")
    s.add_argument("--batch", type=int, default=None, help=f"static batch size (--policy static), {bounds['step']}")
    s.add_argument("--block-size", type=int, default=16,
                   help="KV-cache block size, tokens; one the engine takes (`steptime engines`; default %(default)s)")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="fraction in (0, 1] of the GPU's memory the engine may use (default %(default)s)")
    s.add_argument("--kv-blocks", type=int, default=None,
                   help="override the KV block count (at most what the GPU's memory holds after the weights)")
    s.add_argument("--replicas", type=int, default=1, help="identical instances behind a round-robin router "
                   "(default %(default)s)")
    s.add_argument("--prefill-instances", type=int, default=None, help="prefill pool instances (--policy disagg; "
                                                                         "default 1)")
    s.add_argument("--decode-instances", type=int, default=None, help="decode pool instances (--policy disagg; "
                                                                        "default 1)")
    w = s.add_argument_group("workload")
    w.add_argument("--trace", help=f"a trace of results/data/traces.parquet ({', '.join(TRACES)}) or a "
                                   "csv/parquet file with arrival, prompt and output token columns")
    w.add_argument("--n", type=int, default=None, help="first N requests (synthetic: how many; default 1000)")
    w.add_argument("--rate", type=float, default=None, help=bounds["rate"])
    w.add_argument("--concurrency", type=int, default=None,
                   help="closed loop with this many requests in flight in total (with --replicas R, split "
                        f"across the replicas: C // R each, the remainder one more on the first ones), "
                        f"{bounds['concurrency']}")
    w.add_argument("--isl", default="1024", help="input length, tokens: N or LO:HI (uniform; default %(default)s)")
    w.add_argument("--osl", default="256", help="output length, tokens: N or LO:HI (uniform; default %(default)s)")
    w.add_argument("--time-scale", type=float, default=None,
                   help=f"stretch a trace's recorded arrivals (with --trace, default 1): {bounds['time_scale']}")
    w.add_argument("--seed", type=int, default=0, help="random seed of the synthetic workload (default %(default)s)")
    s.add_argument("--slo-ttft-ms", type=float, default=None, help="time-to-first-token SLO, ms (default: none)")
    s.add_argument("--slo-tpot-ms", type=float, default=None, help="time-per-output-token SLO, ms (default: none)")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.add_argument("--csv", metavar="FILE", help="write the per-request table to a .csv file (checked writable before the run)")
    s.add_argument("--fig", metavar="FILE.png", help="write a figure of the run: FILE.png and FILE.pdf beside it")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _length(text: str, what: str):
    from steptime.validation import check_tokens

    try:
        if ":" in str(text):
            lo, hi = str(text).split(":", 1)
            if max(len(lo.strip()), len(hi.strip())) > 20:
                raise ServeError(f"--{what} {text[:40]!r}: a number with more than 20 digits")
            out = (check_tokens(int(lo), f"--{what}", ServeError), check_tokens(int(hi), f"--{what}", ServeError))
            if out[0] > out[1]:
                raise ServeError(f"--{what} {text!r}: LO must be <= HI")
        else:
            if len(str(text).strip()) > 20:
                raise ServeError(f"--{what} {text[:40]!r}: a number with more than 20 digits")
            out = check_tokens(int(text), f"--{what}", ServeError)
        if min(np.atleast_1d(out)) < 1:  # wave 39: `--isl 0` was refused as "input length", the flag unnamed
            raise ServeError(f"--{what} {text!r}: a request's length must be >= 1 token")
        return out
    except ServeError:
        raise
    except ValueError:
        raise ServeError(f"--{what} {text!r}: expected N or LO:HI") from None


def _read_trace(path):
    """A trace file as a table, or one line saying why not (not a regular file, too large,
    empty, not CSV/parquet)."""
    import pandas as pd

    from steptime.validation import MAX_TABLE_BYTES, check_regular_file

    p = check_regular_file(path, "--trace", MAX_TABLE_BYTES, ServeError)
    kind = "parquet" if p.suffix == ".parquet" else "CSV"
    errors: tuple = (ValueError, OSError, UnicodeError)
    try:
        import pyarrow

        errors += (pyarrow.ArrowException,)
    except ImportError:  # pragma: no cover
        pass
    try:
        return pd.read_parquet(p) if kind == "parquet" else pd.read_csv(p)
    except errors as exc:
        why = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise ServeError(f"--trace {str(p)!r}: not a readable {kind} trace ({why})") from None


def check_output(flag: str, path: str, suffix: str | None = None) -> Path:
    """Refuse an output path before the simulation runs: a directory, a device or other
    non-regular file (/dev/full), a folder that does not exist or cannot be written (/proc),
    or (`suffix`) a file name with another suffix. A trial file is created and removed."""
    import os
    import stat
    import tempfile

    if not str(path).strip():  # '' would otherwise read as "no file asked for" and the option pass unused
        raise ServeError(f"{flag} {path!r}: expected a file name")
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ServeError(f"{flag} {path!r}: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):  # before the suffix: a folder is not "a file without .csv"
        raise ServeError(f"{flag} {path!r}: is a directory; give a file name")
    if suffix is not None and p.suffix.lower() != suffix:
        raise ServeError(f"{flag} {path!r}: expected a {suffix} file name (got suffix {p.suffix or 'none'!r})")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ServeError(f"{flag} {path!r}: not a regular file (a device, FIFO or socket); give a file name")
    parent = p.resolve().parent
    if not parent.is_dir():
        raise ServeError(f"{flag} {path!r}: its folder does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=parent)
        os.close(fd)
        os.unlink(tmp)
        if st is not None:
            with open(p, "ab"):
                pass
    except OSError as exc:
        raise ServeError(f"{flag} {path!r}: cannot write there ({exc.strerror or exc})") from None
    return p


def workload_from_args(a):
    from steptime.serve import from_table, synthetic
    from steptime.serve.workload import check_rate

    if a.rate is not None:  # the flag named in its one line (wave 41: --rate 1e308 ran, every request at t = 0)
        check_rate(a.rate, "--rate: Poisson arrival rate")

    if a.time_scale is not None and (not a.trace or a.rate is not None):
        # a synthetic workload's arrivals are drawn at --rate, and --rate replaces a trace's recorded ones
        raise ServeError(f"--time-scale {a.time_scale:g} stretches a trace's recorded arrivals: use it with --trace "
                         f"and without --rate{'' if a.trace else ' (no --trace given)'}")
    if a.trace:
        import pandas as pd

        if a.trace in TRACES:
            from steptime.io import find_root

            path = find_root() / "results" / "data" / "traces.parquet"
            if not path.is_file():
                raise ServeError(f"{path}: not built (run `snakemake -j1 {path.relative_to(find_root())}`)")
            df = pd.read_parquet(path)
            df = df[df["trace"].str.startswith(a.trace)]
        else:
            if not Path(a.trace).exists():
                raise ServeError(f"--trace {a.trace!r}: neither a known trace ({', '.join(TRACES)}) nor a file")
            df = _read_trace(a.trace)
        if a.concurrency:
            raise ServeError("--concurrency replaces a trace's arrivals: use it with --isl/--osl, not --trace")
        return from_table(df, name=a.trace, n=a.n, time_scale=1.0 if a.time_scale is None else a.time_scale,
                          rate=a.rate, seed=a.seed)
    return synthetic(1000 if a.n is None else a.n, isl=_length(a.isl, "isl"), osl=_length(a.osl, "osl"), rate=a.rate,
                     concurrency=a.concurrency, seed=a.seed)


def check_budget(wl, budget: int, max_num_seqs: int, chunked: bool, what: str = "--max-num-batched-tokens") -> int:
    """Refuse, before the run, a token budget under which the workload cannot finish: a prompt
    longer than an unchunked budget is never scheduled, and a run needing more than MAX_SIM_STEPS
    iterations would not end in useful time. Returns the lower bound on iterations."""
    from steptime.serve.workload import min_steps

    if not chunked and int(wl.prompt.max()) > budget:
        i = int(np.argmax(wl.prompt))
        raise ServeError(f"{wl.name}: request {i}'s prompt of {int(wl.prompt[i])} tokens exceeds the unchunked "
                         f"prefill budget {what} {budget}: it could never be scheduled")
    steps = min_steps(wl, budget, max_num_seqs)
    if steps > MAX_SIM_STEPS:
        raise ServeError(f"{wl.name}: {len(wl)} requests need at least {steps:,} engine iterations under {what} "
                         f"{budget} and --max-num-seqs {max_num_seqs}, above the limit of {MAX_SIM_STEPS:,}: "
                         f"raise the budget or lower --n")
    return steps


EP_NOTE = ("expert parallelism: the ep / tp attention data-parallel ranks of an instance are simulated as independent "
           "schedulers behind a round-robin router, each step timed as if every rank ran a batch of the same size "
           "(ranks run in lockstep in the engine; load imbalance between them is not represented)")


def ep_ranks(model, gpu, tp: int, ep: int, dtype: str) -> int:
    """Attention data-parallel ranks per instance (ep / tp with expert parallelism, else 1), the layout
    checked with one line: ep > 1 only for a mixture-of-experts model (steptime.moe_step.check_layout)."""
    from steptime.specs import get_gpu, get_model
    from steptime.specs.moe import is_moe

    m = get_model(model)
    if not is_moe(m):
        if ep != 1:
            raise ServeError(f"--ep {ep}: expert parallelism applies to mixture-of-experts models; {m.key} is dense")
        return 1
    from steptime import moe_step

    _, ep, dp, _ = moe_step.check_layout(m, get_gpu(gpu), tp, ep, dtype)
    return dp


def check_policy_options(a) -> None:
    """Refuse an option the chosen --policy does not read (it would be ignored without a word); then give
    --max-num-batched-tokens its default."""
    if a.max_num_batched_tokens is not None and a.policy in ("sarathi", "static"):
        raise ServeError(f"--max-num-batched-tokens {a.max_num_batched_tokens} applies to --policy vllm or disagg, not "
                         f"--policy {a.policy}" + (" (its token budget is --chunk)" if a.policy == "sarathi" else
                                                  " (it runs whole batches: --batch)"))
    if a.max_num_batched_tokens is None:
        a.max_num_batched_tokens = VLLM_DEFAULTS["max_num_batched_tokens"]
    if a.policy == "disagg" and a.replicas != 1:  # simulate_disagg sizes its pools, not replicas of an instance
        raise ServeError(f"--replicas {a.replicas} does not apply to --policy disagg: size its pools with "
                         "--prefill-instances and --decode-instances")
    for flag, value, owner in (("--chunk", a.chunk, "sarathi"), ("--batch", a.batch, "static"),
                               ("--prefill-instances", a.prefill_instances, "disagg"),
                               ("--decode-instances", a.decode_instances, "disagg")):
        if value is not None and a.policy != owner:
            raise ServeError(f"{flag} {value} applies to --policy {owner}, not --policy {a.policy}")
        if value is not None and owner == "disagg" and value < 1:
            raise ServeError(f"{flag} {value}: each pool needs at least one instance")


def run_args(a):
    from steptime.serve import engine_policy, policy, simulate, simulate_disagg, simulate_replicas

    check_policy_options(a)
    wl = workload_from_args(a)
    from steptime.specs import get_model
    from steptime.step import resolve_dtype

    m = get_model(a.model)
    a.dtype_from = ("" if a.dtype is not None or getattr(m, "checkpoint_dtype", None) is None
                    else " weights from the checkpoint's config.json")
    a.dtype = resolve_dtype(m, a.dtype, ServeError)  # a config.json's own precision by default
    from steptime.moe_step import engine_with_kernels
    from steptime.specs.moe import is_moe

    engine = engine_with_kernels(a.engine, getattr(a, "moe_kernels", None), m, flag="--moe-kernels", error=ServeError)
    if is_moe(m):  # whose fused-MoE laws priced the routed experts (the profile's, or --moe-kernels'), for the report
        from steptime.moe_step import moe_law
        from steptime.specs.engines import get_engine

        a.moe_law = get_engine(engine).moe_kernels()
        a.moe_law_dtype, a.moe_law_family = moe_law(a.moe_law, a.dtype, a.gpu, a.ep)  # as predict's
    ekw = dict(tp=a.tp, engine=engine, dtype=a.dtype, kv_dtype=a.kv_dtype)
    ranks = ep_ranks(a.model, a.gpu, a.tp, a.ep, a.dtype)
    if a.ep != 1:
        ekw["ep"] = a.ep
    kw = dict(max_num_seqs=a.max_num_seqs, block_size=a.block_size,
              gpu_memory_utilization=a.gpu_memory_utilization, kv_blocks=a.kv_blocks)
    if a.policy == "disagg":
        from steptime.serve import Policy

        if ranks > 1:
            raise ServeError("--policy disagg with expert parallelism (--ep > --tp) is not simulated: the prefill "
                             "and decode pools' data-parallel ranks are not modelled")
        check_budget(wl, a.max_num_batched_tokens, a.max_num_seqs, False)
        run = simulate_disagg(a.model, a.gpu, wl, **ekw,
                              prefill_instances=1 if a.prefill_instances is None else a.prefill_instances,
                              decode_instances=1 if a.decode_instances is None else a.decode_instances,
                              prefill_policy=Policy("vllm", max_num_batched_tokens=a.max_num_batched_tokens,
                                                    chunked_prefill=False, **kw),
                              decode_policy=Policy("vllm", max_num_batched_tokens=a.max_num_batched_tokens, **kw))
    else:
        if a.policy == "static":
            pol = policy("static", batch=a.max_num_seqs if a.batch is None else a.batch,
                         **{k: v for k, v in kw.items() if k != "max_num_seqs"})
        elif a.policy == "sarathi":
            pol = policy("sarathi", chunk=512 if a.chunk is None else a.chunk, **kw)
        else:
            pol = engine_policy(a.engine, max_num_batched_tokens=a.max_num_batched_tokens, **kw)
        steps = check_budget(wl, pol.budget, pol.max_num_seqs, pol.chunked_prefill,
                             "--chunk" if a.policy == "sarathi" else "--max-num-batched-tokens")
        progress = not a.no_progress and (len(wl) >= PROGRESS_MIN or steps >= PROGRESS_MIN_STEPS)
        if a.replicas != 1 or ranks > 1:  # simulate_replicas refuses fewer than one
            run = simulate_replicas(a.model, a.gpu, wl, pol, a.replicas * ranks, **ekw)
        else:
            run = simulate(a.model, a.gpu, wl, pol, progress=progress, **ekw)
    return wl, run


def cmd_serve(a) -> int:
    from steptime.serve.report import plot_run

    if a.csv is not None:
        check_output("--csv", a.csv, ".csv")  # wave 37: any suffix was taken (CSV bytes in out.parquet), as plan
    if a.fig is not None:
        check_output("--fig", a.fig, ".png")
        check_output("--fig", str(Path(a.fig).with_suffix(".pdf")))
    wl, run = run_args(a)
    ms = lambda v: None if v is None else v / 1e3  # noqa: E731
    summ = run.summary(slo_ttft_s=ms(a.slo_ttft_ms), slo_tpot_s=ms(a.slo_tpot_ms))
    doc = {"simulated": True, "model": a.model, "gpu": a.gpu, "engine": a.engine or "vllm", "tp": a.tp,
           **({"ep": a.ep} if a.ep != 1 else {}), **({"note": EP_NOTE} if a.ep > a.tp else {}),
           **({"moe_kernels": a.moe_law, "moe_kernel_dtype": a.moe_law_dtype,
               "moe_kernel_family": a.moe_law_family} if getattr(a, "moe_law", None)
              else {}),
           "workload": {"name": wl.name, "requests": len(wl), "concurrency": wl.concurrency,
                        "mean_prompt": float(np.mean(wl.prompt)), "mean_output": float(np.mean(wl.output))},
           "policy": run.policy, "summary": summ}
    from steptime.calibration import Constants
    from steptime.specs import get_gpu

    note = Constants.default().calibration_note(get_gpu(a.gpu).key)
    doc["uncalibrated"] = note is not None
    if a.csv:
        from steptime.io import atomic_path

        with atomic_path(a.csv) as tmp:
            run.requests.to_csv(tmp, index=False, chunksize=100_000)  # written in chunks of rows
    if a.fig:
        plot_run(run, Path(a.fig).with_suffix(""), title=f"{a.model} on {a.gpu} (tp={a.tp}), {run.policy['name']}")
    if a.json:
        from steptime.io import dumps

        sys.stdout.write(dumps(doc))
        return 0
    if a.ep > a.tp:  # attention data-parallel ranks (ep / tp > 1) are simulated as separate schedulers
        print(f"note: {EP_NOTE}")
    from steptime.moe_step import moe_law_text

    print(f"{a.model} on {a.gpu} (tp={a.tp}{f', ep={a.ep}' if a.ep != 1 else ''}, engine {a.engine or 'vllm'}, {a.dtype}{getattr(a, 'dtype_from', '')}, policy {run.policy['name']}): {len(wl)} requests "
          f"[{wl.name}], simulated"
          + (f"; routed experts priced with {moe_law_text(a.moe_law, [(a.gpu, a.dtype, a.ep)])}"
             if getattr(a, "moe_law", None) else ""))
    print(f"{'metric':<10}{'p50':>10}{'p90':>10}{'p99':>10}   (ms)")
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        v = summ[key]
        print(f"{key[:-2]:<10}" + "".join(f"{v[p] * 1e3:>10.1f}" if v[p] is not None and np.isfinite(v[p]) else f"{'n/a':>10}"
                                          for p in ("p50", "p90", "p99")))
    print(f"throughput {summ['throughput_tok_s']:.1f} output tok/s, {summ['throughput_req_s']:.3f} req/s; "
          f"{summ['steps']} iterations; KV {summ['kv_blocks']} blocks; {summ['preemptions']} preemptions")
    if "slo" in summ:
        print(f"SLO attainment {summ['slo']['attainment']:.1%}, goodput {summ['slo']['goodput_req_s']:.3f} req/s")
    if note:
        print(f"note: {note}")
    return 0
