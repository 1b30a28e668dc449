"""The check the MoE fit's tests share: steptime_lab.experiments.moe._FitLaw (the fit's cached residual evaluator)
gives the law's own numbers (_predict_groups) bit for bit at a parameter vector and at every finite-difference step
of it (a Jacobian's columns, where one parameter moves and its cached parts come back)."""
import numpy as np
import pandas as pd

from steptime.specs import get_gpu
from steptime.terms import moe as M
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


def law_cells(law: dict, rows, shapes, family: str = "cutlass_sm90") -> pd.DataFrame:
    """H100 fp8 fused-MoE table cells (balanced routing) timed by the product's own law under `law`'s constants: one
    row per (tokens, moe_tp, moe_ep) of `rows` and (hidden, inter, top-k, experts) of `shapes`, labelled `family`."""
    mc = M.MoEConstants(values={f"{k}:fp8": v for k, v in law.items()})
    out = []
    for h, i, k, E_ in shapes:
        d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "fp8", "distribution": "balanced", "family": family,
                          "num_tokens": [r[0] for r in rows], "hidden_size": h, "inter_size": i, "topk": k,
                          "num_experts": E_, "moe_tp": [r[1] for r in rows], "moe_ep": [r[2] for r in rows]})
        d["latency_ms"] = [float(M.routed_experts_time(T, h, i, k, E_, get_gpu("h100-sxm"), mc, tp=tp, ep=ep,
                                                       dtype="fp8", routing="balanced", regime="resident",
                                                       family="")["t"]) * 1e3 for T, tp, ep in rows]
        out.append(d)
    return pd.concat(out, ignore_index=True)
