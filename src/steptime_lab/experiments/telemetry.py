"""The awaiting GPU-telemetry experiments of issue 14, each: collected files -> metrics, claims, figure.

One entry per ID: which reduction reads which telemetry, what round 1 reported (quoted as
"reported in round 1", never as ours), and the figure. `build(eid, paths, ...)` is the body
of `workflow/scripts/telemetry_experiment.py`; files are laid out raw/telemetry/<kind>/<gpu>/<file>
(the GPU is the folder name). E1.19 (the host-floor learner) is built on the vendored FPM steps
and collected step traces alike by its own rule (`steptime_lab.experiments.host.learner`, workflow/scripts/E1_19_host_learner.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from steptime.errors import SteptimeError
from steptime.plotting import save, subplots
from steptime_lab.results import rule_provenance, write_result
from steptime_collect.clock import clock_figure, parse_clock_sweep, reduce_clock_sweep
from steptime_collect.dispatch import parse_dispatch_log, tile_agreement
from steptime_collect.engine_kernels import law_gap, parse_engine_kernels
from steptime_collect.gemm_sweep import barrier, duty_law, memory_law, parse_gemm_sweep
from steptime_collect.ncu import parse_ncu_csv, reduce_factors, waterfall_figure
from steptime_collect.power import cap_chain, droop, lock_control, placement


def _gpu(path) -> str:
    return Path(path).parent.name


def _clock(p):
    return parse_clock_sweep(p)


def _sweep(p):
    return parse_gemm_sweep(p)


def _memory_law_sweep(paths, **kw):
    per = {_gpu(p): memory_law(_sweep(p), _gpu(p)) for p in paths}
    claims = [{"claim": f"{g}: steptime's shipped memory law against the measured L2 sweep (x >= 1)",
               "value": r["shipped_law_mape_x_ge_1"], "comparison": "MAPE of eta_mem, x = bytes/L2 >= 1"}
              for g, r in per.items()]
    return per, claims


def _clock_droop(paths, n_boot=1000, seed=0, **kw):
    per = {_gpu(p): droop(_clock(p), _gpu(p), n_boot=n_boot, seed=seed) for p in paths}
    claims = []
    for g, rows in per.items():
        big = rows[-1]
        claims.append({"claim": f"{g}: clock droop at m = {big['m']} (median sustained / boost, 95% CI)",
                       "value": big["droop"], "comparison": f"95% CI {big['droop_ci']}"})
        claims.append({"claim": f"{g}: share of the gap between steptime at boost clock and the measurement "
                                f"that the measured clock explains, m = {big['m']}",
                       "value": big["gap_explained_by_clock"], "comparison": "fraction (1 = all of it)"})
    return per, claims


def _clock_lock(paths, **kw):
    per = {_gpu(p): lock_control(_clock(p), _gpu(p)) for p in paths}
    claims = [{"claim": f"{g}: the large-m throughput decline free-running vs with the SM clock locked",
               "value": {"free": r["decline_free"], "locked": r["decline_locked"]},
               "comparison": "1 - TFLOP/s at the largest m / peak TFLOP/s; the lock held to CV "
                             f"{r['lock_held']:.3f}"} for g, r in per.items()]
    return per, claims


def _cap_clock_chain(paths, **kw):
    per = {_gpu(p): cap_chain(_clock(p), _gpu(p)) for p in paths}
    claims = []
    for g, r in per.items():
        big = max(r["per_m"], key=lambda x: x["m"])
        claims.append({"claim": f"{g}: cap -> clock at m = {big['m']} (correlation, slope)",
                       "value": {"r": big["r_cap_clock"], "mhz_per_w": big["slope_mhz_per_w"]},
                       "comparison": "Pearson r over caps and repeats"})
        claims.append({"claim": f"{g}: clock -> throughput at the same m", "value": r["r_clock_tflops_same_m"],
                       "comparison": "mean over m of Pearson r"})
        claims.append({"claim": f"{g}: throughput penalty of the lowest cap vs the highest, per m",
                       "value": {str(x["m"]): x["penalty_low_cap"] for x in r["per_m"]},
                       "comparison": "1 - TFLOP/s(low cap) / TFLOP/s(high cap)"})
    return per, claims


def _duty_law(paths, dispatch=(), **kw):
    per = {_gpu(p): duty_law(_sweep(p), _gpu(p)) for p in paths}
    for d in dispatch:
        if _gpu(d) in per:
            per[_gpu(d)]["dispatch"] = tile_agreement(parse_dispatch_log(d), _gpu(d))
    claims = [{"claim": f"{g}: the duty law 1/(1 + c/tiles_per_cta) on the dense m ladder: fitted c vs shipped",
               "value": {"c_fit": r["duty_c_fit"], "c_shipped": r["duty_c_shipped"], "mape_fit": r["mape_fit"],
                         "mape_shipped": r["mape_shipped"]}, "comparison": f"{r['cells']} compute-bound cells"}
              for g, r in per.items()]
    return per, claims


def _barrier_constant(paths, **kw):
    per = {_gpu(p): barrier(_sweep(p), _gpu(p)) for p in paths}
    claims = [{"claim": f"{g}: the lumped barrier constant over compute-bound cells (mean, CV, n)",
               "value": {"mean": r["mean"], "cv": r["cv"], "n": r["cells"], "shipped": r["shipped_eta_active"]},
               "comparison": "one constant if CV is small"} for g, r in per.items()]
    return per, claims


def _engine_law_gap(paths, **kw):
    per = {_gpu(p): law_gap(parse_engine_kernels(p), _gpu(p)) for p in paths}
    claims = [{"claim": f"{g}: engine kernels against the standalone memory law (median |gap|)",
               "value": r["median_abs_gap_all"], "comparison": "|eta_engine - eta_law| / eta_law"}
              for g, r in per.items()]
    return per, claims


def _cap_aware_placement(paths, seed=0, **kw):
    per = {_gpu(p): placement(_clock(p), _gpu(p), seed=seed) for p in paths}
    claims = [{"claim": f"{g}: SIMULATED placement of chunk jobs on a fleet of this card at different caps: "
                        "steptime with the measured f_clk(m, cap) vs a cap-blind datasheet scheduler",
               "value": {"mean_makespan_gain": r["mean_makespan_gain_vs_cap_blind"],
                         "oracle_matches": f"{r['oracle_matches']}/{r['n_scenarios']}"},
               "comparison": "1 - makespan(steptime) / makespan(cap-blind), measured latencies"}
              for g, r in per.items()]
    return per, claims


def _ncu_factors(paths, **kw):
    return {_gpu(p): reduce_factors(parse_ncu_csv(p), _gpu(p)) for p in paths}, []


def _clock_sweep(paths, n_boot=1000, seed=0, **kw):
    return {_gpu(p): reduce_clock_sweep(parse_clock_sweep(p), _gpu(p), n_boot=n_boot, seed=seed) for p in paths}, []


def _draw_waterfall(per_gpu, stem):
    waterfall_figure(per_gpu, stem)


def _draw_clock(per_gpu, stem):
    clock_figure(per_gpu, stem)


@dataclass(frozen=True)
class TelemetryExperiment:
    build: Callable
    round1: str
    draw: Callable | None = None   # figure(per_gpu, stem) of its own; else the summary panel of `figure`


EXPERIMENTS = {
    "E1.5": TelemetryExperiment(
        _ncu_factors, "f_clk isolated with n=5 CIs: at large m the clock is the shortfall (E1.5/E1.7)",
        _draw_waterfall),
    "E1.10": TelemetryExperiment(
        _clock_sweep, "Blackwell lab card: 1410 MHz sustained vs 3090 MHz boost, 54.4% droop (n=5)", _draw_clock),
    "E1.3b": TelemetryExperiment(
        _memory_law_sweep, "one (eta_max, x_half) = (0.90, 0.477) pair fits three SKUs at 4.59% MAPE (E1.3c); "
                           "the H200/L40S sweep itself was queued, no number"),
    "E1.6": TelemetryExperiment(
        _clock_droop, "Blackwell lab card: 1410 MHz sustained vs 3090 MHz boost, 54.4% droop (n=5, E1.10)"),
    "E1.7": TelemetryExperiment(_clock_droop, "at large m the clock droop is the whole shortfall (n=5 CIs)"),
    "E1.8": TelemetryExperiment(
        _clock_lock, "L40S: -15.6% free-running large-m decline; the lock was denied on the cluster (inconclusive)"),
    "E1.9": TelemetryExperiment(
        _cap_clock_chain, "RTX 5090, n=5: r(cap, clock) = 0.99/0.97/0.97, slope 1.4/1.7/1.8 MHz/W at "
                          "m = 4096/8192/16384; clock -> TFLOP/s r ~ 1.00; 575 -> 400 W penalty ~0% "
                          "decode-shaped, 8.7% (m=4096), 12.1% (m=16384)"),
    "E1.14": TelemetryExperiment(_duty_law, "in flight after round 1 (2/4 jobs), no number"),
    "E1.15": TelemetryExperiment(_barrier_constant, "L40S barrier 0.425, CV 1.8% (n=32) vs 0.575, CV 26.5% (n=4)"),
    "E1.17": TelemetryExperiment(_engine_law_gap, "the standalone law misses engine decode kernels by 42.3%"),
    "E2.8": TelemetryExperiment(_cap_aware_placement, "+10.5% mean makespan, oracle 6/6 (RTX 5090 cap sweep, n=3)"),
}


def build(eid: str, paths, *, n_boot: int = 1000, seed: int = 0, dispatch=()) -> tuple[dict, list]:
    """Reduce the collected files of one experiment: (metrics, claims), round 1's figure beside ours."""
    if eid not in EXPERIMENTS:
        raise SteptimeError(f"no telemetry reduction for {eid!r}; known: {', '.join(EXPERIMENTS)}")
    if not paths:
        raise SteptimeError(f"{eid}: no collected telemetry files")
    e = EXPERIMENTS[eid]
    per, claims = e.build(list(paths), n_boot=n_boot, seed=seed, dispatch=list(dispatch))
    claims.append({"claim": f"reported in round 1 ({eid}, other telemetry): {e.round1}", "value": e.round1,
                   "comparison": "round-1 figure, not ours"})
    return {"per_gpu": per}, claims


