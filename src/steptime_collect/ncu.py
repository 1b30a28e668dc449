"""E1.5: the five-factor waterfall from Nsight Compute counters.

Collector (GPU node): for each (m, n, k) cell, profile one `torch.nn.functional.linear`
launch with `ncu --csv --page raw --metrics METRICS` and append its rows, with the
cell's m, n, k in front, to raw/telemetry/ncu/gemm_counters.csv. Nsight Compute
locks clocks to base by default (--clock-control base); the collector records which
mode it used in `clock_control`, because f_clk measured under a lock is an artefact.

Parser: `parse_ncu_csv(path)` reads ncu's raw page (header row, then a units row) and
returns one row per kernel with numeric metrics. Reduction: `reduce_factors(df, gpu)`
picks the GEMM kernel of each cell (the longest kernel) and derives
  grid, eta_fill = min(grid, SMs) / SMs, eta_active = sm__cycles_active.avg /
  sm__cycles_elapsed.avg, eta_duty = tensor pipe active % / 100, eta_mem = DRAM % / 100,
  f_clk = SM clock / boost clock, and the achieved fraction of peak it implies.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import subprocess
import sys
from pathlib import Path

from steptime.errors import DataError
from steptime_collect.cli import int_list, output_path, run, shape_list
from steptime_collect.safety import NoGPUError

METRICS = (
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__block_size",
    "launch__cluster_dim_x",
    "launch__cluster_dim_y",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "sm__cycles_elapsed.avg.per_second",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
CELL_COLUMNS = ("m", "n", "k", "clock_control")
REQUIRED = ("Kernel Name",) + METRICS
NUMERIC = ("m", "n", "k") + METRICS
INTEGER = ("m", "n", "k", "launch__grid_size", "launch__block_size", "launch__cluster_dim_x", "launch__cluster_dim_y")
POSITIVE = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg", "launch__grid_size", "m", "n", "k")
PERCENT = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")


def collect(cells, out: Path, clock_control: str = "none") -> None:  # pragma: no cover - needs a GPU
    from steptime.io import atomic_path

    frames = []
    for m, n, k in cells:
        cmd = ["ncu", "--csv", "--page", "raw", "--clock-control", clock_control, "--metrics", ",".join(METRICS),
               sys.executable, "-m", "steptime_collect.gemm_bench", "--m", str(m), "--n", str(n), "--k", str(k),
               "--iters", "1", "--warmup", "2"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        text = r.stdout[r.stdout.index('"ID"'):]
        lines = text.splitlines()
        header, units, rows = lines[0], lines[1], lines[2:]
        if not frames:
            frames.append('"m","n","k","clock_control",' + header)
            frames.append('"","","","",' + units)
        frames.extend(f'"{m}","{n}","{k}","{clock_control}",' + row for row in rows)
    with atomic_path(out) as tmp:
        tmp.write_text("\n".join(frames) + "\n")


def schema():
    """pandera schema of the kernel rows (thousands separators removed): numbers coerced, ranges checked."""
    import pandera.pandas as pa

    def number(name):
        checks = ([pa.Check.gt(0)] if name in POSITIVE else [pa.Check.in_range(0, 100.5)] if name in PERCENT
                  else [])
        return pa.Column("int64" if name in INTEGER else "float64", checks, coerce=True)

    cols = {c: pa.Column(str, coerce=True) for c in CELL_COLUMNS + REQUIRED if c not in NUMERIC}
    cols.update({c: number(c) for c in NUMERIC})
    return pa.DataFrameSchema(cols, name="ncu_raw")


def parse_ncu_csv(path):
    """ncu raw CSV (header row + units row) -> DataFrame with numeric metric columns.

    A DataError names the file, row and column; rows are numbered as pandas reads the file
    (the units row is row 0, the first kernel row 1), with the line in the file alongside.
    """
    from steptime_lab.data.checks import read_csv, run_schema, where

    df = read_csv(path, listed_in=None, dtype=str, keep_default_na=False, index_col=False)
    if len(df) < 2:
        raise DataError(f"{path}: no kernel rows after the units row")
    units, df = df.iloc[0], df.iloc[1:].copy()  # kernel rows keep their row numbers in the file
    for col in NUMERIC:
        if col in df.columns:
            df[col] = df[col].str.replace(",", "", regex=False)
    df = run_schema(df, schema(), path, csv=True).reset_index(drop=True)
    # Normalise units: duration to ms, clock to MHz.
    dur_unit = units["gpu__time_duration.sum"].strip()
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(dur_unit)
    if scale is None:
        raise DataError(f"{where(path, 0, 'gpu__time_duration.sum', csv=True)}: unknown unit {dur_unit!r}")
    df["duration_ms"] = df["gpu__time_duration.sum"] * scale
    clk_unit = units["sm__cycles_elapsed.avg.per_second"].strip()
    cscale = {"cycle/second": 1e-6, "cycle/nsecond": 1e3, "cycle/usecond": 1.0, "Mhz": 1.0, "MHz": 1.0,
              "Ghz": 1e3, "GHz": 1e3}.get(clk_unit)
    if cscale is None:
        raise DataError(f"{where(path, 0, 'sm__cycles_elapsed.avg.per_second', csv=True)}: unknown unit "
                        f"{clk_unit!r}")
    df["sm_clock_mhz"] = df["sm__cycles_elapsed.avg.per_second"] * cscale
    return df


def reduce_factors(df, gpu) -> list[dict]:
    from steptime.specs import get_gpu

    g = get_gpu(gpu)
    out = []
    for (m, n, k), grp in df.groupby(["m", "n", "k"], sort=True):
        row = grp.loc[grp["duration_ms"].idxmax()]
        grid = float(row["launch__grid_size"])
        f_clk = float(row["sm_clock_mhz"]) / g.boost_mhz if g.boost_mhz else None
        eta_fill = min(grid, g.sms) / g.sms
        eta_active = float(row["sm__cycles_active.avg"] / row["sm__cycles_elapsed.avg"])
        eta_duty = float(row["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]) / 100.0
        achieved = 2.0 * m * n * k / (float(row["duration_ms"]) * 1e-3) / g.peak_flops
        out.append({"m": int(m), "n": int(n), "k": int(k), "kernel": row["Kernel Name"], "grid": int(grid),
                    "cluster": int(row["launch__cluster_dim_x"] * max(row["launch__cluster_dim_y"], 1)),
                    "clock_control": row["clock_control"], "f_clk": f_clk, "eta_fill": eta_fill,
                    "eta_active": eta_active, "eta_duty": eta_duty,
                    "eta_mem": float(row["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]) / 100.0,
                    "product": (f_clk or 1.0) * eta_fill * eta_active * eta_duty, "achieved": achieved,
                    "duration_ms": float(row["duration_ms"])})
    return out


def waterfall_figure(per_gpu: dict, stem) -> None:
    """E1.5 figure: per GPU, the mean of each factor (and their product, and the achieved fraction of peak) over
    the cells with m >= 1024 (all cells if none)."""
    from steptime.plotting import save, subplots

    fig, axes = subplots(1, max(1, len(per_gpu)), figsize=(4 * max(1, len(per_gpu)), 3), squeeze=False)
    for ax, (gpu, rows) in zip(axes[0], per_gpu.items()):
        big = [r for r in rows if r["m"] >= 1024] or rows
        names = ["f_clk", "eta_fill", "eta_active", "eta_duty", "product", "achieved"]
        vals = [sum(r[n] or 0 for r in big) / len(big) for n in names]
        ax.bar(names, vals, color="#1b6ca8")
        ax.set_title(f"{gpu} (m >= 1024, mean)")
        ax.set_ylabel("fraction of datasheet peak")
        ax.tick_params(axis="x", rotation=45)
    save(fig, stem,
         caption="E1.5: each factor of eta_c read from Nsight Compute counters, and the achieved fraction of peak.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steptime_collect.ncu",
                                description="Collect E1.5 Nsight Compute GEMM counters on this node's GPU")
    p.add_argument("--out", required=True, type=output_path)
    p.add_argument("--m", type=int_list, default=int_list("1,16,64,256,1024,2048,4096,8192,16384"),
                   help="comma-separated m values")
    p.add_argument("--shapes", type=shape_list, default=shape_list("6144x4096,4096x4096,28672x4096,4096x14336"),
                   help="NxK list")
    p.add_argument("--clock-control", default="none", choices=["none", "base"])
    a = p.parse_args(argv)
    require_ncu()
    cells = [(m, n, k) for n, k in a.shapes for m in a.m]
    collect(cells, Path(a.out), a.clock_control)  # pragma: no cover - needs a GPU
    return 0  # pragma: no cover


def require_ncu() -> None:
    """One line unless this node has a GPU (torch, CUDA) and Nsight Compute's `ncu` on PATH."""
    import shutil

    from steptime_collect.safety import require_gpu

    require_gpu()
    if shutil.which("ncu") is None:  # pragma: no cover - needs a GPU
        raise NoGPUError("Nsight Compute (`ncu`) is not on PATH: load the CUDA toolkit module on the GPU node")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.ncu"))
