"""E1.1 / E1.1b / E1.20 / E1.22 (Vidur part): the whole per-layer step on Vidur's tables.

The measured quantity is the sum of ONE layer's non-attention operators as Vidur
profiles them (steptime.step.VIDUR_LAYER_OPS; `emb` runs once per step and is left out of
the layer sum, as Vidur's own predictor leaves it out of a block). Each (gpu, model, tp,
num_tokens) row is one cell, decode-sized, prefill-sized or mid as steptime_lab.regimes defines them.

Held out per GPU: the GEMM constants are the shipped ones (defaults.yaml, set on
AIConfigurator GEMM tables by E1.x GEMM experiments; Vidur cells never set them), the
light-kernel constants come from the OTHER Vidur GPUs (E1.1c's fit) and the GPU's own
light_bw_scale (carried from its GEMM streaming reading when it has GEMM readings, else its
one light deploy reading; that light cell's row is excluded from scoring either way).

GEMM compute reading (`gemm_reading`): "aic" (the protocol through wave 26) keeps each GPU's
eta_active as its AIConfigurator fold reads it (the 4096^3 cell; A40, with no AIConfigurator
table, the shipped fall-back median); "vidur_rule" (wave 27) reads it from the GPU's own Vidur
GEMM cells by a rule (`ETA_RULE_NOTE`) selected on the other Vidur GPUs alone
(`select_eta_rule`); the rows behind the reading are excluded from scoring. It replaces the
source of the compute reading, it adds no reading.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Calibration, Constants
from steptime_lab.experiments import gemm as GX
from steptime_lab.experiments import light as LX
from steptime_lab import vidur_stack as VS
from steptime_lab.metrics import score, signed_error
from steptime_lab.regimes import PREFILL_MIN_TOKENS, VIDUR_STACK_MIN_M, size_class
from steptime.specs import get_gpu, get_model
from steptime.step import VIDUR_GEMM, VIDUR_LAYER_OPS, VIDUR_LIGHT, vidur_layer_ops
from steptime import plotting
from steptime.step import TERMS, layer_shapes, memory_bytes, predict_steps
from steptime.terms import gemm as G
from steptime_lab.results import claim
from steptime_lab.run_constants import require_constants

TERM_OF = {**{op: "gemm" for op in VIDUR_GEMM}, **{op: "light" for op in VIDUR_LIGHT}}
RUNGS = ("bare_roofline", "+gemm_eta_c", "+gemm_eta_mem", "+gemm_floor", "+light_eta", "+light_floor")


def wide_cells(vidur):
    """One row per (gpu, model, tp, num_tokens): measured ms per Vidur operator + the layer sum."""
    x = vidur[vidur["op"].isin(list(VIDUR_LAYER_OPS) + ["emb"])]
    w = x.pivot_table(index=["gpu", "model", "tp", "num_tokens"], columns="op", values="latency_ms",
                      aggfunc="median").reset_index()
    w.columns.name = None
    present = [op for op in VIDUR_LAYER_OPS if op in w]
    w["layer_ms"] = w[present].sum(axis=1, min_count=1)
    w = w.dropna(subset=["layer_ms"])
    w["cell"] = list(zip(w["gpu"], ["vidur_layer"] * len(w), w["model"], w["tp"].astype(int),
                         w["num_tokens"].astype(int)))
    T = w["num_tokens"].to_numpy()
    w["size"] = size_class(T)
    return w.sort_values(["gpu", "model", "tp", "num_tokens"]).reset_index(drop=True)


def held_out_constants(light_cells, gpu, gpus, gemm_doc: dict | None = None,
                       constants: Constants | None = None) -> tuple[Constants, dict]:
    """Shipped constants with the light-kernel factors refitted on the other Vidur GPUs and
    the GPU's light_bw_scale: carried from its GEMM reading eta_mem_max when `gemm_doc` has
    one (`LX.derived_bw_scale`, ratio fitted on the other GPUs), else its own light deploy
    reading. `info['deploy_cell']` is the light cell that reading would use (kept out of
    scoring either way); `info['reading_cell']` the cell that actually set the scale."""
    others = [g for g in gpus if g != gpu]
    fit = LX.fit_kernels(light_cells, others)
    eta = dict(fit["light_eta"])
    floors = dict(fit["light_floor_us"])
    knee = dict(fit["light_p"])  # the knee exponent too: fitted without the held-out GPU (issue 12)
    base = require_constants(constants, "step.held_out_constants")
    eta.setdefault("kv_write", base.get("light_eta")["kv_write"])
    floors.setdefault("kv_write", float(np.median(list(floors.values()))))
    knee.setdefault("kv_write", float(np.median(list(knee.values()))))
    xg = light_cells[light_cells["gpu"] == gpu].reset_index(drop=True)
    deploy_cell = list(xg["cell"].iloc[LX.deploy_index(xg)])
    derived = LX.derived_bw_scale(light_cells, gpu, others, GX.readings_in_fold(gemm_doc, gpu, gpus, constants=base)) \
        if gemm_doc and gpu in gemm_doc["folds"] else None
    if derived is not None:
        scale, source = derived[0], f"GEMM reading eta_mem_max x {derived[1]:.4g} (ratio fitted on {others})"
        reading_cell, prov = LX.gemm_stream_cell(gemm_doc, gpu), "DERIVED"
    else:
        scale, source, reading_cell, prov = LX.bw_scale(xg, gpu), "E1.1c deploy reading", deploy_cell, "MEASURED"
    # the SM-rate law of the flat floor law's kernels (E1.1c, wave 30): rates fitted on the other GPUs (their caps
    # their own add readings), the GPU's DRAM cap carried from its GEMM reading, else its own add reading
    sm_fit = LX.fit_sm_rate(light_cells, {o: LX.dram_reading(light_cells[light_cells["gpu"] == o].reset_index(
        drop=True), o)[0] for o in others})
    dd = LX.derived_dram_eta(light_cells, gpu, others, GX.readings_in_fold(gemm_doc, gpu, gpus, constants=base)) \
        if derived is not None else None
    own_dram, dram_cell = LX.dram_reading(xg, gpu)
    if dd is not None:
        eta_dram, dram_from, dram_cell = dd[0], f"GEMM reading eta_mem_max x {dd[1]:.4g} (ratio fitted on {others})", \
            LX.gemm_stream_cell(gemm_doc, gpu)
    else:
        eta_dram, dram_from = own_dram, "E1.1c DRAM-cap reading (largest add cell)"
        if tuple(dram_cell[2:5]) != tuple(deploy_cell[2:5]):  # scoring drops the deploy cell's row only
            raise ValueError(f"{gpu}: the DRAM-cap reading {dram_cell} is not in the deploy cell's row {deploy_cell}")
    c = base.with_overrides({"light_eta": eta, "light_floor_us": floors, "light_p": knee, "light_sm_rate": sm_fit},
                            scope="global", source=f"E1.1c fit on {others}")
    c = c.with_overrides({"light_bw_scale": scale}, scope=f"gpu.{get_gpu(gpu).key}", provenance=prov,
                         source=source)
    c = c.with_overrides({"light_dram_eta": eta_dram}, scope=f"gpu.{get_gpu(gpu).key}",
                         provenance="DERIVED" if dd is not None else "MEASURED", source=dram_from)
    return c, {"fit_on": others, "light_bw_scale": scale, "light_bw_scale_from": source, "light_eta": eta,
               "light_floor_us": floors, "light_p": knee, "deploy_cell": deploy_cell, "reading_cell": reading_cell,
               "light_sm_rate": sm_fit, "light_dram_eta": eta_dram, "light_dram_eta_from": dram_from,
               "dram_reading_cell": list(dram_cell)}


GEMM_READINGS = ("aic", "vidur_rule")
ETA_RULE_NOTE = ("eta_active read from the GPU's own Vidur GEMM cells: the median over every model x TP row of the "
                 "GPU of the compute reading each cell of one projection operator at one token count gives "
                 "(contract.apply_readings on that cell's (m, n, k)); the (operator, token count) chosen on the "
                 "other Vidur GPUs alone (select_eta_rule); those rows are excluded from the GPU's scores")
ETA_RULE_NOTE_CELL = "one Vidur GEMM cell of the eta_active reading rule (ETA_RULE_NOTE)"


def eta_rule_candidates(w, gpus) -> list:
    """Candidate rules (op, tokens) of the Vidur compute reading: each projection GEMM operator at
    each power-of-two prefill-sized token count (>= PREFILL_MIN_TOKENS) that every one of `gpus`
    measured; ordered by tokens, then operator."""
    toks = None
    for g in gpus:
        t = {int(x) for x in w.loc[w["gpu"] == g, "num_tokens"].unique()
             if x >= PREFILL_MIN_TOKENS and int(x) & (int(x) - 1) == 0}
        toks = t if toks is None else toks & t
    if not toks:
        raise ValueError(f"eta_rule_candidates: no power-of-two prefill-sized token count measured on every GPU of "
                         f"{list(gpus)}")
    return [(op, T) for T in sorted(toks) for op in VIDUR_GEMM]


def read_eta_active(w, gpu, rule, constants) -> tuple[float, list]:
    """(eta_active, reading cells) of `gpu` under `rule` = (op, tokens): the median of the compute
    reading each of the GPU's rows at `tokens` gives for operator `op` (its (m, n, k) from the
    model's layer shapes at the row's TP), every other constant as `constants` has it."""
    op, T = rule
    rows = w[(w["gpu"] == gpu) & (w["num_tokens"] == T)]
    rows = rows[rows[op].notna()] if op in rows else rows.iloc[:0]
    if rows.empty:
        raise ValueError(f"read_eta_active: {gpu} has no Vidur {op} cell at {T} tokens")
    from steptime_lab.experiments.gemm.contract import apply_readings

    p = G.resolve(get_gpu(gpu), constants)
    etas, cells = [], []
    for model, tp, y in zip(rows["model"], rows["tp"].astype(int), rows[op].to_numpy(float)):
        n, k = layer_shapes(get_model(model), tp)[VIDUR_GEMM[op]]
        etas.append(apply_readings(gpu, p, {"eta_active": ((gpu, "vidur_gemm", int(T), int(n), int(k)), y)})["eta_active"])
        cells.append((gpu, "vidur_gemm", model, int(tp), int(T), op))
    return float(np.median(etas)), cells


def with_eta_active(constants, gpu, eta, rule):
    return constants.with_overrides({"eta_active": eta}, scope=f"gpu.{get_gpu(gpu).key}", provenance="MEASURED",
                                    source=f"Vidur GEMM reading rule {rule[0]} at {rule[1]} tokens (median over rows)")


# Vidur's measurement stack on E1.1 (issue 19, wave 32, helper `e11h`; DESIGN.md): the same compute-rate factor
# E1.29 applies to Vidur's GEMM rows (tp_shapes.vidur_stack_factors, wave 31 `vgemm`), here fitted on the OTHER Vidur
# GPUs' projection operators at num_tokens (the GEMM's m) >= regimes.VIDUR_STACK_MIN_M, each of them at its own
# held-out fold with the scored GPU left out of its constants too; the scored GPU's rows set nothing.
STACK_NOTE = ("Vidur measurement-stack factor (E1.29's form, wave 31 vgemm): the scored GPU's GEMM compute branch "
              "runs at eta_active / factor, factor = median measured / held-out prediction of the other Vidur GPUs' "
              "projection operators at m >= VIDUR_STACK_MIN_M; no reading of the scored GPU")


def stack_factor(w, gpu, gpus, gemm_doc, constants, min_m: int | None = None) -> dict:
    """Vidur's stack factor for `gpu` (STACK_NOTE; `vidur_stack.fit_stack_factor`), fitted on the other Vidur GPUs of
    `gpus` alone: each other GPU `o` predicted on its GEMM leave-one-GPU-out fold (`GX.with_fold` over `constants`,
    no stack factor; the projections read no light constant), the factor the median of measured / predicted over its
    projection operators' rows with num_tokens >= `min_m` (default regimes.VIDUR_STACK_MIN_M). Nothing of `gpu` is
    read. {"factor", "fitted_on", "cells", "min_m"}; factor 1 when no other GPU has such rows."""
    import pandas as pd

    min_m = VIDUR_STACK_MIN_M if min_m is None else int(min_m)
    base = require_constants(constants, "step.stack_factor")
    rows = [stack_rows(w, o, GX.with_fold(base, o, gemm_doc)[0], min_m) for o in gpus if o != gpu]
    rows = [r for r in rows if not r.empty]
    rows = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=list(VS.STACK_ROWS))
    return VS.fit_stack_factor(rows, gpu, min_m)


def stack_rows(w, gpu, constants, min_m: int):
    """`gpu`'s Vidur projection rows with num_tokens >= `min_m` as `vidur_stack.STACK_ROWS` (gpu, m, measured, and
    the prediction under `constants`, no stack factor): the rows a stack factor is fitted on (empty where `gpu` has
    none)."""
    import pandas as pd

    wo = w[(w["gpu"] == gpu) & (w["num_tokens"] >= min_m)].reset_index(drop=True)
    found = [op for op in VIDUR_GEMM if op in wo] if not wo.empty else []
    if not found:
        return pd.DataFrame(columns=list(VS.STACK_ROWS))
    ops = predict_ops_frame(wo, gpu, constants)
    return pd.concat([pd.DataFrame({"gpu": gpu, "m": wo["num_tokens"].to_numpy(), "measured": wo[op].to_numpy(float),
                                    "predicted": ops[op]}) for op in found], ignore_index=True)


def with_stack(constants, gpu, factor: float):
    """`constants` with `gpu`'s eta_active divided by Vidur's stack `factor` (compute branch only;
    `vidur_stack.stacked_eta`)."""
    eta = VS.stacked_eta(constants.get("eta_active", get_gpu(gpu)), factor, gpu)
    return constants.with_overrides({"eta_active": eta}, scope=f"gpu.{get_gpu(gpu).key}", provenance="DERIVED",
                                    source=f"eta_active / Vidur stack factor {float(factor):.4g} ({STACK_NOTE})")


ETA_ROUNDS = 3  # the Vidur compute reading and the fold's other readings, solved in turn (they meet in the overlap)


def fold_constants(C0, gpu, gemm_doc, w=None, rule=None):
    """(constants, AIConfigurator GEMM reading cells, Vidur reading cells): `C0` (the GPU's
    `held_out_constants`) with its GEMM leave-one-GPU-out fold overlaid (`GX.with_fold`). With
    `rule` (and the wide Vidur rows `w`), eta_active is read from the GPU's own Vidur cells
    (`read_eta_active`) in place of the fold's AIConfigurator compute reading, solved in turn
    with the fold's other readings (ETA_ROUNDS); the AIConfigurator compute cell is then not
    among the returned cells."""
    if rule is None:
        C, gemm_cells = GX.with_fold(C0, gpu, gemm_doc)
        return C, gemm_cells, []
    eta = float(GX.NEUTRAL_START["eta_active"])
    for _ in range(ETA_ROUNDS):
        C, gemm_cells = GX.with_fold(C0, gpu, gemm_doc, fixed={"eta_active": eta})
        eta, eta_cells = read_eta_active(w, gpu, rule, C)
        if not gemm_cells:  # no fold: nothing else to solve against
            break
    return with_eta_active(C, gpu, eta, rule), gemm_cells, eta_cells


def layer_prediction(w, gpu, constants) -> tuple[np.ndarray, dict]:
    """(predicted layer ms per row, predicted ms per op) of one GPU's rows; an op the row did not
    measure adds nothing."""
    ops = predict_ops_frame(w, gpu, constants)
    pred = np.zeros(len(w))
    for op in VIDUR_LAYER_OPS:
        pred += np.where(np.isnan(w[op].to_numpy()) if op in w else True, 0.0, ops[op])
    return pred, ops


def _drop_rows(w, gpu, tokens):
    return w[~((w["gpu"] == gpu) & (w["num_tokens"] == tokens)).to_numpy()]


def select_eta_rule(w, light_cells, train, gemm_doc, constants, candidates=None) -> tuple[tuple, list]:
    """(rule, table): the (op, tokens) rule of the Vidur compute reading that minimises, over the
    `train` GPUs, the mean of each GPU's held-out decode and prefill layer MAPE when that GPU
    reads its own eta_active by the rule (its other constants held out within `train`: light
    kernels fitted on the rest of `train`, its AIConfigurator fold) and the rows read are left
    out of its score. Nothing of a GPU outside `train` is read. Ties go to the earlier candidate."""
    train = list(train)
    if len(train) < 2:
        raise ValueError(f"select_eta_rule: needs at least two training GPUs, got {train}")
    cands = list(candidates) if candidates is not None else eta_rule_candidates(w, train)
    per = {c: [] for c in cands}
    for o in train:
        wo = w[w["gpu"] == o]
        C0, _ = held_out_constants(light_cells, o, train, gemm_doc, constants)
        for rule in cands:
            C, _, _ = fold_constants(C0, o, gemm_doc, wo, rule)
            x = _drop_rows(wo, o, rule[1]).reset_index(drop=True)
            pred, _ = layer_prediction(x, o, C)
            ape = np.abs(pred / x["layer_ms"].to_numpy() - 1.0)
            per[rule].append(float(np.mean([ape[(x["size"] == s).to_numpy()].mean() for s in SUBSETS])))
    table = [{"op": r[0], "tokens": r[1], "score": float(np.mean(v)), "per_gpu": dict(zip(train, v))}
             for r, v in per.items()]
    best = min(range(len(table)), key=lambda i: table[i]["score"])
    return cands[best], table


def predict_ops_frame(w, gpu, constants) -> dict:
    """Predicted ms per Vidur op for every row of one GPU (dict op -> array)."""
    out = {op: np.full(len(w), np.nan) for op in list(VIDUR_LAYER_OPS) + ["emb"]}
    for (model, tp), idx in w.groupby(["model", "tp"]).groups.items():
        ii = w.index.get_indexer(idx)
        r = vidur_layer_ops(model, gpu, w.loc[idx, "num_tokens"].to_numpy(float), tp=int(tp), constants=constants)
        for op, v in r.items():
            out[op][ii] = v
    return out


def ladder_ops(w, gpu, constants) -> dict:
    """Layer time (ms) per ablation rung for every row of one GPU."""
    g = get_gpu(gpu)
    res = {r: np.zeros(len(w)) for r in RUNGS}
    for (model, tp), idx in w.groupby(["model", "tp"]).groups.items():
        ii = w.index.get_indexer(idx)
        parts = vidur_layer_ops(model, gpu, w.loc[idx, "num_tokens"].to_numpy(float), tp=int(tp),
                                constants=constants, parts=True)
        for op, p in parts.items():
            if op not in VIDUR_LAYER_OPS:
                continue
            if TERM_OF[op] == "gemm":
                bare = np.maximum(p["flops"] / g.peak_flops, p["bytes"] / g.mem_bw)
                r1 = np.maximum(p["t_compute"], p["bytes"] / g.mem_bw)
                r2 = np.maximum(p["t_compute"], p["t_memory"])
                r3 = p["t"]
                rungs = (bare, r1, r2, r3, r3, r3)
            else:
                floor, stream, nb = p
                bare = nb / g.mem_bw
                rungs = (bare, bare, bare, bare, stream, floor + stream)
            for r, v in zip(RUNGS, rungs):
                res[r][ii] += v * 1e3
    return res


def run(vidur, light_cells, gpus=None, seed: int = 0, n_boot: int = 1000, gemm_doc: dict | None = None,
        constants: Constants | None = None, gemm_reading: str = "aic", stack: bool = False) -> dict:
    """Held out per GPU: light constants from the other Vidur GPUs and, with `gemm_doc`, the
    GEMM constants from the GPU's leave-one-GPU-out fold (else defaults.yaml as shipped,
    whose GEMM globals were fitted on AIConfigurator tables of nine GPUs, never on Vidur rows).
    `gemm_reading` (GEMM_READINGS): where eta_active comes from (module docstring). `stack`: the GPU's compute
    branch runs at eta_active / its Vidur stack factor (`stack_factor`, fitted on the other Vidur GPUs)."""
    import pandas as pd

    if gemm_reading not in GEMM_READINGS:
        raise ValueError(f"run: gemm_reading must be one of {GEMM_READINGS}, got {gemm_reading!r}")
    w_all = wide_cells(vidur)
    gpus = gpus or sorted(w_all["gpu"].unique())
    cal = Calibration()
    recs, ladder, frames, decomp, per_gpu = [], [], [], [], {}
    for g in gpus:
        rule = table = None
        if gemm_reading == "vidur_rule":
            others = [o for o in gpus if o != g]
            own = set(eta_rule_candidates(w_all, [g]))
            cands = [c for c in eta_rule_candidates(w_all, others) if c in own]
            rule, table = select_eta_rule(w_all, light_cells, others, gemm_doc, constants, candidates=cands)
        C0, info = held_out_constants(light_cells, g, gpus, gemm_doc, constants)
        C, gemm_cells, eta_cells = fold_constants(C0, g, gemm_doc, w_all, rule)
        info["gemm_constants"] = "leave-one-GPU-out fold" if gemm_cells else "defaults.yaml as shipped"
        info["gemm_reading"] = gemm_reading
        info["eta_active"] = float(C.get("eta_active", get_gpu(g)))  # the compute reading this protocol scored with
        if stack:
            info["vidur_stack"] = stack_factor(w_all, g, gpus, gemm_doc, constants)
            C = with_stack(C, g, info["vidur_stack"]["factor"])
            cal.notes[f"vidur_stack[{g}]"] = f"{STACK_NOTE}; fitted on {info['vidur_stack']['fitted_on']}"
        eta_rows = None
        if rule is not None:
            cal.record(f"eta_active[{g}]", eta_cells, ETA_RULE_NOTE_CELL)
            eta_rows = rule[1]
            info["eta_active_rule"] = {"op": rule[0], "tokens": rule[1], "eta_active": info["eta_active"],
                                       "cells": len(eta_cells), "chosen_on": others,
                                       "cells_measured_ms": float(np.nansum(w_all.loc[(w_all["gpu"] == g) & (
                                           w_all["num_tokens"] == rule[1]), rule[0]].to_numpy(float))),
                                       "candidates": sorted(table, key=lambda t: t["score"])[:5],
                                       "n_candidates": len(table), "note": ETA_RULE_NOTE}
        per_gpu[g] = info
        if info["dram_reading_cell"][1] == "light":  # the SM-rate law's DRAM cap read in the deploy cell's row
            cal.record(f"light_dram_eta[{g}]", [tuple(info["dram_reading_cell"])], LX.DRAM_NOTE)
        if info["reading_cell"] == info["deploy_cell"]:
            cal.record(f"light_bw_scale[{g}]", [tuple(info["deploy_cell"])], LX.DEPLOY_NOTE)
        else:  # carried from the GEMM streaming reading (recorded with the GEMM fold below)
            cal.notes[f"light_bw_scale[{g}]"] = info["light_bw_scale_from"]
        if gemm_cells:
            cal.record(f"gemm_fold[{g}]", [("aic",) + c for c in gemm_cells],
                       "AIConfigurator GEMM deploy readings of this GPU (a different table from the scored Vidur rows)")
        w = w_all[w_all["gpu"] == g].reset_index(drop=True)
        # the deploy cell is one operator of one row: drop that row from scoring
        dep = info["deploy_cell"]
        drop = (w["model"] == dep[2]) & (w["tp"] == dep[3]) & (w["num_tokens"] == dep[4])
        w = w[~drop.to_numpy()].reset_index(drop=True)
        if eta_rows is not None:  # the rows behind the Vidur compute reading
            w = _drop_rows(w, g, eta_rows).reset_index(drop=True)
        cal.check_disjoint([(c[0], "light", c[2], c[3], c[4], LX.DEPLOY_OP) for c in w["cell"]])
        cal.check_disjoint([(c[0], "vidur_gemm", c[2], c[3], c[4], op) for c in w["cell"] for op in VIDUR_GEMM])
        pred, ops = layer_prediction(w, g, C)
        present = [op for op in VIDUR_LAYER_OPS]
        rung = ladder_ops(w, g, C)
        fr = w.copy()
        fr["pred_ms"] = pred
        for op in present:
            fr[f"pred_{op}"] = ops[op]
        for r in RUNGS:
            fr[f"rung_{r}"] = rung[r]
        frames.append(fr)
        y = w["layer_ms"].to_numpy()
        for subset in ("decode", "prefill", "all"):
            m = (w["size"] == subset).to_numpy() if subset != "all" else np.ones(len(w), bool)
            recs.append({"family": "step", "gpu": g, "predictor": "steptime", "subset": subset,
                         **score(pred[m], y[m], n_boot=n_boot, seed=seed)})
            recs.append({"family": "step", "gpu": g, "predictor": "bare_roofline", "subset": subset,
                         **score(rung["bare_roofline"][m], y[m], n_boot=n_boot, seed=seed)})
            for r in RUNGS:
                ladder.append({"gpu": g, "subset": subset, "rung": r,
                               **score(rung[r][m], y[m], n_boot=n_boot, seed=seed)})
            for (model, tp), d in w[m].groupby(["model", "tp"]):
                mm = m & (w["model"] == model).to_numpy() & (w["tp"] == tp).to_numpy()
                recs.append({"family": "step", "gpu": g, "predictor": "steptime", "subset": subset,
                             "model": model, "tp": int(tp), "scope": "cell_group",
                             **score(pred[mm], y[mm], n_boot=200, seed=seed)})
            # residual decomposition by term (E1.1b)
            net = float(np.sum(pred[m] - y[m]))
            tot = float(np.sum(y[m]))
            for term in ("gemm", "light"):
                tops = [op for op in present if TERM_OF[op] == term and op in w]
                pm = np.nansum([np.where(np.isnan(w[op].to_numpy()), 0, ops[op])[m] for op in tops], axis=0)
                ym = np.nansum([np.nan_to_num(w[op].to_numpy())[m] for op in tops], axis=0)
                s = score(pm, ym, n_boot=200, seed=seed) if np.all(ym > 0) else {"mape": None}
                decomp.append({"gpu": g, "subset": subset, "term": term, "time_share": float(ym.sum() / tot),
                               "mape": s["mape"], "signed_residual_ms": float(np.sum(pm - ym)),
                               "share_of_net_residual": float(np.sum(pm - ym) / net) if net else None,
                               "share_of_abs_residual": float(np.sum(np.abs(pm - ym)) / max(np.sum(np.abs(pred[m] - y[m])), 1e-12))})
            for op in present:
                if op not in w:
                    continue
                ok = m & ~np.isnan(w[op].to_numpy())
                decomp.append({"gpu": g, "subset": subset, "term": op, "time_share": float(np.sum(w[op].to_numpy()[ok]) / tot),
                               "mape": score(ops[op][ok], w[op].to_numpy()[ok], n_boot=50, seed=seed)["mape"],
                               "signed_residual_ms": float(np.sum(ops[op][ok] - w[op].to_numpy()[ok])),
                               "share_of_net_residual": float(np.sum(ops[op][ok] - w[op].to_numpy()[ok]) / net) if net else None})
    return {"records": recs, "ladder": ladder, "decomposition": decomp, "per_gpu": per_gpu, "calibration": cal,
            "pred": pd.concat(frames, ignore_index=True)}


def dominant_op(row, ops=VIDUR_LAYER_OPS) -> str:
    """The operator with the largest absolute error in one predicted row."""
    best, val = None, -1.0
    for op in ops:
        m = row.get(op)
        if m is None or np.isnan(m):
            continue
        e = abs(row[f"pred_{op}"] - m)
        if e > val:
            best, val = op, e
    return best


def signed(fr) -> np.ndarray:
    return signed_error(fr["pred_ms"].to_numpy(), fr["layer_ms"].to_numpy())


# ---------------------------------------------------------------------------------------
# result documents and figures
SUBSETS = ("decode", "prefill")  # decode-sized and prefill-sized cells


STACK_DISCLOSED = (
    "Scored protocol since wave 32 (helper e11h, chosen after seeing E1.1's scores and the per-operator diagnosis in "
    "DESIGN.md): each Vidur GPU's GEMM compute branch runs at eta_active / its Vidur measurement-stack factor "
    "(metrics.vidur_stack), the form E1.29 uses since wave 31 (helper vgemm), fitted on the OTHER Vidur GPUs' "
    "projection operators at m >= 2048 (regimes.VIDUR_STACK_MIN_M, the threshold vgemm chose after seeing A100's "
    "and H100's Vidur GEMM rows), each at its own held-out fold; the scored GPU's rows set nothing and no reading "
    "is added. The wave-31 scores without it are in DESIGN.md.")


ETA_RULE_DISCLOSED = (
    "Context, not the scored protocol (wave 27, helper vread; built after seeing the scores): the same held-out run "
    "with each Vidur GPU's GEMM eta_active read from its own Vidur GEMM cells by a rule selected on the other Vidur "
    "GPUs alone (select_eta_rule: the (projection operator, power-of-two prefill token count) whose median per-cell "
    "reading minimises the training GPUs' mean of held-out decode and prefill MAPE), in place of AIConfigurator's "
    "4096^3 cell (A100, H100) or the shipped fall-back median (A40, no AIConfigurator table); the rows read (every "
    "model x TP row of the GPU at that token count) are excluded from its scores. That reading is the median of "
    "21-29 profiled GEMM cells (metrics.vidur_rule_protocol.per_gpu.*.eta_active_rule), more than the contract's "
    "three readings per GPU allow, so the scored claims keep the contract's protocol (gemm_reading='aic') and the "
    "rule's scores are reported beside them as context: they measure how much of the prefill miss is the offset "
    "between the two profilers' GEMMs (wave 26, helper gpar: Vidur's GEMMs run about 1.14x slower than "
    "AIConfigurator's at m >= 1024 on the same GPU), not the law. The rule family (one operator at one token count, "
    "median over rows) was chosen after scratch scans showed single-cell and one-row rules selected on two GPUs do "
    "not transfer; every one of the 12 candidate rules, scored afterwards, meets A40's prefill target, 9 of 12 "
    "A100's and 7 of 12 H100's.")


def _with_before(rule_info: dict, before: float) -> dict:
    """The rule's record with `eta_active_before` (the contract protocol's AIConfigurator-read value of the
    same GPU, from the scored run) next to the rule's eta_active."""
    return {**rule_info, "eta_active_before": before}


