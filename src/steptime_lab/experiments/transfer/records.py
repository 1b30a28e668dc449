"""E2.1's records: every (predictor, target) score for one dataset and one home bundle,
the headline ratio table and the profiler gap."""

from __future__ import annotations

import copy

import numpy as np

from steptime.calibration import Calibration
from steptime_lab.experiments.cells import DECODE_MAX_TOKENS, STEP_OPS, VIDUR_GPUS, cell_ids, llm_mask
from steptime_lab.experiments.ratios import predict_layer_ops, predict_steptime, spec_ratio, steptime_ratio
from steptime_lab.experiments.transfer.fair_ground import reading_scale, work
from steptime_lab.experiments.transfer.profiled import predict_profiled
from steptime_lab.experiments.transfer.scoring import _calibration_mask, calibration_summary, score_many
from steptime.specs import gpu_keys

PREDICTORS = ("rf_home", "poly_home", "rf_verbatim", "poly_verbatim", "rf_spec_scaled", "poly_spec_scaled",
              "rf_steptime_scaled", "poly_steptime_scaled", "rf_spec_scaled_readings", "ml_loo", "ml_loo_tuned_full",
              "steptime_home_only",
              "steptime", "steptime_residual")
# the fair-ground peers E2.1 states its claim against (steptime_home_only: unseen targets only)
PEERS = ("rf_spec_scaled", "rf_spec_scaled_readings", "ml_loo", "steptime_home_only")
HOME_GPUS = ("a100-sxm", "h100-sxm")
# targets per dataset: the GPUs each project measured (gpus.yaml is the one home of that fact)
TARGETS = {"vidur_step": VIDUR_GPUS, "aic_gemm": tuple(gpu_keys(tables="aic")),
           "aic_attention": tuple(gpu_keys(tables="aic"))}


def _fitted_on_profiled(bundle: dict, what: str, readings: int = 0) -> dict:
    return {"gpus": [bundle["home_gpu"]], "cells": int(bundle["train_rows"]), "target_readings": int(readings),
            "what": what}


