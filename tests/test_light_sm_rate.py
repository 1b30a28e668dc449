"""The SM-rate light law, scored beside E1.1c's shipped law as an ablation (issue 19, wave 28)."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model
from steptime.terms import light as L
from steptime_lab.experiments import light as E

TRUE = {"c_kcycles": 8.0, "bytes_per_sm_cycle": 5.0, "p": 2.5}
ETA = 0.84


def _cells(gpus=("a100-sxm", "h100-sxm", "a40")):
    """Vidur-shaped cells timed by the SM-rate law itself with TRUE constants for every kernel."""
    rows = []
    m = get_model("llama-2-7b")
    for g in gpus:
        gp = get_gpu(g)
        for op, kern in E.OPMAP.items():
            for T in (1, 4, 16, 64, 256, 1024, 4096, 16384):
                nb = float(L.light_bytes(kern, T, m, 1))
                t = E._sm_rate_s(TRUE["c_kcycles"], TRUE["bytes_per_sm_cycle"], TRUE["p"], nb, gp.mem_bw,
                                 gp.sms * gp.boost_mhz * 1e6, gp.boost_mhz * 1e6, 1.0, ETA, E.SM_RATE_Q)
                rows.append(dict(gpu=g, model="llama-2-7b", tp=1, num_tokens=T, op=op, latency_ms=float(t) * 1e3))
    return E.tidy_cells(pd.DataFrame(rows))


def test_fit_recovers_the_constants_and_predicts_the_held_out_gpu():
    c = _cells()
    fit = E.fit_sm_rate(c, ["a100-sxm", "h100-sxm"], ETA)
    for k in E.KERNELS:
        assert fit[k]["bytes_per_sm_cycle"] == pytest.approx(TRUE["bytes_per_sm_cycle"], rel=0.02)
        assert fit[k]["c_kcycles"] == pytest.approx(TRUE["c_kcycles"], rel=0.02)
    a40 = c[c["gpu"] == "a40"]
    assert np.allclose(E.predict_sm_rate(a40, fit, ETA), a40["y_ms"].to_numpy(), rtol=0.02)
    # the regimes the law is for: a large RMSNorm is SM-bound on H100 (DRAM time well under the SM time) and
    # DRAM-bound on the A40 (6 MB L2, a third of the A100's DRAM at the same SM throughput)
    nb = float(L.light_bytes("rmsnorm", 16384, get_model("llama-2-7b"), 1))
    for g, dram_bound in (("h100-sxm", False), ("a40", True)):
        gp = get_gpu(g)
        dram, sm = nb / (gp.mem_bw * ETA), nb / (gp.sms * gp.boost_mhz * 1e6 * TRUE["bytes_per_sm_cycle"])
        assert (dram > sm) is dram_bound


def test_wrong_eta_is_seen_on_the_held_out_gpu():
    """A DRAM cap far from the truth misprices the GDDR GPU, where the cap binds: the fit cannot hide it."""
    c = _cells()
    fit = E.fit_sm_rate(c, ["a100-sxm", "h100-sxm"], 0.4)
    a40 = c[c["gpu"] == "a40"]
    err = np.abs(E.predict_sm_rate(a40, fit, 0.4) / a40["y_ms"].to_numpy() - 1)
    assert err[a40["num_tokens"].to_numpy() >= 4096].mean() > 0.3


def test_dram_fraction_is_the_median_above_l2():
    rows = []
    for g, frac in (("h100-sxm", 0.8), ("b200", 0.9), ("l40s", 0.6)):
        gp = get_gpu(g)
        for m, k in ((1, 4096), (65536, 65536), (32768, 65536)):
            nb = 3.0 * m * k
            big = nb > E.SM_RATE_L2_MULT * gp.l2_mb * 2 ** 20
            rows.append(dict(gpu=g, m=m, k=k, latency_ms=nb / (gp.mem_bw * (frac if big else 5.0)) * 1e3))
    assert E.dram_fraction(pd.DataFrame(rows)) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="lacks columns"):
        E.dram_fraction(pd.DataFrame(rows).drop(columns="k"))
    small = pd.DataFrame([r for r in rows if r["m"] == 1])
    with pytest.raises(ValueError, match="above"):
        E.dram_fraction(small)


def test_bad_input_is_a_clear_error():
    c = _cells(("a100-sxm",))
    with pytest.raises(ValueError, match="eta_dram"):
        E.fit_sm_rate(c, ["a100-sxm"], 0.0)
    with pytest.raises(ValueError, match="no light cells"):
        E.fit_sm_rate(c, ["b200"], ETA)
    fit = E.fit_sm_rate(c[c["kernel"] == "add"], ["a100-sxm"], ETA)
    with pytest.raises(ValueError, match="no constants for kernel"):
        E.predict_sm_rate(c, fit, ETA)


def test_run_scores_the_ablation_only_when_asked_and_documents_it():
    c = _cells()
    kw = {"eta": 1.0, "gpus": [], "per_gpu": {}, "heldout_mape": 0.0}
    plain = E.run(c, n_boot=10, constants=Constants.default())
    assert "sm_rate_law" not in {x["predictor"] for x in plain["records"]} and "sm_rate" not in plain
    plain["kv_write"] = kw
    assert not [x for x in E.document(plain, c, {"mape": 0.1})["claims"] if "SM-rate" in x.get("claim", "")]
    r = E.run(c, n_boot=10, constants=Constants.default(), sm_rate_eta_dram=ETA)
    sm = [x for x in r["records"] if x["predictor"] == "sm_rate_law" and x["subset"] in E.KERNELS]
    assert len(sm) == 3 * len(E.KERNELS) and all(x["mape"] < 0.03 for x in sm)
    # the shipped law's records are the same with and without the ablation
    key = lambda rs: sorted((x["gpu"], x["subset"], x["mape"]) for x in rs if x["predictor"] == "steptime")
    assert key(r["records"]) == key(plain["records"])
    r["kv_write"] = kw
    doc = E.document(r, c, {"mape": 0.1})
    cl = [x for x in doc["claims"] if "SM-rate" in x.get("claim", "")]
    assert len(cl) == 1 and cl[0].get("met") is None
    assert set(cl[0]["value"]) == {"a100-sxm", "a40", "h100-sxm"}
    assert doc["metrics"]["sm_rate_law"]["eta_dram"] == pytest.approx(ETA)
