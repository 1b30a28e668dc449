"""E1.19: an online learner for the host floor S(N) against one-time calibration, frozen at deploy,
and the shift case.

Input: engine steps in the forward-pass-metrics layout (a real engine's per-step wall time and
batch composition: AIConfigurator's FPM runs, or `steptime.collect.steptrace`) and steptime's
kernel-only prediction of each step (`engine="kernels"`). The host floor of a step is what the
wall clock adds to the kernels: h = latency - kernels. Model: S(N) = a + b (N - 1), N requests.

Arms, each scored on the same held-out steps (after the deploy boundary) by the MAE and MAPE of
the predicted step time kernels + S(N):
  static          the engine profile's shipped host constants (given, not fitted here)
  oracle_static   a, b fitted on the held-out steps themselves (hindsight: a bound, not a predictor)
  online_frozen   a, b fitted on the steps before the boundary (the first `warmup` fraction), frozen
  online_adapt    recursive least squares with forgetting `lam`, updated after every step (diagnostic:
                  it sees each held-out step's truth after predicting it)
The shift case trains on one workload segment and tests on another (e.g. the synthetic sweep
-> the chat-shaped run), where a frozen constant meets a distribution it never saw.
"""

from __future__ import annotations

import numpy as np

from steptime.errors import DataError


def _fit(n, h):
    X = np.column_stack([np.ones_like(n), np.maximum(n - 1.0, 0.0)])
    coef, *_ = np.linalg.lstsq(X, h, rcond=None)
    return float(coef[0]), float(coef[1])


def _score(pred, meas):
    err = pred - meas
    return {"mae_ms": float(np.mean(np.abs(err))), "mape": float(np.mean(np.abs(err) / meas)),
            "bias_ms": float(np.mean(err))}


def _rls(n, h, lam: float, a0: float, b0: float):
    """One-step-ahead predictions of recursive least squares with forgetting factor lam."""
    theta = np.array([a0, b0], dtype=float)
    P = np.eye(2) * 1e3
    out = np.empty(len(n))
    for i, (ni, hi) in enumerate(zip(n, h)):
        x = np.array([1.0, max(ni - 1.0, 0.0)])
        out[i] = x @ theta
        k = P @ x / (lam + x @ P @ x)
        theta = theta + k * (hi - x @ theta)
        P = (P - np.outer(k, x) @ P) / lam
    return out


def host_learner(n_requests, kernel_ms, latency_ms, static_ab: tuple[float, float], warmup: float = 0.2,
                 lam: float = 0.99) -> dict:
    """The four arms on one stationary trace (steps in time order)."""
    n = np.asarray(n_requests, dtype=float)
    k = np.asarray(kernel_ms, dtype=float)
    y = np.asarray(latency_ms, dtype=float)
    if not (len(n) == len(k) == len(y)) or len(n) < 10:
        raise DataError(f"E1.19 needs at least 10 steps with matching arrays (got {len(n)}, {len(k)}, {len(y)})")
    if np.any(y <= 0) or not np.all(np.isfinite(k)):
        raise DataError("E1.19: step latencies must be positive and kernel predictions finite")
    h = y - k
    cut = max(2, int(round(warmup * len(n))))
    test = slice(cut, None)
    S = lambda ab, nn: ab[0] + ab[1] * np.maximum(nn - 1.0, 0.0)  # noqa: E731
    frozen = _fit(n[:cut], h[:cut])
    oracle = _fit(n[test], h[test])
    adapt = _rls(n, h, lam, *frozen)[test]
    arms = {"static": S(static_ab, n[test]), "oracle_static": S(oracle, n[test]),
            "online_frozen": S(frozen, n[test]), "online_adapt": adapt}
    return {"steps": int(len(n)), "deploy_boundary": cut, "host_share": float(np.median(h / y)),
            "constants": {"static": list(static_ab), "oracle_static": list(oracle), "online_frozen": list(frozen)},
            "scores": {arm: _score(k[test] + v, y[test]) for arm, v in arms.items()}}


def shift_case(train: dict, test: dict, static_ab: tuple[float, float]) -> dict:
    """Fit on one segment, score on another: train/test are dicts of n_requests, kernel_ms, latency_ms arrays."""
    nt, kt, yt = (np.asarray(train[c], dtype=float) for c in ("n_requests", "kernel_ms", "latency_ms"))
    ns, ks, ys = (np.asarray(test[c], dtype=float) for c in ("n_requests", "kernel_ms", "latency_ms"))
    if len(nt) < 3 or len(ns) < 3:
        raise DataError("E1.19 shift case needs at least three steps on each side")
    frozen = _fit(nt, yt - kt)
    oracle = _fit(ns, ys - ks)
    S = lambda ab, nn: ab[0] + ab[1] * np.maximum(nn - 1.0, 0.0)  # noqa: E731
    adapt = _rls(np.concatenate([nt, ns]), np.concatenate([yt - kt, ys - ks]), 0.99, *frozen)[len(nt):]
    return {"train_steps": int(len(nt)), "test_steps": int(len(ns)),
            "scores": {"static": _score(ks + S(static_ab, ns), ys), "online_frozen": _score(ks + S(frozen, ns), ys),
                       "online_adapt": _score(ks + adapt, ys), "oracle_static": _score(ks + S(oracle, ns), ys)}}
