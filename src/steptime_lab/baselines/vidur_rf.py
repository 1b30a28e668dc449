"""Vidur-style profiled predictors: a random forest per operator, and Vidur's
polynomial linear-regression variant.

Written after Vidur's scikit-learn execution-time predictor (microsoft/vidur,
`vidur/execution_time_predictor/sklearn_execution_time_predictor.py`), not copied:

* one estimator per operator, trained on the profiled table of ONE GPU (and, in
  Vidur, one model and TP degree);
* features: ``num_tokens`` for the linear (GEMM) and light operators; ``batch_size``
  and ``kv_cache_size`` for decode attention; ``kv_cache_size`` and
  ``prefill_chunk_size_squared`` for prefill attention (`FEATURES`);
* hyper-parameters by ``GridSearchCV`` over Vidur's grid (n_estimators 250/500/750,
  max_depth 8/16/32, min_samples_split 2/5/10), 10 folds (Vidur passes an integer, so
  scikit-learn's unshuffled KFold), scored by Vidur's MAPE (percent; a zero target
  counts 0 if predicted 0 else 100), refit on all rows given.

`full_grid=False` selects a small fast grid (`GRID_FAST`) with fewer trees and folds,
for the 2-core main job; every result says which grid built it (`grid_name`).

    est = steptime_lab.baselines.REGISTRY.make("vidur_rf", features=["num_tokens"], full_grid=False, seed=0)
    est.fit(X, y); est.predict(X)

sklearn is imported inside methods only, so `import steptime` stays fast.
"""

from __future__ import annotations

import numpy as np

from steptime.peers import Entry, Registry
from steptime.specs import vidur_operators

VIDUR_FITTED_ON = "the profiled operator table of one GPU (Vidur: one model and TP degree), fitted per operator"

# Vidur's feature choices per operator kind (names as in Vidur's tables).
FEATURES = {
    "linear": ["num_tokens"],
    "light": ["num_tokens"],
    "attn_decode": ["batch_size", "kv_cache_size"],
    "attn_prefill": ["kv_cache_size", "prefill_chunk_size_squared"],
}
# Vidur's per-layer operators (one estimator each) and their kind (specs/operators.yaml).
VIDUR_OPS = {op: ("linear" if op in vidur_operators(kind="gemm") else "light")
             for op in vidur_operators(per="layer")}

GRID_FULL = {"n_estimators": [250, 500, 750], "max_depth": [8, 16, 32], "min_samples_split": [2, 5, 10]}
CV_FULL = 10
GRID_FAST = {"n_estimators": [32], "max_depth": [16, 32], "min_samples_split": [2]}
CV_FAST = 3

# Vidur's linear-regression variant: PolynomialFeatures -> LinearRegression.
POLY_GRID_FULL = {
    "polynomialfeatures__degree": [1, 2, 3, 4, 5],
    "polynomialfeatures__include_bias": [True, False],
    "polynomialfeatures__interaction_only": [True, False],
    "linearregression__fit_intercept": [True, False],
}
POLY_GRID_FAST = {
    "polynomialfeatures__degree": [1, 2, 3],
    "polynomialfeatures__include_bias": [True],
    "polynomialfeatures__interaction_only": [False],
    "linearregression__fit_intercept": [True, False],
}


def vidur_mape(y_true, y_pred) -> float:
    """Vidur's scoring MAPE in percent; a zero target scores 0 if predicted 0, else 100."""
    y_true = np.asarray(y_true, dtype=float)
    y_pred = np.asarray(y_pred, dtype=float)
    err = np.zeros_like(y_true)
    nz = y_true != 0
    err[nz] = np.abs((y_true[nz] - y_pred[nz]) / y_true[nz]) * 100.0
    err[~nz] = np.where(y_pred[~nz] == 0, 0.0, 100.0)
    return float(err.mean()) if err.size else 0.0


def _frame(X, features):
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        missing = [f for f in features if f not in X.columns]
        if missing:
            raise KeyError(f"vidur_rf: feature column(s) {missing} missing (have {list(X.columns)})")
        return X[list(features)].to_numpy(dtype=float)
    arr = np.asarray(X, dtype=float)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.shape[1] != len(features):
        raise ValueError(f"vidur_rf: X has {arr.shape[1]} columns, expected {len(features)} ({features})")
    return arr


