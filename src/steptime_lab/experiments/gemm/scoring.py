"""Scoring held-out GEMM folds against the baselines (E1.23 and `steptime evaluate --family
gemm`) and the deploy readings' sensitivity to their cell (claims: `claims.head_to_head_claims`).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.baselines import REGISTRY as PEERS  # the product's peers + calibrated_roofline
from steptime_lab.experiments.gemm.contract import calibration_record, cell_ids, predict, subset_masks
from steptime_lab.experiments.gemm.folds import fold_from_json, gpu_params
from steptime_lab.metrics import bootstrap_indices, mape, score


def score_cells(pred, meas, masks: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    return {s: score(pred[mk], meas[mk], n_boot=n_boot, seed=seed) for s, mk in masks.items()}


def predictions(df, folds: dict, baselines=("bare_roofline", "datasheet_alpha", "aic_empirical",
                                            "calibrated_roofline")) -> dict:
    """{gpu: {'df': cells scored (deploy cells removed), 'pred': {predictor: array}}}.

    Baselines that need fitting are fitted per subset in-sample (calibrated_roofline is an
    in-sample reference); the others have fixed constants.
    """

    out = {}
    for g, fold in folds.items():
        sub = df[df["gpu"] == g].reset_index(drop=True)
        cal = calibration_record({g: fold["readings"]})
        ids = cell_ids(sub)
        used = cal.all_cells()  # one union, then one look-up per cell
        keep = np.array([c not in used for c in ids])
        sub = sub[keep].reset_index(drop=True)
        cal.check_disjoint(cell_ids(sub))
        pred = {"steptime": predict(g, sub["m"].to_numpy(float), sub["n"].to_numpy(float),
                                    sub["k"].to_numpy(float), fold["params"])}
        masks = subset_masks(sub)
        y = sub["latency_ms"].to_numpy(float)
        for b in baselines:
            est = PEERS.make(b, gpu=g)
            if getattr(est, "in_sample", False):
                # fitted on the very cells it is scored on, per subset: an in-sample reference
                per = {}
                for s, mk in masks.items():
                    if mk.any():
                        per[s] = est.fit(sub[mk], y[mk]).predict(sub[mk])
                pred[b] = per
            else:
                pred[b] = est.fit(sub, y).predict(sub)
        out[g] = {"df": sub, "pred": pred, "masks": masks}
    return out


def records(preds: dict, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """One score per (GPU, predictor, subset), in that order. Every set of cells of one size draws the same
    bootstrap indices (one seed), so they are drawn once per size (metrics.bootstrap_indices) and shared by the
    predictors, subsets and GPUs of that size: the same numbers as drawing them per score."""
    jobs = []
    for g, d in preds.items():
        y = d["df"]["latency_ms"].to_numpy(float)
        for predictor, p in d["pred"].items():
            for s, mk in d["masks"].items():
                if isinstance(p, dict):
                    if s not in p:
                        continue
                    jobs.append((g, predictor, s, p[s], y[mk]))
                else:
                    jobs.append((g, predictor, s, p[mk], y[mk]))
    by_size: dict[int, list[int]] = {}
    for i, (*_, m) in enumerate(jobs):
        by_size.setdefault(int(np.asarray(m).size), []).append(i)
    scores = [None] * len(jobs)
    for size, members in by_size.items():  # one index matrix alive at a time
        idx = bootstrap_indices(size, n_boot, seed) if size else None
        for i in members:
            scores[i] = score(jobs[i][3], jobs[i][4], n_boot=n_boot, seed=seed, idx=idx)
        del idx
    return [{"family": "gemm", "gpu": g, "predictor": predictor, "subset": s, **sc}
            for (g, predictor, s, _, _), sc in zip(jobs, scores)]


def ape_table(preds: dict, predictor: str = "steptime"):
    """Long table of per-cell APE and signed error for one predictor (all cells)."""
    import pandas as pd

    rows = []
    for g, d in preds.items():
        p = d["pred"][predictor]
        if isinstance(p, dict):
            continue
        sub = d["df"].copy()
        sub["pred_ms"] = p
        sub["ape"] = np.abs(p - sub["latency_ms"]) / sub["latency_ms"]
        sub["signed"] = (p - sub["latency_ms"]) / sub["latency_ms"]
        rows.append(sub)
    return pd.concat(rows, ignore_index=True)


BASELINES = ("bare_roofline", "datasheet_alpha", "aic_empirical", "calibrated_roofline")


def load_constants(path) -> dict:
    import json

    with open(path) as fh:
        return json.load(fh)


def evaluate_records(df, doc: dict, gpus=None, n_boot: int = 1000, seed: int = 0, *, constants: Constants):
    """(records, predictions) for every GPU of `doc` (held-out folds over `constants`) and every baseline."""
    gpus = [g for g in (gpus or sorted(doc["folds"])) if g in doc["folds"]]
    folds = {g: fold_from_json(doc, g, constants=constants) for g in gpus}
    P = predictions(df, folds, BASELINES)
    return records(P, n_boot=n_boot, seed=seed), P


SENSITIVITY_CELLS = {
    "eta_mem_max": [(m, 16384, 16384) for m in (1, 2, 4, 8, 16)],
    "eta_active": [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 8192, 8192), (4096, 8192, 4096)],
}


def reading_sensitivity(df, doc: dict, cells=SENSITIVITY_CELLS, *, constants: Constants) -> dict:
    """Held-out LLM-cell MAPE per GPU when one deploy reading is taken from a neighbouring cell
    instead (fold globals unchanged; every reading cell in play excluded from scoring): the
    readings' noise around the fold's own choice."""
    out = {}
    for gpu in sorted(doc["folds"]):
        fold = fold_from_json(doc, gpu, constants=constants)
        sub = df[df["gpu"] == gpu]
        excl = {c for c, _ in fold["readings"].values()}
        excl |= {(gpu, "gemm", *c) for alts in cells.values() for c in alts}
        sub = sub[[c not in excl for c in cell_ids(sub)]]
        sub = sub[subset_masks(sub)["llm"]]
        m, n, k = (sub[x].to_numpy(float) for x in ("m", "n", "k"))
        y = sub["latency_ms"].to_numpy(float)
        res = {}
        for name, alts in cells.items():
            r = {}
            for c in alts:
                row = df[(df["gpu"] == gpu) & (df["m"] == c[0]) & (df["n"] == c[1]) & (df["k"] == c[2])]
                if len(row) != 1:
                    continue
                rd = dict(fold["readings"])
                rd[name] = ((gpu, "gemm", *c), float(row["latency_ms"].iloc[0]))
                p = gpu_params(gpu, fold["globals"], rd, constants=constants)
                r["x".join(map(str, c))] = mape(predict(gpu, m, n, k, p), y)
            res[name] = r
        out[gpu] = {"cells": int(len(sub)), "alternatives": res}
    return out
