"""Speed of each serving peer per simulated request, measured in one run (wall clock; not a result).

    python benchmarks/serve_peers.py [--requests 1000] [--json]

steptime.serve   closed loop (Qwen3-32B, H100, TP2, 2048/256 tokens, concurrency 32) and a Poisson
                 trace on Vidur's own profiled pair (Llama-2-7B on A100), seconds per simulated request.
AIConfigurator   aggregated-serving estimates of 40 workloads like the closed-loop one (tables loaded, no
                 cache hit), seconds per call:
                 a mean-field estimate, no request simulated (skipped when aiconfigurator-core is absent).
DistServe        its fitted model driving the same disaggregated simulator as steptime (OPT-13B, A100,
                 1 prefill + 1 decode instance), seconds per simulated request (needs
                 results/data/distserve.parquet: snakemake -j1 results/data/distserve.parquet).
Vidur            not run: see the line it prints.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np

from steptime.serve import Policy, StepTimer, Workload, poisson_arrivals, simulate, simulate_disagg, synthetic

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn, repeat=1):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    n = a.requests
    rows = []

    timer = StepTimer("qwen3-32b", "h100-sxm", tp=2, max_tokens=8192, max_requests=32)
    wl = synthetic(n, isl=2048, osl=256, concurrency=32, seed=1)
    pol = Policy("vllm", max_num_batched_tokens=8192, max_num_seqs=32)
    run, dt = _timed(lambda: simulate("qwen3-32b", "h100-sxm", wl, pol, tp=2, timer=timer), repeat=3)
    rows.append({"peer": "steptime.serve", "workload": "qwen3-32b h100-sxm tp2 closed loop c=32 2048/256",
                 "requests": n, "steps": run.summary()["steps"], "seconds": dt, "seconds_per_request": dt / n})

    rng = np.random.default_rng(2)
    wl2 = Workload(poisson_arrivals(n, 4.0, 3), rng.integers(128, 2048, n), rng.integers(16, 512, n), name="poisson")
    t2 = StepTimer("llama-2-7b", "a100-sxm", max_tokens=8192, max_requests=256)
    run2, dt2 = _timed(lambda: simulate("llama-2-7b", "a100-sxm", wl2, "vllm", timer=t2), repeat=3)
    rows.append({"peer": "steptime.serve", "workload": "llama-2-7b a100-sxm Poisson 4 req/s (Vidur's own pair)",
                 "requests": n, "steps": run2.summary()["steps"], "seconds": dt2, "seconds_per_request": dt2 / n})

    from steptime.serve import aic

    if aic.available():
        est = aic.AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "vllm", tp=2)
        est.estimate(2048, 256, 32)  # load its tables once
        # AIC caches each (isl, osl, batch, ctx_tokens) point: time distinct points, one call each
        points = [(2048 + 16 * i, 256, 32) for i in range(1, 41)]
        _, tot = _timed(lambda: [est.estimate(*pt) for pt in points])
        dt3 = tot / len(points)
        rows.append({"peer": "AIConfigurator (aggregated estimate)", "workload": "qwen3-32b h100-sxm tp2 c=32 2048/256",
                     "requests": None, "seconds": dt3, "seconds_per_call": dt3,
                     "note": "one mean-field estimate per workload; no request simulated"})
    else:
        rows.append({"peer": "AIConfigurator", "skipped": "aiconfigurator-core not installed: pip install -e '.[peers]'"})

    coef = ROOT / "results/data/distserve.parquet"
    if coef.exists():
        import pandas as pd

        from steptime.serve.distserve import DistServeTimer

        rng = np.random.default_rng(4)
        wl4 = Workload(poisson_arrivals(n, 1.5, 5), rng.integers(64, 1500, n), rng.integers(16, 400, n), name="ds")
        pp = Policy("vllm", max_num_batched_tokens=4096, chunked_prefill=False)
        dp = Policy("vllm", reserve_full=True)
        for name, tm in (("DistServe fitted model", DistServeTimer(pd.read_parquet(coef), "opt-13b", "a100-sxm")),
                         ("steptime.serve", StepTimer("opt-13b", "a100-sxm", max_tokens=4096 + 256))):
            _, dt4 = _timed(lambda: simulate_disagg("opt-13b", "a100-sxm", wl4, tp=1, prefill_policy=pp,
                                                    decode_policy=dp, timer=tm), repeat=3)
            rows.append({"peer": name, "workload": "opt-13b a100-sxm disaggregated 1p1d Poisson 1.5 req/s",
                         "requests": n, "seconds": dt4, "seconds_per_request": dt4 / n})
    else:
        rows.append({"peer": "DistServe", "skipped": f"{coef.relative_to(ROOT)} missing: snakemake -j1 {coef.relative_to(ROOT)}"})

    if importlib.util.find_spec("vidur") is None:
        why = "vidur not installed in this environment"
    else:
        why = "vidur is importable, but this benchmark does not run it"
    rows.append({"peer": "Vidur", "skipped": why + ": Vidur 0.0.26 downloads its profiles (attention.csv.xz, "
                 "mlp.csv.xz) from Hugging Face datasets at run time and the GitHub snapshot's attention "
                 "profiles are absent here, so it cannot run offline"})

    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            if "skipped" in r:
                print(f"{r['peer']:<38} skipped: {r['skipped']}")
            elif r.get("seconds_per_request") is not None:
                print(f"{r['peer']:<38} {r['seconds_per_request'] * 1e6:9.1f} us per simulated request  ({r['workload']}, "
                      f"{r['requests']} requests)")
            else:
                print(f"{r['peer']:<38} {r['seconds_per_call'] * 1e3:9.2f} ms per estimate          ({r['workload']}; {r['note']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
