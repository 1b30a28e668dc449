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
    # step 2 is a new request (no decode, no earlier chunk): not launched inside row 1, so row 1 is step 1's own
    # max(5, 6) + 0.5; row 2 launches itself (30) while its GPU runs (50), then step 3 (a running request's decode,
    # launched early, D 2): max(50, 30 + 2) + 0.5; row 3: step 3's GPU (5, none of it run during row 2) with no
    # next (id 4 absent): 5 + 0.5; row 5 (a new chain): own max(5, 3) + 0.5
    assert np.allclose(got, [6.5, 50.5, 5.5, 5.5])


def test_inline_row_continuing_chunk_is_launched_early():
    steps, pred = _table(1)
    steps["ctx_kv_tokens"] = [0, 1024, 0, 0]  # step 2 continues a prompt already held: launched inside row 1
    got = W.inline_row_ms(steps, pred).to_numpy()
    # row 1: own launch 6 then step 2's 30 (host busy to 36; step 1's GPU done at 6); row 2: step 2's GPU left
    # (56 - 36 = 20) against step 3's launch (2): 20 + 0.5
    assert np.allclose(got, [36.5, 20.5, 5.5, 5.5])


def test_inline_row_queued_request_is_launched_early():
    steps, pred = _table(1)
    steps["queued_ctx_requests"] = [1, 0, 0, 0]  # a request waiting when step 1 was scheduled
    assert np.allclose(W.inline_row_ms(steps, pred).to_numpy(), [36.5, 20.5, 5.5, 5.5])


def test_eager_step_launched_early_keeps_only_its_gpu_tail():
    # decode (GPU 8, D 1), eager mixed step (GPU 20, D 45), decode: the decode row holds the eager launch; the eager
    # step's GPU work runs during its launch, so its own row holds the next decode's launch only (1), during which
    # 1 of that decode's 8 runs: the last row holds 7
    span = W.loop_rows_ms([8.0, 20.0, 8.0], [1.0, 45.0, 1.0], [False, True, True])
    assert np.allclose(span, [max(8.0, 1.0 + 45.0), 1.0, 7.0])


def test_gpu_bound_chain_is_max_of_gpu_and_next_launch():
    # every launch shorter than the GPU work before it: each row is exactly max(GPU(n), D(n + 1)) = GPU(n)
    gpu = np.array([14.5, 16.9, 15.2, 17.3])
    span = W.loop_rows_ms(gpu, [0.8, 3.1, 1.8, 0.8], [False, True, True, True])
    assert np.array_equal(span, gpu)


def test_loop_rows_refuses_bad_input():
    with pytest.raises(W.WallclockError):
        W.loop_rows_ms([1.0, 2.0], [1.0], [False, True])
    with pytest.raises(W.WallclockError):
        W.loop_rows_ms([1.0], [1.0], [True])
    steps, _ = _table(1)
    with pytest.raises(W.WallclockError, match="sorted"):
        W.launched_early(steps.iloc[::-1])
    with pytest.raises(W.WallclockError, match="ctx_kv_tokens"):
        W.launched_early(steps.drop(columns=["ctx_kv_tokens"]))


def test_inline_row_reads_dp():
    steps, pred = _table(1)
    steps["dp"] = 2  # world size 2: rows are their own steps
    assert np.allclose(W.inline_row_ms(steps, pred).to_numpy(), pred["pred_ms"].to_numpy())


def test_inline_row_leaves_multi_rank_rows():
    steps, pred = _table(2)
    assert np.allclose(W.inline_row_ms(steps, pred).to_numpy(), pred["pred_ms"].to_numpy())


def test_inline_row_refuses_bad_pred():
    steps, pred = _table(1)
    with pytest.raises(W.WallclockError):
        W.inline_row_ms(steps, pred.drop(columns=["dispatch_full_ms"]))
    with pytest.raises(W.WallclockError):
        W.inline_row_ms(steps, pred.iloc[::-1])
