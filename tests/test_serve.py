"""The serving simulator: exact step times, scheduler behaviour, physics, bad input."""

import json
import numpy as np
import pandas as pd
import pytest

from steptime.cli import main
from steptime.errors import ServeError, SteptimeError
from steptime.serve import (Policy, StepTimer, Workload, engine_policy, from_table, on_clock, policy, simulate,
                            simulate_disagg,
                            static_batch, synthetic, weighted_quantile)
from steptime.step import predict_steps
from prefill_wave import wave_first_token_times  # tests/prefill_wave.py

M, G = "llama-3.1-8b", "h100-sxm"


@pytest.fixture(scope="module")
def timer():
    return StepTimer(M, G)


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0", "trtllm", "sglang", "kernels"])
def test_timer_exact_against_predict_steps(engine):
    assert StepTimer(M, G, engine=engine).check() < 1e-12
    t2 = StepTimer("llama-3.1-70b", "h100-sxm", tp=4, engine=engine)  # all-reduce and sharded shapes
    assert t2.check() < 1e-12
    assert StepTimer(M, G, engine=engine, kv_dtype="fp8", dtype="fp8").check() < 1e-12


def test_timer_mixed_step_matches_direct_prediction(timer):
    new = np.array([1] * 20 + [512, 37])
    kv = np.array(list(range(100, 2100, 100)) + [0, 3000])
    ref = predict_steps(M, G, np.zeros(len(new), dtype=int), new, kv, 1)["total_ms"][0] * 1e-3
    assert timer.step_arrays(new, kv) == pytest.approx(ref, rel=1e-12)
    assert timer.step(new.tolist(), kv.tolist()) == pytest.approx(ref, rel=1e-12)


def test_decode_steps_list_stops_at_the_first_step_ending_at_or_after_until(timer):
    full = timer.decode_steps(12, 12 * 700.0, 20)
    assert timer.decode_steps_list(12, 12 * 700.0, 20) == pytest.approx(full.tolist(), rel=1e-14)
    ends = np.cumsum(full)
    t0 = 3.0
    until = t0 + (ends[6] + ends[7]) / 2  # inside step 7: the list ends with it
    short = timer.decode_steps_list(12, 12 * 700.0, 20, until, t0)
    assert len(short) == 8 and short == pytest.approx(full[:8].tolist(), rel=1e-14)
    assert len(timer.decode_steps_list(12, 12 * 700.0, 20, t0 + ends[3], t0)) in (4, 5)  # float rounding at the edge
    assert len(timer.decode_steps_list(12, 12 * 700.0, 20, t0 + ends[-1] * 2, t0)) == 20


def _same_runs(a, b):
    cols = ["first_token_s", "finish_s", "preemptions"]
    pd.testing.assert_frame_equal(a.requests[cols], b.requests[cols], rtol=1e-9, atol=0)
    assert a.n_steps == b.n_steps


@pytest.mark.parametrize("wl", [
    synthetic(300, isl=(64, 2048), osl=(8, 400), rate=6.0, seed=3),
    synthetic(200, isl=(64, 1024), osl=(8, 300), concurrency=24, seed=4),
])
def test_fast_path_equals_step_by_step(timer, wl):
    fast = simulate(M, G, wl, timer=timer)
    slow = simulate(M, G, wl, timer=timer, fast=False)
    _same_runs(fast, slow)
    assert fast.summary()["itl_s"] == pytest.approx(slow.summary()["itl_s"], rel=1e-9)


def test_fast_path_equals_step_by_step_under_preemption(timer):
    wl = synthetic(120, isl=(200, 1500), osl=(100, 600), rate=40.0, seed=5)
    pol = Policy("vllm", kv_blocks=900)
    fast = simulate(M, G, wl, pol, timer=timer)
    assert fast.requests["preemptions"].sum() > 0
    _same_runs(fast, simulate(M, G, wl, pol, timer=timer, fast=False))


@pytest.mark.parametrize("kv_blocks,seed", [(900, 5), (400, 6), (2000, 7)])
def test_preempt_bulk_accept_equals_one_by_one(timer, monkeypatch, kv_blocks, seed):
    from steptime.serve import sim

    wl = synthetic(150, isl=(200, 1500), osl=(100, 600), rate=40.0, seed=seed)
    pol = Policy("vllm", kv_blocks=kv_blocks)
    bulk = simulate(M, G, wl, pol, timer=timer)
    # the reference: _preempt_loop's one-by-one walk over every request (nothing accepted in bulk)
    monkeypatch.setattr(sim._Engine, "_accept_fitting", lambda self, R, budget: (0, [], [], budget))
    ref = simulate(M, G, wl, pol, timer=timer)
    assert ref.requests["preemptions"].sum() > 0  # the path under test is taken
    pd.testing.assert_frame_equal(bulk.requests, ref.requests, rtol=0, atol=0)
    assert bulk.n_steps == ref.n_steps


def test_static_decode_batch_is_the_sum_of_predicted_steps(timer):
    n, p, o = 8, 300, 50
    run = simulate(M, G, static_batch(n, p, o), policy("static", batch=n), timer=timer)
    pre = predict_steps(M, G, np.zeros(n, dtype=int), np.full(n, p), np.zeros(n), 1)["total_ms"][0]
    g = np.arange(1, o)  # decode iteration g: KV holds prompt + g - 1 tokens
    dec = predict_steps(M, G, np.repeat(np.arange(o - 1), n), np.ones((o - 1) * n), np.repeat(p + g - 1, n),
                        o - 1)["total_ms"]
    assert run.makespan_s * 1e3 == pytest.approx(pre + dec.sum(), rel=1e-9)
    assert run.n_steps == o
    assert np.allclose(run.requests["ttft_s"], pre * 1e-3)


def test_static_batches_do_not_overlap(timer):
    run = simulate(M, G, synthetic(12, isl=128, osl=(5, 40), seed=1), policy("static", batch=4), timer=timer)
    d = run.requests.sort_values("first_token_s")
    starts = d["first_token_s"].to_numpy().reshape(3, 4)
    ends = d["finish_s"].to_numpy().reshape(3, 4)
    assert np.all(starts[1:].min(axis=1) > ends[:-1].max(axis=1))


def test_more_load_never_lowers_ttft(timer):
    base = synthetic(400, isl=(128, 2048), osl=(16, 256), rate=1.0, seed=7)
    ttft = []
    for rate in (1.0, 4.0, 10.0, 20.0):
        wl = Workload(base.arrival / rate, base.prompt, base.output)  # same requests, compressed arrivals
        ttft.append(simulate(M, G, wl, timer=timer).summary()["ttft_s"]["p90"])
    assert all(b >= a for a, b in zip(ttft, ttft[1:]))
    assert ttft[-1] > 2 * ttft[0]


def test_littles_law_closed_loop(timer):
    c = 16
    run = simulate(M, G, synthetic(1500, isl=(64, 1024), osl=(32, 256), concurrency=c, seed=2), timer=timer)
    d = run.requests
    x = len(d) / run.makespan_s
    assert x * d["e2e_s"].mean() == pytest.approx(c, rel=0.03)
    assert d["arrival_s"].iloc[:c].eq(0).all() and (d["arrival_s"].iloc[c:] > 0).all()


def test_stable_open_loop_throughput_follows_arrivals(timer):
    wl = synthetic(1500, isl=(64, 1024), osl=(16, 128), rate=5.0, seed=9)
    s = simulate(M, G, wl, timer=timer).summary()
    assert s["throughput_req_s"] == pytest.approx(len(wl) / wl.arrival[-1], rel=0.03)