def document(r: dict, eid: str, targets: dict | None = None, alternative: dict | None = None) -> dict:
    """metrics + claims of E1.1, E1.1b or E1.20; E1.1 needs `targets` (held-out MAPE bound per
    subset, config/experiments.yaml E1.1 targets, e.g. {decode: 0.05, prefill: 0.06}). With
    `alternative` (E1.1: the same run with gemm_reading="vidur_rule", beyond the three-reading contract), its
    per-GPU scores are kept beside as context claims and metrics.vidur_rule_protocol."""
    recs = r["records"]
    if eid == "E1.1":
        claims = []
        if not targets:
            raise ValueError("E1.1 document: pass the targets (config/experiments.yaml E1.1 targets)")
        groups = [x for x in recs if x.get("scope") == "cell_group" and x["subset"] in SUBSETS and x["cells"]]
        for sub in SUBSETS:
            tgt = targets[sub]
            gg = [x for x in groups if x["subset"] == sub]
            met = [x for x in gg if x["mape"] <= tgt]
            claims.append(claim(f"{sub}-sized cells: model x GPU x TP groups within the {tgt:.0%} MAPE target",
                                len(met), f"groups of {len(gg)} with MAPE <= {tgt:.0%} (all must be)",
                                target=len(gg), met=len(met) == len(gg), op=">=", unit="groups"))
            for x in recs:
                if x.get("scope") is None and x["predictor"] == "steptime" and x["subset"] == sub:
                    claims.append(claim(f"{x['gpu']}: held-out MAPE of the per-layer step, {sub}-sized cells",
                                        round(x["mape"], 4), f"<= {tgt:.0%}", target=tgt, met=x["mape"] <= tgt,
                                        op="<=", unit="fraction"))
        claims.append(claim("reported in round 1 (A100, E1.1): prefill MAPE 17.34%, decode 5.86% after the GEMM fixes",
                            {"prefill": 0.1734, "decode": 0.0586}, "round-1 figure, other telemetry"))
        metrics = {"records": recs, "per_gpu": r["per_gpu"], "layer_ops": list(VIDUR_LAYER_OPS),
                   "emb": "per step, not in the layer sum"}
        if any("vidur_stack" in info for info in r["per_gpu"].values()):
            metrics["disclosed_stack"] = STACK_DISCLOSED
            metrics["vidur_stack"] = {g: info["vidur_stack"] for g, info in r["per_gpu"].items()
                                      if "vidur_stack" in info}
        if alternative is not None:
            alt = [x for x in alternative["records"] if x.get("scope") is None and x["predictor"] == "steptime"
                   and x["subset"] in SUBSETS]
            # the cells each GPU's rule read, counted from the rule's own record (the text typed "21-29" before)
            n_read = sorted(int(info["eta_active_rule"]["cells"]) for info in alternative["per_gpu"].values()
                            if "eta_active_rule" in info)
            if not n_read:
                raise ValueError("E1.1 document: the alternative run records no eta_active_rule (gemm_reading="
                                 "'vidur_rule')")
            span = str(n_read[0]) if n_read[0] == n_read[-1] else f"{n_read[0]}-{n_read[-1]}"
            for sub in SUBSETS:
                claims.append(claim(f"beyond the three-reading contract: eta_active read from the GPU's own Vidur GEMM "
                                    f"cells (median of {span} cells by a rule chosen on the other Vidur GPUs; those "
                                    f"rows dropped): held-out MAPE per GPU, {sub}-sized cells",
                                    {x["gpu"]: round(x["mape"], 4) for x in alt if x["subset"] == sub},
                                    "context: how much of the miss is the two profilers' GEMM offset"))
            metrics["vidur_rule_protocol"] = {"gemm_reading": "vidur_rule", "records": alt,
                                              "per_gpu": {g: {"eta_active_rule": _with_before(
                                                  info["eta_active_rule"], r["per_gpu"][g]["eta_active"])}
                                                          for g, info in alternative["per_gpu"].items()
                                                          if "eta_active_rule" in info}}
            metrics["disclosed"] = ETA_RULE_DISCLOSED
        return {"metrics": metrics, "claims": claims}
    if eid == "E1.1b":
        dec = r["decomposition"]
        claims = []
        for g in sorted({d["gpu"] for d in dec}):
            for sub in ("decode", "prefill"):
                rows = [d for d in dec if d["gpu"] == g and d["subset"] == sub and d["term"] in ("gemm", "light")]
                if not rows:
                    continue
                top = max(rows, key=lambda d: abs(d["signed_residual_ms"]))
                claims.append(claim(f"{g}, {sub}-sized: the term carrying most of the residual (|signed residual|)",
                                    {"term": top["term"], "share_of_net_residual": top["share_of_net_residual"],
                                     "term_mape": top["mape"], "time_share": round(top["time_share"], 4)},
                                    "largest |sum(pred - measured)|"))
        claims.append(claim("reported in round 1 (A100 prefill): light+KV-write carried 81% of the net residual, "
                            "GEMM 22%", {"light": 0.81, "gemm": 0.22}, "round-1 figure, other telemetry"))
        return {"metrics": {"decomposition": dec}, "claims": claims}
    if eid == "E1.20":
        lad = r["ladder"]
        claims = []
        for g in sorted({x["gpu"] for x in lad}):
            rows = {x["rung"]: x["mape"] for x in lad if x["gpu"] == g and x["subset"] == "all"}
            claims.append(claim(f"{g}: MAPE after each rung (all cells)",
                                {k: round(rows[k], 4) for k in RUNGS}, "ladder from bare roofline to full model"))
        claims.append(claim("reported in round 1 (A100): peak roofline 31.09% -> full ladder 10.62%",
                            {"bare": 0.3109, "full": 0.1062}, "round-1 figure, other telemetry"))
        return {"metrics": {"ladder": lad, "rungs": list(RUNGS)}, "claims": claims}
    raise KeyError(eid)


