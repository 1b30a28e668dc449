"""Collection units (COLLECTION_UNIT_NOTE, issue 19 wave 42): at world size 1 a row under its batch's speed-of-light
bound is scored merged with the row before it; nowhere else does a row move."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments.wallclock import steps as W


def _table(tp, step=(1, 2, 3, 4, 5), lat=(10.0, 400.0, 800.0, 11.0, 400.0)):
    n = len(step)
    return pd.DataFrame({"gpu": "b300", "model": "m", "engine": "vllm", "tp": tp, "phase": "mixed",
                         "segment": "sweep", "step": list(step), "ctx_tokens": 8000, "ctx_requests": 2,
                         "ctx_kv_tokens": 1000, "decode_requests": 4, "mean_decode_kv_tokens": 100,
                         "latency_ms": list(lat)}, index=pd.RangeIndex(10, 10 + n))


FLOOR = np.array([5.0, 300.0, 300.0, 300.0, 300.0])  # row 4 (11 ms) is under its batch's bound of 300 ms


def test_row_under_its_bound_merges_into_the_row_before_at_world_size_1():
    units = W.collection_units(_table(1), FLOOR)
    assert units.tolist() == [10, 11, 13, 13, 14]  # row 12 (800 ms) carries the unit that ends at row 13
    pred = pd.DataFrame({"pred_ms": [9.0, 380.0, 390.0, 380.0, 390.0]}, index=units.index)
    s, p = W.merged_units(_table(1), pred, units)
    assert s.index.tolist() == [10, 11, 13, 14]
    assert s.loc[13, "latency_ms"] == pytest.approx(811.0) and p.loc[13, "pred_ms"] == pytest.approx(770.0)


def test_no_row_moves_where_rows_are_their_own_steps():
    for tp in (2, 8):
        units = W.collection_units(_table(tp), FLOOR)
        assert units.tolist() == units.index.tolist()


def test_a_run_of_rows_under_the_bound_merges_into_the_row_before_the_run():
    units = W.collection_units(_table(1, lat=(10.0, 800.0, 4.0, 3.0, 400.0)), FLOOR)
    assert units.tolist() == [10, 13, 13, 13, 14]


def test_no_merge_across_a_gap_in_step_ids_or_into_a_row_not_held_out():
    assert W.collection_units(_table(1, step=(1, 2, 3, 5, 6)), FLOOR).tolist() == [10, 11, 12, 13, 14]
    held = np.array([True, True, False, True, True])  # the row before is a reading row: not merged into
    assert W.collection_units(_table(1), FLOOR, held).tolist() == [10, 11, 12, 13, 14]


def test_bad_bounds_are_refused():
    with pytest.raises(W.WallclockError, match="aligned"):
        W.collection_units(_table(1), FLOOR[:3])
    with pytest.raises(W.WallclockError, match="finite"):
        W.collection_units(_table(1), np.r_[FLOOR[:4], np.nan])
    with pytest.raises(W.WallclockError, match="aligned"):
        W.merged_units(_table(1), pd.DataFrame({"pred_ms": 1.0}, index=range(5)), W.collection_units(_table(1), FLOOR))
