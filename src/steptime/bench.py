"""Prediction speed, measured against a plain-Python baseline in the same run.

`steptime bench --json` prints:
  gemm_cells_per_s       vectorised predict_ops('gemm') over 10^6 cells
  gemm_python_cells_per_s the same formula as a plain-Python loop (timed on a subset)
  gemm_speedup            ratio of the two
  steps_per_s            vectorised predict_steps over 10^5 steps (mixed decode batches)
  steps_python_per_s     predict_step called once per step in a Python loop (subset)
  steps_speedup
  import_s               wall time of `import steptime` in a fresh interpreter (lazy: submodules load on use)
  import_predict_s       wall time of importing the predictor itself (steptime.step: numpy, specs, terms)
  import_numpy_s         same for `import numpy` alone (the floor we sit on)
  serve_steps_per_s      serving simulator: simulated iterations per second on a Poisson workload
                         (2,000 requests, Llama-3.1-8B on H100; quick: 500), exact fast step timer
  serve_direct_steps_per_s the same simulator timing each iteration with one predict_steps call
                         (first 100 requests; quick: 50), and serve_speedup, their ratio
  serve_requests_per_s   simulated requests per second of wall time
All on one core (BLAS threads pinned to 1 through the environment of the subprocess
for the import timing; numpy elementwise work here is single-threaded anyway).
"""

from __future__ import annotations

# The predictor's imports stay inside run(): the module loads with the CLI, the predictor only when a check runs.

import math
import subprocess
import sys
import time

import numpy as np


def _timeit(fn, repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _python_gemm(m, n, k, peak, bw, sms):
    """Plain-Python reference: a wave-model roofline per cell (same shape of work)."""
    out = []
    for mi, ni, ki in zip(m, n, k):
        best = 0.0
        for tm, tn in ((64, 64), (128, 128), (256, 128)):
            tiles = math.ceil(mi / tm) * math.ceil(ni / tn)
            waves = math.ceil(tiles / sms)
            best = max(best, mi * ni / (waves * sms * tm * tn))
        tc = 2 * mi * ni * ki / (peak * best * 0.95)
        tmem = 2 * (mi * ki + ki * ni + mi * ni) / (bw * 0.8)
        out.append(max(tc, tmem))
    return out


def _import_time(mod: str) -> float:
    code = f"import time; t=time.perf_counter(); import {mod}; print(time.perf_counter()-t)"
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": ""}
    import os

    env = {**os.environ, **env}
    times = []
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        times.append(float(r.stdout.strip()))
    return min(times)


def run(quick: bool = False, seed: int = 0) -> dict:
    from steptime.ops import predict_ops
    from steptime.specs import get_gpu
    from steptime.step import predict_step, predict_steps

    rng = np.random.default_rng(seed)
    gpu = get_gpu("h100-sxm")
    n_cells = 100_000 if quick else 1_000_000
    m = rng.integers(1, 32768, n_cells)
    n = rng.choice([1024, 2048, 4096, 6144, 8192, 14336, 28672], n_cells)
    k = rng.choice([1024, 2048, 4096, 8192, 14336], n_cells)
    t_vec = _timeit(lambda: predict_ops("gemm", gpu, m=m, n=n, k=k))
    sub = 20_000 if quick else 50_000
    t_py = _timeit(lambda: _python_gemm(m[:sub].tolist(), n[:sub].tolist(), k[:sub].tolist(),
                                        gpu.peak_flops, gpu.mem_bw, gpu.sms), repeat=1)
    gemm_rate = n_cells / t_vec
    gemm_py_rate = sub / t_py

    n_steps = 10_000 if quick else 100_000
    reqs = rng.integers(1, 64, n_steps)
    step_id = np.repeat(np.arange(n_steps), reqs)
    new = np.ones(step_id.size, dtype=np.int64)
    kv = rng.integers(16, 4096, step_id.size)
    t_steps = _timeit(lambda: predict_steps("llama-3.1-8b", gpu, step_id, new, kv, n_steps), repeat=2)
    n_loop = 200 if quick else 1000
    starts = np.concatenate([[0], np.cumsum(reqs)])

    def loop():
        for i in range(n_loop):
            kvs = kv[starts[i]:starts[i + 1]]
            predict_step("llama-3.1-8b", gpu, requests=[(1, int(x)) for x in kvs], check_memory=False)

    t_loop = _timeit(loop, repeat=1)
    serve = _serve(quick, seed)
    return {
        **serve,
        "gemm_cells": n_cells,
        "gemm_cells_per_s": gemm_rate,
        "gemm_python_cells_per_s": gemm_py_rate,
        "gemm_speedup": gemm_rate / gemm_py_rate,
        "steps": n_steps,
        "steps_per_s": n_steps / t_steps,
        "steps_python_per_s": n_loop / t_loop,
        "steps_speedup": (n_steps / t_steps) / (n_loop / t_loop),
        "import_s": _import_time("steptime"),
        "import_predict_s": _import_time("steptime.step"),
        "import_numpy_s": _import_time("numpy"),
        "targets": {"gemm_cells_per_s": 2e6, "steps_per_s": 1e5, "import_s": 0.2, "serve_steps_per_s": 1e5},
    }


def _serve(quick: bool, seed: int) -> dict:
    from steptime.serve import DirectTimer, StepTimer, simulate, synthetic

    n = 500 if quick else 2000
    wl = synthetic(n, isl=(128, 2048), osl=(16, 512), rate=8.0, seed=seed)
    timer = StepTimer("llama-3.1-8b", "h100-sxm")
    runs = []
    t_fast = _timeit(lambda: runs.append(simulate("llama-3.1-8b", "h100-sxm", wl, timer=timer)), repeat=2)
    n_direct = 50 if quick else 100
    direct = DirectTimer("llama-3.1-8b", "h100-sxm")
    sub = wl.head(n_direct)
    ref = []
    t_direct = _timeit(lambda: ref.append(simulate("llama-3.1-8b", "h100-sxm", sub, timer=direct, fast=False)),
                       repeat=1)
    fast_rate = runs[-1].n_steps / t_fast
    direct_rate = ref[-1].n_steps / t_direct
    return {"serve_requests": n, "serve_steps": runs[-1].n_steps, "serve_steps_per_s": fast_rate,
            "serve_requests_per_s": n / t_fast, "serve_direct_steps_per_s": direct_rate,
            "serve_speedup": fast_rate / direct_rate}
