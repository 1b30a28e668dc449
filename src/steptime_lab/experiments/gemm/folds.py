"""Leave-one-GPU-out fits of the GEMM globals and the folds rebuilt from a settled document
(`results/calibration/gemm_constants.json`): each GPU's parameters are its globals fitted
without it plus its own deploy readings.
"""

from __future__ import annotations

import numpy as np

from steptime_lab.experiments.gemm.contract import (
    DEPLOY_CELLS, FIT_GLOBALS, FIT_SAMPLE, apply_readings, base_params, calibration_record, cell_ids,
    deploy_readings, predict, subset_masks,
)
from steptime.calibration import Constants
from steptime.specs import get_gpu


def _fit_sample(df, gpus, n_per_gpu: int, seed: int, exclude: set, llm_share: float = 0.7) -> dict:
    """Seeded subsample per GPU: `llm_share` of it from LLM-shaped cells (the cells the
    contract's targets are on), the rest from the remaining grid; deploy cells excluded."""
    import pandas as pd

    out = {}
    for i, gpu in enumerate(gpus):
        sub = df[df["gpu"] == gpu]
        keep = np.array([c not in exclude for c in cell_ids(sub)])
        sub = sub[keep]
        llm = subset_masks(sub)["llm"]
        n_llm = min(int(llm.sum()), int(round(n_per_gpu * llm_share)))
        n_rest = min(int((~llm).sum()), n_per_gpu - n_llm)
        parts = [sub[llm].sample(n_llm, random_state=seed + i), sub[~llm].sample(n_rest, random_state=seed + i)]
        sub = pd.concat(parts)
        out[gpu] = (sub["m"].to_numpy(float), sub["n"].to_numpy(float), sub["k"].to_numpy(float),
                    sub["latency_ms"].to_numpy(float))
    return out