def transfer_records(dataset: str, cells, bundle: dict, targets, *, n_boot: int = 1000, seed: int = 0,
                     constants=None, calibration=None, constants_for=None, cal_log: dict | None = None,
                     home_only=None, ml=None, ml_full=None, reading_ids=None, steptime_fit=None, grey=None,
                     memo: dict | None = None, stack=None) -> list[dict]:
    """Every (predictor, target) record for one dataset and one home bundle.

    `constants_for(target) -> (Constants, Calibration)` supplies held-out constants for the
    steptime row (the family's constants fitted without the target, plus its deploy cells);
    without it steptime runs on `constants` (default: defaults.yaml) and its recorded cells.
    The fair-ground peers (`steptime_lab.experiments.transfer.fair_ground`) ride along when given:
    `home_only` (a `HomeOnly`: steptime_home_only on unseen targets), `ml` (an
    `MLLeaveOneOut`: ml_loo on every target; `ml_full`, the same peer in its fair best, tuned on all
    rows, scored as ml_loo_tuned_full where the fast job runs it) and `reading_ids(target)` (the target's reading
    cells in this table beyond those the calibration excludes: rf_spec_scaled_readings is the
    spec-scaled forest times the geometric-mean ratio measured / predicted on them). Every
    reading cell is kept out of every row's scoring, so all rows score the same cells.
    `steptime_fit(target) -> dict` says what the held-out steptime constants were fitted on.
    `grey` (a `greybox.GreyBox`) adds steptime_residual: steptime's terms on the same
    held-out constants times per-term corrections fitted on the other GPUs' tables; its
    record carries `term_corrections` (the geometric-mean factor per term on the scored cells).
    Each record carries `fitted_on` (GPUs, cells, target readings) beside its score.
    `memo` (a dict the caller keeps across the home bundles of one dataset, with the same
    `constants_for`, `ml`, `ml_full`, `grey`, `reading_ids` and `steptime_fit`) reuses what does not
    depend on the home (the exclusions, steptime's, the grey box's and ml_loo's predictions) when a
    target's cells are the same as before (`target_part`); the records are the same with or without it.
    `stack` (a `transfer.stack.VidurStack`, the Vidur step only) runs steptime's, the grey box's and
    steptime_home_only's GEMM compute branch under Vidur's measurement-stack factor, each held out as its arm
    allows (`transfer.stack`); the steptime-scaled profile rows keep steptime's ratio without it.
    """
    home = bundle["home_gpu"]
    home_constants = constants_for(home)[0] if constants_for is not None else constants
    recs = []
    for target in targets:
        if constants_for is not None:
            constants, cal = constants_for(target)
        else:
            cal = calibration if calibration is not None else Calibration.from_constants(constants)
        tc = cells[cells["gpu"] == target].reset_index(drop=True)
        if tc.empty:
            continue
        if target == home:
            tc = tc[bundle["test_mask"]].reset_index(drop=True)
        tp = target_part(dataset, tc, target, constants, cal, memo=memo, reading_ids=reading_ids,
                         steptime_fit=steptime_fit, grey=grey, ml=ml, ml_full=ml_full, stack=stack)
        excl, read, tc, st_pred = tp["excl"], tp["read"], tp["tc"], tp["st_pred"]
        if cal_log is not None:
            cal_log[f"{dataset}|{target}"] = calibration_summary(cal, target)
        phase, meas = tp["phase"], tp["meas"]
        st_fit = copy.deepcopy(tp["st_fit"])
        if stack is not None:
            st_fit["vidur_stack"] = stack.record(target)
        fitted = {"steptime": st_fit}
        preds = {"steptime": tp["steptime"]}
        term_corr = None
        if grey is not None:
            gt = tp["grey"]
            preds["steptime_residual"] = gt["total"]
            fitted["steptime_residual"] = dict(grey.fitted_on(target), steptime=st_fit, what=(
                "steptime's terms on its held-out constants, each times a bounded smooth correction fitted on "
                "every other GPU's table of this dataset (boosted trees; the setting by leave-one-GPU-out CV on "
                "those GPUs)"))
            term_corr = {t: round(float(np.exp(np.mean(np.log(c)))), 4) for t, c in gt["correction"].items()}
        if home_only is not None and target != home:
            c_ho, cal_ho = home_only(target)
            cal_ho.check_disjoint(tp["ids"])
            if stack is not None:
                c_ho = stack.home_only_constants(home_only, c_ho, target)
            preds["steptime_home_only"] = predict_steptime(dataset, tc, target, c_ho)
            fitted["steptime_home_only"] = {"families": home_only.fitted_on(), "gpus": [home],
                                            "target_readings": 3, "what": "every family constant fitted on the "
                                            "home GPU's tables alone, then the target's three deploy readings"}
            if stack is not None:
                fitted["steptime_home_only"]["vidur_stack"] = stack.home_only_record(home_only)
        if ml_full is not None:
            preds["ml_loo_tuned_full"] = tp["ml_loo_tuned_full"]
            fitted["ml_loo_tuned_full"] = dict(ml_full.fitted_on(target), what=(
                "ml_loo's fair best: gradient-boosted trees on every row of every other GPU's table, the setting "
                "chosen from the wide grid by leave-one-GPU-out CV on those GPUs (what fast: false gives ml_loo)"))
        if ml is not None:
            preds["ml_loo"] = tp["ml_loo"]
            fitted["ml_loo"] = dict(ml.fitted_on(target), what="gradient-boosted trees on every other GPU's "
                                    "table of this dataset, datasheet features beside the shapes")
        st_ratio = None
        for tag in ("rf", "poly"):
            if target == home:
                preds[f"{tag}_home"] = predict_profiled(bundle, tag, tc)
                fitted[f"{tag}_home"] = _fitted_on_profiled(bundle, "home GPU's training split")
                continue
            if st_ratio is None:
                st_ratio = steptime_ratio(dataset, tc, home, target, home_constants, constants, target_pred=st_pred)
            if dataset == "vidur_step":
                per = predict_profiled(bundle, tag, tc, per_op=True)
                ratio = spec_ratio(dataset, tc, home, target)
                preds[f"{tag}_verbatim"] = sum(per.values())
                preds[f"{tag}_spec_scaled"] = sum(per[op] * ratio[op] for op in STEP_OPS)
                preds[f"{tag}_steptime_scaled"] = sum(per[op] * st_ratio[op] for op in STEP_OPS)
            else:
                p = predict_profiled(bundle, tag, tc)
                preds[f"{tag}_verbatim"] = p
                preds[f"{tag}_spec_scaled"] = p * spec_ratio(dataset, tc, home, target)
                preds[f"{tag}_steptime_scaled"] = p * st_ratio
            fitted[f"{tag}_verbatim"] = _fitted_on_profiled(bundle, "home profile used unchanged")
            fitted[f"{tag}_spec_scaled"] = _fitted_on_profiled(bundle, "home profile x datasheet roofline ratio")
            fitted[f"{tag}_steptime_scaled"] = dict(_fitted_on_profiled(
                bundle, "home profile x steptime's held-out ratio target / home"), steptime=st_fit)
            if tag == "rf" and reading_ids is not None and len(read):
                fitted["rf_spec_scaled_readings"] = _fitted_on_profiled(
                    bundle, "spec-scaled home forest x measured / predicted on the target's reading cell "
                    "nearest each cell in (log FLOPs, log bytes)", readings=len(read))
                preds["rf_spec_scaled_readings"] = preds["rf_spec_scaled"] * reading_scale(
                    _spec_scaled(bundle, dataset, read, home, target), read["latency_ms"].to_numpy(dtype=float),
                    work(dataset, read), work(dataset, tc))
        order = [p for p in PREDICTORS if p in preds]
        scores = score_many({p: preds[p] for p in order}, meas, tc["tokens"].to_numpy(), phase, n_boot=n_boot,
                            seed=seed, llm=tp["llm"], draws=memo.setdefault("draws", {}) if memo is not None else None)
        for name in order:
            recs.append({"dataset": dataset, "home_gpu": home, "target_gpu": target, "predictor": name,
                         "calibration_cells_excluded": int(excl.sum()), "fitted_on": fitted.get(name),
                         **scores[name], **({"term_corrections": term_corr} if name == "steptime_residual" else {})})
    return recs


