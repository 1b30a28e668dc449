"""Waiting-time estimators for deadline (QLM-style) queues.

An estimator maps the waiting queue, in service order (remaining prefill tokens of each
request), the time now, the number of running requests and the prefill tokens they still
hold (served first) to each request's estimated first-token time. The simulator serves requests whose estimate meets their deadline in
deadline order and sends the rest to the back of the queue (`deadline_split`: a request's estimate counts only
the requests ahead of it that are served ahead of it, so one that is late already does not make the ones behind
it look late too).

Each estimator is a cost per request (`units`) accumulated over the requests ahead and turned into a time (`at`).

StepEstimator   steptime: the queue's prompt tokens pass through the step token budget,
                (budget - running) tokens a step beside the running decodes, each step
                timed by steptime for that composition (decodes at `decode_context`).
ScalarEstimator one number per request: every request ahead costs the same `seconds`
                (e.g. the predicted prefill of a mean-length prompt), whatever its length
                and whatever runs beside it.
"""

from __future__ import annotations

import numpy as np


class StepEstimator:
    def __init__(self, timer, budget: int, decode_context: int):
        self.timer = timer
        self.budget = int(budget)
        self.ctx = int(decode_context)
        self._t: dict[int, float] = {}

    def step_time(self, n_running: int) -> float:
        if n_running not in self._t:
            chunk = max(1, self.budget - n_running)
            new = np.concatenate([np.ones(n_running, dtype=np.int64), [chunk]])
            kv = np.concatenate([np.full(n_running, self.ctx), [0]])
            self._t[n_running] = self.timer.step_arrays(new, kv)
        return self._t[n_running]

    def units(self, tokens) -> np.ndarray:
        return np.asarray(tokens, dtype=float)

    def at(self, cum, now: float, n_running: int, ahead: int = 0):
        """First-token time of a request once `cum` prompt tokens (its own included) have gone through."""
        per_step = max(1, self.budget - n_running)
        return now + np.ceil((ahead + cum) / per_step) * self.step_time(n_running)

    def __call__(self, tokens, now: float, n_running: int, ahead: int = 0) -> np.ndarray:
        return self.at(np.cumsum(self.units(tokens)), now, n_running, ahead)


class ScalarEstimator:
    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def units(self, tokens) -> np.ndarray:
        return np.ones(len(tokens))

    def at(self, cum, now: float, n_running: int, ahead: int = 0):
        """First-token time of a request with `cum` requests (itself included) served before its first token."""
        return now + self.seconds * cum

    def __call__(self, tokens, now: float, n_running: int, ahead: int = 0) -> np.ndarray:
        return self.at(np.cumsum(self.units(tokens)), now, n_running, ahead)


def deadline_split(estimator, tokens, deadlines, now: float, n_running: int, ahead: int = 0):
    """(estimates, late) for a queue in deadline order: walking it front to back, a request's estimate counts the
    requests before it that meet their deadlines (they are served ahead of it) and not those that miss (they go to
    the back, behind it); it is late when its estimate is past its deadline."""
    u = estimator.units(tokens)
    dl = np.asarray(deadlines, dtype=float)
    est = np.empty(len(u))
    late = np.zeros(len(u), dtype=bool)
    acc = 0.0
    for i in range(len(u)):
        e = float(estimator.at(acc + u[i], now, n_running, ahead))
        est[i] = e
        if e > dl[i]:
            late[i] = True
        else:
            acc += u[i]
    return est, late
