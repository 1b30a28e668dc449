"""Wall-clock experiments on the forward-pass-metrics (FPM) step tables: E1.26 + R2.3 + E1.18 on one
(GPU, engine) table (`run_fpm`), the fitted engine-constants document, and the tidy FPM table as steps.

Part of `steptime_lab.experiments.wallclock` (import from there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from steptime_lab.experiments.wallclock.steps import (
    BLOCK_SCALE, COMM_OFFSET, COMM_SCALE, PREFILL_RESIDUAL_NOTE, READING_RULE, ROW_READING_NOTE, SCALES, STEP_ADJUSTMENTS,
    WallclockError, check_steps, prefill_residual, row_reading_fpm, INLINE_ROW_NOTE, inline_row_ms, COLLECTION_UNIT_NOTE, collection_units, merged_units,
    SPLIT_SIGNAL_NOTE, split_kv_signal, without_split_cost,
    exposed_host, fit_engine_constants, make_predictor, predict_table, reading_rule, score_steps, shares,
    signed_error_bins, residual_terms, tp_scaling, with_scales,
)
from steptime.calibration import Calibration
from steptime.io import atomic_path, read_yaml
from steptime.specs import get_gpu
from steptime.specs.engines import get_engine
from steptime_lab.run_constants import require_constants


# ---------------------------------------------------------------------------------------
# E1.26 + R2.3 + E1.18 on one (GPU, engine) step table
@dataclass
class FpmSpec:
    """What run_fpm fits and compares (all from the workflow's params)."""
    model: str
    engine: str = "vllm"
    dtype: str = "bf16"
    fit_names: tuple = ("host_a_ms", "host_b_ms", "host_ray_tp_ms")        # R2.3: the engine's constants
    block_fit_names: tuple = ("host_a_ms", BLOCK_SCALE, "host_ray_tp_ms")   # R2.3 arm C: scale on kernels
    bounds: dict = field(default_factory=dict)
    small_requests: int = 4
    kv_bucket: int = 512
    eager_reading_tokens: int = 0  # > 0: that eager sweep prefill is read in place of eager_reading_slot (wave 33)
    eager_reading_slot: str = "largest_tp_decode"  # the decode reading it replaces (steps.EAGER_SLOTS)


def run_fpm(steps, spec: FpmSpec, *, fitted_doc=None, n_boot: int = 1000, seed: int = 0, constants=None) -> dict:
    """Every predictor on the same held-out steps of one (GPU, engine) table.

    Without `fitted_doc`, R2.3: the engine constants `spec.fit_names` (and the block-scale
    arm's `spec.block_fit_names`) are fitted on the three reading steps. With it (the
    engine_constants.yaml R2.3 wrote), E1.26: those values are used as written, after
    checking that they were read from the same three steps the rule picks here. `constants`: the
    rule's settled constants (None: the shipped ones)."""
    check_steps(steps)
    gpus = steps["gpu"].unique()
    if len(gpus) != 1:
        raise WallclockError(f"run_fpm: one GPU per call (got {sorted(gpus)})")
    gpu = str(gpus[0])
    rd = reading_rule(steps, eager_tokens=spec.eager_reading_tokens, eager_slot=spec.eager_reading_slot)
    ev = steps.drop(index=rd.excluded)
    cal = Calibration()
    cal.record(f"engine[{spec.engine}@{gpu}]", rd.cells, READING_RULE)
    cal.check_disjoint([(str(r.gpu), str(r.engine), int(r.tp), str(r.phase), int(r.decode_requests), int(r.step))
                        for r in ev.itertuples()])
    c0 = require_constants(constants, "wallclock.fpm.run_fpm")
    eng = with_scales(make_predictor(spec.engine, spec.model, gpu, engine=spec.engine, dtype=spec.dtype, constants=c0))
    preds = {"kernels": make_predictor("kernels", spec.model, gpu, dtype=spec.dtype, constants=c0), spec.engine: eng,
             "roofline": make_predictor("roofline", spec.model, gpu, constants=c0)}
    fit_name, blk_name = f"{spec.engine}_wallclock_fit", f"{spec.engine}_wallclock_block_scale"
    x0, bnd = _fit_start(spec, gpu, c0)
    fitted_blk = None
    if fitted_doc is None:
        fitted = fit_engine_constants(steps, rd, eng, list(spec.fit_names), x0, bnd)
        blk = eng
        fitted_blk = fit_engine_constants(steps, rd, blk, list(spec.block_fit_names), x0, bnd)
    else:
        fitted, cells = fitted_values(fitted_doc, spec.engine, gpu)
        if sorted(map(tuple, cells)) != sorted(map(tuple, rd.cells)):
            raise WallclockError(f"engine constants for {spec.engine}@{gpu} were read from {cells}, "
                                 f"not the rule's steps {rd.cells}")
    tabs = {name: predict_table(ev, p) for name, p in preds.items()}
    tabs[fit_name] = predict_table(ev, eng, fitted)
    if fitted_blk is not None:
        tabs[blk_name] = predict_table(ev, eng, fitted_blk)
    # the engine's row reading (INLINE_ROW_NOTE): the same fitted prediction, each row read as what the engine's
    # loop times (next step's host from the FULL table, so a reading step can be the next step); no new constant
    inline_name = f"{fit_name}_inline_row"
    full = predict_table(steps, eng, fitted)
    tabs[inline_name] = tabs[fit_name].assign(pred_ms=inline_row_ms(steps, full).loc[ev.index].to_numpy())
    sol_ok = ev["latency_ms"].to_numpy() >= tabs["roofline"]["pred_ms"].to_numpy()
    # the same row reading with each row under its batch's roofline merged with the row before (COLLECTION_UNIT_NOTE)
    units = collection_units(ev, tabs["roofline"]["pred_ms"].to_numpy())
    ev_u, pred_u = merged_units(ev, tabs[inline_name], units)
    scores = {name: score_steps(ev, t, n_boot=n_boot, seed=seed) for name, t in tabs.items()}
    scores_sol = {name: score_steps(ev[sol_ok], t, n_boot=n_boot, seed=seed) for name, t in tabs.items()}
    scaling = {name: tp_scaling(ev, t, kv_bucket=spec.kv_bucket) for name, t in tabs.items()}
    ev_tok = ev.assign(tokens=ev["ctx_tokens"] + ev["decode_requests"])
    focus = [n for n in (spec.engine, fit_name, "kernels", "roofline") if n in tabs]
    bins_req = {n: signed_error_bins(ev, tabs[n], "decode_requests", [0, 2, 5, 9, 17, 25, 33, 65, 129]) for n in focus}
    bins_tok = {n: signed_error_bins(ev_tok, tabs[n], "tokens", [0, 33, 129, 513, 2049, 4097, 8193]) for n in focus}
    return {"gpu": gpu, "engine": spec.engine, "model": spec.model, "readings": rd, "calibration": cal,
            "fitted": fitted, "fitted_block": fitted_blk, "x0": x0, "eval": ev, "pred": tabs,
            "scores": scores, "scores_sol": scores_sol, "tp_scaling": scaling,
            "shares": {n: shares(tabs[n], ev) for n in focus if n != "roofline"},
            "residual_terms": {n: residual_terms(ev, tabs[n]) for n in focus if n != "roofline"},
            "signed_vs_requests": bins_req, "signed_vs_tokens": bins_tok,
            "exposed_host": exposed_host(ev, tabs[spec.engine], spec.small_requests),  # the engine's own GPU part
            "below_speed_of_light": {"steps": int((~sol_ok).sum()),
                                     "by_tp_phase": [{"tp": int(tp), "phase": ph, "steps": int(n)} for (tp, ph), n in
                                                     ev[~sol_ok].groupby(["tp", "phase"]).size().items()]},
            "row_reading": {"note": ROW_READING_NOTE,
                            "by_tp": row_reading_fpm(steps, full["pred_ms"].to_numpy(),
                                                     predict_table(steps, preds["roofline"])["pred_ms"].to_numpy(),
                                                     get_engine(spec.engine).get("graph_max_tokens", gpu, c0))},
            "prefill_residual": {"note": PREFILL_RESIDUAL_NOTE, "predictor": fit_name,
                                 "by_tp": prefill_residual(ev, tabs[fit_name])},
            "split_signal": {"note": SPLIT_SIGNAL_NOTE, "predictor": fit_name,
                             "by_tp": split_kv_signal(ev, tabs[fit_name], predict_table(
                                 ev, with_scales(make_predictor(spec.engine, spec.model, gpu, engine=spec.engine,
                                                                dtype=spec.dtype, constants=without_split_cost(c0))),
                                 fitted))},
            "collection_units": {"note": COLLECTION_UNIT_NOTE, "predictor": inline_name,
                                 "merged_rows": [{"tp": int(ev.at[i, "tp"]), "step": int(ev.at[i, "step"]),
                                                  "into_step": int(ev.at[u, "step"])}
                                                 for i, u in units.items() if i != u],
                                 "scores": score_steps(ev_u, pred_u, n_boot=n_boot, seed=seed)},
            "names": {"fit": fit_name, "block": blk_name, "inline": inline_name}}


def exposed_host_fpm(steps, max_requests: int = 4, *, constants=None) -> list[dict]:
    """E1.18's step part: `exposed_host` per (gpu, engine, model) of a step table (fpm_steps), each against the
    GPU part of ITS OWN engine profile's prediction (the engine column: vllm, vllm-v1-sync, ...), with the bare
    'kernels' prediction beside it as a diagnostic only."""
    check_steps(steps)
    c0 = require_constants(constants, "wallclock.fpm.exposed_host_fpm")
    small = steps[(steps["phase"] == "decode") & (steps["decode_requests"] <= max_requests)]
    out = []
    for (gpu, engine, model), s in small.groupby(["gpu", "engine", "model"], sort=True):
        prof = predict_table(s, make_predictor(engine, model, gpu, engine=engine, constants=c0))
        kern = predict_table(s, make_predictor("kernels", model, gpu, constants=c0))
        out += exposed_host(s, prof, max_requests, kernels_pred=kern)
    return out


def repeat_spread(steps, spec: FpmSpec, targets: dict, *, draws: int = 30, seed: int = 0, constants=None) -> dict:
    """How much E1.26's score depends on which repeat of each read composition is read.

    The three compositions are the rule's (reading_rule); each of `draws` draws reads one uniformly
    random repeat of each, fits `spec.fit_names` on them as R2.3 does, and scores the same held-out
    steps (every repeat of a read composition stays out of scoring whichever is read). Returns the
    pass count of the phase x TP cells (targets['fpm_mape']) and of the TP ratios
    (targets['tp_ratio_error']) per draw, their spread, and each cell's MAPE range; plus the same
    for the median-repeat reading (the rule) and the earliest repeat (the rule before issue 19)."""
    check_steps(steps)
    gpu = str(steps["gpu"].iloc[0])
    eng = make_predictor(spec.engine, spec.model, gpu, engine=spec.engine, dtype=spec.dtype, constants=constants)
    x0, bnd = _fit_start(spec, gpu, constants)
    ev = steps.drop(index=reading_rule(steps, eager_tokens=spec.eager_reading_tokens,
                                       eager_slot=spec.eager_reading_slot).excluded)

    def one(pick):
        rd = reading_rule(steps, pick=pick, eager_tokens=spec.eager_reading_tokens,
                          eager_slot=spec.eager_reading_slot)
        fitted = fit_engine_constants(steps, rd, eng, list(spec.fit_names), x0, bnd)
        t = predict_table(ev, eng, fitted)
        ape = (t["pred_ms"] / ev["latency_ms"] - 1.0).abs()
        cells = {f"tp{int(tp)}/{ph}": float(v) for (tp, ph), v in ape.groupby([ev["tp"], ev["phase"]]).mean().items()}
        ratios = {f"tp{s['tp']}": float(s["mean_abs_ratio_error"]) for s in tp_scaling(ev, t, kv_bucket=spec.kv_bucket)}
        n_cells = sum(v <= targets["fpm_mape"][k.split("/")[1]] for k, v in cells.items())
        n_ratio = sum(v <= targets["tp_ratio_error"] for v in ratios.values())
        return {"cells": cells, "ratios": ratios, "cells_met": int(n_cells), "ratios_met": int(n_ratio),
                "read_steps": [int(steps.at[i, "step"]) for i in rd.rows],
                "read_ms": [float(steps.at[i, "latency_ms"]) for i in rd.rows],
                "fitted": {k: float(v) for k, v in fitted.items()}}

    rng = np.random.default_rng(seed)
    runs = [one(rng) for _ in range(draws)]
    med, early = one("median"), one("earliest")

    def spread(key):
        v = np.array([r[key] for r in runs])
        return {"min": int(v.min()), "median": float(np.median(v)), "max": int(v.max()),
                "histogram": {int(k): int((v == k).sum()) for k in sorted(set(v.tolist()))}}

    def ranges(key):
        names = sorted(runs[0][key])
        return {n: {"min": float(min(r[key][n] for r in runs)), "median": float(np.median([r[key][n] for r in runs])),
                    "max": float(max(r[key][n] for r in runs))} for n in names}

    return {"draws": draws, "seed": seed, "cells_total": len(med["cells"]), "ratios_total": len(med["ratios"]),
            "cells_met": spread("cells_met"), "ratios_met": spread("ratios_met"),
            "cell_mape": ranges("cells"), "ratio_error": ranges("ratios"),
            "median_repeat": med, "earliest_repeat": early}


def _fit_start(spec: FpmSpec, gpu: str, constants=None):
    """(x0, bounds) of R2.3's fit: shipped values (scales 1, offsets 0) and the fit's bounds."""
    c0 = require_constants(constants, "wallclock.fpm._fit_start")
    names = list(dict.fromkeys(list(spec.fit_names) + list(spec.block_fit_names)))
    x0 = {n: (1.0 if n in SCALES else 0.0 if n == COMM_OFFSET else _start_value(n, spec.engine, gpu, c0))
          for n in names}
    bnd = {BLOCK_SCALE: (0.3, 3.0), COMM_SCALE: (0.0, 3.0), COMM_OFFSET: (-50.0, 50.0),
           **{k: tuple(v) for k, v in spec.bounds.items()}}
    return x0, bnd


def _start_value(name: str, engine: str, gpu: str, constants) -> float:
    """The shipped value of an engine field (profile) or a calibration constant, for one GPU."""
    e = get_engine(engine, fitted={})
    g = get_gpu(gpu)
    if name in e.values:
        return float(e.get(name, g, constants))
    return float(constants.get(name, g))


def engine_constants_doc(fits: list[dict], spec: FpmSpec, experiment: str = "R2.3") -> dict:
    """The fitted-constants file: engine fields under `engines`, calibration constants under
    `constants`, each {value, provenance: FITTED, source, experiment, cells}."""
    doc: dict = {"engines": {}, "constants": {}, "scales": {}}
    for r in fits:
        fields = set(get_engine(r["engine"], fitted={}).values)
        for n, v in sorted(r["fitted"].items()):
            cells = [list(c) for c in r["readings"].cells]
            sec = "engines" if n in fields else ("scales" if n in STEP_ADJUSTMENTS else "constants")
            doc[sec].setdefault(r["engine"], {}).setdefault(r["gpu"], {})[n] = {
                "value": round(float(v), 6), "provenance": "FITTED", "experiment": experiment, "cells": cells,
                "source": f"{experiment}: least squares on log step time over three wall-clock steps of "
                          f"{r['model']} ({READING_RULE.split(':')[0]}; shipped value {r['x0'][n]:.6g})"}
    return doc


def fitted_values(doc, engine: str, gpu: str) -> tuple[dict, list]:
    """({name: value}, reading cells) of one (engine, GPU) in a fitted-constants doc or path."""
    raw = doc if isinstance(doc, dict) else read_yaml(doc)
    vals, cells = {}, None
    for sec in ("engines", "constants", "scales"):
        for n, e in ((raw.get(sec) or {}).get(engine, {}).get(gpu, {}) or {}).items():
            vals[n] = float(e["value"])
            cells = [tuple(c) for c in e.get("cells", [])]
    if not vals:
        raise WallclockError(f"no fitted engine constants for {engine}@{gpu}")
    return vals, cells


# ---------------------------------------------------------------------------------------
# Adapters: the tidy tables of steptime_lab.data (W1's loaders) -> the frames above
def engine_profile(engine: str, version=None) -> str:
    """The engine profile of a measured (engine, version): vLLM before 0.8 ran the V0 engine
    (V1 became the default in 0.8), 0.8-0.13 V1 without the all-reduce + RMSNorm fusion and without async
    scheduling (its default from 0.14), 0.14-0.17 V1 without the fusion, 0.18 and later (and an unrecorded
    version) V1 with it; other engines map to their own profile."""
    e = str(engine).lower()
    if e == "vllm" and version is not None and str(version) not in ("", "<NA>", "nan", "None"):
        try:
            major, minor = (int(p) for p in str(version).split(".")[:2])
        except ValueError:
            return "vllm"
        if (major, minor) < (0, 8):
            return "vllm-v0"
        if (major, minor) < (0, 14):
            return "vllm-v1-sync"
        return "vllm-v1-unfused" if (major, minor) < (0, 18) else "vllm"
    return e


def fpm_steps(tidy, moe: bool = False):
    """STEP_COLUMNS from the tidy `fpm_steps` table (dense models only unless `moe`)."""
    x = tidy if moe else tidy[~tidy["moe"].astype(bool)]
    out = x.rename(columns={"workload_segment": "segment"}).copy()
    out["phase"] = out["phase"].replace({"context": "prefill"})
    out["step"] = out["counter_id"]
    if "mean_decode_kv_tokens" not in out:
        out["mean_decode_kv_tokens"] = np.where(out["decode_requests"] > 0,
                                                out["decode_kv_tokens"] / np.maximum(out["decode_requests"], 1), 0.0)
    out["engine"] = [engine_profile(e, v) for e, v in zip(out["engine"], out["engine_version"])]
    return out.reset_index(drop=True)


def write_fitted_constants(path, doc: dict) -> None:
    """Write the fitted-constants file (YAML, sorted keys, atomically) with a header naming its writer, closed by its
    seal line (steptime.calibration.seal_text: `steptime calibration ship` requires it)."""
    import yaml

    from steptime.calibration import seal_text

    text = ("# Engine constants read from at most three wall-clock steps per (GPU, engine): written by the\n"
            "# pipeline (rule R2_3, steptime_lab.experiments.wallclock); do not edit. Read with\n"
            "# steptime.specs.engines.get_engine(name, fitted=<this file>) (the `engines` part) and\n"
            "# steptime_lab.experiments.wallclock.split_fitted / make_predictor(fitted=...) (all three parts).\n")
    text += yaml.safe_dump(doc, sort_keys=True, width=120)
    with atomic_path(path) as tmp:
        tmp.write_text(seal_text(text))

