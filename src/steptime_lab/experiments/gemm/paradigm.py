"""E1.12: which SM-fill paradigm (wave or persistent) fits each Blackwell GPU's measured
curves, against the one `fill_paradigm()` codes.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.experiments.gemm.contract import calibration_record, cell_ids, predict, subset_masks
from steptime_lab.experiments.gemm.fill import _shape_cells, staircase_jumps
from steptime_lab.experiments.gemm.folds import fold_from_json
from steptime_lab.experiments.gemm.scoring import score_cells
from steptime_lab.results import claim
from steptime.specs import get_gpu, gpu_keys
from steptime.terms import gemm as G


def paradigm_scores(df, doc: dict, gpu: str, paradigms=("wave", "persistent"), seed: int = 0, *,
                    constants: Constants) -> dict:
    out = {}
    for par in paradigms:
        fold = fold_from_json(doc, gpu, paradigm=par, constants=constants)
        sub = df[df["gpu"] == gpu].reset_index(drop=True)
        cal = calibration_record({gpu: fold["readings"]})
        sub = sub[[c not in cal.all_cells() for c in cell_ids(sub)]].reset_index(drop=True)
        cal.check_disjoint(cell_ids(sub))
        pred = predict(gpu, sub["m"].to_numpy(float), sub["n"].to_numpy(float), sub["k"].to_numpy(float),
                       fold["params"], paradigm=par)
        y = sub["latency_ms"].to_numpy(float)
        sc = score_cells(pred, y, subset_masks(sub), n_boot=200, seed=seed)
        jumps = staircase_jumps(df, gpu, fold["params"], paradigm=par)
        mid = (jumps["m"] >= 128) & (jumps["m"] <= 4352)
        j = jumps[mid]
        out[par] = {"scores": {s: {"mape": v["mape"], "mape_ci": v["mape_ci"], "cells": v["cells"]}
                               for s, v in sc.items()},
                    "jump_mae": float(np.mean(np.abs(j["predicted_jump"] - j["measured_jump"]))),
                    "jump_corr": float(np.corrcoef(j["predicted_jump"], j["measured_jump"])[0, 1]),
                    "eta_active": fold["params"]["eta_active"]}
    return out


BLACKWELL = tuple(gpu_keys("blackwell", tables="aic"))


def e1_12_document(scores: dict) -> dict:
    claims, decision = [], {}
    for gpu, sc in scores.items():
        w = sc["wave"]["scores"]["prefill"]["mape"]
        p = sc["persistent"]["scores"]["prefill"]["mape"]
        best = "wave" if w < p else "persistent"
        coded = G.fill_paradigm(get_gpu(gpu))
        decision[gpu] = {"data": best, "coded": coded, "agree": best == coded,
                         "prefill_mape": {"wave": w, "persistent": p},
                         "llm_mape": {k: sc[k]["scores"]["llm"]["mape"] for k in sc}}
        claims.append(claim(f"{gpu}: the {best} paradigm fits the measured curves better (held-out prefill MAPE "
                            f"wave {w:.1%}, persistent {p:.1%}); fill_paradigm() says {coded}", best,
                            "prefill-sized LLM cells, same constants, paradigm switched", target=coded,
                            met=best == coded, op="=="))
    return {"metrics": {"scores": scores, "decision": decision}, "claims": claims}


def e1_12_panels(df, doc: dict, n: int = 8192, k: int = 4096, *, constants: Constants) -> list:
    panels = []
    for gpu in BLACKWELL:
        coded = G.fill_paradigm(get_gpu(gpu))
        other = "wave" if coded == "persistent" else "persistent"
        fa = fold_from_json(doc, gpu, constants=constants)
        fb = fold_from_json(doc, gpu, paradigm=other, constants=constants)
        pb = dict(fb["params"], _paradigm=other)
        panels.append((gpu, _shape_cells(df, gpu, n, k),
                       [(f"{coded} (fill_paradigm)", fa["params"], "-"), (f"{other}", pb, "--")],
                       f"{gpu}: n = {n}, k = {k}"))
    return panels
