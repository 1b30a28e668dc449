"""E2.1's peers on fair ground: the same cells, each predictor's training data named.

* ``steptime_home_only`` (`HomeOnly`): every family constant steptime fits (GEMM globals,
  attention shape factors and reading ratios, light-kernel factors) fitted on the home
  GPU's tables alone, then the target's three deploy readings; scored on unseen GPUs only
  (at home it would be in-sample).
* ``ml_loo`` (`MLLeaveOneOut`): a gradient-boosted tree model (scikit-learn's
  HistGradientBoostingRegressor) trained on every other GPU's table of the same dataset,
  with datasheet features (peak bf16 FLOP/s, HBM bandwidth, SMs, GPCs, L2, boost and base
  clocks, SM version for the architecture) beside the shapes and their datasheet
  rooflines; it predicts log(latency / roofline) on the held-out GPU. No target reading.
* ``rf_spec_scaled_readings`` (`reading_scale`): the home forest's spec-scaled prediction
  times measured / predicted on the target's reading cell nearest to each cell in (log
  FLOPs, log bytes) (the readings are kept out of every row's scoring).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Calibration, Constants
from steptime.peers import Entry
from steptime.specs import get_gpu, get_model
from steptime_lab.experiments.cells import STEP_OPS
from steptime_lab.experiments.ratios import attention_work, gemm_work, roofline_s, step_op_work
from steptime_lab.experiments import attention as AX, gemm as GX, light as LX

# datasheet columns of gpus.yaml the ML peer sees for each GPU
DATASHEET_FEATURES = ("bf16_dense_tflops", "mem_bw_gbps", "sms", "gpcs", "l2_mb", "boost_mhz", "base_mhz",
                      "sm_version")
# fast: each training GPU's table subsampled to this many rows (seeded); heavy: whole tables
ML_FAST_ROWS_PER_GPU = 3000
ML_SETTINGS = {True: {"max_iter": 300, "learning_rate": 0.08, "max_leaf_nodes": 31},
               False: {"max_iter": 800, "learning_rate": 0.05, "max_leaf_nodes": 63}}


def datasheet_row(gpu: str) -> list[float]:
    g = get_gpu(gpu)
    # a figure gpus.yaml lacks is NaN (the boosted trees route missing values natively)
    return [float(v) if (v := getattr(g, f)) is not None else float("nan") for f in DATASHEET_FEATURES]


def work(dataset: str, cells):
    """(flops, bytes) of each cell (the step: summed over Vidur's nine operators)."""
    if dataset == "aic_gemm":
        return gemm_work(cells["m"], cells["n"], cells["k"])
    if dataset == "aic_attention":
        return attention_work(cells)
    w = step_op_work(cells)
    return sum(w[op][0] for op in STEP_OPS), sum(w[op][1] for op in STEP_OPS)


def _shape_features(dataset: str, cells) -> list[np.ndarray]:
    if dataset == "aic_gemm":
        return [np.log2(cells[c].to_numpy(dtype=float)) for c in ("m", "n", "k")]
    if dataset == "aic_attention":
        return [(cells["phase"] == "decode").to_numpy(dtype=float)] + [
            np.log2(1.0 + cells[c].to_numpy(dtype=float))
            for c in ("batch_size", "new_tokens", "kv_len", "num_heads", "num_kv_heads")]
    dims = {m: get_model(m) for m in cells["model"].unique()}
    hid = cells["model"].map({m: float(d.hidden_size) for m, d in dims.items()}).to_numpy(dtype=float)
    inter = cells["model"].map({m: float(d.intermediate_size) for m, d in dims.items()}).to_numpy(dtype=float)
    return [np.log2(cells["num_tokens"].to_numpy(dtype=float)), np.log2(cells["tp"].to_numpy(dtype=float)),
            np.log2(hid), np.log2(inter)]


def ml_features(dataset: str, cells, gpu: str):
    """Feature matrix (cells x features) and the datasheet roofline (s) of each cell on `gpu`."""
    f, b = work(dataset, cells)
    roof = roofline_s(f, b, gpu)
    n = len(cells)
    cols = _shape_features(dataset, cells) + [
        np.log10(np.maximum(f, 1.0)), np.log10(np.maximum(b, 1.0)), np.log10(roof),
        np.log10(np.maximum(f, 1.0) / np.maximum(b, 1.0))]
    cols += [np.full(n, v) for v in datasheet_row(gpu)]
    return np.column_stack(cols), roof


# fair best (issue 24): the setting is chosen per target by cross-validation grouped by GPU
# inside the training GPUs only (never the target). fast: a small grid, two inner folds and
# each training GPU capped at ML_TUNED_ROWS_PER_GPU["fast"] rows; full (fast: false): every
# row, a wider grid and leave-one-GPU-out inner folds.
ML_GRID = {True: ({"max_iter": 300, "learning_rate": 0.08, "max_leaf_nodes": 31},
                  {"max_iter": 500, "learning_rate": 0.08, "max_leaf_nodes": 63, "l2_regularization": 1.0}),
           False: tuple({"max_iter": it, "learning_rate": lr, "max_leaf_nodes": nl, "min_samples_leaf": ms}
                        for it in (300, 800) for lr in (0.05, 0.1) for nl in (31, 63) for ms in (20, 100))}
ML_INNER_FOLDS = {True: 2, False: None}  # None: leave-one-GPU-out
ML_TUNED_ROWS_PER_GPU = {True: 6000, False: None}


def prefix_twins(grid) -> dict[int, list[int]]:
    """Group the settings of `grid` (HistGradientBoostingRegressor keyword dicts) that differ only in
    max_iter: {index of the group's setting with the most iterations (the first such): [every index of
    the group, in grid order]}, groups in the order of their first setting."""
    groups: dict = {}
    for j, s in enumerate(grid):
        rest = tuple(sorted((k, v) for k, v in s.items() if k != "max_iter"))
        groups.setdefault(rest, []).append(j)
    out = {}
    for members in groups.values():
        top = max(members, key=lambda j: (grid[j].get("max_iter", 100), -j))
        out[top] = members
    return out


def truncated(est, n_iter: int):
    """A fitted HistGradientBoostingRegressor cut to its first `n_iter` iterations: boosting does not
    look at max_iter before it stops, so this predicts bit for bit what the same setting fitted with
    max_iter=n_iter predicts (the same trees, summed in the same order)."""
    import copy

    n_iter = int(n_iter)
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, not {n_iter}")
    if not hasattr(est, "_predictors"):
        raise ValueError("truncated() needs a fitted HistGradientBoostingRegressor")
    if getattr(est, "warm_start", False):
        raise ValueError("truncated() is defined for fits from scratch (warm_start=False)")
    if n_iter >= est.n_iter_:
        return est
    out = copy.copy(est)
    out._predictors = est._predictors[:n_iter]
    out.max_iter = n_iter
    return out


class MLLeaveOneOut:
    """Gradient-boosted trees trained on every GPU of `cells` but the target (memoised per
    target); `fast` caps each training GPU at ML_FAST_ROWS_PER_GPU rows (seeded). With
    `tuned` (the fair best), the setting is picked from ML_GRID[fast] by GPU-grouped
    cross-validation on the training GPUs (mean per-GPU MAPE), rows capped at
    ML_TUNED_ROWS_PER_GPU[fast] (None: all rows)."""

    name = "ml_loo"

    def __init__(self, dataset: str, cells, *, fast: bool = True, seed: int = 0, tuned: bool = False):
        self.dataset, self.cells, self.fast, self.seed = dataset, cells, bool(fast), int(seed)
        self.tuned = bool(tuned)
        self._memo: dict = {}
        self._inner: dict = {}  # inner-fold fits shared by the two targets whose tuning both fit them (_tune)

    def _cap(self):
        if self.tuned:
            return ML_TUNED_ROWS_PER_GPU[self.fast]
        return ML_FAST_ROWS_PER_GPU if self.fast else None

    def _train(self, gpus):
        xs, ys, n, grp = [], [], {}, []
        cap = self._cap()
        for i, g in enumerate(gpus):
            sub = self.cells[self.cells["gpu"] == g]
            if cap is not None and len(sub) > cap:
                sub = sub.sample(cap, random_state=self.seed + i)
            sub = sub.reset_index(drop=True)
            X, roof = ml_features(self.dataset, sub, g)
            xs.append(X)
            ys.append(np.log(sub["latency_ms"].to_numpy(dtype=float) * 1e-3 / roof))
            grp.append(np.full(len(sub), i))
            n[g] = int(len(sub))
        return np.vstack(xs), np.concatenate(ys), n, np.concatenate(grp)

    def _tune(self, X, y, grp, gpus=None):
        """{setting index: mean per-GPU MAPE} of GPU-grouped inner folds, and the best index.
        Leave-one-GPU-out on uncapped rows (`gpus` given): the fold of target T holding out H fits
        on exactly the rows target H's fold holding out T fits on (every row of the other GPUs, in
        the same order, the same seed): fitted once, kept until its second use. Settings that differ
        only in max_iter (`prefix_twins`) share one fit, the one with the most iterations: the fewer
        iterations' model is its first trees (`truncated`), the very model a fit of its own makes."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        gids = np.unique(grp)
        k = ML_INNER_FOLDS[self.fast] or len(gids)
        folds = [gids[i::k] for i in range(min(k, len(gids)))]
        share = gpus is not None and ML_INNER_FOLDS[self.fast] is None and self._cap() is None
        grid = ML_GRID[self.fast]
        errs = {j: [] for j in range(len(grid))}
        for t, group in prefix_twins(grid).items():
            for held in folds:
                te = np.isin(grp, held)
                key = (t, tuple(g for i, g in enumerate(gpus) if i not in set(held.tolist()))) if share else None
                full = self._inner.pop(key, None) if share else None
                if full is None:
                    full = HistGradientBoostingRegressor(random_state=self.seed, **grid[t]).fit(X[~te], y[~te])
                    if share:
                        self._inner[key] = full
                for j in group:
                    est = full if j == t else truncated(full, grid[j]["max_iter"])
                    r = np.abs(np.exp(est.predict(X[te]) - y[te]) - 1.0)
                    errs[j] += [float(np.mean(r[grp[te] == g])) for g in held]
        cv = {j: float(np.mean(errs[j])) for j in range(len(grid))}
        return cv, min(cv, key=cv.get)

    def fit(self, target: str):
        if target not in self._memo:
            from sklearn.ensemble import HistGradientBoostingRegressor

            from threadpoolctl import threadpool_limits

            gpus = sorted(g for g in self.cells["gpu"].unique() if g != target)
            X, y, n, grp = self._train(gpus)
            with threadpool_limits(limits=1):  # one core (shared machines; deterministic)
                if self.tuned and len(gpus) >= 2:
                    cv, best = self._tune(X, y, grp, gpus)
                    setting = dict(ML_GRID[self.fast][best])
                    tuning = {"grid": [dict(s) for s in ML_GRID[self.fast]],
                              "inner_cv_mape": {str(j): round(v, 5) for j, v in cv.items()},
                              "inner_folds": ML_INNER_FOLDS[self.fast] or "leave-one-GPU-out",
                              "tuned_on": "the training GPUs only (folds grouped by GPU), never the target"}
                else:
                    setting, tuning = dict(ML_SETTINGS[self.fast]), None
                est = HistGradientBoostingRegressor(random_state=self.seed, **setting).fit(X, y)
            self._memo[target] = (est, {"gpus": gpus, "cells": int(sum(n.values())), "cells_per_gpu": n,
                                        "target_readings": 0, "model": "HistGradientBoostingRegressor",
                                        "settings": dict(setting, fast=self.fast, rows_per_gpu_cap=self._cap()),
                                        "tuning": tuning,
                                        "features": "shapes, log FLOPs, log bytes, log datasheet roofline, "
                                                    "intensity, " + ", ".join(DATASHEET_FEATURES)})
        return self._memo[target]

    def predict(self, cells, target: str) -> np.ndarray:
        """Predicted ms of `cells` on `target` (a GPU the model never saw)."""
        est, _ = self.fit(target)
        from threadpoolctl import threadpool_limits

        X, roof = ml_features(self.dataset, cells, target)
        with threadpool_limits(limits=1):
            return np.exp(est.predict(X)) * roof * 1e3

    def fitted_on(self, target: str) -> dict:
        return self.fit(target)[1]


def reading_scale(pred_at_readings, meas_at_readings, work_at_readings=None, work=None):
    """Measured / predicted on the target's reading cells, carried to each cell from the
    reading nearest to it in (log FLOPs, log bytes) (a compute-bound cell takes the large
    GEMM's ratio, a streaming cell the streaming one's): an array over `work`'s cells, or the
    geometric mean over the readings when `work` is not given (1 without any reading)."""
    p = np.asarray(pred_at_readings, dtype=float)
    m = np.asarray(meas_at_readings, dtype=float)
    ok = (p > 0) & (m > 0) & np.isfinite(p) & np.isfinite(m)
    if not ok.any():
        return 1.0 if work is None else np.ones(len(np.asarray(work[0])))
    r = m[ok] / p[ok]
    if work is None or work_at_readings is None:
        return float(np.exp(np.mean(np.log(r))))
    lw = np.log10(np.maximum(np.column_stack([np.asarray(x, dtype=float) for x in work]), 1.0))
    lr = np.log10(np.maximum(np.column_stack([np.asarray(x, dtype=float) for x in work_at_readings]), 1.0))[ok]
    nearest = np.argmin(((lw[:, None, :] - lr[None, :, :]) ** 2).sum(axis=2), axis=1)
    return r[nearest]


class HomeOnly:
    """steptime with every family constant fitted on the home GPU's tables alone, then each
    target's three deploy readings (the same reading cells as the held-out fold's), over the
    `constants` given (the run's settled constants: the constants no family here refits).

    `gemm_df`: GEMM table in `experiments.gemm.load_gemm` form; `attn_cells`: attention
    cells in `experiments.attention.tidy_cells` form; `light_cells`: light cells in
    `experiments.light.tidy_cells` form; each only for the families the dataset uses.
    `shared`: a dict the caller passes to every HomeOnly of one run (E2.1 makes one per dataset
    and home): the home's GEMM globals and each GPU's readings under them are fitted once per
    home and reused by the others (keyed by the home and by the very objects and settings the fit
    reads, so instances that differ in any of them never share).
    """

    name = "steptime_home_only"

    def __init__(self, families, home: str, *, constants: Constants, gemm_doc: dict, gemm_df=None, attn_cells=None,
                 light_cells=None, seed: int = 0, gemm_n_per_gpu: int = 2000, gemm_max_nfev: int = 80,
                 attn_sample: int = 800, shared: dict | None = None):
        self.families, self.home, self.doc = tuple(families), home, gemm_doc
        self._shared = shared
        self.base = constants
        self.gemm_df, self.attn_cells, self.light_cells = gemm_df, attn_cells, light_cells
        self.seed, self.kw = int(seed), dict(n_per_gpu=gemm_n_per_gpu, max_nfev=gemm_max_nfev)
        self.attn_sample = int(attn_sample)
        self._glob = None
        self._attn = None
        self._light = None
        self._memo: dict = {}

    # --- fits on the home GPU alone (each once)
    def _gemm_key(self) -> tuple:
        """What the home's GEMM fit reads (the `shared` memo's key)."""
        return (self.home, id(self.gemm_df), id(self.doc), id(self.base), self.seed, tuple(sorted(self.kw.items())))

    def gemm_globals(self) -> dict:
        if self._glob is None:
            key = ("gemm_globals",) + self._gemm_key()
            if self._shared is not None and key in self._shared:
                self._glob = self._shared[key]
            else:
                rd = {self.home: GX._readings_from_json(self.doc, self.home)}
                self._glob = GX.fit_globals(self.gemm_df, [self.home], rd, constants=self.base, seed=self.seed,
                                            fixed=self.doc.get("fixed"), **self.kw)
                if self._shared is not None:
                    self._shared[key] = self._glob
        return self._glob

    def readings(self, gpu: str) -> dict | None:
        """`gpu`'s GEMM per-GPU constants solved from its own deploy cells under the home-only globals."""
        if gpu not in self.doc["folds"]:
            return None
        key = ("readings", gpu) + self._gemm_key()
        if self._shared is not None and key in self._shared:
            return dict(self._shared[key])
        p = GX.gpu_params(gpu, self.gemm_globals(), GX._readings_from_json(self.doc, gpu), constants=self.base)
        out = {nm: float(p[nm]) for nm in GX.DEPLOY_CELLS}
        if self._shared is not None:
            self._shared[key] = dict(out)
        return out

    def attention_fit(self):
        if self._attn is None:
            fcg = AX.fit_globals(self.attn_cells, [self.home], self.seed, n_sample=self.attn_sample,
                                 constants=self.base)
            ratios = AX.reading_ratios(self.attn_cells, [self.home], fcg, {self.home: self.readings(self.home)},
                                       self.base)
            self._attn = (fcg, ratios)
        return self._attn

    def light_fit(self):
        if self._light is None:
            self._light = LX.fit_kernels(self.light_cells, [self.home])
        return self._light

    def fitted_on(self) -> dict:
        """What the home-only constants were fitted on (GPUs and cells), per family."""
        out = {}
        if "gemm" in self.families or "attention" in self.families:
            out["gemm"] = {"gpus": [self.home], "cells": int(min(self.kw["n_per_gpu"],
                                                                  int((self.gemm_df["gpu"] == self.home).sum())))}
        if "attention" in self.families:
            out["attention"] = {"gpus": [self.home], "cells": int(len(AX._sample(
                self.attn_cells[self.attn_cells["gpu"] == self.home], self.seed, self.attn_sample)))}
        if "light" in self.families:
            out["light"] = {"gpus": [self.home], "cells": int((self.light_cells["gpu"] == self.home).sum())}
        return out

    def __call__(self, target: str) -> tuple[Constants, Calibration]:
        if target not in self._memo:
            self._memo[target] = self._constants(target)
        return self._memo[target]

    def _constants(self, target: str):
        key = get_gpu(target).key
        c = self.base
        src = f"fitted on {self.home}'s table alone (E2.1 steptime_home_only)"
        rd_cells = []
        if "light" in self.families:
            fit = self.light_fit()
            base = c
            eta, floors, ps = dict(fit["light_eta"]), dict(fit["light_floor_us"]), dict(fit["light_p"])
            eta.setdefault("kv_write", base.get("light_eta")["kv_write"])
            floors.setdefault("kv_write", float(np.median(list(floors.values()))))
            ps.setdefault("kv_write", float(np.median(list(ps.values()))))
            rds = {g: r for g in (self.home, target) if (r := self.readings(g)) is not None}
            derived = LX.derived_bw_scale(self.light_cells, target, [self.home], rds) if target in rds else None
            xg = self.light_cells[self.light_cells["gpu"] == target].reset_index(drop=True)
            if derived is not None:
                scale = derived[0]
                rd_cells.append(tuple(LX.gemm_stream_cell(self.doc, target)))
            else:
                scale = LX.bw_scale(xg, target)
                rd_cells.append(tuple(xg["cell"].iloc[LX.deploy_index(xg)]))
            c = c.with_overrides({"light_eta": eta, "light_floor_us": floors, "light_p": ps}, scope="global",
                                 source=f"light kernels {src}")
            c = c.with_overrides({"light_bw_scale": scale}, scope=f"gpu.{key}", provenance="DERIVED",
                                 source=f"light_bw_scale from the target's reading, ratio {src}")
        if "gemm" in self.families:
            glob = self.gemm_globals()
            if key in self.doc["folds"]:
                rd = GX._readings_from_json(self.doc, key)
                params = GX.gpu_params(key, glob, rd, constants=self.base)
                rd_cells += [tuple(cell) for cell, _ in rd.values()]
            else:  # a GPU without GEMM readings: home-only globals over its shipped per-GPU constants
                params = {k: v for k, v in glob.items() if k not in GX.FAMILY_GLOBALS}
            c = c.with_overrides(params, scope=f"gpu.{key}", provenance="FITTED", source=f"GEMM globals {src}")
        if "attention" in self.families:
            fcg, ratios = self.attention_fit()
            fc = AX.from_gemm_readings(fcg, ratios, self.readings(key))
            c = c.with_overrides({**fc, "attn_lane_factors": {}}, scope=f"gpu.{key}", provenance="FITTED",
                                 source=f"attention factors {src}")
            rd_cells += [tuple(v) for v in AX.gemm_reading_cells(self.doc, key).values()]
        cal = Calibration.from_constants(c)
        cal.record(f"home_only@{key}", sorted(set(rd_cells), key=str),
                   note=f"every family constant {src}; the target's deploy readings")
        return c, cal


# E2.1's fair-ground peers (steptime_lab.peer_registry.LAB composes them with the product's and the baselines')
PEER_ENTRIES = (Entry.of(MLLeaveOneOut, query="transfer",
                         fitted_on="every other GPU's table of the same dataset with datasheet features; "
                                   "no target reading"),
                Entry.of(HomeOnly, query="constants",
                         fitted_on="every family constant fitted on the home GPU's tables alone, then the "
                                   "target's three deploy readings"))