def plot_step(r: dict, stem, caption=None, targets: dict | None = None):
    plt = plotting.setup()
    groups = [x for x in r["records"] if x.get("scope") == "cell_group"]
    gpus = sorted({x["gpu"] for x in groups})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, sub in zip(axes, SUBSETS):
        labels = sorted({(x["model"], x["tp"]) for x in groups})
        for j, g in enumerate(gpus):
            v = [next((x["mape"] for x in groups if x["gpu"] == g and x["subset"] == sub and (x["model"], x["tp"]) == lb
                       and x["cells"]), np.nan) for lb in labels]
            ax.bar(np.arange(len(labels)) + (j - 1) * 0.27, np.array(v, dtype=float) * 100, 0.27, label=g)
        if targets:
            ax.axhline(targets[sub] * 100, color="k", ls="--", lw=0.8)
        ax.set_xticks(np.arange(len(labels)))
        ax.set_xticklabels([f"{m} tp{t}" for m, t in labels], rotation=60, ha="right", fontsize=6)
        ax.set_title(f"{sub}-sized cells")
    axes[0].set_ylabel("held-out MAPE (%)")
    axes[0].legend(fontsize=7)
    plotting.save(fig, stem, caption)


def plot_residual(r: dict, stem, caption=None):
    plt = plotting.setup()
    dec = [d for d in r["decomposition"] if d["term"] in VIDUR_LAYER_OPS and d["subset"] in SUBSETS]
    gpus = sorted({d["gpu"] for d in dec})
    fig, axes = plt.subplots(1, len(gpus), figsize=(4 * len(gpus), 3.4), sharey=True)
    for ax, g in zip(np.atleast_1d(axes), gpus):
        for j, sub in enumerate(SUBSETS):
            rows = [d for d in dec if d["gpu"] == g and d["subset"] == sub]
            tot = sum(abs(d["signed_residual_ms"]) for d in rows) or 1.0
            ax.barh(np.arange(len(rows)) + (j - 0.5) * 0.4, [d["signed_residual_ms"] / tot * 100 for d in rows], 0.4,
                    label=sub)
            ax.set_yticks(np.arange(len(rows)))
            ax.set_yticklabels([d["term"] for d in rows], fontsize=7)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_xlabel("signed residual share (%)")
        ax.set_title(g)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    plotting.save(fig, stem, caption)


