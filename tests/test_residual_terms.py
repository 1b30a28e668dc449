"""E1.26's residual-by-term diagnostic (wallclock.residual_terms), on synthetic steps built here."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments.wallclock import KINDS, residual_terms


def _steps(comm_err: float, gemm_err: float):
    rows, preds = [], []
    for tp in (1, 2, 4, 8):
        for n in (1, 8, 32):
            gemm, comm, host = 10.0 * n / tp, (0.0 if tp == 1 else 0.3 * np.log2(tp) * n ** 0.5), 0.5
            kinds = {f"{k}_ms": 0.0 for k in KINDS}
            kinds.update(gemm_ms=gemm, comm_ms=comm, host_ms=host)
            meas = gemm * (1 + gemm_err) + comm * (1 + comm_err) + host
            rows.append({"tp": tp, "phase": "decode", "latency_ms": meas, "decode_requests": n})
            preds.append({"pred_ms": gemm + comm + host, **kinds})
    return pd.DataFrame(rows), pd.DataFrame(preds)


def test_one_term_scale_explains_every_held_out_tp():
    steps, pred = _steps(comm_err=-0.15, gemm_err=0.14)
    r = residual_terms(steps, pred)
    held = {x["held_out_tp"]: x for x in r["by_phase"]}
    assert sorted(held) == [1, 2, 4, 8]
    for tp, x in held.items():
        assert abs(x["signed_median_after"]) < 1e-6, tp
        assert x["fitted_on_tp"] == [t for t in (1, 2, 4, 8) if t != tp]
        assert x["scales"]["compute"] == pytest.approx(0.14, abs=1e-3)
    # TP 1 has no comm: held out, comm's scale still comes from the other TPs
    assert held[1]["scales"]["comm"] == pytest.approx(-0.15, abs=1e-3)
    assert held[8]["mape_before"] > 0.05
    rm = {x["tp"]: x for x in r["residual_ms"]}
    assert rm[1]["median_ms"] > 0  # measured slower than predicted: positive residual


def test_a_term_only_at_the_held_out_tp_is_not_invented():
    steps, pred = _steps(comm_err=-0.3, gemm_err=0.0)
    one = steps["tp"].isin([1, 2])
    r = residual_terms(steps[one], pred[one])
    held = {x["held_out_tp"]: x for x in r["by_phase"]}
    # fitted on TP 1 alone: no comm there, so comm keeps scale 0 and TP 2's comm error stays
    assert held[2]["scales"]["comm"] == 0.0
    assert held[2]["signed_median_after"] == pytest.approx(held[2]["signed_median_before"])
    assert held[2]["signed_median_before"] > 0  # predicted slower: comm over-predicted
