"""The check the MoE fit's tests share: steptime_lab.experiments.moe._FitLaw (the fit's cached residual evaluator)
gives the law's own numbers (_predict_groups) bit for bit at a parameter vector and at every finite-difference step
of it (a Jacobian's columns, where one parameter moves and its cached parts come back)."""
import numpy as np

from steptime_lab.experiments import moe as E


def assert_fit_law_matches_the_law(law, groups, n: int, dtype: str, x) -> None:
    x = np.asarray(x, dtype=float)
    for j in [None, *range(len(x)), None]:
        xj = x.copy()
        if j is not None:
            xj[j] = xj[j] * (1 + 1e-7) + 1e-9
        slow = E._predict_groups(groups, n, {dtype: law.law(xj)}, None, E.REGIME)
        assert law.predict(xj).tobytes() == slow.tobytes(), f"_FitLaw differs from the law at step {j}"
        assert np.isfinite(slow).all()
