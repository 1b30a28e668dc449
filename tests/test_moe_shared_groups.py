"""E3.1's run predicts each held-out GPU's cells three times (readings on, the evicted regime, no readings) on one
`_groups` of them (wave 35, helper speed5): the shared groups, whose router loads the first call caches, give what a
fresh `predict` gives, bit for bit."""

import numpy as np
import pandas as pd

from steptime_lab.experiments import moe as E


def _cells():
    rows = [(g, ds, T, ep) for g in ("h100-sxm", "b200") for ds in ("balanced", "power_law_1.2", "power_law_1.01")
            for T in (1, 3, 16, 200, 4096) for ep in (1, 2, 8)]
    return pd.DataFrame({"gpu": [r[0] for r in rows], "sdtype": "fp8_block", "distribution": [r[1] for r in rows],
                         "num_tokens": [r[2] for r in rows], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                         "num_experts": 128, "moe_tp": 1, "moe_ep": [r[3] for r in rows]})


def _law(tile: float, small: float) -> dict:
    names, p0, _, _ = E.law_params("fp8_block")
    return {**dict(zip(names, p0)), "tile_m": tile, "unpadded_rows": small}


def test_shared_groups_predict_what_fresh_groups_predict():
    d = _cells()
    scales = {"h100-sxm": {"s_c": 1.1, "s_mem": 0.9, "d_floor_us": 2.0}}
    laws = ({"fp8_block": _law(64.0, 0.0)}, {"fp8_block": _law(16.0, 8.0)})
    grp = E._groups(d)
    calls = [(laws[0], scales, E.REGIME, frozenset()), (laws[0], scales, "evicted", frozenset()),
             (laws[1], None, E.REGIME, frozenset()), (laws[1], scales, E.REGIME, frozenset({"fp8_block"})),
             (laws[0], scales, E.REGIME, frozenset())]   # the last again, on loads every earlier call has cached
    for per_dtype, sc, regime, unscaled in calls:
        shared = E._predict_groups(grp, len(d), per_dtype, sc, regime, unscaled)
        fresh = E.predict(d, per_dtype, sc, regime=regime, unscaled=unscaled)
        assert np.isfinite(fresh).all()
        assert np.array_equal(shared, fresh)
    assert any(loads for *_, loads in grp)   # the groups did keep the router's loads between the calls
    # and the calls differ from each other (the comparison is not of one constant array)
    assert not np.array_equal(E.predict(d, laws[0], scales), E.predict(d, laws[0], scales, regime="evicted"))


def test_gpu_scales_with_a_kept_groups_memo_solve_what_they_solve_without():
    """choose_readings passes gpu_scales one memo of the reading rows' `_groups` for every option and GPU: the scales
    are the same bit for bit, whatever the option, and the memo holds one entry per reading row."""
    law = {"bf16": dict(zip(E.PARAMS, (0.4, 0.8, 0.3, 20.0, 2.0, 1.0, 0.5, 16.0, 4.0)))}
    h, i, k, n = E.READING_SHAPE
    rows = [(T, 1, ep) for T in (1, 2, 4096, 16384) for ep in (1, 8)]
    d = pd.DataFrame({"gpu": "h100-sxm", "sdtype": "bf16", "distribution": "balanced", "hidden_size": h,
                      "inter_size": i, "topk": k, "num_experts": n, "moe_tp": [r[1] for r in rows],
                      "moe_ep": [r[2] for r in rows], "num_tokens": [r[0] for r in rows]})
    d["latency_ms"] = E.predict(d, law, {"h100-sxm": {"s_c": 0.8, "s_mem": 1.2, "d_floor_us": 7.0}}) * np.linspace(
        0.9, 1.1, len(d))
    memo = {}
    options = (dict(E.READINGS), {**E.READINGS, "memory": (2, 1, 1)}, {**E.READINGS, "compute": (4096, 1, 1)},
               {**E.READINGS, "compute": None}, dict(E.READINGS))
    for cfg in options:
        kept = E.gpu_scales(d, "h100-sxm", law, cfg, groups=memo)
        assert kept == E.gpu_scales(d, "h100-sxm", law, cfg)
    assert len(memo) == 5   # floor (1, 1, 8), memory (1, 1, 1) and (2, 1, 1), compute (16384, 1, 1) and (4096, 1, 1)
    # a memo entry is what is read: a wrong one moves the scales
    wrong = {key: E._groups(d.iloc[[0]]) for key in memo}
    assert E.gpu_scales(d, "h100-sxm", law, options[0], groups=wrong) != E.gpu_scales(d, "h100-sxm", law, options[0])
