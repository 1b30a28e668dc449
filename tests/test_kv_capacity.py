"""KV capacity in requests (steptime.serve.kv_capacity_requests) and E2.11/E3.4's one-step TPOT capped at it
(issues 19, 20): a hand-computed small case, the MoE memory model's sliding window, a row above capacity
capped, nonsense refused with a clear error."""

import numpy as np
import pandas as pd
import pytest

from steptime import moe_step
from steptime.errors import ServeError, SteptimeError
from steptime.serve import Policy, kv_capacity_requests
from steptime.specs import get_gpu, get_model
from steptime.step import memory_bytes
from steptime_lab.experiments.wallclock import kv_running, predict_tpot


def test_dense_capacity_by_hand():
    m, g = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    w = memory_bytes(m, 0, 1, weight_dtype="bf16", kv_dtype="bf16")
    per_tok = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    # 1,000 tokens hold 63 blocks of 16 = 1,008 tokens
    want = np.floor((0.9 * g.mem_bytes - w) / (1008 * per_tok))
    assert kv_capacity_requests(m, g, 1000, tp=1)[()] == want
    # TP 2 halves the weights and the KV heads per GPU
    w2 = memory_bytes(m, 0, 2, weight_dtype="bf16", kv_dtype="bf16")
    assert kv_capacity_requests(m, g, [1000], tp=2)[0] == np.floor((0.9 * g.mem_bytes - w2) / (1008 * per_tok / 2))
    # the memory fraction is the policy's
    lo = kv_capacity_requests(m, g, 1000, pol=Policy(gpu_memory_utilization=0.5))[()]
    assert lo == np.floor((0.5 * g.mem_bytes - w) / (1008 * per_tok)) and lo < want


def test_sliding_window_capacity():
    m, g = get_model("gpt-oss-120b"), get_gpu("h100-sxm")
    layer = moe_step.kv_layer_bytes(m, 1, "bf16")
    w = moe_step.memory_bytes(m, 0, 1, dtype="mxfp4")
    per_req = 2048 * 18 * layer + (128 + 16) * 18 * layer  # 18 full layers, 18 window layers
    assert kv_capacity_requests(m, g, 2048, dtype="mxfp4")[()] == np.floor((0.9 * g.mem_bytes - w) / per_req)


def test_chunked_attention_capacity():
    """Llama 4's chunked layers (36 of 48) hold at most a chunk plus the block it ends in per request."""
    m, g = get_model("llama-4-scout"), get_gpu("h100-sxm")
    layer = moe_step.kv_layer_bytes(m, 4, "bf16")
    w = moe_step.memory_bytes(m, 0, 4, 4)
    per_req = 32768 * 12 * layer + (8192 + 16) * 36 * layer
    assert kv_capacity_requests(m, g, 32768, tp=4, ep=4)[()] == np.floor((0.9 * g.mem_bytes - w) / per_req)


def test_refusals():
    with pytest.raises(ServeError, match="gpu_memory_utilization"):
        Policy(gpu_memory_utilization=-0.1)
    with pytest.raises(ServeError, match="context_tokens"):
        kv_capacity_requests("llama-3.1-8b", "h100-sxm", [-5.0])
    with pytest.raises(ServeError, match="leave no KV cache"):
        kv_capacity_requests("llama-3.1-70b", "h100-sxm", 1000, tp=1)
    with pytest.raises(SteptimeError, match="KV capacity"):
        kv_running([4.0], [-1.0])


def _const_predictor(frame, tp, _):  # step time = running requests (ms), to read the batch back
    n = frame["decode_requests"].to_numpy(float)
    return {"total": n}


def test_row_above_capacity_is_capped():
    rows = pd.DataFrame({"batch": [8.0, 512.0], "prompt_tokens": [1000, 1000], "output_tokens": [1000, 1000],
                         "mode": ["agg", "agg"]})
    r = predict_tpot(rows, _const_predictor, None, tp=1, capacity=[100.0, 100.0])
    assert list(r["running"]) == [8.0, 100.0] and list(r["capped"]) == [False, True]
    assert list(r["decode_ms"]) == [8.0, 100.0]
    un = predict_tpot(rows, _const_predictor, None, tp=1)
    assert list(un["running"]) == [8.0, 512.0] and not un["capped"].any()


def test_only_concurrency_rows_are_capped():
    from steptime_lab.experiments.wallclock import kv_capacity

    rows = pd.DataFrame({"dataset": ["aic-silicon", "mlenergy-v3"], "batch": [4096.0, 4096.0],
                         "prompt_tokens": [1000.0, 1000.0], "output_tokens": [1000.0, 1000.0]})
    cap = kv_capacity(rows, "llama-3.1-8b", "h100-sxm", 1)
    want = kv_capacity_requests("llama-3.1-8b", "h100-sxm", 1500.0)[()]
    assert cap[0] == want and np.isinf(cap[1])  # ML.ENERGY's batch is measured running: left as measured
    running, capped = kv_running(rows["batch"], cap)
    assert list(running) == [want, 4096.0] and list(capped) == [True, False]
