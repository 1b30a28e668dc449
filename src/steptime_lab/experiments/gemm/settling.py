"""The settle_gemm_constants rule's library side: the leave-one-GPU-out calibration
document and the defaults.yaml entries it (and the E1.3/E1.11/E1.13 decisions) set.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime_lab.experiments.gemm.contract import (
    DEPLOY_CELLS, DEPLOY_NOTES, FIT_GLOBALS, STREAM_MIN_MIB, calibration_record, deploy_readings,
    select_stream_cell,
)
from steptime_lab.experiments.gemm.folds import FAMILY_GLOBALS, LAUNCH_SCOPES, _readings_json, fit_globals, gpu_params


FIT_SETTINGS = {"n_per_gpu": 2000, "max_nfev": 80, "llm_share": 0.7}


def _settle_fold(df, g, gpus, readings, stream_all, glob_all, kw: dict, constants: Constants) -> dict:
    """One fold of `settle`: the globals fitted without `g`, its readings and its read constants."""
    others = [o for o in gpus if o != g]
    stream = select_stream_cell(df, others)  # chosen without the held-out GPU
    rd = readings if stream == stream_all else {o: deploy_readings(df, o, stream) for o in gpus}
    glob = fit_globals(df, others, rd, x0=glob_all, **kw)
    p = gpu_params(g, glob, rd[g], constants=constants)
    return {"globals": glob, "readings": _readings_json(rd[g]), "stream_cell": list(stream),
            "per_gpu": {nm: p[nm] for nm in DEPLOY_CELLS}}


def settle(df, gpus=None, *, constants: Constants, seed: int = 0, fixed: dict | None = None,
           n_per_gpu: int | None = None, max_nfev: int | None = None, jobs: int = 1) -> dict:
    """Run the leave-one-GPU-out calibration over `constants` (the constants no fit or reading
    sets: the tile ladder, CTAs per SM, cluster size) and return a JSON-able document.

    {'settings', 'deploy_cells', 'fixed', 'all': globals on every GPU, 'folds': {gpu:
    {'globals' (fitted without gpu), 'readings', 'per_gpu' (its read constants)}},
    'calibration'}.
    """
    gpus = list(gpus or sorted(df["gpu"].unique()))
    n_per_gpu = n_per_gpu or FIT_SETTINGS["n_per_gpu"]
    max_nfev = max_nfev or FIT_SETTINGS["max_nfev"]
    fixed = dict(fixed or {})
    stream_all = select_stream_cell(df, gpus)
    readings = {g: deploy_readings(df, g, stream_all) for g in gpus}
    kw = dict(constants=constants, seed=seed, n_per_gpu=n_per_gpu, max_nfev=max_nfev, fixed=fixed)
    glob_all = fit_globals(df, gpus, readings, **kw)
    # the folds are independent fits (each single-threaded, so deterministic): `jobs` worker processes run them
    # side by side with the same results as one after another
    if jobs > 1:
        from joblib import Parallel, delayed

        done = Parallel(n_jobs=min(jobs, len(gpus)))(
            delayed(_settle_fold)(df, g, gpus, readings, stream_all, glob_all, kw, constants) for g in gpus)
    else:
        done = [_settle_fold(df, g, gpus, readings, stream_all, glob_all, kw, constants) for g in gpus]
    folds = dict(zip(gpus, done))
    p_all = {g: gpu_params(g, glob_all, readings[g], constants=constants) for g in gpus}
    return {
        "settings": {"seed": seed, "n_per_gpu": n_per_gpu, "max_nfev": max_nfev,
                     "llm_share": FIT_SETTINGS["llm_share"], "fit_globals": list(FIT_GLOBALS)},
        "deploy_cells": {k: list(v) for k, v in dict(DEPLOY_CELLS, eta_mem_max=stream_all).items()},
        "stream_cell_rule": f"select_stream_cell: single-token cells over >= {STREAM_MIN_MIB} MiB weights; "
                            "each fold chooses on its training GPUs (folds[gpu].stream_cell)",
        "fixed": fixed,
        "all": glob_all,
        "all_per_gpu": {g: {nm: p_all[g][nm] for nm in DEPLOY_CELLS} for g in gpus},
        "folds": folds,
        "calibration": calibration_record(readings).to_dict(),
    }


def _update_scope(name: str) -> tuple[str, str]:
    """(scope, constant) a fitted global is written to: a family global to its family's scope, a launch-kind global
    (`folds.LAUNCH_SCOPES`) to the global `<constant>_<kind>` the product's GEMM term reads on that launch kind
    (`steptime.terms.gemm.WAVE_RAMP`), any other to the global scope."""
    if name not in FAMILY_GLOBALS:
        return "global", name
    scope, const = FAMILY_GLOBALS[name]
    return ("global", f"{const}_{scope}") if scope in LAUNCH_SCOPES else (f"family.{scope}", const)


def defaults_updates(doc: dict, experiment: str = "settle_gemm_constants") -> list[dict]:
    """update_defaults entries: global fitted constants (all GPUs) and per-GPU deploy readings."""
    s = doc["settings"]
    gpus = sorted(doc["folds"])
    sample = (f"aic-gemm bf16 table, seeded subsample (seed {s['seed']}) of {s['n_per_gpu']} cells per GPU "
              f"({int(s['llm_share'] * 100)}% LLM-shaped) on {', '.join(gpus)}; deploy cells excluded")
    ups = []
    for name, value in doc["all"].items():
        if name in doc["fixed"]:
            continue
        scope, const = _update_scope(name)
        ups.append({"scope": scope, "name": const, "value": round(float(value), 6), "provenance": "FITTED",
                    "source": "least-squares (log error, soft-L1) on all GPUs; leave-one-GPU-out refits in "
                              "results/calibration/gemm_constants.json", "experiment": experiment,
                    "cells": [sample]})
    for g in gpus:
        rd = doc["folds"][g]["readings"]
        for name, v in doc["all_per_gpu"][g].items():
            ups.append({"scope": f"gpu.{g}", "name": name, "value": round(float(v), 6), "provenance": "MEASURED",
                        "source": f"deploy reading: {DEPLOY_NOTES[name]}", "experiment": experiment,
                        "cells": [rd[name]["cell"]]})
    # fall-backs for GPUs without readings: the median over the GPUs read
    for name in DEPLOY_CELLS:
        vals = [doc["all_per_gpu"][g][name] for g in gpus]
        ups.append({"scope": "global", "name": name, "value": round(float(np.median(vals)), 6),
                    "provenance": "FITTED", "experiment": experiment,
                    "source": f"median of the per-GPU deploy readings of {len(gpus)} GPUs (used only where a GPU "
                              f"has no reading of its own)", "cells": [f"{g}: {doc['folds'][g]['readings'][name]['cell']}"
                                                                       for g in gpus]})
    return ups


# A stated design choice, not a fitted result: the GEMM fits run without a global work-dependent
# clock droop (the AIConfigurator tables hold latencies, no clock readings, so a droop fitted on them
# would absorb other errors, and five of the nine GPUs do not droop). E1.13's factor ablation tests
# the choice downstream (fitting the droop back in; results/E1_13.json); the term keeps the droop for
# clock telemetry (E1.10). Hopper's own droop is fitted (`hopper_clk_droop`, both Hopper parts droop;
# DESIGN.md, wave 29), at the droop's work scale fixed here.
SHIPPED_FIXED = {"clk_droop": 0.0, "clk_droop_us": 1000.0}


def decision_updates(cluster: int, law: str, experiment: str = "settle_gemm_constants") -> list[dict]:
    """The family/global constants the E1.11 and E1.3 decisions set, and the stated clock-droop choice."""
    ups = [{"scope": "global", "name": "clk_droop", "value": SHIPPED_FIXED["clk_droop"], "provenance": "ASSUMED",
            "source": "design choice: no work-dependent clock droop in the GEMM fits (the latency tables hold no "
                      "clock readings; the term keeps the droop for clock telemetry, E1.10); tested downstream by "
                      "E1.13's factor ablation, which fits it back in (results/E1_13.json); Hopper's own droop is "
                      "fitted (family.hopper clk_droop, hopper_clk_droop in the fit)", "cells": None},
           {"scope": "global", "name": "clk_droop_us", "value": SHIPPED_FIXED["clk_droop_us"], "provenance": "ASSUMED",
            "source": "design choice: the droop's work scale (us of work at peak) fixed at wave 24's 1000 us, so "
                      "Hopper's droop is one fitted number (DESIGN.md, wave 29 helper gemmh)", "cells": None},
           {"scope": "family.hopper", "name": "cluster_size", "value": int(cluster), "provenance": "FITTED",
            "source": "E1.11: cluster size whose persistent-grid cap gives the lowest held-out Hopper MAPE on the "
                      "AIConfigurator latency tables (results/E1_11.json)", "experiment": "E1.11",
            "cells": ["h100-sxm and h200-sxm aic-gemm bf16 tables, leave-one-GPU-out"]}]
    if law == "bytes":
        ups.append({"scope": "global", "name": "mem_x_half", "value": 0.0, "provenance": "FITTED",
                    "source": "E1.3: the memory ramp is a fixed time (mem_t_half_us, law in bytes read), not a "
                              "working-set-over-L2 ramp, which did worse held out (results/E1_3.json); 0 = off",
                    "experiment": "E1.3", "cells": ["memory-bound aic-gemm cells (m <= 16), all GPUs"]})
    return ups


GEMM_GPU_CONSTANTS = ("eta_active", "eta_mem_max", "mem_t_half_us", "kernel_floor_us")