def plot_ladder(r: dict, stem, caption=None):
    plt = plotting.setup()
    lad = r["ladder"]
    gpus = sorted({x["gpu"] for x in lad})
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for ax, sub in zip(axes, ("decode", "prefill", "all")):
        for g in gpus:
            v = [next(x["mape"] for x in lad if x["gpu"] == g and x["subset"] == sub and x["rung"] == rr) for rr in RUNGS]
            ax.plot(range(len(RUNGS)), np.array(v) * 100, "o-", label=g)
        ax.set_xticks(range(len(RUNGS)))
        ax.set_xticklabels(RUNGS, rotation=35, ha="right", fontsize=7)
        ax.set_title(f"{sub}-sized cells")
    axes[0].set_ylabel("MAPE (%)")
    axes[0].legend(fontsize=7)
    plotting.save(fig, stem, caption)


def _atlas_frame(r: dict):
    """The Vidur step predictions with their signed error, power-of-two token bin and model@tp shape."""
    pr = r["pred"].copy()
    pr["err"] = (pr["pred_ms"] - pr["layer_ms"]) / pr["layer_ms"]
    pr["tbin"] = 2 ** np.floor(np.log2(pr["num_tokens"].to_numpy()))
    pr["shape"] = pr["model"] + " tp" + pr["tp"].astype(str)
    return pr