def test_every_token_is_emitted_once(timer):
    wl = synthetic(150, isl=(32, 900), osl=(1, 300), rate=30.0, seed=11)
    run = simulate(M, G, wl, Policy("vllm", kv_blocks=700), timer=timer)
    assert run.itl_w.sum() == (wl.output - 1).sum()
    d = run.requests
    assert (d["first_token_s"] > d["arrival_s"]).all() and (d["finish_s"] >= d["first_token_s"]).all()


def test_chunk_budget_trades_ttft_for_itl(timer):
    wl = synthetic(300, isl=(1024, 4096), osl=(64, 256), rate=4.0, seed=12)
    small = simulate(M, G, wl, policy("sarathi", chunk=256), timer=timer).summary()
    big = simulate(M, G, wl, policy("sarathi", chunk=4096), timer=timer).summary()
    assert small["itl_s"]["p99"] < big["itl_s"]["p99"]
    assert small["ttft_s"]["p50"] > big["ttft_s"]["p50"]


def test_deterministic_for_a_seed(timer):
    a = simulate(M, G, synthetic(200, isl=(64, 512), osl=(8, 64), rate=10.0, seed=5), timer=timer)
    b = simulate(M, G, synthetic(200, isl=(64, 512), osl=(8, 64), rate=10.0, seed=5), timer=timer)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    c = simulate(M, G, synthetic(200, isl=(64, 512), osl=(8, 64), rate=10.0, seed=6), timer=timer)
    assert not a.requests["finish_s"].equals(c.requests["finish_s"])


def test_disaggregation_pools(timer):
    wl = synthetic(300, isl=(256, 2048), osl=(16, 256), rate=12.0, seed=13)
    one = simulate_disagg(M, G, wl, prefill_instances=1, decode_instances=1)
    two = simulate_disagg(M, G, wl, prefill_instances=1, decode_instances=2)
    # the prefill pool is the same, so TTFT is; a second decode instance can only help TPOT
    assert np.allclose(one.requests["ttft_s"], two.requests["ttft_s"])
    assert two.summary()["tpot_s"]["p50"] < one.summary()["tpot_s"]["p50"]
    assert (one.requests["finish_s"] >= one.requests["first_token_s"]).all()


def test_goodput_and_weighted_quantile(timer):
    assert weighted_quantile([1.0, 2.0, 3.0], [1, 1, 8], [0.5])[0] == 3.0
    s = simulate(M, G, synthetic(100, isl=256, osl=32, rate=2.0), timer=timer).summary(slo_ttft_s=10.0,
                                                                                         slo_tpot_s=10.0)
    assert s["slo"]["attainment"] == 1.0
    s = simulate(M, G, synthetic(100, isl=256, osl=32, rate=2.0), timer=timer).summary(slo_tpot_s=1e-6)
    assert s["slo"]["attainment"] == 0.0


# ---- bad input: one clear error each -----------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    (dict(arrival=[0.0, np.nan], prompt=[10, 10], output=[5, 5]), "missing arrival"),
    (dict(arrival=[0.0, 1.0], prompt=[10, np.nan], output=[5, 5]), "missing prompt"),
    (dict(arrival=[-1.0, 1.0], prompt=[10, 10], output=[5, 5]), "negative arrival"),
    (dict(arrival=[0.0, 1.0], prompt=[10, -3], output=[5, 5]), "prompt tokens -3"),
    (dict(arrival=[0.0, 1.0], prompt=[10, 10], output=[0, 5]), "output tokens 0"),
    (dict(arrival=[2.0, 1.0], prompt=[10, 10], output=[5, 5]), "not sorted"),
    (dict(arrival=[], prompt=[], output=[]), "no requests"),
])
def test_bad_workload(kw, match):
    with pytest.raises(ServeError, match=match):
        Workload(**kw)


def test_bad_trace_table():
    with pytest.raises(ServeError, match="no output column"):
        from_table(pd.DataFrame({"arrived_at_s": [0.0], "num_prefill_tokens": [5]}))
    with pytest.raises(ServeError, match="not sorted"):
        from_table(pd.DataFrame({"arrived_at_s": [1.0, 0.5], "num_prefill_tokens": [5, 5],
                                 "num_decode_tokens": [3, 3]}))


@pytest.mark.parametrize("call, match", [
    (lambda: from_table(pd.DataFrame({"arrived_at_s": [0.0], "num_prefill_tokens": [5], "num_decode_tokens": [3]}),
                        time_scale=0), "time_scale must be a number > 0"),
    (lambda: from_table(pd.DataFrame({"arrived_at_s": [0.0], "num_prefill_tokens": [5], "num_decode_tokens": [3]}),
                        n=0), "number of requests n must be >= 1"),
    (lambda: synthetic(5, isl=8, osl=8, seed=1.5), "seed must be an integer"),
    (lambda: synthetic(5, isl=8, osl=8, rate=1.0, seed=-2), "seed must be >= 0"),
    (lambda: StepTimer(M, G, tp=0), "tp must be >= 1"),
    (lambda: StepTimer(M, G, tp=2.5), "tp must be an integer"),
    (lambda: StepTimer(M, G, kv_dtype="int4"), "unknown KV-cache dtype"),
    (lambda: StepTimer(M, G, dtype="fp16"), "unknown dtype 'fp16'"),
    (lambda: StepTimer(M, "a100-sxm", dtype="fp8"), "no fp8 tensor cores"),
    (lambda: StepTimer(M, G, f_clk=float("nan")), "f_clk"),
    (lambda: policy("sarathi", chunk=0), r"sarathi chunk \(--chunk\) must be >= 1"),
    (lambda: policy("static", batch=0), "static batch size must be >= 1"),
    (lambda: Policy("vllm", kv_blocks=0), "kv_blocks must be >= 1"),
])
def test_bad_serve_arguments_are_one_clear_value_error(call, match):
    with pytest.raises(SteptimeError, match=match) as exc:
        call()
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_request_beyond_context(timer):
    with pytest.raises(ServeError, match="beyond llama-3.1-8b's context"):
        simulate(M, G, Workload([0.0], [131000], [1000]), timer=timer)


def test_workload_that_cannot_fit_kv(timer):
    with pytest.raises(ServeError, match="cannot fit in KV memory"):
        simulate(M, G, Workload([0.0], [4000], [100]), Policy("vllm", kv_blocks=100), timer=timer)
    with pytest.raises(ServeError, match="leave no KV cache"):
        simulate("llama-3.1-70b", "l40s", Workload([0.0], [100], [10]))


def test_bad_policy():
    with pytest.raises(ServeError, match="unknown scheduler policy"):
        Policy("fifo")
    with pytest.raises(ServeError, match="below max_num_seqs"):
        policy("sarathi", chunk=64)
    assert issubclass(ServeError, ValueError) and issubclass(ServeError, SteptimeError)


def test_whole_run_equals_direct_prediction_of_every_iteration(timer):
    from steptime.serve import DirectTimer

    wl = synthetic(40, isl=(64, 1500), osl=(4, 80), rate=8.0, seed=21)
    ref = simulate(M, G, wl, Policy("vllm", max_num_batched_tokens=512, kv_blocks=300),
                   timer=DirectTimer(M, G), fast=False)
    got = simulate(M, G, wl, Policy("vllm", max_num_batched_tokens=512, kv_blocks=300), timer=timer)
    _same_runs(got, ref)