def fit_globals(df, gpus, readings: dict, *, constants: Constants, seed: int = 0, n_per_gpu: int = FIT_SAMPLE,
                x0: dict | None = None, max_nfev: int = 60, names=None, fixed: dict | None = None) -> dict:
    """Least-squares fit (log error, soft-L1) of the global constants on `gpus`' cells.

    `readings[gpu]` are that GPU's deploy readings (applied inside the fit; their cells
    are left out of the fitted sample); `constants` the run's (the constants no fit sets:
    `base_params`). Returns {name: value} for `names` (all of FIT_GLOBALS by default) plus
    `fixed` as given.
    """
    from scipy.optimize import least_squares

    fixed = dict(fixed or {})
    if not any(get_gpu(g).architecture == "hopper" for g in gpus):
        fixed.setdefault("hopper_clk_droop", 0.0)  # no Hopper cells: no data on Hopper's droop, none applied
        fixed.setdefault("hopper_split_min_k", 0.0)  # nor on its split depth: none applied
    if not any(_persistent_blackwell(g) for g in gpus):  # no datacenter Blackwell cells: no depth, no own stream
        fixed.setdefault("blackwell_split_min_k", 0.0)
        fixed.setdefault("blackwell_cta_stream_us_mb", 0.0)
    # no wave-launched cells: no data on their own ramp; none fitted or returned, so such a fit's wave parts
    # read the shared ramp
    unscoped = set() if any(_in_scope(g, "wave") for g in gpus) else {
        k for k, (scope, _) in FAMILY_GLOBALS.items() if scope == "wave" and k not in fixed}
    if not any(_persistent(g) for g in gpus):
        # no persistent-launched cells (a wave-only fit, e.g. E2.1's steptime_home_only on an A100): the globals only
        # a persistent launch reads leave every residual unchanged, bit for bit (`persistent_only_globals`), so the
        # least-squares step moves them by rounding noise alone (a different end point on each CPU, wave 37 helper
        # repro); they stay at their start, the value a fit without their data carries
        for nm in persistent_only_globals(set(names or FIT_GLOBALS) | set(fixed)):
            if nm not in fixed and nm not in unscoped:
                fixed[nm] = float(np.clip((x0 or {}).get(nm, FIT_GLOBALS[nm][0]), FIT_GLOBALS[nm][1],
                                          FIT_GLOBALS[nm][2]))
    names = [nm for nm in (names or FIT_GLOBALS) if nm not in fixed and nm not in unscoped]
    exclude = {c for g in gpus for c, _ in readings[g].values()}
    sample = _fit_sample(df, gpus, n_per_gpu, seed, exclude)
    bases = {g: base_params(g, constants) for g in gpus}
    start = np.array([(x0 or {}).get(nm, FIT_GLOBALS[nm][0]) for nm in names], dtype=float)
    lo = np.array([FIT_GLOBALS[nm][1] for nm in names])
    hi = np.array([FIT_GLOBALS[nm][2] for nm in names])
    start = np.clip(start, lo + 1e-9, hi - 1e-9)

    fills = _FillCache(gpus, readings, sample)

    def resid(x):
        glob = dict(zip(names, x), **fixed)
        out = []
        for g in gpus:
            q = with_globals(g, bases[g], glob)
            p = apply_readings(g, q, readings[g], rounds=3, fill=fills.get(g, "readings", q))
            m, n, k, y = sample[g]
            out.append(np.log(predict(g, m, n, k, p, fill=fills.get(g, "sample", p)) / y))
        return np.concatenate(out)

    # one BLAS thread: the fit's landscape has flat directions, and multi-threaded reductions
    # would make the result depend on the machine's thread count (determinism)
    from threadpoolctl import threadpool_limits

    def fit(x0):
        return least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, max_nfev=max_nfev,
                             x_scale=np.maximum(np.abs(x0), 0.1)).x

    with threadpool_limits(limits=1):
        x = fit(start)
        # a family split depth picks the launch (split-K / stream-K allowed or not): the cost is piecewise in it and
        # the least-squares step barely moves it from its start, so scan its grid too
        for depth in SPLIT_DEPTH_GLOBALS:
            if depth in names:
                x = _scan_grid(x, names, depth, SPLIT_DEPTH_GRID, resid, fit, lo, hi)
        if "wave_l2_resident_x" in names:  # a threshold in the working set: piecewise too, so scan its grid
            x = _scan_grid(x, names, "wave_l2_resident_x", WAVE_L2_RESIDENT_GRID, resid, fit, lo, hi)
    return {**dict(zip(names, map(float, x))), **fixed}


class _FillCache:
    """The launch fills (`steptime.terms.gemm.sm_fill`) of one fit's cells per GPU (its reading cells, its sample),
    kept for the last few `fill_key`s: a least-squares step moves one global at a time, and most globals leave the
    launch choice alone, so most residual evaluations reuse a fill (the same values, without the launch search).
    An entry is keyed on all the fill depends on: the GPU and cell set (its slot), the paradigm and the constants of
    `FILL_CONSTANTS` (`fill_key`); the heuristic launch only (no `launch` dispatch).
    One per `fit_globals` call (no state outlives the fit)."""

    SIZE = 8  # fills kept per GPU and cell set (a Jacobian moves each launch global once from the same point)

    def __init__(self, gpus, readings: dict, sample: dict):
        from steptime_lab.experiments.gemm.contract import reading_cells

        self.cells = {}
        for g in gpus:
            self.cells[(g, "readings")] = reading_cells(readings[g])[1:]
            self.cells[(g, "sample")] = sample[g][:3]
        self.kept: dict = {key: {} for key in self.cells}

    def get(self, gpu: str, which: str, p: dict, paradigm: str | None = None) -> dict:
        """The `sm_fill` of `gpu`'s `which` cells under `p` and `paradigm` (default: the GPU's, `fill_paradigm`)."""
        from steptime.terms.gemm import fill_key, fill_paradigm, sm_fill

        kept = self.kept[(gpu, which)]
        paradigm = paradigm or fill_paradigm(get_gpu(gpu))
        key = fill_key(p, paradigm)
        fill = kept.pop(key, None)
        if fill is None:
            m, n, k = self.cells[(gpu, which)]
            fill = sm_fill(m, n, k, get_gpu(gpu), params=p, paradigm=paradigm)
            if len(kept) >= self.SIZE:
                kept.pop(next(iter(kept)))  # the least recently used
        kept[key] = fill  # most recent last
        return fill


