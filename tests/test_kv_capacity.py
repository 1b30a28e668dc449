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


# ---- one memory model (steptime.serve.memory.kv_budget) behind the simulator's blocks, the requests a cache holds
# and E2.11's TTFT wave: the three agree on the same inputs
from steptime.serve import StepTimer, kv_budget, kv_capacity_blocks  # noqa: E402
from steptime.serve.memory import KvBudget  # noqa: E402

CASES = [  # (model, gpu, layout and dtype, a context beyond any window)
    ("llama-3.1-8b", "h100-sxm", dict(tp=1), 3000),  # dense: every layer keeps every token
    ("gpt-oss-120b", "h100-sxm", dict(tp=1, dtype="mxfp4"), 3000),  # 18 sliding-window layers of 128
    ("qwen3.6-35b-a3b", "h200-sxm", dict(tp=1), 3000),  # hybrid: 30 Gated DeltaNet layers' state per request
    ("llama-4-scout", "h200-sxm", dict(tp=8, ep=8), 20_000),  # 36 chunked layers of 8,192
]


@pytest.mark.parametrize("model,gpu,kw,ctx", CASES, ids=[c[0] for c in CASES])
def test_blocks_requests_and_ttft_agree(model, gpu, kw, ctx):
    b = kv_budget(model, gpu, **kw)
    n = int(kv_capacity_requests(model, gpu, ctx, **kw)[()])
    assert n == b.requests(ctx)[()] and n >= 1
    held = int(b.held_tokens(ctx)[()])  # whole blocks
    assert held % 16 == 0 and ctx <= held < ctx + 16
    # the simulator's pool with room for exactly n running requests holds n such requests' full-layer tokens,
    # and with room for n + 1 it does not hold n + 1 (the per-request window cap and state set aside first)
    blocks_n = kv_budget(model, gpu, **kw, max_num_seqs=n).blocks()
    assert blocks_n * 16 >= n * held
    try:
        blocks_n1 = kv_budget(model, gpu, **kw, max_num_seqs=n + 1).blocks()
    except ServeError:
        blocks_n1 = 0  # the reserve of n + 1 requests alone leaves no cache
    assert blocks_n1 * 16 < (n + 1) * held
    # kv_capacity_blocks is the same budget at the timer's layout and the policy's knobs (the serving timer
    # refuses a Gated DeltaNet hybrid as yet: its blocks are kv_budget's alone)
    if not getattr(get_model(model), "n_linear_layers", 0):
        pol = Policy(max_num_seqs=n, max_num_batched_tokens=max(8192, n))
        t = StepTimer(model, gpu, tp=kw["tp"], ep=kw.get("ep", 1), dtype=kw.get("dtype", "bf16"), max_tokens=64,
                      max_requests=16)
        assert kv_capacity_blocks(t, pol) == blocks_n
    # bytes: n requests fit in the free bytes, n + 1 do not
    per_req = b.request_bytes(ctx)[()]
    assert n * per_req <= b.free_bytes < (n + 1) * per_req
    # E2.11's TTFT wave takes the same capacity (requests of ISL + OSL tokens): with every step 1 ms and a
    # budget that prefills a whole wave in one step, request i waits (i // fit) waves of (1 + OSL) ms, plus 1 ms
    from steptime_lab.experiments.wallclock import predict_ttft

    isl, osl = ctx - 1000, 1000
    c = 3 * n + 1
    rows = pd.DataFrame({"batch": [float(c)], "prompt_tokens": [float(isl)], "output_tokens": [float(osl)]})
    got = predict_ttft(rows, lambda f, tp, _: {"total": np.ones(len(f))}, model, gpu, kw["tp"], ep=kw.get("ep", 1),
                       token_budget=1e12, dtype=kw.get("dtype", "bf16"))[0]
    i = np.arange(c)
    assert got == pytest.approx(np.mean((i // n) * (1.0 + osl) + 1.0))


def test_window_and_state_terms():
    """gpt-oss: 18 full layers per token, 18 window layers capped at 128 + 16; qwen3.6: 10 full-attention layers
    per token (its 30 linear layers hold no KV: before the unification the simulator's blocks charged all 40)
    and each request the 30 layers' state; a dense model neither."""
    o = kv_budget("gpt-oss-120b", "h100-sxm", dtype="mxfp4")
    layer = moe_step.kv_layer_bytes(get_model("gpt-oss-120b"), 1)
    assert (o.token_bytes, o.window_token_bytes, o.window_cap, o.state_bytes) == (18 * layer, 18 * layer, 144, 0.0)
    assert o.request_bytes(100)[()] == 112 * 36 * layer  # short context: the window layers hold it all
    q = get_model("qwen3.6-35b-a3b")
    h = kv_budget(q, "h200-sxm")
    assert h.token_bytes == 10 * moe_step.kv_layer_bytes(q, 1) and h.state_bytes == 30 * q.gdn_state_bytes(1)
    assert h.blocks() == int((h.free_bytes - 256 * h.state_bytes) // (h.token_bytes * 16))
    d = kv_budget("llama-3.1-8b", "h100-sxm")
    assert (d.window_token_bytes, d.window, d.state_bytes, d.reserve_bytes) == (0.0, 0, 0.0, 0.0)
    assert d.token_bytes == 2 * 32 * 8 * 128 * 2 and isinstance(d, KvBudget)


def test_no_kv_left_names_model_gpu_and_layout():
    with pytest.raises(ServeError, match=r"llama-3\.1-70b weights \(141\.\d GB per GPU at tp=1\) leave no KV cache "
                                         r"in 0\.9 of h100-sxm's 85\.9 GB"):
        kv_budget("llama-3.1-70b", "h100-sxm")
    with pytest.raises(ServeError, match=r"deepseek-v3 weights .* at tp=2, ep=4\) leave no KV cache .*h100-sxm"):
        kv_capacity_requests("deepseek-v3", "h100-sxm", 1000, tp=2, ep=4, dtype="fp8_block")
    t = StepTimer("llama-3.1-70b", "h100-sxm", tp=1, max_tokens=64, max_requests=16)
    with pytest.raises(ServeError, match=r"llama-3\.1-70b .* at tp=1\) leave no KV cache .*h100-sxm"):
        kv_capacity_blocks(t, Policy())
    # the per-request reserve named when it is what leaves no room: gpt-oss's window, Llama 4's chunk, the state
    with pytest.raises(ServeError, match=r"at tp=4, ep=4\) and the chunked-attention layers' KV of 256 requests "
                                         r"\(77\.5 GB\) leave no KV cache in 0\.9 of h100-sxm's 85\.9 GB"):
        kv_budget("llama-4-scout", "h100-sxm", tp=4, ep=4).blocks()
    with pytest.raises(ServeError, match=r"qwen3\.6-35b-a3b weights .* at tp=1, ep=1\) and the linear-attention "
                                         r"state of 256 requests .* h100-sxm"):
        kv_budget("qwen3.6-35b-a3b", "h100-sxm").blocks()
    assert kv_budget("qwen3.6-35b-a3b", "h100-sxm", max_num_seqs=16).blocks() > 0  # fewer slots fit
    from steptime_lab.experiments.wallclock import predict_ttft

    rows = pd.DataFrame({"batch": [4.0], "prompt_tokens": [1000.0], "output_tokens": [100.0]})
    with pytest.raises(ServeError, match="leave no KV cache"):  # was: a wave of one request
        predict_ttft(rows, lambda f, tp, _: {"total": np.ones(len(f))}, "llama-3.1-70b", "h100-sxm", 1,
                     token_budget=8192)


@pytest.mark.parametrize("bad", [0, -5.0, float("nan"), float("inf"), [1000, 0], [np.nan], "many"])
def test_bad_context_refused(bad):
    with pytest.raises(ServeError, match="context_tokens"):
        kv_capacity_requests("llama-3.1-8b", "h100-sxm", bad)
    with pytest.raises(ServeError, match="context_tokens"):
        kv_budget("gpt-oss-120b", "h100-sxm", dtype="mxfp4").requests(bad)


def test_bad_layout_refused():
    for kw, what in ((dict(gpu_memory_utilization=float("nan")), "gpu_memory_utilization"),
                     (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"), (dict(tp=0), "tp"),
                     (dict(ep=2.5), "ep"), (dict(block_size=0), "block_size"), (dict(max_num_seqs=0), "max_num_seqs")):
        with pytest.raises(ServeError, match=what):
            kv_budget("llama-3.1-8b", "h100-sxm", **kw)