def atlas_regions(r: dict) -> list[dict]:
    """E1.22's score: the bad regions (|median signed error| > 10%) of each GPU's (tokens bin x model@tp)
    grid, each with the operator (and term) whose summed residual dominates it."""
    pr = _atlas_frame(r)
    regions = []
    for g in sorted(pr["gpu"].unique()):
        x = pr[pr["gpu"] == g]
        for (shape, tb), d in x.groupby(["shape", "tbin"]):
            med = float(np.median(d["err"]))
            if abs(med) <= 0.10:
                continue
            err = {op: float(np.nansum(d[f"pred_{op}"] - d[op])) for op in VIDUR_LAYER_OPS if op in d}
            dom = max(err, key=lambda k: abs(err[k]))
            regions.append({"gpu": g, "shape": shape, "tokens_bin": int(tb), "median_signed_error": round(med, 4),
                            "dominant_op": dom, "dominant_term": TERM_OF[dom], "cells": int(len(d))})
    return regions


def plot_atlas(r: dict, stem, caption=None) -> None:
    """E1.22's figure: signed error over (tokens x model@tp) per GPU."""
    plt = plotting.setup()
    pr = _atlas_frame(r)
    gpus = sorted(pr["gpu"].unique())
    fig, axes = plt.subplots(1, len(gpus), figsize=(4.2 * len(gpus), 4.2))
    for ax, g in zip(np.atleast_1d(axes), gpus):
        x = pr[pr["gpu"] == g]
        piv = x.pivot_table(index="shape", columns="tbin", values="err", aggfunc="median")
        im = ax.imshow(piv.to_numpy() * 100, cmap="RdBu_r", vmin=-30, vmax=30, aspect="auto")
        ax.set_xticks(range(len(piv.columns)))
        ax.set_xticklabels([int(v) for v in piv.columns], rotation=90, fontsize=6)
        ax.set_yticks(range(len(piv.index)))
        ax.set_yticklabels(piv.index, fontsize=6)
        ax.set_xlabel("tokens in the step (m, power-of-two bins)")
        ax.set_title(g)
        ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.7, label="signed error (%), predicted vs measured")
    plotting.save(fig, stem, caption)


