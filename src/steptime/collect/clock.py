"""E1.10: sustained SM clock under GEMM load versus m (clock droop), n randomised sweeps.

Collector (GPU node, torch + pynvml): for each repeat, visit the m ladder in a random
order; for each m, run the GEMM back to back for `hold_s` seconds while a thread samples
NVML (SM clock, power, temperature) every 20 ms; cool down between cells. Never changes
clocks or power limits: it measures the card as it is.

CSV columns (raw/telemetry/clock/clock_sweep.csv):
  gpu_name, run, order, m, n, k, latency_ms, sm_clock_mhz, power_w, temp_c, samples
Parser: `parse_clock_sweep(path)`. Reduction: `reduce_clock_sweep(df, gpu)` -> per m the
median sustained clock with a 95% bootstrap interval across runs, f_clk = clock / boost,
and achieved TFLOP/s.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

COLUMNS = {"gpu_name": str, "run": int, "order": int, "m": int, "n": int, "k": int, "latency_ms": float,
           "sm_clock_mhz": float, "power_w": float, "temp_c": float, "samples": int}
POSITIVE = ("m", "n", "k", "latency_ms", "sm_clock_mhz", "samples")
NONNEGATIVE = ("run", "order", "power_w")
LADDER = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def collect(out: Path, n: int = 4096, k: int = 4096, runs: int = 5, hold_s: float = 3.0, cool_s: float = 10.0,
            seed: int = 0) -> None:  # pragma: no cover - needs a GPU
    import random

    import pynvml
    import torch

    from steptime.io import atomic_path

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    name = pynvml.nvmlDeviceGetName(h)
    name = name.decode() if isinstance(name, bytes) else name
    rng = random.Random(seed)
    rows = []
    for run in range(runs):
        order = list(LADDER)
        rng.shuffle(order)
        for pos, m in enumerate(order):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            samples, stop = [], threading.Event()

            def sample():
                while not stop.is_set():
                    samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                                    pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                    pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
                    time.sleep(0.02)

            th = threading.Thread(target=sample)
            th.start()
            t0, iters = time.perf_counter(), 0
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            while time.perf_counter() - t0 < hold_s:
                for _ in range(20):
                    torch.nn.functional.linear(x, w)
                iters += 20
                torch.cuda.synchronize()
            end.record()
            torch.cuda.synchronize()
            stop.set()
            th.join()
            half = samples[len(samples) // 2:] or samples  # steady state: second half of the hold
            med = lambda i: sorted(s[i] for s in half)[len(half) // 2]  # noqa: E731
            rows.append([name, run, pos, m, n, k, start.elapsed_time(end) / iters, med(0), med(1), med(2), len(half)])
            time.sleep(cool_s)
    with atomic_path(out) as tmp:
        with open(tmp, "w") as fh:
            fh.write(",".join(COLUMNS) + "\n")
            for r in rows:
                fh.write(",".join(str(v) for v in r) + "\n")


def schema():
    """pandera schema of the sweep CSV: COLUMNS' types (coerced), ranges from POSITIVE / NONNEGATIVE."""
    import pandera.pandas as pa

    def column(name, typ):
        if typ is str:
            return pa.Column(str, pa.Check.str_length(min_value=1), coerce=True)
        checks = [pa.Check.gt(0)] if name in POSITIVE else [pa.Check.ge(0)] if name in NONNEGATIVE else []
        return pa.Column("int64" if typ is int else "float64", checks, coerce=True)

    return pa.DataFrameSchema({c: column(c, t) for c, t in COLUMNS.items()}, name="clock_sweep")


def parse_clock_sweep(path):
    """Sweep CSV -> checked DataFrame; a DataError names the file, row (and line) and column."""
    from steptime.data.checks import read_csv, run_schema

    return run_schema(read_csv(path, listed_in=None, index_col=False), schema(), path, csv=True)


def reduce_clock_sweep(df, gpu, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    import numpy as np

    from steptime.metrics import bootstrap_ci
    from steptime.specs import get_gpu

    g = get_gpu(gpu)
    out = []
    for (m, n, k), grp in df.groupby(["m", "n", "k"], sort=True):
        clk = grp["sm_clock_mhz"].to_numpy(float)
        lat = grp["latency_ms"].to_numpy(float)
        med = float(np.median(clk))
        lo, hi = bootstrap_ci(clk, stat=np.median, n_boot=n_boot, seed=seed)
        out.append({"m": int(m), "n": int(n), "k": int(k), "runs": int(len(grp)), "sm_clock_mhz": med,
                    "sm_clock_ci": [lo, hi], "f_clk": med / g.boost_mhz if g.boost_mhz else None,
                    "tflops": float(2 * m * n * k / (np.median(lat) * 1e-3) / 1e12),
                    "power_w": float(grp["power_w"].median())})
    return out


def clock_figure(per_gpu: dict, stem) -> None:
    """E1.10 figure: the reduced f_clk against m, one line per GPU."""
    from steptime.plotting import save, subplots

    fig, ax = subplots(figsize=(5, 3.2))
    for gpu, rows in per_gpu.items():
        ax.plot([r["m"] for r in rows], [r["f_clk"] for r in rows], marker="o", label=gpu)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("m (tokens)")
    ax.set_ylabel("f_clk = sustained / boost clock")
    ax.legend()
    save(fig, stem, caption="E1.10: median sustained SM clock under GEMM load against m, as a fraction of boost.")


def main(argv=None) -> int:  # pragma: no cover - needs a GPU
    p = argparse.ArgumentParser(description="Collect the E1.10 clock sweep on this node's GPU")
    p.add_argument("--out", required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hold-s", type=float, default=3.0)
    p.add_argument("--cool-s", type=float, default=10.0)
    a = p.parse_args(argv)
    collect(Path(a.out), runs=a.runs, hold_s=a.hold_s, cool_s=a.cool_s)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
