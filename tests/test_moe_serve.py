"""Mixture-of-experts models in the serving simulator and the planner (issue 20): the fast step timer is
exact against predict_steps for GQA, MLA and sliding-window MoE models at every layout, memory fits with
the experts sharded by EP/TP and MLA's latent KV, and `serve` / `plan` accept MoE models and EP."""

import json

import numpy as np
import pytest

from steptime import moe_step
from steptime.cli import main
from steptime.errors import SteptimeError
from steptime.plan import Layout, layouts, plan
from steptime.serve import DirectTimer, Policy, StepTimer, kv_capacity_blocks, simulate, simulate_replicas, synthetic
from steptime.specs import get_gpu, get_model
from steptime.step import predict_step, predict_steps

CASES = [  # model, gpu, tp, ep, dtype: GQA, MLA (fp8 block-scaled), sliding-window + MXFP4, EP with DP attention
    ("qwen3-30b-a3b", "h100-sxm", 1, 1, "bf16"),
    ("qwen3-30b-a3b", "h100-sxm", 1, 4, "bf16"),
    ("deepseek-v3", "h200-sxm", 8, 8, "fp8_block"),
    ("gpt-oss-120b", "h200-sxm", 1, 1, "mxfp4"),
    ("gpt-oss-120b", "b200", 2, 8, "nvfp4"),
]


@pytest.mark.parametrize("model,gpu,tp,ep,dtype", CASES)
def test_moe_timer_is_exact_against_predict_steps(model, gpu, tp, ep, dtype):
    t = StepTimer(model, gpu, tp=tp, ep=ep, dtype=dtype, max_tokens=1024, max_requests=128)
    assert t.check() < 1e-9
    rng = np.random.default_rng(1)
    kw = dict(tp=tp, ep=ep, dtype=dtype)
    for n_dec, n_pre in ((17, 0), (9, 1), (0, 2), (40, 1)):
        new = np.array([1] * n_dec + list(rng.integers(2, 400, n_pre)))
        kv = rng.integers(0, 6000, len(new))
        ref = predict_steps(model, gpu, np.zeros(len(new), dtype=int), new, kv, 1, **kw)["total_ms"][0] * 1e-3
        assert t.step_arrays(new, kv) == pytest.approx(ref, rel=1e-9)
        assert t.step(list(new), list(kv)) == pytest.approx(ref, rel=1e-9)


def test_all_to_all_mode_is_chosen_per_step():
    """A decode-only step runs DeepEP's low-latency mode, a step with a prefill the high-throughput one,
    whatever else is predicted in the same call."""
    kw = dict(tp=1, ep=8, dtype="fp8_block")
    both = predict_steps("deepseek-v3", "h200-sxm", np.array([0, 0, 1]), np.array([1, 1, 300]), np.array([500, 500, 0]),
                         2, **kw)["terms_ms"]["moe_a2a"]
    dec = predict_steps("deepseek-v3", "h200-sxm", np.array([0, 0]), np.array([1, 1]), np.array([500, 500]), 1,
                        **kw)["terms_ms"]["moe_a2a"]
    pre = predict_steps("deepseek-v3", "h200-sxm", np.array([0]), np.array([300]), np.array([0]), 1,
                        **kw)["terms_ms"]["moe_a2a"]
    assert both[0] == pytest.approx(dec[0]) and both[1] == pytest.approx(pre[0])


@pytest.mark.parametrize("model,gpu,tp,ep,dtype", [CASES[1], CASES[3]])
def test_fast_simulation_equals_predict_steps_step_by_step(model, gpu, tp, ep, dtype):
    """The simulator's fast path (decode runs, a sliding window's per-request KV) equals timing every
    iteration with predict_steps itself."""
    wl = synthetic(60, isl=(64, 1500), osl=(8, 300), rate=8.0, seed=2)
    pol = Policy("vllm", max_num_batched_tokens=1024, max_num_seqs=64)
    fast = simulate(model, gpu, wl, pol, tp=tp, ep=ep, dtype=dtype)
    slow = simulate(model, gpu, wl, pol, timer=DirectTimer(model, gpu, tp=tp, ep=ep, dtype=dtype), fast=False)
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9)


