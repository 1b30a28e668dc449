"""E1.16: the metric-divergence lesson, read from R2.3's result (nothing recomputed here).

Two profiles of the same engine on the same GPU: the shipped one, whose kernel constants (the
L2-aware memory law among them) are calibrated on per-operator tables, and the one R2.3 calibrates
to three wall-clock steps (arm B: engine constants; arm C: one scale k on every kernel term with the
per-step cost and the all-reduce offset). Each is scored on two metrics R2.3 already computed: MAPE on
the per-operator tables (`per_op_cost`) and held-out step MAPE on real engine steps
(`gain_by_phase`). The lesson holds for an arm when the two metrics rank the two profiles oppositely:
the per-operator tables prefer the per-operator calibration on every table the wall-clock fit changes,
and the wall clock prefers the wall-clock calibration in every phase.

    r23 = json.load(open("results/R2_3.json"))
    doc = document(r23, targets={"per_op_delta_below": 0.0, "wallclock_delta_below": 0.0})
"""

from __future__ import annotations

from steptime_lab.results import claim, target

PHASES = ("prefill", "decode", "mixed")


def _r(x, n=4):
    return None if x is None else round(float(x), n)


def pairs(r23: dict) -> list[dict]:
    """One record per (engine@GPU, arm) of R2.3's metrics: the two metrics for the shipped profile and
    the arm's wall-clock calibration, and their deltas (wall-clock calibration minus per-operator one)."""
    from steptime.errors import SteptimeError

    out = []
    for where, m in sorted((r23.get("metrics") or {}).items()):
        eng = m.get("engine")
        arms = {"arm_B": next((n for n, t in (m.get("arms") or {}).items() if t.startswith("arm B")), None),
                "arm_C": next((n for n, t in (m.get("arms") or {}).items() if t.startswith("arm C")), None)}
        for arm, name in arms.items():
            rows = (m.get("per_op_cost") or {}).get(arm)
            if name is None or rows is None:
                continue
            changed = [c for c in rows if c["scale"] != 1.0 or c["offset_us"] != 0.0]
            per_op = {c["table"]: {"per_op_calibrated": c["mape_per_op_calibrated"],
                                   "wallclock_calibrated": c["mape_wallclock_scaled"], "cells": c["cells"],
                                   "changed": c in changed} for c in rows}
            wall = {}
            for g in m.get("gain_by_phase") or []:
                if eng not in g or name not in g:
                    raise SteptimeError(f"R2.3 {where}: gain_by_phase row {g.get('phase')} lacks {eng} or {name}")
                wall[g["phase"]] = {"per_op_calibrated": g[eng], "wallclock_calibrated": g[name], "steps": g["steps"]}
            out.append({"where": where, "gpu": m.get("gpu"), "engine": eng, "arm": arm, "wallclock_profile": name,
                        "per_op": per_op, "wallclock": wall,
                        "per_op_delta": {t: _r(v["per_op_calibrated"] - v["wallclock_calibrated"])
                                         for t, v in per_op.items() if v["changed"]},
                        "wallclock_delta": {p: _r(v["wallclock_calibrated"] - v["per_op_calibrated"])
                                            for p, v in wall.items()}})
    if not out:
        raise SteptimeError("E1.16: R2.3's result holds no per-operator price of a wall-clock arm (metrics.*.per_op_cost)")
    return out


def document(r23: dict, targets: dict) -> dict:
    """Metrics and claims of E1.16 from R2.3's result document."""
    lo_op = target(targets, "per_op_delta_below", "E1.16")
    lo_wall = target(targets, "wallclock_delta_below", "E1.16")
    claims = []
    ps = pairs(r23)
    for p in ps:
        tag = f"{p['engine']}@{p['gpu']} {p['arm']} ({p['wallclock_profile']})"
        if p["per_op_delta"]:
            claims.append(claim(f"{tag}: per-operator tables: the per-operator calibration (L2-aware memory law and all) "
                                "has the lower MAPE on every table the wall-clock fit changes (MAPE per-operator-"
                                "calibrated minus wall-clock-calibrated)", p["per_op_delta"], f"< {lo_op} on every table",
                                lo_op, all(v < lo_op for v in p["per_op_delta"].values()), op="<", unit="MAPE points",
                                rule="all"))
        claims.append(claim(f"{tag}: real engine steps held out: the wall-clock calibration has the lower step MAPE in "
                            "every phase (MAPE wall-clock-calibrated minus per-operator-calibrated)", p["wallclock_delta"],
                            f"< {lo_wall} in every phase", lo_wall,
                            all(v < lo_wall for v in p["wallclock_delta"].values()), op="<", unit="MAPE points",
                            rule="all"))
        claims.append(claim(f"{tag}: phases where the wall clock prefers the wall-clock calibration",
                            sorted(k for k, v in p["wallclock_delta"].items() if v < lo_wall), "descriptive"))
    metrics = {"pairs": ps, "source": "results/R2_3.json (metrics.*.per_op_cost and metrics.*.gain_by_phase)",
               "reading": "per_op_delta < 0: the per-operator tables prefer the per-operator calibration; "
                          "wallclock_delta < 0: the held-out wall clock prefers the wall-clock calibration; both "
                          "together: the two metrics rank the two profiles oppositely (the divergence)"}
    return {"metrics": metrics, "claims": claims}


def plot(ps: list[dict], stem, caption: str) -> None:
    """Left (E1.16a): per-operator MAPE per table, per-operator vs wall-clock calibration (each arm); right
    (E1.16b): held-out step MAPE per phase, the same profiles."""
    import numpy as np

    from steptime.plotting import PALETTE, save, subplots

    fig, axes = subplots(1, 2, figsize=(10, 3.6))
    tabs = sorted({t for p in ps for t in p["per_op"]})
    phases = [ph for ph in PHASES if any(ph in p["wallclock"] for p in ps)]
    bars = [("per-operator calibrated (shipped)", None)] + [(f"{p['arm']}: wall-clock calibrated", p) for p in ps]
    w = 0.8 / len(bars)
    colors = list(dict.fromkeys(PALETTE.values()))  # the house colour-blind palette, in order
    for ax, keys, field, xlabel in ((axes[0], tabs, "per_op", "per-operator MAPE (fraction)"),
                                    (axes[1], phases, "wallclock", "held-out step MAPE (fraction)")):
        y = np.arange(len(keys))
        for i, (label, p) in enumerate(bars):
            src = p or ps[0]
            col = "per_op_calibrated" if p is None else "wallclock_calibrated"
            v = [src[field].get(k, {}).get(col, np.nan) for k in keys]
            ax.barh(y + (i - (len(bars) - 1) / 2) * w, v, w, color=colors[i % len(colors)], label=label)
        ax.set_yticks(y, keys, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
    axes[0].set_title("E1.16a: per-operator tables")
    axes[1].set_title("E1.16b: real engine steps (held out)")
    axes[0].legend(fontsize=7, loc="lower right")  # room there: the per-operator MAPEs of the GEMM rows are small
    save(fig, stem, caption=caption, tight_layout=True)
