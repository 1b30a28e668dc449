"""Waiting-time estimators for deadline (QLM-style) queues.

An estimator maps the waiting queue, in service order (remaining prefill tokens of each
request), the time now, the number of running requests and the prefill tokens they still
hold (served first) to each request's estimated first-token time. The simulator serves requests whose estimate meets their deadline in
deadline order and sends the rest to the back of the queue.

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

    def __call__(self, tokens, now: float, n_running: int, ahead: int = 0) -> np.ndarray:
        per_step = max(1, self.budget - n_running)
        steps = np.ceil((ahead + np.cumsum(tokens)) / per_step)
        return now + steps * self.step_time(n_running)


class ScalarEstimator:
    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def __call__(self, tokens, now: float, n_running: int, ahead: int = 0) -> np.ndarray:
        return now + self.seconds * np.arange(1, len(tokens) + 1)
