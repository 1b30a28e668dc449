"""Prediction speed, measured against a plain-Python baseline in the same run.

`steptime bench --json` prints:
  gemm_cells_per_s       vectorised predict_ops('gemm') over 10^6 cells
  gemm_python_cells_per_s the same formula as a plain-Python loop (timed on a subset)
  gemm_speedup            ratio of the two
  steps_per_s            vectorised predict_steps over 10^5 steps (mixed decode batches)
  steps_python_per_s     predict_step called once per step in a Python loop (subset)
  steps_speedup
  gemm_* and steps_* also come per second of this process's CPU time (`*_per_cpu_s`, and
  `gemm_speedup_cpu`, `steps_speedup_cpu`), with the wall and CPU seconds of each timed call
  (`*_wall_s`, `*_cpu_s`; best of the repeats): on a shared machine the wall rate falls with the
  load, the CPU rate and the ratio against the plain path timed in the same run much less
  import_s               wall time of `import steptime` in a fresh interpreter (lazy: submodules load on use)
  import_predict_s       wall time of importing the predictor itself (steptime.step: numpy, specs, terms)
  import_numpy_s         same for `import numpy` alone (the floor we sit on)
  serve_steps_per_s      serving simulator: simulated iterations per second on a Poisson workload
                         (2,000 requests, Llama-3.1-8B on H100; quick: 500), exact fast step timer
  serve_direct_steps_per_s the same simulator timing each iteration with one predict_steps call
                         (first 100 requests; quick: 50), and serve_speedup, their ratio
  serve_requests_per_s   simulated requests per second of wall time
  serve_steps_per_cpu_s, serve_direct_steps_per_cpu_s, serve_speedup_cpu
                         the same two rates per second of this process's CPU time (the machine may be
                         shared: CPU time does not count the time other processes held the core)
  load_before, load_after  the 1-minute load average and the CPUs this process may use, so a reader can
                         tell a quiet run from a loaded one
`steptime bench --plan` adds the planner: one `steptime plan` search (Llama-3.1-8B, a 5,000-request
Poisson workload, H100 and H200, the default grid: >= 300 layouts) on `--jobs` worker processes:
  plan_layouts, plan_simulated (of which plan_shared reuse the run of a layout whose knobs did not bind),
  plan_pruned (provably dearer than a layout met: steptime.plan.Bound), plan_wall_s, plan_cpu_s (parent + workers),
  plan_cpu_per_simulated_s, and plan_sim_cpu_ratio: the CPU the planner spent per simulated
  layout over the CPU one plain `simulate` of the same workload costs in this run (1 = no overhead).
  plan_moe_* the same for a mixture-of-experts search (gpt-oss-20b, 1,000 requests, H100 and B200: expert
  parallelism and the sliding-window layers' step path), its baseline one plain `simulate` of gpt-oss-20b on H100.
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


def _load() -> dict:
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    la = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"load_1min": la, "cpus": cpus}


def _cpu_timeit(fn, repeat: int = 3) -> tuple[float, float]:
    """(best wall, best CPU time of this process) over `repeat` calls."""
    best_w = best_c = math.inf
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best_c = min(best_c, time.process_time() - c0)
        best_w = min(best_w, time.perf_counter() - w0)
    return best_w, best_c


def run(quick: bool = False, seed: int = 0, plan: bool = False, jobs: int = 2) -> dict:
    from steptime.ops import predict_ops
    from steptime.specs import get_gpu
    from steptime.step import predict_step, predict_steps

    load_before = _load()
    rng = np.random.default_rng(seed)
    gpu = get_gpu("h100-sxm")
    n_cells = 100_000 if quick else 1_000_000
    m = rng.integers(1, 32768, n_cells)
    n = rng.choice([1024, 2048, 4096, 6144, 8192, 14336, 28672], n_cells)
    k = rng.choice([1024, 2048, 4096, 8192, 14336], n_cells)
    t_vec, c_vec = _cpu_timeit(lambda: predict_ops("gemm", gpu, m=m, n=n, k=k))
    sub = 20_000 if quick else 50_000
    t_py, c_py = _cpu_timeit(lambda: _python_gemm(m[:sub].tolist(), n[:sub].tolist(), k[:sub].tolist(),
                                                  gpu.peak_flops, gpu.mem_bw, gpu.sms), repeat=1)
    gemm_rate = n_cells / t_vec
    gemm_py_rate = sub / t_py

    n_steps = 10_000 if quick else 100_000
    reqs = rng.integers(1, 64, n_steps)
    step_id = np.repeat(np.arange(n_steps), reqs)
    new = np.ones(step_id.size, dtype=np.int64)
    kv = rng.integers(16, 4096, step_id.size)
    t_steps, c_steps = _cpu_timeit(lambda: predict_steps("llama-3.1-8b", gpu, step_id, new, kv, n_steps), repeat=3)
    n_loop = 200 if quick else 1000
    starts = np.concatenate([[0], np.cumsum(reqs)])

    def loop():
        for i in range(n_loop):
            kvs = kv[starts[i]:starts[i + 1]]
            predict_step("llama-3.1-8b", gpu, requests=[(1, int(x)) for x in kvs], check_memory=False)

    t_loop, c_loop = _cpu_timeit(loop, repeat=1)
    serve = _serve(quick, seed)
    planned = _plan(seed, jobs) if plan else {}
    return {
        **serve,
        **planned,
        "gemm_cells": n_cells,
        "gemm_cells_per_s": gemm_rate,
        "gemm_python_cells_per_s": gemm_py_rate,
        "gemm_speedup": gemm_rate / gemm_py_rate,
        "gemm_cells_per_cpu_s": n_cells / c_vec,
        "gemm_python_cells_per_cpu_s": sub / c_py,
        "gemm_speedup_cpu": (n_cells / c_vec) / (sub / c_py),
        "gemm_wall_s": t_vec, "gemm_cpu_s": c_vec, "gemm_python_cells": sub, "gemm_python_wall_s": t_py,
        "gemm_python_cpu_s": c_py,
        "steps": n_steps,
        "steps_per_s": n_steps / t_steps,
        "steps_python_per_s": n_loop / t_loop,
        "steps_speedup": (n_steps / t_steps) / (n_loop / t_loop),
        "steps_per_cpu_s": n_steps / c_steps,
        "steps_python_per_cpu_s": n_loop / c_loop,
        "steps_speedup_cpu": (n_steps / c_steps) / (n_loop / c_loop),
        "steps_wall_s": t_steps, "steps_cpu_s": c_steps, "steps_python": n_loop, "steps_python_wall_s": t_loop,
        "steps_python_cpu_s": c_loop,
        "import_s": _import_time("steptime"),
        "import_predict_s": _import_time("steptime.step"),
        "import_numpy_s": _import_time("numpy"),
        "load_before": load_before,
        "load_after": _load(),
        "targets": {"gemm_cells_per_s": 2e6, "steps_per_s": 1e5, "import_s": 0.2, "serve_steps_per_s": 1e5,
                    "plan_wall_s": 60.0},
    }


def _serve(quick: bool, seed: int) -> dict:
    from steptime.serve import DirectTimer, StepTimer, simulate, synthetic

    n = 500 if quick else 2000
    wl = synthetic(n, isl=(128, 2048), osl=(16, 512), rate=8.0, seed=seed)
    timer = StepTimer("llama-3.1-8b", "h100-sxm")
    runs = []
    t_fast, c_fast = _cpu_timeit(lambda: runs.append(simulate("llama-3.1-8b", "h100-sxm", wl, timer=timer)), repeat=3)
    n_direct = 50 if quick else 100
    direct = DirectTimer("llama-3.1-8b", "h100-sxm")
    sub = wl.head(n_direct)
    ref = []
    t_direct, c_direct = _cpu_timeit(lambda: ref.append(simulate("llama-3.1-8b", "h100-sxm", sub, timer=direct,
                                                                  fast=False)), repeat=1)
    fast_rate = runs[-1].n_steps / t_fast
    direct_rate = ref[-1].n_steps / t_direct
    return {"serve_requests": n, "serve_steps": runs[-1].n_steps, "serve_steps_per_s": fast_rate,
            "serve_requests_per_s": n / t_fast, "serve_direct_steps_per_s": direct_rate,
            "serve_speedup": fast_rate / direct_rate,
            "serve_steps_per_cpu_s": runs[-1].n_steps / c_fast,
            "serve_direct_steps_per_cpu_s": ref[-1].n_steps / c_direct,
            "serve_speedup_cpu": (runs[-1].n_steps / c_fast) / (ref[-1].n_steps / c_direct)}


# the planner searches `bench --plan` times: (key prefix, model, workload arguments, GPUs, TTFT and TPOT SLO in seconds)
PLANS = (("plan", "llama-3.1-8b", (("n", 5000), ("isl", (128, 2048)), ("osl", (16, 512)), ("rate", 8.0)), ("h100-sxm", "h200-sxm"),
          1.0, 0.05),
         # a mixture-of-experts search: expert parallelism, the sliding-window layers' step path (wave 38)
         ("plan_moe", "gpt-oss-20b", (("n", 1000), ("isl", (512, 2048)), ("osl", (128, 512)), ("rate", 4.0)), ("h100-sxm", "b200"),
          2.0, 0.04))


def _plan(seed: int, jobs: int) -> dict:
    """The planner searches of PLANS (see the module docstring), each with its own baseline."""
    out = {}
    for prefix, model, wl_kw, gpus, ttft, tpot in PLANS:
        out.update(_plan_one(prefix, model, dict(wl_kw), gpus, ttft, tpot, seed, jobs))
    return out


def _plan_one(prefix: str, model: str, wl_kw: dict, gpus, ttft: float, tpot: float, seed: int, jobs: int) -> dict:
    """One planner search, wall and CPU time (parent + worker processes), against one plain `simulate` of the same
    workload on the first GPU in this run: keys `<prefix>_*`."""
    import resource

    from steptime.plan import plan
    from steptime.serve import simulate, synthetic

    n = wl_kw["n"]
    wl = synthetic(n, isl=wl_kw["isl"], osl=wl_kw["osl"], rate=wl_kw["rate"], seed=seed)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0, c0 = time.perf_counter(), time.process_time()
    res = plan(model, wl, slo_ttft_s=ttft, slo_tpot_s=tpot, gpus=gpus, jobs=jobs)
    wall, cpu_self = time.perf_counter() - w0, time.process_time() - c0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu_self + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    sims = len(res.simulated())
    _, c_sim = _cpu_timeit(lambda: simulate(model, gpus[0], wl), repeat=1)
    per = cpu / max(sims, 1)
    p = prefix
    return {f"{p}_model": model, f"{p}_requests": len(wl), f"{p}_jobs": jobs, f"{p}_layouts": len(res.rows),
            f"{p}_simulated": sims, f"{p}_shared": sum(1 for r in res.simulated() if r.get("shared_with")),
            f"{p}_pruned": len(res.pruned()), f"{p}_dropped": len(res.dropped()), f"{p}_wall_s": wall,
            f"{p}_cpu_s": cpu, f"{p}_cpu_per_simulated_s": per, f"{p}_one_simulate_cpu_s": c_sim,
            f"{p}_sim_cpu_ratio": per / c_sim}
