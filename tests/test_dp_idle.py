"""The idle attention-DP ranks' serial share of a hybrid MoE step with a prefill (launch.dp_idle_rank_share,
terms/host.py dp_idle_rank_time; issue 20, wave 42)."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.specs.engines import get_engine
from steptime.step import predict_steps


def _engine(share):
    g, e = get_gpu("b300"), get_engine("vllm")
    return e.with_fitted(g.key, {"dp_idle_rank_share": share}, source="test")


def test_dp_idle_time_is_the_share_of_the_launch_floor_of_a_prefill_step_at_dp_above_1():
    from steptime.terms.host import dp_idle_rank_time

    g, c = get_gpu("b300"), Constants.default()
    disp = np.array([0.045, 0.0165, 0.002])
    dec = np.array([False, False, True])
    t = dp_idle_rank_time(disp, dec, 2, g, _engine(0.4), c, gdn_layers=30)
    assert t == pytest.approx([0.4 * 0.045, 0.4 * 0.0165, 0.0])  # decode (full graphs): nothing
    assert dp_idle_rank_time(disp, dec, 1, g, _engine(0.4), c, gdn_layers=30) == pytest.approx([0, 0, 0])
    assert dp_idle_rank_time(disp, dec, 4, g, _engine(0.4), c, gdn_layers=0) == pytest.approx([0, 0, 0])
    assert dp_idle_rank_time(disp, dec, 4, g, _engine(0.0), c, gdn_layers=30) == pytest.approx([0, 0, 0])
    with pytest.raises(ValueError, match="dp must be >= 1"):
        dp_idle_rank_time(disp, dec, 0, g, _engine(0.4), c, gdn_layers=30)
    with pytest.raises(ValueError, match="dp_idle_rank_share must be >= 0"):
        dp_idle_rank_time(disp, dec, 2, g, _engine(-0.1), c, gdn_layers=30)


@pytest.mark.parametrize("tp,ep", [(1, 2), (2, 8)])
def test_a_hybrid_prefill_step_at_dp_above_1_adds_the_share_of_its_own_launch_floor(tp, ep):
    """At dp = ep / tp > 1 the step with a prefill (eager above graph_max_tokens, piecewise below) gains share x its
    whole launch floor in the host term; its decode-only step and every step at dp 1 do not move."""
    sid, new, kv = np.array([0, 1, 2]), np.array([3168, 256, 1]), np.array([0, 0, 900])
    kw = dict(tp=tp, ep=ep, rows="work")
    off = predict_steps("qwen3.6-35b-a3b", "b300", sid, new, kv, 3, engine=_engine(0.0), **kw)
    on = predict_steps("qwen3.6-35b-a3b", "b300", sid, new, kv, 3, engine=_engine(0.5), **kw)
    disp = off["terms_ms"]["dispatch_floor"] + off["hidden_ms"]["dispatch_floor"]
    assert on["total_ms"] - off["total_ms"] == pytest.approx([0.5 * disp[0], 0.5 * disp[1], 0.0])
    assert on["dp_idle_ms"] == pytest.approx([0.5 * disp[0], 0.5 * disp[1], 0.0])
    assert sum(on["terms_ms"][k] for k in on["terms_ms"]) == pytest.approx(on["total_ms"])  # the breakdown sums
    dp1_off = predict_steps("qwen3.6-35b-a3b", "b300", sid, new, kv, 3, engine=_engine(0.0), tp=tp, ep=tp, rows="work")
    dp1_on = predict_steps("qwen3.6-35b-a3b", "b300", sid, new, kv, 3, engine=_engine(0.5), tp=tp, ep=tp, rows="work")
    assert dp1_on["total_ms"] == pytest.approx(dp1_off["total_ms"])


def test_a_dense_moe_model_never_reads_the_share():
    sid, new, kv = np.array([0]), np.array([3168]), np.array([0])
    a = predict_steps("qwen3-30b-a3b", "b300", sid, new, kv, 1, engine=_engine(0.0), tp=1, ep=4, rows="work")
    b = predict_steps("qwen3-30b-a3b", "b300", sid, new, kv, 1, engine=_engine(0.5), tp=1, ep=4, rows="work")
    assert b["total_ms"] == pytest.approx(a["total_ms"])


def test_dp_idle_fit_rows_are_the_prefill_steps_of_the_dp_layouts():
    from steptime_lab.experiments.moe_wallclock import dp_idle_fit_rows

    s = pd.DataFrame({"engine": "vllm", "tp": [1, 1, 2, 2, 1], "dp": [2, 2, 1, 4, 1],
                      "phase": ["prefill", "decode", "mixed", "mixed", "prefill"]})
    assert dp_idle_fit_rows(s).tolist() == [True, False, False, True, False]  # dp 1 (world size 1 too): none


def test_shipped_dp_idle_share_is_the_results_all_layout_fit(repo_root):
    """engines.yaml's FITTED launch.dp_idle_rank_share is the value E3.4's committed result fits on all DP layouts,
    and every DP layout is scored with a value fitted on the others (each DP layout has fit rows)."""
    import json

    fit = json.loads((repo_root / "results/E3_4.json").read_text())["metrics"]["fpm_dp_idle_fit"]
    shipped = get_engine("vllm").get("dp_idle_rank_share", get_gpu("b300"), Constants.default())
    assert [v["all_layouts_us"] for v in fit.values()] == [pytest.approx(shipped)]
    for v in fit.values():
        assert v["layouts_fitted_on"] and all(v["fit_rows_per_layout"][k] > 0 for k in v["layouts_fitted_on"])