def test_memory_shards_experts_by_ep_and_keeps_the_latent_kv():
    m = get_model("deepseek-v3")
    t1 = StepTimer(m, "h200-sxm", tp=8, ep=1, dtype="fp8_block", max_tokens=64, max_requests=16)
    t8 = StepTimer(m, "h200-sxm", tp=1, ep=8, dtype="fp8_block", max_tokens=64, max_requests=16)
    # MLA: the latent (kv_lora_rank + rope dims) per token and layer, replicated over TP, bf16
    assert t1.kv_bytes_per_token() == pytest.approx(m.num_hidden_layers * (512 + 64) * 2)
    assert t8.kv_bytes_per_token() == pytest.approx(t1.kv_bytes_per_token())
    # routed experts: 1/8 of them on each GPU either way; attention replicated at tp 1 (dp 8)
    experts = m.n_moe_layers * m.num_experts * m.expert_params() * 1.0 / 8
    assert t1.memory_bytes(0) > experts and t8.memory_bytes(0) > t1.memory_bytes(0)
    blocks = kv_capacity_blocks(t8, Policy("vllm"))
    free = get_gpu("h200-sxm").mem_bytes * 0.9 - t8.memory_bytes(0)
    assert blocks == int(free // (t8.kv_bytes_per_token() * 16))
    with pytest.raises(SteptimeError, match="leave no KV"):
        kv_capacity_blocks(StepTimer(m, "h100-sxm", tp=2, ep=4, dtype="fp8_block", max_tokens=64, max_requests=16),
                           Policy("vllm"))


def test_sliding_window_layers_hold_only_the_window():
    """gpt-oss: 18 of its 36 layers attend over a 128-token window, so they keep at most 128 tokens per request
    (the engine frees the blocks that leave the window); the memory check and the KV capacity count that."""
    m, g = get_model("gpt-oss-120b"), get_gpu("h200-sxm")
    assert (m.sliding_window, moe_step.sliding_layers(m)) == (128, 18)
    layer = moe_step.kv_layer_bytes(m, 1)
    assert layer == 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    w = moe_step.memory_bytes(m, 0, 1, dtype="mxfp4")
    # 10 requests of 10,000 tokens: full layers 100,000 tokens, window layers 10 x 128
    got = moe_step.memory_bytes(m, 100_000, 1, dtype="mxfp4", window_tokens=10 * 128)
    assert got - w == pytest.approx((100_000 * 18 + 1_280 * 18) * layer)
    # without the per-request window: every layer charged every token (the upper bound)
    assert moe_step.memory_bytes(m, 100_000, 1, dtype="mxfp4") - w == pytest.approx(100_000 * 36 * layer)
    # a model without a window is unchanged by window_tokens
    q = get_model("qwen3-30b-a3b")
    assert moe_step.memory_bytes(q, 5_000, 1, window_tokens=10) == moe_step.memory_bytes(q, 5_000, 1)
    # capacity: blocks of the 18 full layers, after the window of max_num_seqs requests is set aside
    t = StepTimer(m, g, tp=1, dtype="mxfp4", max_tokens=64, max_requests=16)
    pol = Policy("vllm")
    reserve = pol.max_num_seqs * (128 + 16) * 18 * layer
    assert kv_capacity_blocks(t, pol) == int((g.mem_bytes * 0.9 - w - reserve) // (18 * layer * 16))
    # the step's memory check uses the window: 64 decodes over 25,000 tokens fit on one H200 (weights + 59 GB of
    # full-layer KV) only because the window layers hold 128 tokens each (all 36 layers: 118 GB of KV)
    assert predict_step(m, g, decode=[(64, 25_000)], dtype="mxfp4").total_ms > 0
    assert w + 64 * 25_001 * 36 * layer > g.mem_bytes


@pytest.mark.parametrize("args,msg", [
    (["--model", "llama-3.1-8b", "--ep", "2"], "applies to mixture-of-experts models"),
    (["--model", "qwen3-30b-a3b", "--ep", "3"], "must divide"),
    (["--model", "qwen3-30b-a3b", "--tp", "2", "--ep", "3"], "multiple of the tensor-parallel degree"),
    (["--model", "qwen3-30b-a3b", "--gpu", "a100-sxm", "--dtype", "nvfp4"], "no fp4 tensor cores"),
    (["--model", "qwen3-30b-a3b", "--ep", "2", "--policy", "disagg"], "not simulated"),
])
def test_serve_refuses_what_it_cannot_represent_in_one_line(args, msg, capsys):
    a = ["serve", "--gpu", "h100-sxm", "--n", "5", "--no-progress", *args]
    if "--gpu" in args:
        a = ["serve", "--n", "5", "--no-progress", *args]
    assert main(a) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_serve_moe_with_ep_runs_one_rank_per_scheduler(capsys):
    assert main(["serve", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--ep", "2", "--rate", "4", "--n", "40",
                 "--isl", "256", "--osl", "32", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ep"] == 2 and "lockstep" in doc["note"]
    wl = synthetic(40, isl=256, osl=32, rate=4.0, seed=0)
    ref = simulate_replicas("qwen3-30b-a3b", "h100-sxm", wl, Policy("vllm"), 2, ep=2)
    assert doc["summary"]["throughput_tok_s"] == pytest.approx(ref.summary()["throughput_tok_s"])


def test_serve_notes_data_parallel_ranks_only_when_there_are_some(capsys):
    """ep = tp: one attention rank per instance (no data parallelism), so no note about DP schedulers."""
    assert main(["serve", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "2", "--ep", "2", "--rate", "4",
                 "--n", "20", "--isl", "256", "--osl", "32", "--no-progress"]) == 0
    assert "data-parallel ranks" not in capsys.readouterr().out
    assert main(["serve", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "1", "--ep", "2", "--rate", "4",
                 "--n", "20", "--isl", "256", "--osl", "32", "--no-progress"]) == 0
    assert "data-parallel ranks" in capsys.readouterr().out


def test_plan_searches_expert_parallelism_for_moe_only():
    cand, dropped = layouts(get_model("qwen3-30b-a3b"), ["h100-sxm"], tps=(1, 2), seqs=(64,), budgets=(2048,),
                            dtypes=("bf16",))
    eps = {(x.tp, x.ep) for x in cand}
    assert {(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 4), (2, 8)} <= eps
    assert all(x.gpus == x.ep * x.instances for x in cand if x.ep > 1) and all(x.gpus <= 8 for x in cand)
    assert all("ep" in x.label() for x in cand if x.ep > 1)
    assert any("disaggregated pools with expert parallelism" in why for _, why in dropped)
    dense, _ = layouts(get_model("llama-3.1-8b"), ["h100-sxm"], tps=(1, 2), seqs=(64,), budgets=(2048,))
    assert {x.ep for x in dense} == {1} and all(" ep" not in x.label() for x in dense)


def test_plan_simulates_moe_layouts_with_ep():
    wl = synthetic(80, isl=512, osl=64, rate=6.0, seed=1)
    res = plan("qwen3-30b-a3b", wl, slo_ttft_s=2.0, slo_tpot_s=0.1, gpus=("h100-sxm",), tps=(1,), seqs=(64,),
               budgets=(2048,), dtypes=("bf16",), disagg=False, jobs=1, exhaustive=True)
    sims = res.simulated()
    by = {(r["ep"] if "ep" in r else 1, r["replicas"]): r for r in sims}
    assert (2, 1) in by and (1, 1) in by
    r = by[(2, 1)]
    assert r["gpus"] == 2 and r["throughput_per_gpu"] == pytest.approx(r["throughput_tok_s"] / 2)
    assert r["limiting"] in ("compute", "memory bandwidth", "all-to-all", "host", "all-reduce", "KV capacity")
    # the row is the simulator's: two data-parallel ranks behind a round-robin router
    ref = simulate_replicas("qwen3-30b-a3b", "h100-sxm", wl, Policy("vllm", max_num_batched_tokens=2048,
                                                                    max_num_seqs=64), 2, ep=2)
    assert r["throughput_tok_s"] == pytest.approx(ref.summary()["throughput_tok_s"], rel=1e-6)


def test_check_layout_lines_are_the_timers():
    with pytest.raises(SteptimeError, match="beyond"):
        StepTimer("qwen3-30b-a3b", "h100-sxm", tp=1, ep=16)
    assert moe_step.attention_geometry(get_model("deepseek-v3"), 8) == (16, 1, 576)
    assert moe_step.sliding_layers(get_model("gpt-oss-120b")) == 18


def test_replicas_share_one_step_timer_with_the_same_run(monkeypatch):
    """simulate_replicas (serve --ep E's data-parallel ranks, --replicas) builds ONE step timer for its identical
    shares (until wave 39: one per share, E of them), and each share's run is bit for bit the run of that share on
    a timer of its own (the tables grow on demand, the same numbers)."""
    import steptime.serve.sim as sim
    from steptime.serve import Workload

    wl = synthetic(60, isl=256, osl=32, rate=6.0, seed=1)
    pol = Policy("vllm", max_num_batched_tokens=2048, max_num_seqs=16)
    built = []
    real = sim.StepTimer

    def counting(*a, **k):
        built.append(k.get("max_tokens"))
        return real(*a, **k)

    monkeypatch.setattr(sim, "StepTimer", counting)
    shared = simulate_replicas("qwen3-30b-a3b", "h100-sxm", wl, pol, 4, ep=4)
    assert len(built) == 1
    for i in range(4):
        sel = np.arange(i, len(wl), 4)
        own = simulate("qwen3-30b-a3b", "h100-sxm", Workload(wl.arrival[sel], wl.prompt[sel], wl.output[sel],
                                                             None, wl.name), pol, ep=4)
        mine = shared.requests[shared.requests["request"].isin(sel)].drop(columns="request").reset_index(drop=True)
        assert mine.equals(own.requests.drop(columns="request", errors="ignore")), i
    assert len(built) == 5  # each share on its own: one timer each
