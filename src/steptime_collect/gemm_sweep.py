"""GEMM latency sweeps on a GPU node: the dense m ladder (E1.14, E1.15) and L2-sized working sets
(E1.3b, and the standalone law E1.17 compares engine kernels with).

    python -m steptime_collect.gemm_sweep --plan duty --gpu l40s --out raw/telemetry/gemm_sweep/l40s/duty.csv
    python -m steptime_collect.gemm_sweep --plan l2 --gpu h200-sxm --out raw/telemetry/gemm_sweep/h200-sxm/l2.csv

Collector: times `torch.nn.functional.linear` (bf16, CUDA events, warm-up first) for every cell
of the plan, in a random order per repeat, and reads the median SM clock over each timed run
from NVML. It changes no GPU setting. CSV columns:
  gpu_name, plan, repeat, order, m, n, k, latency_ms, sm_clock_mhz
Parser: `parse_gemm_sweep(path)` (checked). Reductions:
  memory_law  (E1.3b)  eta = achieved / datasheet bandwidth against x = bytes / L2, the saturation
                       law eta_max x / (x + x_half) fitted, and steptime's shipped law scored on it
  duty_law    (E1.14)  the tensor-pipe duty each compute-bound cell implies, against tiles per CTA,
                       with 1 / (1 + c / tiles_per_cta) fitted and the shipped c scored
  barrier     (E1.15)  the lumped constant (eta_active) each compute-bound cell implies once clock,
                       fill and duty are divided out: its mean and CV over n cells
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import sys
from pathlib import Path

import numpy as np

from steptime_collect.cli import nonnegative_int, output_path, positive_int, run, write_csv
from steptime.errors import DataError

COLUMNS = {"gpu_name": str, "plan": str, "repeat": int, "order": int, "m": int, "n": int, "k": int,
           "latency_ms": float, "sm_clock_mhz": float}
PLANS = ("duty", "l2")
DUTY_SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))


def duty_ladder(m_max: int = 16384) -> list[int]:
    """The dense m ladder: every m to 16, every 8 to 256, every 32 to 2048, every 256 beyond."""
    ms = list(range(1, 17)) + list(range(24, 257, 8)) + list(range(288, 2049, 32)) + list(range(2304, m_max + 1, 256))
    return sorted(set(m for m in ms if m <= m_max))


def l2_ladder(gpu, points: int = 24, x_min: float = 0.05, x_max: float = 8.0) -> list[tuple[int, int, int]]:
    """Single-token GEMMs whose weight (n x k bf16) spans x = bytes / L2 from x_min to x_max."""
    from steptime.specs import get_gpu

    g = get_gpu(gpu)
    cells = []
    for x in np.geomspace(x_min, x_max, points):
        side = int(max(128, round(np.sqrt(x * g.l2_bytes / 2.0) / 128) * 128))
        cells.append((1, side, side))
    return sorted(set(cells))


def plan_cells(plan: str, gpu: str) -> list[tuple[int, int, int]]:
    if plan == "duty":
        return [(m, n, k) for n, k in DUTY_SHAPES for m in duty_ladder()]
    if plan == "l2":
        return l2_ladder(gpu)
    raise DataError(f"unknown plan {plan!r}; known: {', '.join(PLANS)}")


def run_order(cells, repeats: int, seed: int = 0) -> list[tuple[int, int, tuple]]:
    """(repeat, order, cell) in the order they run: a fresh random order per repeat."""
    import random

    rng = random.Random(seed)
    out = []
    for r in range(repeats):
        cs = list(cells)
        rng.shuffle(cs)
        out.extend((r, i, c) for i, c in enumerate(cs))
    return out


def collect(out: Path, plan: str, gpu: str, repeats: int = 3, seed: int = 0) -> None:  # pragma: no cover - GPU
    import statistics
    import threading
    import time

    from steptime_collect.gemm_bench import time_linear
    from steptime_collect.safety import progress, require_gpu
    require_gpu()
    import pynvml
    import torch

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    name = pynvml.nvmlDeviceGetName(h)
    name = name.decode() if isinstance(name, bytes) else name
    rows = []
    for rep, order, (m, n, k) in progress(run_order(plan_cells(plan, gpu), repeats, seed), desc=f"{plan} sweep"):
        clocks, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                clocks.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
                time.sleep(0.005)

        th = threading.Thread(target=sample)
        th.start()
        lat = time_linear(m, n, k, iters=50, warmup=10)
        stop.set()
        th.join()
        rows.append([name, plan, rep, order, m, n, k, lat, statistics.median(clocks) if clocks else float("nan")])
    write_csv(out, list(COLUMNS), rows)


def schema():
    import pandera.pandas as pa

    def col(name, typ):
        if typ is str:
            return pa.Column(str, pa.Check.str_length(min_value=1), coerce=True)
        checks = [pa.Check.ge(0)] if name in ("repeat", "order") else [pa.Check.gt(0)]
        return pa.Column("int64" if typ is int else "float64", checks, coerce=True)

    cols = {c: col(c, t) for c, t in COLUMNS.items()}
    cols["plan"] = pa.Column(str, pa.Check.isin(PLANS), coerce=True)
    return pa.DataFrameSchema(cols, name="gemm_sweep")


def parse_gemm_sweep(path):
    """Sweep CSV -> checked DataFrame (a DataError names the file, row and column)."""
    from steptime_lab.data.checks import read_csv, run_schema

    return run_schema(read_csv(path, listed_in=None, index_col=False), schema(), path, csv=True)


def _cells(df, plan: str, gpu):
    d = df[df["plan"] == plan]
    if d.empty:
        raise DataError(f"{gpu}: no '{plan}' cells in the sweep")
    return d.groupby(["m", "n", "k"], as_index=False).agg(latency_ms=("latency_ms", "median"),
                                                          sm_clock_mhz=("sm_clock_mhz", "median"),
                                                          repeats=("latency_ms", "size"))


def memory_law(df, gpu) -> dict:
    """E1.3b: achieved fraction of datasheet bandwidth against x = bytes / L2, law fitted and shipped law scored."""
    from scipy.optimize import curve_fit

    from steptime.specs import get_gpu
    from steptime.terms.gemm import eta_mem, gemm_bytes

    g = get_gpu(gpu)
    d = _cells(df, "l2", gpu)
    nbytes = gemm_bytes(d["m"].to_numpy(float), d["n"].to_numpy(float), d["k"].to_numpy(float))
    eta = nbytes / (d["latency_ms"].to_numpy() * 1e-3) / g.mem_bw
    x = nbytes / g.l2_bytes
    law = lambda x, e, h: e * x / (x + h)  # noqa: E731
    big = x >= 1.0  # the DRAM law is fitted where the working set leaves L2
    (e_max, x_half), _ = curve_fit(law, x[big], eta[big], p0=(0.9, 0.5), maxfev=20000) if big.sum() >= 3 \
        else ((float("nan"), float("nan")), None)
    shipped = np.asarray(eta_mem(nbytes, g), dtype=float)
    mape = float(np.mean(np.abs(shipped[big] - eta[big]) / eta[big])) if big.any() else None
    return {"cells": [{"x": float(a), "bytes": float(b), "eta_measured": float(c), "eta_shipped": float(s)}
                      for a, b, c, s in zip(x, nbytes, eta, shipped)],
            "fit": {"eta_max": float(e_max), "x_half": float(x_half), "cells": int(big.sum())},
            "shipped_law_mape_x_ge_1": mape, "max_eta_in_l2": float(eta[~big].max()) if (~big).any() else None}


def _compute_cells(df, gpu, plan: str = "duty"):
    from steptime.specs import get_gpu
    from steptime.terms.gemm import gemm_time

    g = get_gpu(gpu)
    d = _cells(df, plan, gpu)
    m, n, k = (d[c].to_numpy(float) for c in ("m", "n", "k"))
    f_clk = np.clip(d["sm_clock_mhz"].to_numpy(float) / g.boost_mhz, 1e-3, None)
    model = gemm_time(m, n, k, g)
    eff = 2.0 * m * n * k / (d["latency_ms"].to_numpy() * 1e-3) / g.peak_flops
    keep = np.asarray(model["compute_bound"], dtype=bool)
    from steptime.terms.gemm import sm_fill

    fill = sm_fill(m, n, k, g)
    return d[keep], eff[keep], f_clk[keep], {kk: np.asarray(v)[keep] for kk, v in {**model, **fill}.items()
                                            if np.ndim(v) and np.size(v) == len(m)}


def duty_law(df, gpu) -> dict:
    """E1.14: the duty each compute-bound cell implies vs tiles per CTA; c of 1 / (1 + c / tiles) fitted."""
    from scipy.optimize import curve_fit

    from steptime.calibration import Constants

    d, eff, f_clk, mdl = _compute_cells(df, gpu)
    if len(d) < 3:
        raise DataError(f"{gpu}: E1.14 needs at least three compute-bound cells (found {len(d)})")
    duty = eff / (f_clk * mdl["eta_cluster"] * mdl["eta_active"])
    tpc = mdl["tiles_per_cta"]
    law = lambda t, c: 1.0 / (1.0 + c / t)  # noqa: E731
    (c_fit,), _ = curve_fit(law, tpc, duty, p0=(0.5,), sigma=duty, maxfev=20000)  # relative errors
    from steptime.specs import get_gpu

    c_shipped = float(Constants.default().get("duty_c", get_gpu(gpu)))
    err = lambda c: float(np.mean(np.abs(law(tpc, c) - duty) / duty))  # noqa: E731
    return {"cells": int(len(d)), "duty_c_fit": float(c_fit), "duty_c_shipped": c_shipped,
            "mape_fit": err(c_fit), "mape_shipped": err(c_shipped),
            "points": [{"m": int(a), "tiles_per_cta": float(b), "duty": float(c)}
                       for a, b, c in zip(d["m"], tpc, duty)]}


def _gpu(gpu):
    from steptime.specs import get_gpu

    return get_gpu(gpu)


def barrier(df, gpu) -> dict:
    """E1.15: the lumped constant (eta_active) each compute-bound cell implies; mean, CV and n."""
    from steptime.calibration import Constants

    d, eff, f_clk, mdl = _compute_cells(df, gpu)
    if len(d) < 2:
        raise DataError(f"{gpu}: E1.15 needs at least two compute-bound cells (found {len(d)})")
    b = eff / (f_clk * mdl["eta_cluster"] * mdl["eta_duty"])
    return {"cells": int(len(b)), "mean": float(b.mean()), "cv": float(b.std(ddof=1) / b.mean()),
            "shipped_eta_active": float(Constants.default().get("eta_active", _gpu(gpu))),
            "per_cell": [{"m": int(a), "n": int(nn), "k": int(kk), "barrier": float(v)}
                         for a, nn, kk, v in zip(d["m"], d["n"], d["k"], b)]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steptime_collect.gemm_sweep", description=__doc__.split("\n\n")[0]
                                + " Changes no GPU setting.")
    p.add_argument("--plan", required=True, choices=PLANS)
    p.add_argument("--gpu", required=True, help="steptime GPU key of this node's GPU (sizes the L2 plan)")
    p.add_argument("--out", required=True, type=output_path)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the cells in run order and exit (no GPU needed)")
    a = p.parse_args(argv)
    if a.dry_run:
        for rep, order, cell in run_order(plan_cells(a.plan, a.gpu), a.repeats, a.seed):
            print(rep, order, *cell)
        return 0
    collect(Path(a.out), a.plan, a.gpu, a.repeats, a.seed)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.gemm_sweep"))