def target_part(dataset: str, tc, target: str, constants, cal, *, memo: dict | None = None, reading_ids=None,
                steptime_fit=None, grey=None, ml=None, ml_full=None, stack=None) -> dict:
    """What `transfer_records` computes for one target's cells `tc` that does not depend on the home
    bundle: the exclusions (calibration cells and reading ids; the cells scored, `tc`, and the readings,
    `read`), the calibration's disjointness check, the cell ids, steptime's prediction (per operator for
    the step: `st_pred`; summed: `steptime`), the grey box's terms, ml_loo's (and ml_loo_tuned_full's)
    predictions, the measured latency, the phase and LLM masks and what steptime was fitted on.

    With `memo` (kept by the caller across the home bundles of one dataset, every other argument the
    same objects), a target whose cells equal (`DataFrame.equals`) cells it saw before under the same
    `constants` and `cal` gets that earlier answer back instead of a recomputation. `stack` (the Vidur step
    only, `transfer.stack.VidurStack`): steptime and the grey box run on the target's constants under its
    held-out stack factor; `st_pred` (the steptime-scaled rows' ratio) stays without it."""
    key = (dataset, target)
    if memo is not None:
        for tc0, c0, cal0, part in memo.get(key, ()):
            if c0 is constants and cal0 is cal and tc0.equals(tc):
                return part
    tc_in = tc
    excl = _calibration_mask(dataset, tc, target, cal)
    extra = {tuple(c) for c in (reading_ids(target) if reading_ids is not None else [])}
    if extra:
        excl = excl | np.array([c in extra for c in cell_ids(dataset, tc, target)], dtype=bool)
    read = tc[excl].reset_index(drop=True)
    tc = tc[~excl].reset_index(drop=True)
    ids = cell_ids(dataset, tc, target)
    cal.check_disjoint(ids)
    part = {"excl": excl, "read": read, "tc": tc, "ids": ids,
            "phase": tc["phase"].to_numpy() if dataset == "aic_attention" else None,
            "meas": tc["latency_ms"].to_numpy(dtype=float),
            "st_fit": dict(steptime_fit(target)) if steptime_fit is not None else {"what": "defaults.yaml as shipped"}}
    scored = constants
    if dataset == "vidur_step":  # per operator: the steptime-scaled rows scale each one
        part["st_pred"] = predict_layer_ops(tc, target, constants, per_op=True)
        part["steptime"] = sum(part["st_pred"].values())
        if stack is not None:
            scored = stack.constants(constants, target)
            part["steptime"] = sum(predict_layer_ops(tc, target, scored, per_op=True).values())
    else:
        part["st_pred"] = part["steptime"] = predict_steptime(dataset, tc, target, constants)
    if grey is not None:
        part["grey"] = grey.predict_terms(tc, target, scored)
    if ml_full is not None:
        part["ml_loo_tuned_full"] = ml_full.predict(tc, target)
    if ml is not None:
        part["ml_loo"] = ml.predict(tc, target)
    part["llm"] = llm_mask(dataset, tc)
    if memo is not None:
        memo.setdefault(key, []).append((tc_in, constants, cal, part))
    return part


