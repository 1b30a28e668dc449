"""The first-token times of one wave of c identical prompts run alone, in prefill-only steps of at most
`budget` tokens filled in request order (each request's prompt chunked across steps): the analytic wave the
serving simulator and the E2.11b harness replay must reproduce (tests/test_serve.py, tests/test_replay.py)."""

import numpy as np


def wave_first_token_times(timer, c: int, isl: int, budget: int) -> list[float]:
    t, firsts, left, comp = 0.0, [], [isl] * c, [0] * c
    while any(left):
        take, room = [], budget
        for i in range(c):
            take.append(min(left[i], room))
            room -= take[-1]
        ids = [i for i in range(c) if take[i]]
        t += timer.step_arrays(np.array([take[i] for i in ids]), np.array([comp[i] for i in ids]))
        for i in ids:
            comp[i] += take[i]
            left[i] -= take[i]
            if not left[i]:
                firsts.append(t)
    return firsts
