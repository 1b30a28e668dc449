"""`steptime plan`: the command line of steptime.plan.

    steptime plan --model llama-3.1-8b --rate 8 --isl 128:2048 --osl 16:512 --n 2000 \
        --slo-ttft-ms 1000 --slo-tpot-ms 50 --gpus h100-sxm,h200-sxm,l40s [--max-gpus 8] \
        [--engines vllm,sglang] [--headroom 0.05] [--prices FILE] [--json] [--csv FILE] [--fig FILE.png]

Every number it prints is simulated (scheduler model + predicted step times), priced at the
price table's per-GPU-hour figures.
"""

from __future__ import annotations

# Imports stay inside each command function: a CLI command loads only what it runs.

import sys
from pathlib import Path

import numpy as np

from steptime.errors import SteptimeError


def add_parser(sub) -> None:
    from steptime.serve.command import bound_help

    bounds = bound_help()
    s = sub.add_parser("plan", help="cheapest layout (GPU, tp, replicas, engine, knobs) meeting an SLO (simulated)")
    s.add_argument("--model", required=True, help="model key, HF id, or path to config.json")
    w = s.add_argument_group("workload (as `steptime serve`)")
    w.add_argument("--trace", default=None, help="a trace name or a csv/parquet file (as `steptime serve`)")
    w.add_argument("--n", type=int, default=None, help="requests (default 2000)")
    w.add_argument("--rate", type=float, default=None, help=bounds["rate"])
    w.add_argument("--concurrency", type=int, default=None,
                   help=f"closed loop: requests in flight in total (split over replicas), {bounds['concurrency']}")
    w.add_argument("--isl", default="1024", help="input length, tokens: N or LO:HI (default %(default)s)")
    w.add_argument("--osl", default="256", help="output length, tokens: N or LO:HI (default %(default)s)")
    w.add_argument("--time-scale", type=float, default=None,
                   help=f"stretch a trace's recorded arrivals (with --trace): {bounds['time_scale']}")
    w.add_argument("--seed", type=int, default=0, help="random seed of the synthetic workload (default %(default)s)")
    s.add_argument("--slo-ttft-ms", type=float, default=None, help="time-to-first-token SLO, ms")
    s.add_argument("--slo-tpot-ms", type=float, default=None, help="time-per-output-token SLO, ms")
    s.add_argument("--slo-itl-ms", type=float, default=None, help="time between tokens (inter-token latency) SLO, ms")
    s.add_argument("--percentile", type=float, default=90.0, help="SLO percentile (default 90)")
    s.add_argument("--headroom", type=float, default=0.0, metavar="FRACTION",
                   help="margin for the predictor's error: a layout meets the SLO only if every simulated percentile "
                        "x (1 + FRACTION) is within its bound (default 0: no margin; E2.13 reads a band of about 0.05 "
                        "from held-out serving rows of other engines, DESIGN.md)")
    s.add_argument("--attainment", action="store_true",
                   help="judge the SLO as DistServe does: at least --percentile %% of requests within every bound")
    s.add_argument("--max-rate", metavar="RATES", default=None,
                   help="another question: the largest request rate per GPU (of these comma-separated req/s/GPU, "
                        "scanned up to the first that fails) each layout serves within the SLO; the workload's "
                        "lengths are replayed with Poisson arrivals at each rate; each rate x --max-gpus within "
                        "--rate's bound")
    s.add_argument("--gpus", default="h100-sxm,h200-sxm,a100-sxm,l40s",
                   help="comma-separated GPU keys (default %(default)s)")
    s.add_argument("--engines", default="vllm", help="comma-separated engine profiles (default %(default)s)")
    s.add_argument("--max-gpus", type=int, default=8, help="most GPUs a layout may use (default %(default)s)")
    s.add_argument("--tp", default=None, help="comma-separated TP degrees (default 1,2,4,8)")
    s.add_argument("--dtypes", default="bf16,fp8", help="comma-separated precisions (default %(default)s): the GEMMs', or an MoE "
                   "model's expert weights, as `steptime predict --dtype` names them (see its --help)")
    s.add_argument("--no-disagg", action="store_true", help="aggregated layouts only")
    s.add_argument("--exhaustive", action="store_true",
                   help="simulate every layout (default: skip layouts provably dearer than a smaller one that meets "
                        "the SLO)")
    s.add_argument("--prices", default=None, help="price table (YAML, as specs/prices.yaml)")
    s.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPUs)")
    s.add_argument("--top", type=int, default=5, help="layouts listed (default %(default)s)")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.add_argument("--csv", metavar="FILE", help="every evaluated layout (simulated and dropped)")
    s.add_argument("--fig", metavar="FILE.png", help="throughput/GPU vs tokens/s/user frontier")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _entries(text, what, expect):
    """The entries of a comma-separated option, stripped; an empty entry between commas (`h100-sxm,,b200`) or an
    option of only commas is refused in one line (wave 37: skipped without a word)."""
    from steptime.plan import PlanError

    v = [x.strip() for x in str(text).split(",")]
    if not any(v):
        raise PlanError(f"--{what} {text!r}: expected comma-separated {expect}")
    if not all(v):
        raise PlanError(f"--{what} {text!r}: entry {v.index('') + 1} is empty (two commas in a row, or one at an "
                        f"end): expected comma-separated {expect}")
    return v