def test_cli_serve(tmp_path, capsys):
    import json

    rc = main(["serve", "--model", M, "--gpu", G, "--rate", "4", "--n", "50", "--isl", "64:512", "--osl", "8:64",
               "--json", "--csv", str(tmp_path / "r.csv"), "--fig", str(tmp_path / "f.png"), "--slo-tpot-ms", "50"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["simulated"] is True and doc["summary"]["requests"] == 50
    assert 0 <= doc["summary"]["slo"]["attainment"] <= 1
    assert len(pd.read_csv(tmp_path / "r.csv")) == 50 and (tmp_path / "f.png").is_file()


@pytest.mark.parametrize("args, match", [
    (["--trace", "nope"], "neither a known trace"),
    (["--isl", "200000"], "beyond llama-3.1-8b's context"),
    (["--isl", "a:b"], "expected N or LO:HI"),
    (["--policy", "disagg", "--concurrency", "4"], "open-loop"),
    (["--rate", "-1"], "rate must be > 0"),
    (["--kv-blocks", "10", "--isl", "1000"], "cannot fit in KV memory"),
    (["--engine", "nope"], "nope"),
    # a zero is refused, never replaced by a default
    (["--n", "0"], "number of requests must be >= 1"),
    (["--policy", "sarathi", "--chunk", "0"], "sarathi chunk (--chunk) must be >= 1"),
    (["--policy", "static", "--batch", "0"], "static batch size must be >= 1"),
    (["--replicas", "0"], "replicas must be >= 1"),
    (["--tp", "0"], "tensor-parallel degree tp must be >= 1"),
    (["--max-num-batched-tokens", "0"], "max_num_batched_tokens must be >= 1"),
    (["--kv-blocks", "0"], "kv_blocks must be >= 1"),
    (["--seed", "-1"], "seed must be >= 0"),
    (["--slo-ttft-ms", "-1"], "TTFT SLO must be a time > 0"),
    (["--slo-tpot-ms", "nan"], "TPOT SLO must be a time > 0"),
    (["--csv", "/no/such/folder/r.csv"], "--csv '/no/such/folder/r.csv': its folder does not exist"),
    # an option the workload or the policy does not read is refused, never ignored (wave 34, helper harden)
    (["--time-scale", "-1"], "--time-scale -1 stretches a trace's recorded arrivals: use it with --trace"),
    (["--time-scale", "2", "--rate", "4"], "use it with --trace and without --rate"),
    (["--prefill-instances", "2"], "--prefill-instances 2 applies to --policy disagg, not --policy vllm"),
    (["--decode-instances", "2", "--policy", "static"], "--decode-instances 2 applies to --policy disagg"),
    (["--chunk", "256"], "--chunk 256 applies to --policy sarathi, not --policy vllm"),
    (["--batch", "8", "--policy", "sarathi"], "--batch 8 applies to --policy static, not --policy sarathi"),
    (["--policy", "disagg", "--prefill-instances", "0"], "--prefill-instances 0: each pool needs at least one"),
])
def test_cli_serve_bad_input(args, match, capsys):
    assert main(["serve", "--model", M, "--gpu", G, "--n", "5", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1


def test_a_trace_without_arrival_times_asks_for_a_rate(tmp_path, capsys):
    """Wave 34 (helper harden): a length-only trace (arXiv's) said 'request 0 has a missing arrival'."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n,100,5\n,100,5\n")
    assert main(["serve", "--model", M, "--gpu", G, "--trace", str(trace)]) == 2
    assert "the trace has no arrival times (column 'arrival_s' is empty): give a Poisson rate (--rate" in \
        capsys.readouterr().err
    assert main(["serve", "--model", M, "--gpu", G, "--trace", str(trace), "--rate", "2", "--json"]) == 0


def test_cli_serve_time_scale_stretches_a_trace_file(tmp_path, capsys):
    """--time-scale is read with --trace: a trace file's arrivals, stretched, run (and 0 is refused)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,5\n0.5,100,5\n1.0,100,5\n")
    assert main(["serve", "--model", M, "--gpu", G, "--trace", str(trace), "--time-scale", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["requests"] == 3
    assert main(["serve", "--model", M, "--gpu", G, "--trace", str(trace), "--time-scale", "0"]) == 2
    assert "time_scale must be a number > 0" in capsys.readouterr().err


def test_a_static_batch_beyond_the_workload_sizes_the_step_table_by_the_workload(capsys):
    """Wave 34 (helper harden): `--policy static --batch 100000` over 10 requests asked for a step table of
    5e9 rows (a 37 GiB MemoryError traceback); the table is sized by the requests there are, bit for bit."""
    argv = ["serve", "--model", M, "--gpu", G, "--n", "10", "--policy", "static", "--json", "--no-progress"]
    assert main(argv) == 0
    small = json.loads(capsys.readouterr().out)
    assert main(argv + ["--batch", "100000"]) == 0
    big = json.loads(capsys.readouterr().out)
    assert big["summary"] == small["summary"]


def test_a_step_table_beyond_memory_is_one_serve_error(monkeypatch):
    import steptime.serve.timer as T

    def no_memory(*a, **k):
        raise MemoryError

    timer = StepTimer(M, G, max_requests=16)
    monkeypatch.setattr(T, "predict_steps", no_memory)
    with pytest.raises(ServeError, match="the step timer's table of 5,000,050,000 rows does not fit in memory"):
        timer._grow_requests(100_000)


def test_engine_changes_the_run():
    import dataclasses
    from steptime.specs.engines import get_engine
    wl = synthetic(100, isl=(64, 512), osl=(16, 128), rate=10.0, seed=1)
    # vllm's light kernels take the row floor law, the kernels profile E1.1c's flat floors (engines.yaml
    # light.floor_law): compare the kernel sum with vllm under the same (flat) law
    v = get_engine("vllm")
    flat = dataclasses.replace(v, values={k: x for k, x in v.values.items() if k != "light_floor_law"})
    a = simulate(M, G, wl, engine=flat).summary()["tpot_s"]["p50"]
    b = simulate(M, G, wl, engine="kernels").summary()["tpot_s"]["p50"]
    assert b < a  # the bare kernel sum has no host, launch or sampling time
    assert simulate(M, G, wl, engine="vllm").summary()["tpot_s"]["p50"] < a  # the row law's cheaper floors


def test_itl_log_merges_exactly_then_on_a_bounded_grid():
    from steptime.serve.sim import ItlLog

    rng = np.random.default_rng(0)
    vals = [rng.choice([0.01, 0.02, 0.03], 50) for _ in range(40)]
    log = ItlLog(cap=100)  # compacts many times; 3 distinct values stay exact
    for i, v in enumerate(vals):
        log.add(v, float(i % 3 + 1))
    v, w = log.arrays()
    allv = np.concatenate(vals)
    allw = np.concatenate([np.full(50, float(i % 3 + 1)) for i in range(40)])
    assert log.exact and v.size == 3
    assert np.array_equal(weighted_quantile(v, w, [0.1, 0.5, 0.9]), weighted_quantile(allv, allw, [0.1, 0.5, 0.9]))
    assert w.sum() == allw.sum()
    # distinct floats beyond the cap: a log grid of 1e-4 relative width, bounded size
    log = ItlLog(cap=1000)
    x = rng.uniform(0.005, 0.05, 200_000)
    for c in np.split(x, 100):
        log.add(c, 1.0)
    v, w = log.arrays()
    assert not log.exact and v.size < 30_000 and w.sum() == x.size
    q = weighted_quantile(v, w, [0.5, 0.9, 0.99])
    assert np.allclose(q, np.quantile(x, [0.5, 0.9, 0.99]), rtol=2e-4)


def test_itl_log_merge_compaction_equals_sorting_everything():
    """The compaction merges the tail into the sorted head; a reference re-sorts every pair each time
    (the plain definition). Same values, weights and exact flag, through the switch to the grid."""
    from steptime.serve.sim import ItlLog

    class Plain(ItlLog):
        def _compact(self):
            v, w = self._arrays()
            if not self.exact:
                v = self._grid(v)
            u, inv = np.unique(v, return_inverse=True)
            if self.exact and u.size > self.cap // 2:
                self.exact = False
                u, inv = np.unique(self._grid(v), return_inverse=True)
            self.v, self.w = [u], [np.bincount(inv, weights=w, minlength=u.size)]
            self.n = u.size

    rng = np.random.default_rng(3)
    pool = rng.uniform(0.001, 0.1, 3000)
    flips = []
    for grow in (0, 3, 8):  # distinct values: 150 throughout (exact); growing, so the grid comes after merges
        a, b = ItlLog(cap=1000), Plain(cap=1000)
        merged_exact = 0
        for i in range(300):
            x = rng.choice(pool[:150 + grow * i], 37)
            a.add(x, float(i % 5 + 1))
            b.add(x.copy(), float(i % 5 + 1))
            merged_exact += a.exact and isinstance(a.w[0], np.ndarray)
            (va, wa), (vb, wb) = a._arrays(), b._arrays()
            assert a.exact == b.exact and np.array_equal(va, vb) and np.array_equal(wa, wb)
        (va, wa), (vb, wb) = a.arrays(), b.arrays()
        assert a.exact == b.exact and np.array_equal(va, vb) and np.array_equal(wa, wb)
        assert wa.sum() == sum(37 * (i % 5 + 1) for i in range(300)) and merged_exact
        flips.append(a.exact)
    assert flips == [True, False, False]


def test_itl_log_tail_merged_per_weight_equals_merging_every_pair():
    """_tail_merged (one sort per distinct chunk weight) gives, weight group by weight group, the values and
    weight sums of merging every value with its chunk's weight; list chunks and the grid included."""
    from steptime.serve.sim import ItlLog

    rng = np.random.default_rng(5)
    for exact in (True, False):
        log = ItlLog(cap=1 << 30)
        log.exact = exact
        chunks = [rng.choice(rng.uniform(0.001, 0.1, 40), int(rng.integers(1, 60))) for _ in range(50)]
        for i, c in enumerate(chunks):
            log.add(c.tolist() if i % 4 == 0 else c, float(i % 3 + 1) * (7.0 if i % 2 else 1.0))
        parts = log._tail_merged(0)
        assert len(parts) == len({float(w) for w in log.w})
        v = np.concatenate(chunks)
        w = np.concatenate([np.full(len(c), float(i % 3 + 1) * (7.0 if i % 2 else 1.0)) for i, c in enumerate(chunks)])
        v = v if exact else log._grid(v)
        for u, ws in parts:
            assert np.all(np.diff(u) > 0)
        u, ws = ItlLog._merge(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        ur, inv = np.unique(v, return_inverse=True)
        assert np.array_equal(u, ur) and np.array_equal(ws, np.bincount(inv, weights=w, minlength=ur.size))
        log.arrays()
        assert np.array_equal(log.v[0], ur) and np.array_equal(log.w[0], ws)
    assert ItlLog()._tail_merged(0) == []


def test_decode_runs_through_finishes_match_step_by_step(timer):
    # many short outputs: most decode runs end in a finish (timed inside the run)
    wl = synthetic(150, isl=(16, 256), osl=(2, 12), rate=30.0, seed=9)
    fast = simulate(M, G, wl, timer=timer)
    slow = simulate(M, G, wl, timer=timer, fast=False)
    _same_runs(fast, slow)
    assert fast.itl_w.sum() == slow.itl_w.sum() == (wl.output - 1).sum()


def test_prefill_first_steps_carry_no_decodes(timer):
    """`mixed_prefill=False` (SGLang's default): while a prompt can be admitted or is unfinished, the iteration
    computes prompt tokens only; a closed loop of identical requests then stays in step (every request of a
    wave decodes together and finishes together), so each round arrives as one wave again."""
    c, isl, osl = 12, 1024, 20
    wl = Workload(np.zeros(3 * c), np.full(3 * c, isl), np.full(3 * c, osl), concurrency=c)
    run = simulate(M, G, wl, Policy("vllm", max_num_seqs=c, max_num_batched_tokens=4096, mixed_prefill=False),
                   timer=timer)
    d = run.requests
    assert d["finish_s"].iloc[:c].nunique() == 1  # the first wave finishes in one step
    assert (d["arrival_s"].iloc[c:2 * c] == d["finish_s"].iloc[0]).all()
    # the first wave: a stream of c x isl prompt tokens in 4096-token prefill steps, nothing else
    firsts = wave_first_token_times(timer, c, isl, 4096)
    assert d["first_token_s"].iloc[:c].to_numpy() == pytest.approx(firsts, rel=1e-9)
    mixed = simulate(M, G, wl, Policy("vllm", max_num_seqs=c, max_num_batched_tokens=4096), timer=timer).requests
    assert mixed["finish_s"].iloc[:c].nunique() > 1  # mixed steps let the early requests decode during the wave


def test_prefill_first_under_kv_pressure_still_finishes(timer):
    wl = synthetic(80, isl=(200, 1500), osl=(50, 300), concurrency=24, seed=7)
    run = simulate(M, G, wl, Policy("vllm", max_num_seqs=24, kv_blocks=700, mixed_prefill=False), timer=timer)
    assert run.requests["finish_s"].notna().all() and run.itl_w.sum() == (wl.output - 1).sum()


@pytest.mark.parametrize("model, gpu, dtype", [(M, G, "bf16"), ("gpt-oss-120b", "h200-sxm", "mxfp4")])
def test_disaggregation_hands_over_the_kv_the_decode_pool_holds(model, gpu, dtype):
    """The KV hand-over moves the prompt's KV as the one memory model holds it (kv_budget's request_bytes: whole
    blocks; gpt-oss's sliding layers at most their window), at `transfer_gbps`. A slow link makes the hand-over
    dominate a one-token decode, so finish - first token is the transfer plus one short step."""
    from steptime.serve import kv_budget

    wl = Workload(np.array([0.0, 50.0]), np.array([1000, 3000]), np.array([2, 2]))
    bw = 1e-3  # GB/s
    run = simulate_disagg(model, gpu, wl, transfer_gbps=bw, dtype=dtype)
    d = run.requests.sort_values("request")
    expect = kv_budget(model, gpu, dtype=dtype).request_bytes(wl.prompt) / (bw * 1e9)
    waited = (d["finish_s"] - d["first_token_s"]).to_numpy()
    assert np.all(waited >= expect) and np.all(waited < expect + 0.5)
    if model.startswith("gpt-oss"):  # the windowed layers keep 128 + one block, not the whole prompt
        b = kv_budget(model, gpu, dtype=dtype)
        assert expect[1] < 3008 * (b.token_bytes + b.window_token_bytes) / (bw * 1e9)


# ---- vLLM V1 automatic prefix caching under preemption (Policy.prefix_caching) -------------------------------
def _engine(timer, blocks, prompts, outputs, **kw):
    from steptime.serve import sim

    n = len(prompts)
    wl = Workload(np.zeros(n), np.asarray(prompts), np.asarray(outputs))
    return sim._Engine(timer, Policy("vllm", kv_blocks=blocks, prefix_caching=True, **kw), wl)


def test_prefix_cache_keeps_a_victims_full_blocks_and_evicts_its_tail_first(timer):
    e = _engine(timer, 100, [100, 100], [50, 50])
    assert e.free == 100 and list(map(list, e._lru)) == [[-1, 100]]
    e.free -= 60  # two requests take 60 blocks off the front
    e.held[:] = [30, 30]
    e.comp[0] = 470  # 29 full blocks (464 tokens) and a partial one
    e.ntok[0] = 471
    e._release_preempted(0)
    e.held[0] = 0
    assert e.free == 70 and e.cached[0] == 29 and e.comp[0] == 29 * 16
    assert list(map(list, e._lru)) == [[-1, 40], [-1, 1], [0, 29]]  # older free blocks, its partial block, its chain
    e.free -= 45  # 40 + 1 ordinary blocks first, then 4 of its (tail) blocks
    assert e.cached[0] == 25 and e.comp[0] == 25 * 16 and e.free == 25
    hit = e._take_cached(0)  # readmitted: its 25 surviving blocks come out where they sit
    assert hit == 25 and e.free == 0 and e.cached[0] == 0 and not e._lru
    with pytest.raises(ServeError, match="more blocks given out than are free"):
        e.free -= 1


def test_prefix_cache_resumes_at_most_all_tokens_but_one(timer):
    e = _engine(timer, 100, [64], [10])
    e.free -= 5
    e.held[0] = 5
    e.comp[0] = 64  # every token's KV computed, exactly four full blocks
    e.ntok[0] = 65
    e._release_preempted(0)
    assert e.cached[0] == 4 and e.comp[0] == 64  # (65 - 1) // 16 = 4 blocks: 64 tokens, one left to compute
    e.ntok[0] = 64
    e._resume_point(0)
    assert e.comp[0] == 48  # never all of them: the last token is always recomputed


def test_without_prefix_caching_a_victim_starts_over(timer):
    from steptime.serve import sim

    e = sim._Engine(timer, Policy("vllm", kv_blocks=100), Workload(np.zeros(1), np.array([100]), np.array([5])))
    e.free -= 10
    e.held[0], e.comp[0] = 10, 150
    e._release_preempted(0)
    assert e._lru is None and e.comp[0] == 0 and e.free == 100 and e._take_cached(0) == 0


def test_prefix_caching_recomputes_less_and_changes_nothing_without_preemption(timer):
    wl = synthetic(120, isl=(200, 1500), osl=(100, 600), rate=40.0, seed=5)
    off = simulate(M, G, wl, Policy("vllm", kv_blocks=900), timer=timer)
    on = simulate(M, G, wl, Policy("vllm", kv_blocks=900, prefix_caching=True), timer=timer)
    assert off.requests["preemptions"].sum() > 0 and on.requests["preemptions"].sum() > 0
    assert on.busy_s < off.busy_s  # less recompute
    _same_runs(on, simulate(M, G, wl, Policy("vllm", kv_blocks=900, prefix_caching=True), timer=timer, fast=False))
    roomy = synthetic(80, isl=(200, 1500), osl=(100, 600), rate=5.0, seed=6)
    a = simulate(M, G, roomy, Policy("vllm"), timer=timer)
    b = simulate(M, G, roomy, Policy("vllm", prefix_caching=True), timer=timer)
    assert a.requests["preemptions"].sum() == 0
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=0, atol=0)


@pytest.mark.parametrize("kv_blocks,seed", [(900, 5), (400, 6)])
def test_prefix_cache_free_queue_holds_exactly_the_free_blocks(timer, kv_blocks, seed):
    from steptime.serve import sim

    wl = synthetic(150, isl=(200, 1500), osl=(100, 600), rate=40.0, seed=seed)
    e = sim._Engine(timer, Policy("vllm", kv_blocks=kv_blocks, prefix_caching=True), wl)
    run = e.run()
    assert run.requests["preemptions"].sum() > 0
    assert sum(c for _, c in e._lru) == e.free == kv_blocks  # every block back, each counted once
    assert (e.cached == 0).all() or all(o == -1 or e.cached[o] > 0 for o, _ in e._lru)


def _split_constants(rel: float = 0.3):
    """The shipped constants with every kernel family's split-KV combine share set to `rel`."""
    from steptime.calibration import Constants

    c = Constants.default()
    lanes = {k: {**v, "attn_split_rel": rel} for k, v in c.get("attn_lane_factors").items()}
    return c.with_overrides({"attn_lane_factors": lanes, "attn_split_rel": rel})


def test_timer_pays_the_split_kv_combine_like_predict_steps():
    # 8 B at TP 1 on an H100: 8 KV heads, so <= 16 decode requests split the KV (streams < 132 SMs)
    c = _split_constants()
    t = StepTimer(M, G, constants=c)
    assert t.check() < 1e-12
    assert t._dsplit > 0.0
    # the floor gains the combine once the mean KV passes one tile, and not at 17 requests (136 streams)
    assert t.decode_attention1(4, 4 * 100.0) < t.decode_attention1(4, 4 * 300.0) - 0.9 * t._dsplit
    assert t._dfloor_n(17, 17 * 5000.0) == t._dfloor_n(17, 0.0)
    # a decode run that crosses the tile mid-way: list and vector forms agree, and each matches predict_steps
    full = t.decode_steps(4, 4 * 120.0, 20)
    assert t.decode_steps_list(4, 4 * 120.0, 20) == pytest.approx(full.tolist(), rel=1e-14)
    kvs = np.repeat(120.0 + np.arange(20)[:, None], 4, axis=1)
    ref = predict_steps(M, G, np.repeat(np.arange(20), 4), np.ones(80), kvs.ravel(), 20, constants=c)["total_ms"] * 1e-3
    assert full == pytest.approx(ref, rel=1e-12)
    assert full[-1] - full[0] > 0.9 * t._dsplit * t.L   # the combine appears between the first and last step


class _ConstTimer(StepTimer):
    """Every iteration takes 1 ms: step counts read directly off the clock."""

    def step_arrays(self, new, kv):
        return 1e-3

    def decode_steps(self, n, sum_kv0, k, kvs=None):
        return np.full(k, 1e-3)

    def decode_steps_list(self, n, sum_kv0, k, until=float("inf"), t0=0.0):
        out, t = [], t0
        for _ in range(k):
            out.append(1e-3)
            t += 1e-3
            if t >= until:
                break
        return out


@pytest.mark.parametrize("join", [1, 2, 3])
def test_closed_loop_successor_joins_join_steps_after_its_predecessor(join):
    """Policy.join_steps (engines.yaml schedule.join_steps): a closed-loop request released by a finish in step s
    joins step s + join_steps, not earlier, while the engine is busy; an idle engine takes it at once."""
    t = _ConstTimer(M, G, check=False)
    # two slots; request 0 (3 tokens out) finishes in step 3 while request 1 (50 out) keeps the engine busy
    wl = Workload(np.zeros(4), np.array([100, 100, 100, 100]), np.array([3, 50, 5, 5]), concurrency=2)
    pol = Policy("vllm", max_num_seqs=2, max_num_batched_tokens=4096, kv_blocks=1000, join_steps=join)
    for fast in (True, False):
        d = simulate(M, G, wl, pol, timer=t, fast=fast).requests
        assert d["finish_s"].iloc[0] == pytest.approx(3e-3)
        assert d["arrival_s"].iloc[2] == pytest.approx(3e-3)
        assert d["ttft_s"].iloc[2] == pytest.approx(join * 1e-3)  # steps 4 .. 3 + join, its own included
    # one slot: every finish leaves the engine idle, so the next request starts at once whatever join_steps is
    one = Workload(np.zeros(3), np.full(3, 100), np.full(3, 4), concurrency=1)
    d = simulate(M, G, one, Policy("vllm", max_num_seqs=1, kv_blocks=1000, join_steps=join), timer=t).requests
    assert d["ttft_s"].to_numpy() == pytest.approx([1e-3] * 3)


@pytest.mark.parametrize("join", [1, 2, 3])
def test_open_loop_arrival_joins_read_join_steps_after_the_engine_reads_it(join):
    """Policy.read_join_steps (engines.yaml schedule.read_join_steps): an open-loop request that arrives while the
    engine is busy is read at the next step boundary (Run read_s) and first joins the read_join_steps-th step after
    it; TTFT on the engine's clock (on_clock) is then exactly read_join_steps steps; an idle engine takes it at once."""
    t = _ConstTimer(M, G, check=False)
    # request 0 keeps the engine busy (50 tokens out); request 1 arrives mid-way through step 3 (2 ms .. 3 ms);
    # request 2 arrives long after everything finished
    wl = Workload(np.array([0.0, 2.5e-3, 1.0]), np.array([100, 100, 100]), np.array([50, 5, 5]))
    pol = Policy("vllm", max_num_seqs=2, max_num_batched_tokens=4096, kv_blocks=1000, read_join_steps=join)
    for fast in (True, False):
        run = simulate(M, G, wl, pol, timer=t, fast=fast)
        d = run.requests
        assert d["read_s"].iloc[1] == pytest.approx(3e-3)
        assert d["first_token_s"].iloc[1] == pytest.approx((3 + join) * 1e-3)  # steps 4 .. 3 + join
        assert d["ttft_s"].iloc[1] == pytest.approx((3 + join) * 1e-3 - 2.5e-3)  # the client's clock: from arrival
        e = on_clock(d, "engine")
        assert e["ttft_s"].iloc[1] == pytest.approx(join * 1e-3)
        assert e["e2e_s"].iloc[1] == pytest.approx(d["finish_s"].iloc[1] - 3e-3)
        assert e["tpot_s"].equals(d["tpot_s"])
        assert d["read_s"].iloc[2] == 1.0 and d["ttft_s"].iloc[2] == pytest.approx(1e-3)  # idle: at once
        assert on_clock(d, "client")["ttft_s"].equals(d["ttft_s"])


@pytest.mark.parametrize("join", [1, 2])
def test_open_loop_arrival_read_inside_a_decode_run_at_its_own_boundary(join):
    """A request that arrives while the engine is full is read at the first step boundary after its arrival, also
    when the fast path times the steps as one run (Engine._read_in_run): the same read_s and first token as the
    one-step-at-a-time reference; it joins once a slot frees (read long before: no extra wait)."""
    t = _ConstTimer(M, G, check=False)
    wl = Workload(np.array([0.0, 2.5e-3]), np.array([100, 100]), np.array([10, 5]))
    pol = Policy("vllm", max_num_seqs=1, max_num_batched_tokens=4096, kv_blocks=1000, read_join_steps=join)
    got = []
    for fast in (True, False):
        d = simulate(M, G, wl, pol, timer=t, fast=fast).requests
        assert d["read_s"].iloc[1] == pytest.approx(3e-3)
        assert d["finish_s"].iloc[0] == pytest.approx(10e-3)
        assert d["first_token_s"].iloc[1] == pytest.approx(11e-3)
        got.append(d[["read_s", "first_token_s", "finish_s"]].to_numpy())
    assert got[0] == pytest.approx(got[1])


@pytest.mark.parametrize("join", [1, 2, 3])
def test_a_finished_requests_slot_serves_the_read_join_steps_th_step_after_it(join):
    """read_join_steps > 1 (async / overlap loops, wave 28): a request finished in step s leaves the running set when
    the loop processes step s's output, after step s + 1 was scheduled, so its slot (and its blocks) serve step
    s + read_join_steps; a waiting request takes it then, on both paths; an engine with nothing else running gives
    it back at once (the test above: one slot)."""
    t = _ConstTimer(M, G, check=False)
    # request 0 (3 out) finishes in step 3 beside request 1 (50 out); request 2 waits for a slot from the start
    wl = Workload(np.zeros(3), np.array([100, 100, 100]), np.array([3, 50, 5]))
    slots = Policy("vllm", max_num_seqs=2, max_num_batched_tokens=4096, kv_blocks=1000, read_join_steps=join)
    # the same with the slot free but the blocks short: 17 blocks hold requests 0 and 1, not request 2 beside them
    blocks = Policy("vllm", max_num_seqs=8, max_num_batched_tokens=4096, kv_blocks=17, read_join_steps=join)
    # prefill first (SGLang): a held slot must not start a prefill-only step that then admits nobody
    first = Policy("vllm", max_num_seqs=2, max_num_batched_tokens=4096, kv_blocks=1000, read_join_steps=join,
                   mixed_prefill=False)
    for pol in (slots, blocks, first):
        got = []
        for fast in (True, False):
            d = simulate(M, G, wl, pol, timer=t, fast=fast).requests
            assert d["finish_s"].iloc[0] == pytest.approx(3e-3)
            assert d["first_token_s"].iloc[2] == pytest.approx((3 + join) * 1e-3)  # step 3 + join, not step 4
            assert d["preemptions"].sum() == 0
            got.append(d[["first_token_s", "finish_s"]].to_numpy())
        assert got[0] == pytest.approx(got[1])


def test_on_clock_refuses_an_unknown_clock_and_a_table_without_read_times():
    d = simulate(M, G, Workload(np.zeros(1), np.array([10]), np.array([2])), "vllm").requests
    with pytest.raises(ServeError, match="unknown latency clock"):
        on_clock(d, "wall")
    with pytest.raises(ServeError, match="read_s"):
        on_clock(d.drop(columns="read_s"), "engine")


def test_engine_policy_reads_the_profiles_read_join_steps():
    """vLLM's async scheduling (0.14 on: vllm, vllm-v1-unfused) and the TensorRT-LLM / SGLang overlap loops read
    then join two steps on; the synchronous 0.8-0.13 loop (vllm-v1-sync) one; a profile without the field one."""
    assert engine_policy("vllm").read_join_steps == 2
    assert engine_policy("vllm-v1-unfused").read_join_steps == 2
    assert engine_policy("trtllm").read_join_steps == 2
    assert engine_policy("sglang").read_join_steps == 2
    assert engine_policy("vllm-v1-sync").read_join_steps == 1
    assert engine_policy("vllm-v0").read_join_steps == 1
    assert engine_policy("vllm", read_join_steps=1).read_join_steps == 1
    with pytest.raises(ServeError, match="read_join_steps"):
        Policy("vllm", read_join_steps=0)


def test_engine_policy_reads_the_profiles_closed_loop_join_steps():
    """engine_policy (steptime plan / serve) carries the profile's closed-loop schedule.join_steps (wave 28): vLLM >=
    0.14, TensorRT-LLM and SGLang 3, vLLM 0.8-0.13 2, a profile without the field (vLLM V0) the next step; an
    explicit keyword wins. In a closed loop the successor of a request finished while the engine is busy then first
    joins that many steps later (the simulator's gate, test above)."""
    assert engine_policy("vllm").join_steps == 3
    assert engine_policy("trtllm").join_steps == 3
    assert engine_policy("sglang").join_steps == 3
    assert engine_policy("vllm-v1-sync").join_steps == 2
    assert engine_policy("vllm-v0").join_steps == 1
    assert engine_policy("vllm", join_steps=1).join_steps == 1
    t = _ConstTimer(M, G, check=False)
    wl = Workload(np.zeros(4), np.array([100, 100, 100, 100]), np.array([3, 50, 5, 5]), concurrency=2)
    for eng, join in (("vllm", 3), ("vllm-v1-sync", 2), ("vllm-v0", 1)):
        pol = engine_policy(eng, max_num_seqs=2, max_num_batched_tokens=4096, kv_blocks=1000, prefix_caching=False)
        d = simulate(M, G, wl, pol, timer=t).requests
        assert d["ttft_s"].iloc[2] == pytest.approx(join * 1e-3), eng


def test_join_steps_must_be_a_whole_number_of_at_least_one():
    with pytest.raises(ServeError, match="join_steps"):
        Policy("vllm", join_steps=0)


def test_timer_bounds_an_fp8_decode_stream_by_the_fp8_read_rate():
    from steptime.calibration import Constants
    from steptime.terms import attention

    capped = Constants.default().with_overrides({"attn_fp8_bpc": 9.0, "attn_lane_factors": {}})
    free = Constants.default().with_overrides({"attn_lane_factors": {}})
    t = StepTimer(M, G, constants=capped, kv_dtype="fp8")
    assert t.check() < 1e-12
    n, kv = 64, np.full(64, 8000.0)
    ref = attention.attention_time(np.ones(n), kv, t.heads, t.kv_heads, t.head_dim, t.gpu, capped, kv_dtype="fp8",
                                   group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
    assert t.decode_attention1(n, float(kv.sum())) == pytest.approx(ref, rel=1e-12)
    assert t.decode_attention(np.array([float(n)]), np.array([kv.sum()]))[0] == pytest.approx(ref, rel=1e-12)
    assert t.decode_steps_list(n, float(kv.sum()), 2)[1] == pytest.approx(t.decode_steps(n, float(kv.sum()), 2)[1])
    # slower than the same stream without the bound; a bf16 cache is not bounded
    assert t.decode_attention1(n, float(kv.sum())) > 1.2 * StepTimer(M, G, constants=free, kv_dtype="fp8") \
        .decode_attention1(n, float(kv.sum()))
    assert StepTimer(M, G, constants=capped).decode_attention1(n, float(kv.sum())) == pytest.approx(
        StepTimer(M, G, constants=free).decode_attention1(n, float(kv.sum())), rel=1e-15)


def test_timer_pays_the_per_split_cost_like_predict_steps():
    """An fa2 GPU with attn_split_us: the timer's decode floor carries FlashAttention-2's per-split cost, the
    list and vector decode runs agree, and `check` holds it to predict_steps."""
    from steptime.calibration import Constants

    c0 = Constants.default()
    lanes = {k: {**v, "attn_split_us": 0.2} for k, v in c0.get("attn_lane_factors").items()}
    c = c0.with_overrides({"attn_lane_factors": lanes, "attn_split_us": 0.2})
    t = StepTimer(M, "l40s", constants=c)
    off = {k: {**v, "attn_split_us": 0.0} for k, v in c0.get("attn_lane_factors").items()}
    base = StepTimer(M, "l40s", constants=c0.with_overrides({"attn_lane_factors": off, "attn_split_us": 0.0}))
    assert t.check() < 1e-12
    assert t._dsplit_us == 0.2 and base._dsplit_us == 0.0
    # one request: 16 splits at 2,047 cached tokens (FlashAttention-2's heuristic on 142 SMs)
    assert t.decode_attention1(1, 2047.0) - base.decode_attention1(1, 2047.0) == pytest.approx(0.2e-6 * 16, rel=1e-9)
    full = t.decode_steps(2, 2 * 1000.0, 12)
    assert t.decode_steps_list(2, 2 * 1000.0, 12) == pytest.approx(full.tolist(), rel=1e-14)
    assert float(t.decode_attention(np.array([1.0]), np.array([2047.0]))[0]) == pytest.approx(
        t.decode_attention1(1, 2047.0), rel=1e-12)


def test_timer_prices_an_unswapped_fa2_decode_as_the_step_does():
    """An MHA model on an FA2 GPU (H_q == H_kv: attention.unswapped) streams each (request, KV head) unsplit at
    attn_stream_gbs with the lower floor; the timer's fast paths equal attention_time (wave 31, helper ampa)."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    on = Constants.default().with_overrides({"attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1, "attn_lane_factors": {}})
    off = Constants.default().with_overrides({"attn_lane_factors": {}})
    t = StepTimer("llama-2-7b", "a100-sxm", constants=on)
    assert t.check() < 1e-12 and t._unsw
    for n, kv in ((1, 16000.0), (8, 4000.0), (200, 500.0)):
        kvs = np.full(n, kv)
        ref = attention.attention_time(np.ones(n), kvs, t.heads, t.kv_heads, t.head_dim, t.gpu, on,
                                       group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
        assert t.decode_attention1(n, float(kvs.sum())) == pytest.approx(ref, rel=1e-12)
        assert t.decode_attention(np.array([float(n)]), np.array([kvs.sum()]))[0] == pytest.approx(ref, rel=1e-12)
        assert t.decode_steps_list(n, float(kvs.sum()), 3)[2] == pytest.approx(t.decode_steps(n, float(kvs.sum()), 3)[2])
    # one request's 32 long streams are slower than the split streams the law priced before; GQA is not touched
    assert t.decode_attention1(1, 16000.0) > 1.5 * StepTimer("llama-2-7b", "a100-sxm", constants=off).decode_attention1(1, 16000.0)
    assert not StepTimer(M, "a100-sxm", constants=on)._unsw
    assert StepTimer(M, "a100-sxm", constants=on).decode_attention1(8, 8000.0) == pytest.approx(
        StepTimer(M, "a100-sxm", constants=off).decode_attention1(8, 8000.0), rel=1e-15)


def test_timer_prices_the_unswapped_stream_from_its_clocks_as_the_step_does():
    """attn_stream_clk (wave 37, fa2dec): the timer's unswapped stream reads attention.stream_rate, the datasheet rate
    of the split-KV kernel's block, and its fast paths equal attention_time (fails before it: the timer read
    attn_stream_gbs alone, so a lane with the clocks had no stream bound in the timer and `check` failed)."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    on = Constants.default().with_overrides({"attn_stream_gbs": 0.0, "attn_stream_clk": 2000.0,
                                             "attn_noswap_rel": 0.1, "attn_lane_factors": {}})
    for gpu in ("a100-sxm", "l40s"):
        t = StepTimer("llama-2-7b", gpu, constants=on)
        assert t.check() < 1e-12 and t._unsw
        assert t._srate == pytest.approx(float(attention.stream_rate(t.gpu, t.fc)) * t.kv_heads, rel=1e-15)
        for n, kv in ((1, 16000.0), (8, 4000.0), (200, 500.0)):
            kvs = np.full(n, kv)
            ref = attention.attention_time(np.ones(n), kvs, t.heads, t.kv_heads, t.head_dim, t.gpu, on,
                                           group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
            assert t.decode_attention1(n, float(kvs.sum())) == pytest.approx(ref, rel=1e-12)


def test_timer_leaves_each_unswapped_streams_first_block_to_the_floor_as_the_step_does():
    """On the clocks law the unswapped stream's bound is affine in the bytes (each stream's first 64 KiB block is the
    floor's: attention.stream_first_bytes); the timer's scalar, array and multi-step paths equal attention_time across
    the switch from the HBM stream to the stream bound (wave 37, fa2v; fails on a timer that charges every byte)."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    on = Constants.default().with_overrides({"attn_stream_gbs": 0.0, "attn_stream_clk": 2000.0,
                                             "attn_noswap_rel": 0.1, "attn_lane_factors": {}})
    t = StepTimer("llama-2-7b", "a100-sxm", constants=on)
    assert t._soff == 65536.0 * t.kv_heads and t.check() < 1e-12
    assert StepTimer(M, "a100-sxm", constants=on)._soff == 0.0  # GQA: no unswapped stream
    gbs = Constants.default().with_overrides({"attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1, "attn_lane_factors": {}})
    assert StepTimer("llama-2-7b", "a100-sxm", constants=gbs)._soff == 0.0  # the GB/s law charges every byte

    def ref(n, kv):
        return attention.attention_time(np.ones(n), np.full(n, kv), t.heads, t.kv_heads, t.head_dim, t.gpu, on,
                                        group=np.zeros(n, dtype=int), n_groups=1)["t"][0]

    for n, kv in ((1, 20.0), (1, 127.0), (1, 200.0), (1, 16000.0), (8, 100.0), (8, 4000.0), (200, 500.0)):
        assert t.decode_attention1(n, n * kv) == pytest.approx(ref(n, kv), rel=1e-12)
        assert t.decode_attention(np.array([float(n)]), np.array([n * kv]))[0] == pytest.approx(ref(n, kv), rel=1e-12)
    # 2 requests from 60 to 160 tokens: the first steps read one block a stream, the later ones more
    full = t.decode_steps(2, 2 * 60.0, 101)
    assert t.decode_steps_list(2, 2 * 60.0, 101) == pytest.approx(full.tolist(), rel=1e-14)
    steps = [t.step_arrays(np.ones(2), np.full(2, 60.0 + j)) for j in range(101)]
    assert full.tolist() == pytest.approx(steps, rel=1e-12)
    # one request of H_kv streams at 16k tokens: the stream bound, less the first block of each stream
    nb = t._b0 + t._b1 * 16000.0
    bound = (nb - t.kv_heads * 65536.0) / (t.kv_heads * float(attention.stream_rate(t.gpu, t.fc)))
    assert t._tmem(1, nb) == pytest.approx(bound, rel=1e-12) and bound > nb * t._dmem


def test_timer_with_per_split_cost_and_unswapped_stream_together_equals_the_library():
    """Both wave-31 fa2 laws on at once (adaa's per-split cost, ampa's unswapped MHA stream): an unswapped decode
    never splits, so it pays no per-split cost; a GQA decode pays it; the timer equals attention_time either way."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    both = Constants.default().with_overrides({"attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1, "attn_split_us": 0.2,
                                               "attn_lane_factors": {}})
    split_only = Constants.default().with_overrides({"attn_split_us": 0.2, "attn_lane_factors": {}})
    stream_only = Constants.default().with_overrides({"attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1,
                                                      "attn_lane_factors": {}})
    for model in ("llama-2-7b", M):
        t = StepTimer(model, "a100-sxm", constants=both)
        assert t.check() < 1e-12
        for n, kv in ((1, 16000.0), (8, 4000.0), (60, 900.0)):
            kvs = np.full(n, kv)
            ref = attention.attention_time(np.ones(n), kvs, t.heads, t.kv_heads, t.head_dim, t.gpu, both,
                                           group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
            cells = attention.attention_cells(n, 1, kv, t.heads, t.kv_heads, t.head_dim, t.gpu, both)["t"]
            assert t.decode_attention1(n, float(kvs.sum())) == pytest.approx(ref, rel=1e-12)
            assert float(cells) == pytest.approx(ref, rel=1e-9)
    mha = StepTimer("llama-2-7b", "a100-sxm", constants=both)
    assert mha._unsw and mha._dsplit_us == 0.0
    assert mha.decode_attention1(1, 16000.0) == pytest.approx(
        StepTimer("llama-2-7b", "a100-sxm", constants=stream_only).decode_attention1(1, 16000.0), rel=1e-15)
    gqa = StepTimer(M, "a100-sxm", constants=both)
    assert gqa.decode_attention1(1, 16000.0) == pytest.approx(
        StepTimer(M, "a100-sxm", constants=split_only).decode_attention1(1, 16000.0), rel=1e-15)


def test_timer_bounds_a_few_stream_fa3_decode_by_its_split_ctas_like_the_step():
    """A Hopper GPU with attn_cta_gbs (FA3's split CTAs under vLLM, attention.split_ctas): at TP 8 a 70B decode of one
    request reads its one KV head's long KV through 16 CTAs, slower than the HBM stream; the timer's scalar, vector
    and list paths equal attention_time and `check` holds them to predict_steps; many streams price as before."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    c0 = Constants.default()
    lanes = {k: ({**v, "attn_cta_gbs": 100.0} if k == "fa3" else v) for k, v in c0.get("attn_lane_factors").items()}
    on = c0.with_overrides({"attn_lane_factors": lanes})
    off = c0.with_overrides({"attn_lane_factors": {k: {**v, "attn_cta_gbs": 0.0} for k, v in lanes.items()}})
    t = StepTimer("llama-3.1-70b", "h100-sxm", tp=8, constants=on)
    base = StepTimer("llama-3.1-70b", "h100-sxm", tp=8, constants=off)
    assert t.check() < 1e-12 and t.kv_heads == 1 and t._crate == 100e9 and base._crate == 0.0
    for n, kv in ((1, 65535.0), (3, 30000.0), (300, 400.0)):
        kvs = np.full(n, kv)
        ref = attention.attention_time(np.ones(n), kvs, t.heads, t.kv_heads, t.head_dim, t.gpu, on,
                                       group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
        assert t.decode_attention1(n, float(kvs.sum())) == pytest.approx(ref, rel=1e-12)
        assert t.decode_attention(np.array([float(n)]), np.array([kvs.sum()]))[0] == pytest.approx(ref, rel=1e-12)
        assert t.decode_steps_list(n, float(kvs.sum()), 3) == pytest.approx(t.decode_steps(n, float(kvs.sum()), 3).tolist(),
                                                                           rel=1e-14)
    assert t.decode_attention1(1, 65535.0) > 1.2 * base.decode_attention1(1, 65535.0)
    assert t.decode_attention1(300, 300 * 400.0) == base.decode_attention1(300, 300 * 400.0)


def test_timer_pays_trtllm_gens_per_split_cost_like_the_step():
    """A Blackwell GPU with attn_split_us and attn_split_rule 1: the timer's decode floor carries TRT-LLM-gen's CTAs
    per KV head (attention.trtllm_split_count) x the per-split cost, its paths agree, and `check` holds them."""
    from steptime.calibration import Constants
    from steptime.terms import attention

    c0 = Constants.default()
    lanes = {k: ({**v, "attn_split_us": 0.1, "attn_split_rule": 1.0} if k == "trtllm" else v)
             for k, v in c0.get("attn_lane_factors").items()}
    on = c0.with_overrides({"attn_lane_factors": lanes})
    t = StepTimer("llama-3.1-70b", "b200", tp=8, constants=on)
    assert t.check() < 1e-12 and t._dsplit_us == 0.1
    for n, kv in ((1, 65535.0), (2, 30000.0), (64, 2000.0)):
        kvs = np.full(n, kv)
        ref = attention.attention_time(np.ones(n), kvs, t.heads, t.kv_heads, t.head_dim, t.gpu, on,
                                       group=np.zeros(n, dtype=int), n_groups=1)["t"][0]
        assert t.decode_attention1(n, float(kvs.sum())) == pytest.approx(ref, rel=1e-12)
        assert t.decode_steps_list(n, float(kvs.sum()), 3) == pytest.approx(t.decode_steps(n, float(kvs.sum()), 3).tolist(),
                                                                           rel=1e-14)
    # one request x one KV head at 64k tokens: 148 CTAs (the SMs), 0.1 us each
    off = {k: {**v, "attn_split_us": 0.0} for k, v in lanes.items()}
    base = StepTimer("llama-3.1-70b", "b200", tp=8, constants=c0.with_overrides({"attn_lane_factors": off}))
    assert t.decode_attention1(1, 65535.0) - base.decode_attention1(1, 65535.0) == pytest.approx(0.1e-6 * 148, rel=1e-9)
