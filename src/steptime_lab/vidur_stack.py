"""Vidur's measurement-stack factor, one implementation for every experiment that scores Vidur's rows.

Vidur's profiler times the projections of Sarathi-Serve's fp16 model through PyTorch (its own cuBLAS, kernel
durations from the torch profiler trace); steptime's GEMM constants are fitted on AIConfigurator's tables. Once the
GEMM is compute-bound at the large tile (m >= regimes.VIDUR_STACK_MIN_M) Vidur's rows run 1.1-1.15x slower than the
held-out law on every Vidur GPU, and within a few percent at small m: a compute-rate factor of the stack (DESIGN.md,
wave 31 `vgemm`, wave 32 `e11h`). A scored GPU's factor is the median measured / held-out prediction over the OTHER
Vidur GPUs' projection rows at m >= VIDUR_STACK_MIN_M (`fit_stack_factor`); its GEMM compute branch then runs at
eta_active / factor (`stacked_eta`), the memory branch unchanged. E1.29 (`tp_shapes`), E1.1 (`step`) and E2.1's
Vidur step (`transfer`) call these two functions.
"""

from __future__ import annotations

import numpy as np

from steptime_lab.regimes import VIDUR_STACK_MIN_M

STACK_ROWS = ("gpu", "m", "measured", "predicted")


def fit_stack_factor(rows, gpu: str, min_m: int = VIDUR_STACK_MIN_M) -> dict:
    """Vidur's stack factor for `gpu`: the median of measured / predicted over the rows of `rows` (a frame with the
    columns STACK_ROWS: one row per Vidur projection cell of some GPU, `predicted` its held-out prediction without a
    factor) of the GPUs other than `gpu` with m >= `min_m` and a positive measured time. `gpu`'s own rows set
    nothing. {"factor" (4 decimals), "fitted_on" (the GPUs whose rows set it), "cells", "min_m"}; factor 1 (no
    correction) when no such row exists."""
    missing = [c for c in STACK_ROWS if c not in rows.columns]
    if missing:
        raise ValueError(f"fit_stack_factor needs the columns {list(STACK_ROWS)}, missing {missing}")
    min_m = int(min_m)
    y = rows["measured"].to_numpy(float)
    o = rows[(rows["gpu"] != gpu).to_numpy() & (rows["m"] >= min_m).to_numpy() & np.isfinite(y) & (y > 0)]
    r = o["measured"].to_numpy(float) / o["predicted"].to_numpy(float)
    return {"factor": round(float(np.median(r)), 4) if len(r) else 1.0,
            "fitted_on": sorted(map(str, o["gpu"].unique())), "cells": int(len(r)), "min_m": min_m}


def stacked_eta(eta: float, factor: float, gpu: str) -> float:
    """`gpu`'s eta_active under Vidur's stack: eta / `factor` (a positive number, else a clear error)."""
    f = float(factor)
    if not np.isfinite(f) or f <= 0:
        raise ValueError(f"{gpu}: a measurement-stack factor must be a positive number, got {factor!r}")
    return float(eta) / f