# Candidate split depths (elements of k) scanned by `fit_globals` (powers of two, fixed before any scan was run)
SPLIT_DEPTH_GRID = (1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
# The family split depths `fit_globals` scans over that grid (Blackwell's, wave 30; Hopper's, wave 32 helper hop8)
SPLIT_DEPTH_GLOBALS = ("blackwell_split_min_k", "hopper_split_min_k")


def _soft_l1(r) -> float:
    """least_squares' soft-L1 cost at f_scale 0.1 (up to a constant factor)."""
    return float(np.sum(np.sqrt(1.0 + (r / 0.1) ** 2) - 1.0))


# Candidate wave-launch L2-residency thresholds (working set / L2), scanned by `fit_globals` (wave 31, helper l40g;
# fixed before the scan was run, after seeing the first wave-ramp settle leave the threshold at its start)
WAVE_L2_RESIDENT_GRID = (0.05, 0.1, 0.2, 0.3, 0.5)


def _scan_grid(x, names, name, grid, resid, fit, lo, hi):
    """A global the least-squares step barely moves (the cost is piecewise in it: a launch choice, a threshold):
    score each `grid` value of `name` at the other globals just fitted; if one beats the fitted value, refit every
    global from it (the other globals then follow)."""
    i = names.index(name)
    best, best_cost = x, _soft_l1(resid(x))
    for d in grid:
        y = np.array(x, dtype=float)
        y[i] = d
        c = _soft_l1(resid(y))
        if c < best_cost:
            best, best_cost = y, c
    if best is x:
        return x
    return fit(np.clip(best, lo + 1e-9, hi - 1e-9))


# Family constants carried among the globals: {glob key: (architecture or launch kind, the GEMM constant it sets on
# those parts only)}
FAMILY_GLOBALS = {"hopper_cluster_size": ("hopper", "cluster_size"), "hopper_clk_droop": ("hopper", "clk_droop"),
                  "hopper_split_min_k": ("hopper", "split_min_k"),
                  "blackwell_split_min_k": ("blackwell", "split_min_k"),
                  "blackwell_cta_stream_us_mb": ("blackwell", "cta_stream_us_mb"),
                  # launch-kind scope: the wave-launched parts' memory ramp (fill_paradigm "wave": Ampere, Ada, sm120)
                  "wave_mem_t_half_us": ("wave", "mem_t_half_us"), "wave_l2_resident_x": ("wave", "l2_resident_x"),
                  "wave_l2_gain": ("wave", "l2_gain")}
HOPPER_GLOBALS = {k: c for k, (fam, c) in FAMILY_GLOBALS.items() if fam == "hopper"}
# the scopes of FAMILY_GLOBALS that name a launch kind (steptime.terms.gemm.fill_paradigm), not an architecture
LAUNCH_SCOPES = ("wave",)


def _in_scope(gpu: str, scope: str) -> bool:
    """Whether a FAMILY_GLOBALS scope covers `gpu`: its architecture, or its launch kind (`LAUNCH_SCOPES`)."""
    from steptime.terms.gemm import fill_paradigm

    g = get_gpu(gpu)
    return fill_paradigm(g) == scope if scope in LAUNCH_SCOPES else g.architecture == scope


# The globals a wave launch never reads (wave 37, helper repro): the per-CTA prologue duty, stream-K's relative
# throughput and the per-CTA stream (steptime.terms.gemm: FILL_CONSTANTS["wave"] lacks the first two; wave-launched
# families keep the stream off); and the shared memory ramp, which `with_globals` replaces on wave parts by its
# `wave_*` twin wherever that twin is fitted or fixed (SHADOWED_ON_WAVE)
PERSISTENT_ONLY = ("duty_c", "streamk_rel", "cta_stream_us_mb")
SHADOWED_ON_WAVE = {"mem_t_half_us": "wave_mem_t_half_us", "l2_resident_x": "wave_l2_resident_x",
                    "l2_gain": "wave_l2_gain"}


def persistent_only_globals(present) -> list[str]:
    """The FIT_GLOBALS no wave-launched GPU's residual reads, given the globals `present` in a fit (fitted or fixed):
    PERSISTENT_ONLY, and each SHADOWED_ON_WAVE global whose wave twin is present."""
    present = set(present)
    return [nm for nm in FIT_GLOBALS
            if nm in PERSISTENT_ONLY or (nm in SHADOWED_ON_WAVE and SHADOWED_ON_WAVE[nm] in present)]


def _persistent(gpu: str) -> bool:
    """A part whose GEMMs launch persistent (`steptime.terms.gemm.fill_paradigm`: Hopper, datacenter Blackwell)."""
    from steptime.terms.gemm import fill_paradigm

    return fill_paradigm(get_gpu(gpu)) == "persistent"


def _persistent_blackwell(gpu: str) -> bool:
    """A datacenter Blackwell part (sm100/sm103: persistent launches), the parts the Blackwell GEMM globals act on."""
    from steptime.terms.gemm import fill_paradigm

    g = get_gpu(gpu)
    return g.architecture == "blackwell" and fill_paradigm(g) == "persistent"


def with_globals(gpu: str, base: dict, glob: dict) -> dict:
    """`base` with the global constants applied; the `FAMILY_GLOBALS` keys set their constant on that
    family's parts only (`hopper_cluster_size`: the cluster size; `hopper_clk_droop`: the clock droop, over
    any global `clk_droop`; `hopper_split_min_k`: Hopper's split depth; `blackwell_split_min_k` / `blackwell_cta_stream_us_mb`: the split depth and the
    per-CTA stream, over the global ones; `wave_*`: the memory ramp on the wave-launched parts, over the global
    one) and are not passed to other parts."""
    p = {k: v for k, v in base.items() if k not in FAMILY_GLOBALS}
    for k, v in glob.items():
        if k not in FAMILY_GLOBALS:
            p[k] = v
    for k, v in glob.items():
        if k in FAMILY_GLOBALS and _in_scope(gpu, FAMILY_GLOBALS[k][0]):
            p[FAMILY_GLOBALS[k][1]] = int(v) if k == "hopper_cluster_size" else float(v)
    return p


def gpu_params(gpu: str, glob: dict, readings: dict, *, constants: Constants, paradigm: str | None = None,
               fixed: dict | None = None) -> dict:
    """The full parameter set for `gpu`: the run's constants (`base_params`), then fitted globals,
    then `fixed` (per-GPU values taken from elsewhere, e.g. a reading of another table), then its readings."""
    return apply_readings(gpu, {**with_globals(gpu, base_params(gpu, constants), glob), **(fixed or {})}, readings,
                          paradigm=paradigm)


def loo(df, gpus=None, *, constants: Constants, seed: int = 0, n_per_gpu: int = FIT_SAMPLE, max_nfev: int = 60,
        warm: dict | None = None) -> dict:
    """Leave-one-GPU-out: for each GPU, globals fitted on the others + its own readings.

    Returns {'folds': {gpu: {'globals', 'params', 'readings'}}, 'all': globals fitted on
    every GPU, 'calibration': Calibration}.
    """
    gpus = list(gpus or sorted(df["gpu"].unique()))
    readings = {g: deploy_readings(df, g) for g in gpus}
    glob_all = fit_globals(df, gpus, readings, constants=constants, seed=seed, n_per_gpu=n_per_gpu, x0=warm,
                           max_nfev=max_nfev)
    folds = {}
    for g in gpus:
        others = [o for o in gpus if o != g]
        glob = fit_globals(df, others, readings, constants=constants, seed=seed, n_per_gpu=n_per_gpu, x0=glob_all,
                           max_nfev=max_nfev)
        folds[g] = {"globals": glob, "params": gpu_params(g, glob, readings[g], constants=constants),
                    "readings": readings[g]}
    return {"folds": folds, "all": glob_all, "readings": readings, "calibration": calibration_record(readings)}


def _readings_json(rd: dict) -> dict:
    return {nm: {"cell": list(cell), "latency_ms": t} for nm, (cell, t) in rd.items()}


def folds_from_doc(doc: dict, gpus=None, *, constants: Constants) -> dict:
    """{gpu: fold} with params rebuilt from a settle() document (no refit) over `constants`."""
    return {g: fold_from_json(doc, g, constants=constants) for g in (gpus or doc["folds"])}


def _readings_from_json(doc: dict, gpu: str) -> dict:
    return {name: (tuple(v["cell"]), float(v["latency_ms"])) for name, v in doc["folds"][gpu]["readings"].items()}


def fold_from_json(doc: dict, gpu: str, paradigm: str | None = None, *, constants: Constants,
                   fixed: dict | None = None) -> dict:
    """`gpu`'s leave-one-GPU-out fold of a settle() document: its globals, readings and the
    parameters they give over `constants` (the run's). `fixed` {name: value}: per-GPU constants
    set from elsewhere; the readings of those names are not applied (nor returned)."""
    fixed = dict(fixed or {})
    readings = {nm: r for nm, r in _readings_from_json(doc, gpu).items() if nm not in fixed}
    glob = dict(doc["folds"][gpu]["globals"])
    return {"globals": glob, "readings": readings,
            "params": gpu_params(gpu, glob, readings, constants=constants, paradigm=paradigm, fixed=fixed)}


def with_fold(constants, gpu: str, doc: dict | None, fixed: dict | None = None):
    """`constants` with `gpu`'s leave-one-GPU-out GEMM fold overlaid (globals fitted on the other
    GPUs plus its own three deploy readings; `fixed` as in `fold_from_json` replaces a reading).
    Returns (constants, the fold's reading cells); unchanged, with no cells, when `doc` has no
    fold for the GPU."""
    key = get_gpu(gpu).key
    if not doc or key not in doc.get("folds", {}):
        return constants, []
    fold = fold_from_json(doc, key, constants=constants, fixed=fixed)
    constants = constants.with_overrides(fold["params"], scope=f"gpu.{key}", provenance="FITTED",
                                         source="GEMM leave-one-GPU-out fold (results/calibration/gemm_constants.json)")
    return constants, [tuple(cell) for cell, _ in fold["readings"].values()]


def readings_in_fold(doc: dict, fold_gpu: str | None, gpus, *, constants: Constants) -> dict:
    """{gpu: {reading name: value}} for every GPU of `gpus` with GEMM deploy readings, each
    solved from its own deploy cells under the globals of `fold_gpu`'s leave-one-GPU-out
    fold (fitted without `fold_gpu`; None: the all-GPU fit). Other families carry these
    readings to their own per-GPU constants, so a GPU needs no readings beyond these three.
    `constants`: the run's (the constants no fit or reading sets)."""
    glob = doc["all"] if fold_gpu is None else doc["folds"][fold_gpu]["globals"]
    stream = None if fold_gpu is None else doc["folds"][fold_gpu].get("stream_cell")
    out = {}
    for g in gpus:
        if g not in doc["folds"]:
            continue
        rd = _readings_from_json(doc, g)
        # the doc keeps each GPU's readings at its own fold's stream cell: only valid here when
        # that is the cell `fold_gpu`'s fit used for every GPU
        if stream is not None and list(rd["eta_mem_max"][0][2:]) != list(stream):
            raise ValueError(f"{g}: its stored streaming reading {rd['eta_mem_max'][0]} is not at the stream cell "
                             f"{stream} that {fold_gpu}'s fold was fitted with")
        p = gpu_params(g, glob, rd, constants=constants)
        out[g] = {name: float(p[name]) for name in DEPLOY_CELLS}
    return out