def _spec_scaled(bundle: dict, dataset: str, cells, home: str, target: str):
    """The home forest's spec-scaled prediction (ms) of `cells` on `target`."""
    if dataset == "vidur_step":
        per = predict_profiled(bundle, "rf", cells, per_op=True)
        ratio = spec_ratio(dataset, cells, home, target)
        return sum(per[op] * ratio[op] for op in STEP_OPS)
    return predict_profiled(bundle, "rf", cells) * spec_ratio(dataset, cells, home, target)


def ratio_table(records) -> list[dict]:
    """steptime vs the spec-scaled RF on every unseen target: the headline ratio per row."""
    by = {(r["dataset"], r["home_gpu"], r["target_gpu"], r["predictor"]): r for r in records}
    out = []
    for (ds, home, tgt, pred), r in sorted(by.items()):
        if pred != "steptime" or tgt == home:
            continue
        rf = by.get((ds, home, tgt, "rf_spec_scaled"))
        if rf is None or not r["mape_all"]:
            continue
        row = {"dataset": ds, "home_gpu": home, "target_gpu": tgt, "steptime_mape": r["mape_all"],
               "rf_spec_scaled_mape": rf["mape_all"], "ratio": rf["mape_all"] / r["mape_all"]}
        hy = by.get((ds, home, tgt, "rf_steptime_scaled"))
        if hy is not None and hy["mape_all"]:
            row.update({"rf_steptime_scaled_mape": hy["mape_all"],
                        "ratio_profile_transfer": rf["mape_all"] / hy["mape_all"]})
        if r.get("mape_llm"):
            row.update({"steptime_mape_llm": r["mape_llm"], "rf_spec_scaled_mape_llm": rf["mape_llm"],
                        "ratio_llm": rf["mape_llm"] / r["mape_llm"]})
        for peer in PEERS[1:]:  # peer MAPE / steptime MAPE (> 1: steptime wins)
            q = by.get((ds, home, tgt, peer))
            if q is not None and q["mape_all"]:
                row[f"{peer}_mape"] = q["mape_all"]
                row[f"ratio_vs_{peer}"] = q["mape_all"] / r["mape_all"]
                if q.get("mape_llm") and r.get("mape_llm"):
                    row[f"ratio_llm_vs_{peer}"] = q["mape_llm"] / r["mape_llm"]
        out.append(row)
    return out


def profiler_gap(vidur, gemm) -> dict:
    """The same GEMM on the same GPU as two profilers time it: Vidur's per-operator profile
    (eager PyTorch, CUDA events) against AIConfigurator's table (CUDA-graph replay), on every
    (gpu, m, n, k) both hold. Returns {gpu: {size: {cells, median, p10, p90}}} of the ratio
    Vidur / AIConfigurator, size 'decode' for m <= DECODE_MAX_TOKENS else 'prefill'.

    steptime's GEMM constants are fitted on AIConfigurator's tables, the Vidur-step RF on
    Vidur's: a ratio away from 1 is a measurement-stack offset no datasheet predicts."""
    v = vidur.dropna(subset=["gemm_m", "gemm_n", "gemm_k"])
    v = v.groupby(["gpu", "gemm_m", "gemm_n", "gemm_k"], as_index=False)["latency_ms"].median()
    a = gemm.groupby(["gpu", "m", "n", "k"], as_index=False)["latency_ms"].median()
    j = v.merge(a, left_on=["gpu", "gemm_m", "gemm_n", "gemm_k"], right_on=["gpu", "m", "n", "k"],
                suffixes=("_vidur", "_aic"))
    j["ratio"] = j["latency_ms_vidur"] / j["latency_ms_aic"]
    j["size"] = np.where(j["m"] <= DECODE_MAX_TOKENS, "decode", "prefill")
    out: dict = {}
    for (gpu, size), r in j.groupby(["gpu", "size"]):
        q = np.quantile(r["ratio"], [0.1, 0.5, 0.9])
        out.setdefault(gpu, {})[size] = {"cells": int(len(r)), "median": float(q[1]), "p10": float(q[0]),
                                         "p90": float(q[2])}
    return out