class _GridSearched:
    """Shared fit/predict: GridSearchCV with Vidur's MAPE scorer, refit on all rows."""

    grid_full: dict = {}
    grid_fast: dict = {}

    def __init__(self, features=("num_tokens",), full_grid: bool = False, cv: int | None = None,
                 n_jobs: int = 1, seed: int = 0, max_rows: int | None = None):
        self.features = features
        self.full_grid = full_grid
        self.cv = cv
        self.n_jobs = n_jobs
        self.seed = seed
        self.max_rows = max_rows

    @property
    def grid_name(self) -> str:
        return "vidur_full" if self.full_grid else "fast"

    def param_grid(self) -> dict:
        return self.grid_full if self.full_grid else self.grid_fast

    def _cv(self) -> int:
        if self.cv is not None:
            return int(self.cv)
        return CV_FULL if self.full_grid else CV_FAST

    def _estimator(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def fit(self, X, y):
        from sklearn.metrics import make_scorer
        from sklearn.model_selection import GridSearchCV

        Xa = _frame(X, list(self.features))
        ya = np.asarray(y, dtype=float)
        if len(Xa) == 0:
            raise ValueError(f"{type(self).__name__}: no training rows")
        if len(Xa) != len(ya):
            raise ValueError(f"{type(self).__name__}: X has {len(Xa)} rows, y has {len(ya)}")
        self.n_rows_total_ = int(len(Xa))
        if self.max_rows is not None and len(Xa) > self.max_rows:
            idx = np.sort(np.random.default_rng(self.seed).choice(len(Xa), self.max_rows, replace=False))
            Xa, ya = Xa[idx], ya[idx]
        cv = self._cv() if len(Xa) >= self._cv() else 2  # Vidur: 2 folds when rows < folds
        search = GridSearchCV(self._estimator(), self.param_grid(),
                              scoring=make_scorer(vidur_mape, greater_is_better=False), cv=cv,
                              n_jobs=self.n_jobs, refit=True)
        search.fit(Xa, ya)
        self.estimator_ = search.best_estimator_
        self.best_params_ = dict(search.best_params_)
        self.cv_mape_ = float(-search.best_score_)
        self.n_rows_ = int(len(Xa))
        self.n_candidates_ = int(len(search.cv_results_["params"]))
        self.cv_folds_ = int(cv)
        return self

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "estimator_"):
            raise RuntimeError(f"{type(self).__name__}: call fit before predict")
        return np.asarray(self.estimator_.predict(_frame(X, list(self.features))), dtype=float)

    def describe(self) -> dict:
        out = {"baseline": self.name, "features": list(self.features), "grid": self.grid_name,
               "param_grid": self.param_grid(), "cv_folds": self._cv(), "seed": self.seed,
               "max_rows": self.max_rows}
        if hasattr(self, "estimator_"):
            out.update({"best_params": self.best_params_, "cv_mape_pct": self.cv_mape_, "rows": self.n_rows_,
                        "rows_available": self.n_rows_total_})
        return out


class VidurRF(_GridSearched):
    """Vidur's random forest for one operator (RandomForestRegressor, seeded)."""

    name = "vidur_rf"

    grid_full = GRID_FULL
    grid_fast = GRID_FAST

    def _estimator(self):
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(random_state=self.seed, n_jobs=1)


class VidurPoly(_GridSearched):
    """Vidur's linear-regression variant: polynomial features then least squares."""

    name = "vidur_poly"

    grid_full = POLY_GRID_FULL
    grid_fast = POLY_GRID_FAST

    def _estimator(self):
        from sklearn.linear_model import LinearRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import PolynomialFeatures

        return make_pipeline(PolynomialFeatures(), LinearRegression())


PEER_ENTRIES = (Entry.of(VidurRF, query="op", fitted_on=VIDUR_FITTED_ON),
                Entry.of(VidurPoly, query="op", fitted_on=VIDUR_FITTED_ON))
_OWN = Registry(PEER_ENTRIES)  # the operator models' estimator kinds


class OperatorModels:
    """One Vidur estimator per operator key, as Vidur keeps them (dict of fitted estimators).

    `fit(frame, key_cols, features, target)` groups the training frame by `key_cols`
    (e.g. model, tp, op) and fits one estimator per group; `predict(frame)` routes each
    row to its group's estimator. Groups absent from training raise KeyError: a
    profiled predictor can only answer what it profiled.
    """

    def __init__(self, kind: str = "vidur_rf", key_cols=("op",), features=("num_tokens",),
                 full_grid: bool = False, n_jobs: int = 1, seed: int = 0, max_rows: int | None = None,
                 progress: bool = False):
        self.kind = kind
        self.key_cols = tuple(key_cols)
        self.features = tuple(features)
        self.full_grid = full_grid
        self.n_jobs = n_jobs
        self.seed = seed
        self.max_rows = max_rows
        self.progress = progress

    def fit(self, frame, target: str = "latency_ms"):
        groups = list(frame.groupby(list(self.key_cols), sort=True))
        it = groups
        if self.progress:
            from tqdm import tqdm

            it = tqdm(groups, desc=f"fit {self.kind}", unit="op")
        self.models_ = {}
        for key, sub in it:
            key = key if isinstance(key, tuple) else (key,)
            est = _OWN.make(self.kind, features=list(self.features), full_grid=self.full_grid,
                            n_jobs=self.n_jobs, seed=self.seed, max_rows=self.max_rows)
            self.models_[tuple(_py(k) for k in key)] = est.fit(sub, sub[target])
        self.n_rows_ = int(sum(m.n_rows_ for m in self.models_.values()))
        return self

    def predict(self, frame) -> np.ndarray:
        out = np.full(len(frame), np.nan)
        pos = np.arange(len(frame))
        for key, idx in frame.groupby(list(self.key_cols), sort=True).indices.items():
            key = key if isinstance(key, tuple) else (key,)
            k = tuple(_py(x) for x in key)
            if k not in self.models_:
                raise KeyError(f"no profiled estimator for {dict(zip(self.key_cols, k))}: "
                               "a profiled predictor answers only what it profiled")
            out[pos[idx]] = self.models_[k].predict(frame.iloc[idx])
        return out

    def covers(self, frame) -> np.ndarray:
        keys = set(self.models_)
        cols = [frame[c].to_numpy() for c in self.key_cols]
        return np.array([tuple(_py(v) for v in row) in keys for row in zip(*cols)], dtype=bool)

    def describe(self) -> dict:
        first = next(iter(self.models_.values()))
        return {"baseline": self.kind, "key_cols": list(self.key_cols), "features": list(self.features),
                "grid": first.grid_name, "param_grid": first.param_grid(), "cv_folds": first._cv(),
                "seed": self.seed, "max_rows_per_operator": self.max_rows, "estimators": len(self.models_),
                "rows": self.n_rows_}


def _py(v):
    return v.item() if hasattr(v, "item") else v