def figure(eid: str, metrics: dict, stem) -> None:
    """The experiment's own figure where it has one, else one summary panel: the per-GPU headline
    numbers as bars (units in the labels)."""
    if EXPERIMENTS[eid].draw is not None:
        EXPERIMENTS[eid].draw(metrics["per_gpu"], stem)
        return

    fig, ax = subplots(figsize=(5, 3))
    names, vals = [], []
    for g, r in metrics["per_gpu"].items():
        if eid in ("E1.6", "E1.7"):
            names += [f"{g} m={x['m']}" for x in r]
            vals += [x["droop"] for x in r]
            ax.set_ylabel("droop = 1 - sustained / boost clock")
        elif eid == "E1.3b":
            names += [f"{g} x={c['x']:.2f}" for c in r["cells"]]
            vals += [c["eta_measured"] for c in r["cells"]]
            ax.set_ylabel("achieved / datasheet DRAM bandwidth")
        elif eid == "E1.8":
            names += [f"{g} {k}" for k in ("free", "locked")]
            vals += [r["decline_free"], r["decline_locked"]]
            ax.set_ylabel("large-m decline in TFLOP/s (fraction)")
        elif eid == "E1.9":
            names += [f"{g} m={x['m']}" for x in r["per_m"]]
            vals += [x["penalty_low_cap"] for x in r["per_m"]]
            ax.set_ylabel("throughput penalty, lowest vs highest cap")
        elif eid == "E1.14":
            names += [f"{g} c fit", f"{g} c shipped"]
            vals += [r["duty_c_fit"], r["duty_c_shipped"]]
            ax.set_ylabel("duty constant c (tiles per CTA)")
        elif eid == "E1.15":
            names += [f"{g} mean", f"{g} CV"]
            vals += [r["mean"], r["cv"]]
            ax.set_ylabel("barrier (fraction) / CV")
        elif eid == "E1.17":
            names += [f"{g} {c}" for c in r["per_class"]]
            vals += [v["median_gap"] for v in r["per_class"].values()]
            ax.set_ylabel("median (eta_engine - eta_law) / eta_law")
        elif eid == "E2.8":
            names += [g]
            vals += [r["mean_makespan_gain_vs_cap_blind"]]
            ax.set_ylabel("makespan gain vs cap-blind (simulated)")
    ax.bar(range(len(vals)), vals, color="#1b6ca8")
    ax.set_xticks(range(len(vals)), names, rotation=60, ha="right", fontsize=7)
    ax.set_title(eid)
    save(fig, stem, caption=f"{eid}: per-GPU summary from the collected telemetry (see results/{eid.replace('.', '_')}"
                            ".json for every number and the round-1 figure beside it).", tight_layout=True)


def report(smk, script: str = "workflow/scripts/telemetry_experiment.py") -> tuple[dict, list]:
    """The body of every awaiting experiment's Snakemake script: reduce the collected files
    (`smk.input.telemetry`, laid out raw/telemetry/<kind>/<gpu>/<file>: the GPU is the folder name),
    write `smk.output.result` with provenance from what the rule declared (`rule_provenance`: its
    inputs, its params as the config), draw the figure at the stem of `smk.output.fig`.
    `smk` is the script's `snakemake` object (or anything with those attributes)."""
    p = smk.params
    metrics, claims = build(p.id, list(smk.input.telemetry), n_boot=p.bootstrap, seed=p.seed,
                            dispatch=list(getattr(smk.input, "dispatch", None) or []))
    write_result(smk.output.result, id=p.id, question=p.question, metrics=metrics, claims=claims,
                 provenance=rule_provenance(smk, script=script))
    figure(p.id, metrics, Path(smk.output.fig).with_suffix(""))
    return metrics, claims
