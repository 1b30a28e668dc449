"""Reductions of clock sweeps taken under power caps and locked clocks (E1.6, E1.7, E1.8, E1.9)
and the power-aware placement they feed (E2.8).

All take the checked table of `steptime_collect.clock.parse_clock_sweep` (one row per cell:
run, m, n, k, latency, sustained SM clock, power, and the cap / lock the cell ran under).

- E1.7 `droop`: per m the sustained clock with a 95% bootstrap interval across repeats, the
  droop 1 - clock/boost, and how much of the gap between steptime's prediction at boost
  clock and the measured latency the measured clock explains.
- E1.8 `lock_control`: free-running vs locked-clock TFLOP/s over m; if the large-m decline
  is the clock, it vanishes under the lock and the clock-normalised curves agree.
- E1.9 `cap_chain`: per (cap, m) clock / TFLOP/s / power with Student-t 95% intervals over
  repeats; per m the correlation and slope of clock on cap, overall clock -> TFLOP/s, and
  the throughput penalty of the lowest cap against the highest, per m.
- E2.8 `placement`: chunk jobs placed on a fleet of the same card at different caps by
  longest-processing-time-first with three cost models (cap-blind datasheet, steptime with
  the measured f_clk(m, cap), and the brute-force oracle on the measured times); makespans
  are evaluated on the measured latencies. Simulated placement on measured times.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import itertools

import numpy as np

from steptime.errors import DataError


def _t_ci(x, level: float = 0.95):
    from scipy import stats

    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return [float(x.mean()), float(x.mean())]
    h = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return [float(x.mean() - h), float(x.mean() + h)]


def _tflops(df):
    return 2.0 * df["m"] * df["n"] * df["k"] / (df["latency_ms"] * 1e-3) / 1e12


def droop(df, gpu, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """E1.7 per m: sustained clock (median, 95% bootstrap CI), droop vs boost, and the share of the
    gap between steptime at boost clock and the measurement that the measured clock explains."""
    from steptime_lab.metrics import bootstrap_ci
    from steptime.specs import get_gpu
    from steptime.terms.gemm import gemm_time

    g = get_gpu(gpu)
    free = df[df["cap_w"].isna() & df["locked_mhz"].isna()]
    if free.empty:
        raise DataError(f"{gpu}: no free-running cells (no cap, no lock) in the sweep")
    out = []
    for (m, n, k), grp in free.groupby(["m", "n", "k"], sort=True):
        clk = grp["sm_clock_mhz"].to_numpy(float)
        med = float(np.median(clk))
        lo, hi = bootstrap_ci(clk, stat=np.median, n_boot=n_boot, seed=seed)
        f = med / g.boost_mhz
        t_meas = float(np.median(grp["latency_ms"]))
        t_boost = float(gemm_time(np.array([m]), n, k, g, f_clk=1.0)["t"][0]) * 1e3
        t_clock = float(gemm_time(np.array([m]), n, k, g, f_clk=f)["t"][0]) * 1e3
        gap = t_meas - t_boost
        out.append({"m": int(m), "n": int(n), "k": int(k), "runs": int(len(grp)), "sm_clock_mhz": med,
                    "sm_clock_ci": [lo, hi], "droop": 1.0 - f, "droop_ci": [1.0 - hi / g.boost_mhz,
                                                                              1.0 - lo / g.boost_mhz],
                    "t_measured_ms": t_meas, "t_steptime_boost_ms": t_boost, "t_steptime_clock_ms": t_clock,
                    "gap_explained_by_clock": (t_clock - t_boost) / gap if abs(gap) > 1e-12 else None})
    return out


def lock_control(df, gpu) -> dict:
    """E1.8: free vs locked TFLOP/s per m, the large-m decline in each, and the clock-normalised curves."""
    d = df[df["cap_w"].isna()].assign(tflops=_tflops(df[df["cap_w"].isna()]))
    free, locked = d[d["locked_mhz"].isna()], d[d["locked_mhz"].notna()]
    if free.empty or locked.empty:
        raise DataError(f"{gpu}: E1.8 needs both free-running and locked-clock cells")
    rows = []
    for m in sorted(set(free["m"]) & set(locked["m"])):
        f, lk = free[free["m"] == m], locked[locked["m"] == m]
        rows.append({"m": int(m), "tflops_free": float(f["tflops"].mean()), "tflops_locked": float(lk["tflops"].mean()),
                     "clock_free_mhz": float(f["sm_clock_mhz"].mean()),
                     "clock_locked_mhz": float(lk["sm_clock_mhz"].mean()),
                     "tflops_per_ghz_free": float((f["tflops"] / f["sm_clock_mhz"]).mean() * 1e3),
                     "tflops_per_ghz_locked": float((lk["tflops"] / lk["sm_clock_mhz"]).mean() * 1e3)})
    if len(rows) < 2:
        raise DataError(f"{gpu}: E1.8 needs at least two m values run both free and locked")
    peak_free = max(r["tflops_free"] for r in rows)
    peak_locked = max(r["tflops_locked"] for r in rows)
    last = rows[-1]
    return {"per_m": rows, "decline_free": 1.0 - last["tflops_free"] / peak_free,
            "decline_locked": 1.0 - last["tflops_locked"] / peak_locked,
            "lock_held": float(np.std([r["clock_locked_mhz"] for r in rows]) / np.mean([r["clock_locked_mhz"]
                                                                                         for r in rows]))}


def cap_chain(df, gpu) -> dict:
    """E1.9: cap -> clock -> throughput, with Student-t 95% intervals over repeats."""
    from scipy import stats

    d = df[df["cap_w"].notna() & df["locked_mhz"].isna()]
    d = d.assign(tflops=_tflops(d))
    caps = sorted(d["cap_w"].unique())
    if len(caps) < 2:
        raise DataError(f"{gpu}: E1.9 needs cells at two or more power caps (found {caps})")
    cells = []
    for (cap, m), grp in d.groupby(["cap_w", "m"], sort=True):
        cells.append({"cap_w": float(cap), "m": int(m), "runs": int(len(grp)),
                      "clock_mhz": float(grp["sm_clock_mhz"].mean()), "clock_ci": _t_ci(grp["sm_clock_mhz"]),
                      "tflops": float(grp["tflops"].mean()), "tflops_ci": _t_ci(grp["tflops"]),
                      "power_w": float(grp["power_w"].mean())})
    per_m = []
    for m in sorted(d["m"].unique()):
        grp = d[d["m"] == m]
        if grp["cap_w"].nunique() < 2:
            continue
        fit = stats.linregress(grp["cap_w"], grp["sm_clock_mhz"])
        hi = grp[grp["cap_w"] == caps[-1]]["tflops"].mean()
        lo = grp[grp["cap_w"] == caps[0]]["tflops"].mean()
        per_m.append({"m": int(m), "r_cap_clock": float(fit.rvalue) if np.isfinite(fit.rvalue) else None,
                      "slope_mhz_per_w": float(fit.slope), "penalty_low_cap": float(1.0 - lo / hi)})
    r_ct = stats.pearsonr(d["sm_clock_mhz"], d["tflops"]) if d["sm_clock_mhz"].nunique() > 1 else None
    return {"caps_w": caps, "cells": cells, "per_m": per_m,
            "r_clock_tflops_same_m": _within_m_r(d),
            "r_clock_tflops_pooled": float(r_ct.statistic) if r_ct is not None else None}


def _within_m_r(d):
    """Mean over m of the clock -> TFLOP/s correlation across caps and repeats at that m."""
    from scipy import stats

    rs = []
    for _, grp in d.groupby("m"):
        if grp["sm_clock_mhz"].nunique() > 1 and grp["tflops"].nunique() > 1:
            rs.append(stats.pearsonr(grp["sm_clock_mhz"], grp["tflops"]).statistic)
    return float(np.mean(rs)) if rs else None


def _lpt(jobs, cost):
    """Longest processing time first: job j to the machine that finishes it earliest under `cost[j, g]`."""
    load = np.zeros(cost.shape[1])
    assign = np.zeros(len(jobs), dtype=int)
    for j in np.argsort(-cost.min(axis=1), kind="stable"):
        g = int(np.argmin(load + cost[j]))
        assign[j] = g
        load[g] += cost[j, g]
    return assign


def placement(df, gpu, n_scenarios: int = 20, jobs_per_scenario: int = 8, seed: int = 0) -> dict:
    """E2.8: makespan of chunk jobs on the same card at different caps, by three cost models."""
    from steptime.specs import get_gpu
    from steptime.terms.gemm import gemm_time

    g = get_gpu(gpu)
    d = df[df["cap_w"].notna() & df["locked_mhz"].isna()]
    caps = sorted(d["cap_w"].unique())
    if len(caps) < 2:
        raise DataError(f"{gpu}: E2.8 needs a sweep over two or more power caps")
    ms = sorted(m for m in d["m"].unique() if d[d["m"] == m]["cap_w"].nunique() == len(caps))
    n, k = int(d["n"].iloc[0]), int(d["k"].iloc[0])
    meas = {(c, m): float(d[(d["cap_w"] == c) & (d["m"] == m)]["latency_ms"].median()) for c in caps for m in ms}
    fclk = {(c, m): float(d[(d["cap_w"] == c) & (d["m"] == m)]["sm_clock_mhz"].median()) / g.boost_mhz
            for c in caps for m in ms}
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n_scenarios):
        jobs = rng.choice(ms, size=jobs_per_scenario)
        true = np.array([[meas[(c, m)] for c in caps] for m in jobs])
        blind = np.array([[2.0 * m * n * k / g.peak_flops for _ in caps] for m in jobs])
        aware = np.array([[float(gemm_time(np.array([m]), n, k, g, f_clk=fclk[(c, m)])["t"][0]) for c in caps]
                          for m in jobs])

        def makespan(assign):
            return max(true[assign == j, j].sum() for j in range(len(caps)))

        best = min(makespan(np.array(a)) for a in itertools.product(range(len(caps)), repeat=len(jobs)))
        out.append({"scenario": s, "jobs": [int(m) for m in jobs], "makespan_ms": {
            "cap_blind": makespan(_lpt(jobs, blind)), "steptime_fclk": makespan(_lpt(jobs, aware)), "oracle": best}})
    gain = [1.0 - r["makespan_ms"]["steptime_fclk"] / r["makespan_ms"]["cap_blind"] for r in out]
    hit = [np.isclose(r["makespan_ms"]["steptime_fclk"], r["makespan_ms"]["oracle"]) for r in out]
    return {"caps_w": caps, "m_values": [int(m) for m in ms], "scenarios": out,
            "mean_makespan_gain_vs_cap_blind": float(np.mean(gain)), "oracle_matches": int(np.sum(hit)),
            "n_scenarios": n_scenarios, "simulated": True}
