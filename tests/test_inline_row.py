import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments.wallclock import steps as W


def _table(tp):
    steps = pd.DataFrame({"gpu": "b300", "model": "m", "engine": "vllm", "tp": tp,
                          "phase": ["decode", "prefill", "decode", "decode"], "segment": "sweep",
                          "step": [1, 2, 3, 5], "ctx_tokens": [0, 4096, 0, 0], "ctx_requests": [0, 1, 0, 0],
                          "ctx_kv_tokens": 0, "decode_requests": [4, 0, 4, 4], "mean_decode_kv_tokens": 100,
                          "latency_ms": 10.0})
    pred = pd.DataFrame({f"{k}_ms": 0.0 for k in W.KINDS}, index=steps.index)
    pred["gemm_ms"] = [5.0, 50.0, 5.0, 5.0]
    pred["dispatch_full_ms"] = [6.0, 30.0, 2.0, 3.0]
    pred["launch_ms"] = np.maximum(0.0, pred["dispatch_full_ms"] - pred["gemm_ms"])  # own max(GPU, D)
    pred["host_ms"] = 0.5
    pred["pred_ms"] = pred[[f"{k}_ms" for k in W.KINDS]].sum(axis=1)
    return steps, pred


def test_inline_row_takes_next_steps_launch():
    steps, pred = _table(1)
    got = W.inline_row_ms(steps, pred).to_numpy()
    # row 1: max(5, D(2)=30) + 0.5; row 2: max(50, 2) + 0.5; row 3: next id 4 absent -> own max(5, 2);
    # row 5 (last): own max(5, 3)
    assert np.allclose(got, [30.5, 50.5, 5.5, 5.5])


def test_inline_row_leaves_multi_rank_rows():
    steps, pred = _table(2)
    assert np.allclose(W.inline_row_ms(steps, pred).to_numpy(), pred["pred_ms"].to_numpy())


def test_inline_row_refuses_bad_pred():
    steps, pred = _table(1)
    with pytest.raises(W.WallclockError):
        W.inline_row_ms(steps, pred.drop(columns=["dispatch_full_ms"]))
    with pytest.raises(W.WallclockError):
        W.inline_row_ms(steps, pred.iloc[::-1])
