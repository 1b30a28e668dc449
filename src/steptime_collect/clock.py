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

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import sys
import threading
import time
from pathlib import Path

from steptime_collect.cli import int_list, nonnegative_int, output_path, positive_int, run, setting_list, write_csv

COLUMNS = {"gpu_name": str, "run": int, "order": int, "m": int, "n": int, "k": int, "latency_ms": float,
           "sm_clock_mhz": float, "power_w": float, "temp_c": float, "samples": int}
# Written by the collector since the cap / lock extension (E1.6-E1.9); empty = as found (default cap,
# free-running clock). Older sweeps without them parse with both empty.
OPTIONAL = {"cap_w": float, "locked_mhz": float}
POSITIVE = ("m", "n", "k", "latency_ms", "sm_clock_mhz", "samples")
NONNEGATIVE = ("run", "order", "power_w")
LADDER = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def clock_plan(ladder=LADDER, runs: int = 5, caps=(None,), locks=(None,), seed: int = 0) -> list[dict]:
    """The cells of a sweep in the order they run: per repeat the (cap, lock) settings in a fresh
    random order (E1.9 randomises the cap order per repeat), and within each setting the m ladder
    in a fresh random order. None = leave the setting as found."""
    import random

    rng = random.Random(seed)
    plan = []
    for run in range(runs):
        settings = [(c, lk) for c in caps for lk in locks]
        rng.shuffle(settings)
        pos = 0
        for cap, lock in settings:
            ms = list(ladder)
            rng.shuffle(ms)
            for m in ms:
                plan.append({"run": run, "order": pos, "cap_w": cap, "locked_mhz": lock, "m": int(m)})
                pos += 1
    return plan


def collect(out: Path, n: int = 4096, k: int = 4096, runs: int = 5, hold_s: float = 3.0, cool_s: float = 10.0,
            seed: int = 0, ladder=LADDER, caps=(None,), locks=(None,), allow_set_power: bool = False,
            allow_lock_clocks: bool = False, backend=None) -> None:  # pragma: no cover - needs a GPU
    from steptime_collect.safety import GpuSettings, NvmlBackend, guarded, progress, require_gpu
    require_gpu()
    import pynvml
    import torch

    plan = clock_plan(ladder, runs, caps, locks, seed)
    settings = GpuSettings(backend or NvmlBackend(torch.cuda.current_device()), allow_set_power, allow_lock_clocks)
    # refuse before touching anything when the plan needs a setting the flags do not allow
    if any(c is not None for c in caps) and not allow_set_power:
        settings.set_power_limit(next(c for c in caps if c is not None))
    if any(lk is not None for lk in locks) and not allow_lock_clocks:
        settings.lock_clocks(next(lk for lk in locks if lk is not None))
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    name = pynvml.nvmlDeviceGetName(h)
    name = name.decode() if isinstance(name, bytes) else name
    rows = []
    with guarded(settings):
        current = (None, None)
        for cell in progress(plan, total=len(plan), desc="clock sweep"):
            want = (cell["cap_w"], cell["locked_mhz"])
            if want != current:
                settings.restore()
                if want[0] is not None:
                    settings.set_power_limit(want[0])
                if want[1] is not None:
                    settings.lock_clocks(want[1])
                current = want
            m = cell["m"]
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
            rows.append([name, cell["run"], cell["order"], m, n, k, start.elapsed_time(end) / iters, med(0), med(1),
                         med(2), len(half), "" if want[0] is None else want[0], "" if want[1] is None else want[1]])
            time.sleep(cool_s)
    write_csv(out, [*COLUMNS, *OPTIONAL], rows)


def schema():
    """pandera schema of the sweep CSV: COLUMNS' types (coerced), ranges from POSITIVE / NONNEGATIVE."""
    import pandera.pandas as pa

    def column(name, typ):
        if typ is str:
            return pa.Column(str, pa.Check.str_length(min_value=1), coerce=True)
        checks = [pa.Check.gt(0)] if name in POSITIVE else [pa.Check.ge(0)] if name in NONNEGATIVE else []
        return pa.Column("int64" if typ is int else "float64", checks, coerce=True)

    cols = {c: column(c, t) for c, t in COLUMNS.items()}
    cols.update({c: pa.Column("float64", pa.Check.gt(0), nullable=True, coerce=True) for c in OPTIONAL})
    return pa.DataFrameSchema(cols, name="clock_sweep")


def parse_clock_sweep(path):
    """Sweep CSV -> checked DataFrame; a DataError names the file, row (and line) and column."""
    from steptime_lab.data.checks import read_csv, run_schema

    df = read_csv(path, listed_in=None, index_col=False)
    for c in OPTIONAL:
        if c not in df.columns:
            df[c] = float("nan")
    return run_schema(df, schema(), path, csv=True)


def reduce_clock_sweep(df, gpu, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    import numpy as np

    from steptime_lab.metrics import bootstrap_ci
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m steptime_collect.clock",
        description="Clock sweep on this node's GPU (E1.6, E1.7, E1.8, E1.9, E1.10): the sustained SM clock, power "
                    "and GEMM latency over an m ladder, n randomised repeats. GPU settings are left as found unless "
                    "--caps / --lock-mhz are given WITH their --allow flag; whatever was changed is restored on exit, "
                    "error or signal.")
    p.add_argument("--out", required=True, type=output_path, help="CSV to write (raw/telemetry/clock/<gpu>/<name>.csv)")
    p.add_argument("--runs", type=positive_int, default=5)
    p.add_argument("--hold-s", type=float, default=3.0)
    p.add_argument("--cool-s", type=float, default=10.0)
    p.add_argument("--m", type=int_list, default=LADDER, help="comma-separated m ladder")
    p.add_argument("--n", type=positive_int, default=4096)
    p.add_argument("--k", type=positive_int, default=4096)
    p.add_argument("--caps", type=setting_list, default=(None,), help="power caps in W, e.g. 575,500,450,400 (randomised order per repeat)")
    p.add_argument("--lock-mhz", type=setting_list, default=(None,), help="'none,2200': free-running and locked at 2200 MHz")
    p.add_argument("--allow-set-power", action="store_true", help="allow changing the power limit (restored after)")
    p.add_argument("--allow-lock-clocks", action="store_true", help="allow locking SM clocks (reset after)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    a = p.parse_args(argv)
    ladder, caps, locks = tuple(a.m), a.caps, a.lock_mhz
    if a.dry_run:
        for cell in clock_plan(ladder, a.runs, caps, locks, a.seed):
            print(cell)
        return 0
    collect(Path(a.out), n=a.n, k=a.k, runs=a.runs, hold_s=a.hold_s, cool_s=a.cool_s, seed=a.seed, ladder=ladder,
            caps=caps, locks=locks, allow_set_power=a.allow_set_power, allow_lock_clocks=a.allow_lock_clocks)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.clock"))