def _ints(text, what):
    from steptime.plan import PlanError

    entries = _entries(text, what, "whole numbers")
    try:
        v = [int(x) for x in entries]
    except ValueError:
        raise PlanError(f"--{what} {text!r}: expected comma-separated whole numbers") from None
    if min(v) < 1:
        raise PlanError(f"--{what} {text!r}: expected whole numbers >= 1")
    return tuple(v)


def _names(text, what):
    """A comma-separated list of names (GPUs, engines, dtypes), or one line saying it or an entry is empty."""
    return _entries(text, what, "names")


def _rates(text):
    from steptime.plan import PlanError

    entries = _entries(text, "max-rate", "request rates per GPU")
    try:
        v = [float(x) for x in entries]
    except ValueError:
        raise PlanError(f"--max-rate {text!r}: expected comma-separated request rates per GPU") from None
    if not all(np.isfinite(x) and x > 0 for x in v):
        raise PlanError(f"--max-rate {text!r}: expected request rates per GPU > 0")
    return v


def _fmt_ms(v):
    return "   n/a" if v is None or not np.isfinite(v) else f"{v * 1e3:8.1f}"


def cmd_plan(a) -> int:
    from steptime.plan import PlanError, frontier_figure, load_prices, plan, to_doc
    from steptime.serve.command import workload_from_args

    from steptime.serve.command import check_output

    if a.csv is not None:
        check_output("--csv", a.csv, ".csv")
    if a.fig is not None:
        check_output("--fig", a.fig, ".png")
        check_output("--fig", str(Path(a.fig).with_suffix(".pdf")))
    if a.top < 1:
        raise PlanError(f"--top {a.top}: must be >= 1 (layouts listed)")
    if a.n is None:
        a.n = 2000
    prices = load_prices(a.prices) if a.prices else None
    wl = workload_from_args(a)
    ms = lambda v: None if v is None else v / 1e3  # noqa: E731
    res = plan(a.model, wl, slo_ttft_s=ms(a.slo_ttft_ms), slo_tpot_s=ms(a.slo_tpot_ms), slo_itl_s=ms(a.slo_itl_ms),
               percentile=a.percentile,
               gpus=_names(a.gpus, "gpus"), engines=_names(a.engines, "engines"), max_gpus=a.max_gpus, prices=prices,
               jobs=a.jobs, progress=not a.no_progress and not a.json,
               tps=_ints(a.tp, "tp") if a.tp else (1, 2, 4, 8),
               dtypes=tuple(_names(a.dtypes, "dtypes")), disagg=not a.no_disagg,
               exhaustive=a.exhaustive, attainment=a.attainment, seed=a.seed, headroom=a.headroom,
               moe_kernels=getattr(a, "moe_kernels", None),
               **({"objective": "max_rate", "rates": _rates(a.max_rate)} if a.max_rate else {}))
    doc = to_doc(res, top=a.top)
    doc.update(model=a.model, workload={"name": wl.name, "requests": len(wl), "concurrency": wl.concurrency,
                                        "mean_prompt": float(np.mean(wl.prompt)),
                                        "mean_output": float(np.mean(wl.output))})
    if a.csv:
        import pandas as pd

        from steptime.io import atomic_path

        with atomic_path(a.csv) as tmp:  # whole or not at all
            pd.DataFrame(res.rows).to_csv(tmp, index=False)
    if a.fig and res.simulated():
        frontier_figure(res, Path(a.fig).with_suffix(""))
    best = res.ranked()
    pct = f"p{a.percentile:g}"
    bounds = ", ".join(f"{what} <= {v:g} ms" for what, v in (("TTFT", a.slo_ttft_ms), ("TPOT", a.slo_tpot_ms),
                                                              ("ITL", a.slo_itl_ms)) if v is not None)
    if not best and not res.interrupted:  # a refusal, before any report: stdout stays empty (one JSON document or none)
        where = f"; every layout tried is in {a.csv}" if a.csv else ""
        sims = res.simulated()
        if not sims:
            raise PlanError(f"the workload fits no layout: all {len(res.rows)} were dropped "
                            f"(first reason: {res.dropped()[0]['dropped'] if res.dropped() else 'none'}){where}")
        slo = res.slo
        close = min(sims, key=lambda r: max((r["ttft_pct_s"] / slo[0]) if slo[0] else 0,
                                            (r["tpot_pct_s"] / slo[1]) if slo[1] else 0,
                                            (r["itl_pct_s"] / slo[2]) if slo[2] else 0))
        raise PlanError(f"no layout meets the SLO ({pct} {bounds}"
                        f"{f', with {a.headroom * 100:.3g}% headroom' if a.headroom else ''}) "
                        f"among {len(sims)} simulated: closest {close['layout']} with TTFT "
                        f"{close['ttft_pct_s'] * 1e3:.1f} ms, TPOT {close['tpot_pct_s'] * 1e3:.1f} ms "
                        f"(simulated){where}")
    if a.json:
        from steptime.io import dumps

        sys.stdout.write(dumps(doc))
    else:
        room = f" with {a.headroom * 100:.3g}% headroom" if a.headroom else ""
        print(f"steptime plan: {a.model}, {wl.name} ({len(wl)} requests); SLO {pct} {bounds}{room}; "
              "every number simulated")
        for note in res.notes:
            print(f"note: {note}")
        if res.moe_kernels:
            from steptime.moe_step import moe_law_text

            print("routed experts priced with: " + "; ".join(
                f"engine {e}: {moe_law_text(k, res.searched_cells(e))}" for e, k in res.moe_kernels.items()))
        print(f"tried {len(res.rows)} layouts: {len(res.simulated())} simulated, {len(res.dropped())} dropped "
              f"(did not fit or cannot run), {len(res.pruned())} pruned (provably dearer than a smaller layout "
              f"meeting the SLO), {len(best)} meet the SLO; {res.wall_s:.1f} s"
              + ("; INTERRUPTED: best so far" if res.interrupted else ""))
        reasons = {}
        for r in res.dropped():
            key = r["dropped"].split(":")[0] if "does not fit" in r["dropped"] else r["dropped"]
            reasons[key] = reasons.get(key, 0) + 1
        for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:4]:
            print(f"  dropped {v}: {k}")
        if best and res.objective == "max_rate":
            print(f"{'#':>2} {'layout':<48}{'GPUs':>5}{'req/s/GPU':>10}{'req/s':>8}{'TTFT ' + pct:>11}{'TPOT ' + pct:>11}"
                  "  (at the largest rate meeting the SLO)")
            for i, r in enumerate(best[:a.top], 1):
                print(f"{i:>2} {r['layout']:<48}{r['gpus']:>5}{r['max_rate_per_gpu']:>10.4g}{r['max_rate_req_s']:>8.4g}"
                      f"{_fmt_ms(r['ttft_pct_s']):>11}{_fmt_ms(r['tpot_pct_s']):>11}")
        elif best:
            print(f"{'#':>2} {'layout':<48}{'GPUs':>5}{'$/Mtok':>8}{'TTFT ' + pct:>11}{'TPOT ' + pct:>11}"
                  f"{'tok/s/GPU':>10}{'tok/s/user':>11}  limiting")
            for i, r in enumerate(best[:a.top], 1):
                cost = r["usd_per_m_output_tokens"]
                tag = " uncalibrated" if r.get("uncalibrated") else ""
                print(f"{i:>2} {r['layout']:<48}{r['gpus']:>5}{'n/a' if cost is None else f'{cost:.3f}':>8}"
                      f"{_fmt_ms(r['ttft_pct_s']):>11}{_fmt_ms(r['tpot_pct_s']):>11}{r['throughput_per_gpu']:>10.0f}"
                      f"{r['tok_s_per_user']:>11.1f}  {r['limiting']}{tag}")
            if len(best) > 1:
                print(f"runner-up lost: {doc['runner_up_lost']}")
            used = {r["gpu"] for r in best[:a.top]}
            for g in sorted(used):
                p = res.prices.get(g)
                if p:
                    print(f"price {g}: ${p['usd_per_gpu_hour']:.4g}/GPU-hour ({p['provider']}; {p['date']})")
    return 0


__all__ = ["add_parser", "cmd_plan", "SteptimeError"]