def atlas_document(attn_regions: list[dict], step_regions: list[dict]) -> dict:
    """E1.22's claims: per GPU, the operator (step) and the named factor (attention) behind most bad regions."""
    import collections

    claims = []
    for g in sorted({x["gpu"] for x in step_regions}):
        c = collections.Counter(x["dominant_op"] for x in step_regions if x["gpu"] == g)
        if c:
            op, n = c.most_common(1)[0]
            claims.append(claim(f"Vidur step on {g}: operator dominating most bad (|median error| > 10%) regions",
                                {"op": op, "regions": n, "bad_regions": sum(c.values())}, "count of (m bin x shape)"))
    for g in sorted({x["gpu"] for x in attn_regions}):
        rows = [x for x in attn_regions if x["gpu"] == g]
        top = max(rows, key=lambda x: x["bad_cells"])
        claims.append(claim(f"attention on {g}: named factor governing most bad (|error| > 10%) Llama-like cells",
                            {"phase": top["phase"], "branch": top["dominant_branch"], "sign": top["sign"],
                             "cells": top["bad_cells"], "bad_cells": sum(x["bad_cells"] for x in rows)},
                            "count of cells"))
    return {"metrics": {"attention_bad_cells": attn_regions, "step_bad_regions": step_regions}, "claims": claims}


def plot_walkthrough(model: str, gpu: str, stem, caption=None, constants: Constants | None = None):
    plt = plotting.setup()
    kvs = (512, 4096, 32768)
    batches = (1, 4, 16, 64, 256)
    cases, labels = [], []
    mem = get_gpu(gpu).mem_bytes
    for kv in kvs:
        for b in batches:
            if memory_bytes(get_model(model), b * (kv + 1)) > mem:
                continue  # the batch does not fit in the GPU's memory
            cases.append((b, kv, 1))
            labels.append(f"{b}x{kv // 1024 or kv}{'k' if kv >= 1024 else ''}")
    cases.append((1, 0, 2048))
    labels.append("prefill 2048")
    sid, new, kvl = [], [], []
    for i, (b, kv, t) in enumerate(cases):
        sid += [i] * b
        new += [t] * b
        kvl += [kv] * b
    r = predict_steps(model, gpu, np.array(sid), np.array(new), np.array(kvl), len(cases), constants=constants)
    tot = r["total_ms"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 1]})
    bottom = np.zeros(len(cases))
    cmap = plt.cm.tab20
    for i, t in enumerate(TERMS):
        share = r["terms_ms"][t] / tot * 100
        if np.all(share < 0.05):
            continue
        axes[0].bar(range(len(cases)), share, bottom=bottom, color=cmap(i % 20), label=t)
        bottom += share
    axes[0].set_xticks(range(len(cases)))
    axes[0].set_xticklabels(labels, rotation=70, fontsize=7)
    axes[0].set_ylabel("share of the step (%)")
    axes[0].set_xlabel("batch: requests x KV length (decode), or one prefill chunk")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, ncol=9, loc="upper center",
               bbox_to_anchor=(0.5, 1.12))
    axes[1].semilogy(range(len(cases)), tot, "o-", color="k")
    axes[1].set_xticks(range(len(cases)))
    axes[1].set_xticklabels(labels, rotation=70, fontsize=6)
    axes[1].set_ylabel("predicted step (ms)")
    axes[1].set_title(f"{model} on {gpu}")
    plotting.save(fig, stem, caption)


def tornado(ladder: list[dict], rungs: list[str]) -> list[dict]:
    """E1.20b: the change in MAPE each rung brings over the one before it, per (GPU, subset), from E1.20's
    ladder rows (negative: the term helps)."""
    out = []
    for g in sorted({x["gpu"] for x in ladder}):
        for sub in sorted({x["subset"] for x in ladder}):
            m = {x["rung"]: x["mape"] for x in ladder if x["gpu"] == g and x["subset"] == sub}
            seq = [r for r in rungs if r in m]
            for prev, r in zip(seq, seq[1:]):
                out.append({"gpu": g, "subset": sub, "rung": r, "delta_mape": m[r] - m[prev]})
    return out


def plot_tornado(rows: list[dict], stem, caption=None, subsets=("decode", "prefill")) -> None:
    """E1.20b: per subset, one horizontal bar per rung and GPU (change in step MAPE, points), rungs sorted by
    their largest |change|."""
    from steptime import plotting

    subs = [s for s in subsets if any(r["subset"] == s for r in rows)]
    gpus = sorted({r["gpu"] for r in rows})
    fig, axes = plotting.subplots(1, len(subs), figsize=(5 * len(subs), 3.4), squeeze=False)
    colors = list(dict.fromkeys(plotting.PALETTE.values()))
    for ax, sub in zip(axes[0], subs):
        mine = [r for r in rows if r["subset"] == sub]
        order = sorted({r["rung"] for r in mine}, key=lambda k: -max(abs(r["delta_mape"]) for r in mine if r["rung"] == k))
        y = np.arange(len(order))
        w = 0.8 / len(gpus)
        for j, g in enumerate(gpus):
            v = [next((100 * r["delta_mape"] for r in mine if r["gpu"] == g and r["rung"] == k), np.nan) for k in order]
            ax.barh(y + (j - (len(gpus) - 1) / 2) * w, v, w, color=colors[j % len(colors)], label=g)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(y, order, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("change in step MAPE (percentage points; < 0 helps)")
        ax.set_title(f"{sub}-sized cells")
    axes[0][0].legend(fontsize=7)
    plotting.save(fig, stem, caption, tight_layout=True)
