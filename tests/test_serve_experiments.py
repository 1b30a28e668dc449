"""Part-2 serving integrations (simulated): E2.9 chunk sizing."""

import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments import serving
from steptime.serve import StepTimer
from distserve_table import coefficients  # tests/distserve_table.py

GRID = [128, 256, 512, 1024, 2048]


@pytest.fixture(scope="module")
def timer():
    return StepTimer("llama-3.1-8b", "h100-sxm")


def test_pick_chunk_honours_the_predicted_slo_and_tightens_with_it(timer):
    picks = []
    # the tightest SLO is just above the smallest chunk's predicted mixed step (only that chunk meets it), read
    # from the predictor itself so the test does not depend on today's constants
    t_min = serving.pick_chunk(timer, 32, 1000, 200, 1.0, GRID)["table"]["t_mix_s"].min()
    for slo in (1.001 * t_min, 0.02, 0.04, 1.0):
        pk = serving.pick_chunk(timer, 32, 1000, 200, slo, GRID)
        row = pk["table"].set_index("chunk").loc[pk["chunk"]]
        assert row["t_mix_s"] <= slo or not pk["table"]["meets"].any()
        picks.append(pk["chunk"])
    assert picks == sorted(picks) and picks[0] < picks[-1]


def test_pick_chunk_predicted_mixed_step_grows_with_chunk(timer):
    t = serving.pick_chunk(timer, 32, 1000, 200, 1.0, GRID)["table"]["t_mix_s"].to_numpy()
    assert np.all(np.diff(t) > 0)


def _traces(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"trace": "splitwise_conv", "request_id": np.arange(n), "arrived_at_s": np.arange(n) * 0.1,
                         "num_prefill_tokens": rng.integers(64, 2048, n),
                         "num_decode_tokens": rng.integers(16, 300, n)})


def test_e2_9_document_scores_every_choice_in_the_simulator():
    r = serving.chunk_sizing(_traces(), models=["llama-3.1-8b"], gpus=["h100-sxm"], trace="splitwise_conv", n=200,
                     concurrency=16, grid=GRID, slo_multiples=[2, 5], targets={"pick_meets_slo_fraction": 1.0,
                                                                                "pick_vs_oracle_min": 0.95,
                                                                                "pick_equals_oracle_fraction": 1.0})
    df = r["cases"]
    assert len(df) == 2 and set(df["pick"]) <= set(GRID)
    # the oracle is the highest-throughput chunk of the sweep that meets the SLO
    sw = r["sweeps"]["llama-3.1-8b|h100-sxm"]
    for row in df.itertuples():
        ok = sw[sw["tbt_p99_s"] <= row.slo_tbt_s]
        assert row.oracle_sweep_rule == ok.loc[ok["throughput_tok_s"].idxmax(), "chunk"]
        # the oracle is the planner's pick (ranked by cost at one GPU): a chunk of the sweep that meets the SLO; where
        # it differs from the sweep rule, the result's claim counts it (chunk_sizing_claims)
        assert row.oracle in set(ok["chunk"])
        # no pick that meets the SLO beats the sweep's best (the planner's oracle ranks by cost, so a near tie with it
        # can go either way by a hair)
        assert row.pick_tok_s <= ok["throughput_tok_s"].max() + 1e-9 or not row.pick_meets
    doc = serving.chunk_sizing_claims(r)
    assert doc["metrics"]["label"].startswith("simulated")
    assert all("met" in c for c in doc["claims"][:2])
    # a larger chunk never lowers the simulated p99 time between tokens
    assert np.all(np.diff(sw["tbt_p99_s"]) > -1e-9)


# ---- E2.4 ---------------------------------------------------------------------------------
def test_distserve_timer_is_its_formula_and_refuses_mixed_steps():
    from steptime.errors import ServeError
    from steptime.serve.distserve import DistServeTimer

    t = DistServeTimer(coefficients(), "opt-13b", "a100-sxm")
    assert t.step_arrays([300, 200], [0, 0]) == pytest.approx((18.0 + 0.1 * 500 + 7e-6 * (300**2 + 200**2)) * 1e-3)
    assert t.step_arrays([1] * 4, [99] * 4) == pytest.approx((20.0 + 6e-4 * 400 + 0.04 * 4) * 1e-3)
    assert t.step_arrays([1] * 100, [9] * 100) == pytest.approx((7.0 + 6e-4 * 1000 + 0.16 * 100) * 1e-3)
    assert np.allclose(t.decode_steps(4, 396, 3), [t.step_arrays([1] * 4, [99 + j] * 4) for j in range(3)])
    with pytest.raises(ServeError, match="no mixed"):
        t.step_arrays([1, 300], [50, 0])
    with pytest.raises(ServeError, match="no fitted"):
        DistServeTimer(coefficients(), "opt-13b", "a100-sxm", tp=2)
    with pytest.raises(ServeError, match="tp must be an integer, got 1.5"):  # not truncated to tp=1
        DistServeTimer(coefficients(), "opt-13b", "a100-sxm", tp=1.5)


def test_placements_fit_the_gpus():
    assert serving.placements(4, 1) == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1)]
    assert all((p + d) * 2 <= 8 for p, d in serving.placements(8, 2))


def test_reserved_decode_pool_never_preempts():
    from steptime.serve import Policy, simulate, synthetic

    wl = synthetic(150, isl=(200, 1500), osl=(100, 600), rate=40.0, seed=5)
    run = simulate("llama-3.1-8b", "h100-sxm", wl, Policy("vllm", kv_blocks=900, reserve_full=True))
    assert run.requests["preemptions"].sum() == 0
    assert run.itl_w.sum() == (wl.output - 1).sum()


def test_e2_4_small_case():
    mt = pd.DataFrame({"gpu": ["a100-sxm"], "model": ["opt-13b"], "model_source": ["facebook/opt-13b"], "tp": [1],
                       "pp": [1], "max_num_tokens": [66144]})
    tr = _traces(300)
    r = serving.pool_sizing(tr, coefficients(), mt, cases=[{"model": "opt-13b", "tp": 1, "total_gpus": 3, "slo_ttft_s": 0.5,
                                                       "slo_tpot_s": 0.1, "rates_per_gpu": [0.5, 1, 2, 4]}],
                     gpu="a100-sxm", trace="splitwise_conv", n=80, seed=0, targets={"goodput_ratio_min": 0.9})
    c = r["cases"][0]
    assert set(c["goodput"]["steptime"]) == {"1p1d", "1p2d", "2p1d"}
    for name in ("steptime", "distserve"):
        g = c["goodput"][name]
        assert g[c["choice"][name]] == max(g.values())
        # the scan stops at the first rate that misses the attainment target
        for scan in c["scans"][name].values():
            assert all(s["attainment"] >= 0.9 for s in scan[:-1])
    doc = serving.pool_sizing_claims(r)
    assert len(doc["claims"]) == 2 and "round 1" in doc["metrics"]["round1_step_parity"]


# ---- E2.10 --------------------------------------------------------------------------------
def _measured_run(n=60, moe=False, run="X_Llama"):
    rng = np.random.default_rng(3)
    arr = np.sort(rng.uniform(0, 20, n))
    inp, out = rng.integers(50, 1500, n), rng.integers(5, 300, n)
    ttft = rng.uniform(0.05, 0.5, n)
    tpot = rng.uniform(0.01, 0.03, n)
    return pd.DataFrame({"run": run, "gpu": "rtx-pro-6000", "model": "llama-3.1-8b", "tp": 1, "moe": moe,
                         "engine_version": "0.19.0", "max_num_seqs": 256, "max_num_batched_tokens": 2048,
                         "request_id": [f"r{i}" for i in range(n)], "arrival_s": arr + 5.0, "input_tokens": inp,
                         "output_tokens": out, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (out - 1)})


def test_replay_keeps_arrivals_lengths_and_request_ids():
    rows = _measured_run().sample(frac=1.0, random_state=0)  # order on disk must not matter
    sim, run = serving.replay_run(rows)
    m = rows.set_index("request_id").loc[sim["request_id"]]
    assert np.allclose(sim["arrival_s"], m["arrival_s"] - rows["arrival_s"].min())
    assert (sim["prompt_tokens"].to_numpy() == m["input_tokens"].to_numpy()).all()
    assert (sim["output_tokens"].to_numpy() == m["output_tokens"].to_numpy()).all()
    assert run.policy["max_num_batched_tokens"] == 2048


def test_replay_joins_as_the_profile_says_and_reports_latencies_on_the_runs_engine_clock():
    """replay_run: the policy's read_join_steps is the engine profile's (vllm: 2, async scheduling; vllm-v1-sync: 1);
    TTFT and e2e are on the LLMServingSim runs' clock (SERVINGSIM_LATENCY_CLOCK, the engine's: from read_s), TPOT on
    either; the client clock is the Run's own."""
    rows = _measured_run()
    sim, run = serving.replay_run(rows)
    assert run.policy["read_join_steps"] == 2
    assert np.allclose(sim["ttft_s"], sim["first_token_s"] - sim["read_s"])
    assert np.allclose(sim["e2e_s"], sim["finish_s"] - sim["read_s"])
    assert (sim["read_s"] >= sim["arrival_s"]).all() and (sim["read_s"] > sim["arrival_s"]).any()
    client, _ = serving.replay_run(rows, clock="client")
    assert np.allclose(client["ttft_s"], client["first_token_s"] - client["arrival_s"])
    assert np.allclose(client["tpot_s"], sim["tpot_s"], equal_nan=True)
    _, sync = serving.replay_run(rows, engine="vllm-v1-sync")
    assert sync.policy["read_join_steps"] == 1
    with pytest.raises(Exception, match="unknown latency clock"):
        serving.replay_run(rows, clock="wall")


def test_replay_resumes_preempted_requests_from_the_prefix_cache_as_vllm_0_19_does():
    rows = _measured_run()
    _, on = serving.replay_run(rows)
    _, off = serving.replay_run(rows, prefix_caching=False)
    assert serving.replay.RUN_PREFIX_CACHING is True
    assert on.policy["prefix_caching"] is True and off.policy["prefix_caching"] is False


def test_e2_10_scores_each_run_and_skips_moe():
    t = {"tpot_s_p50_abs_error_max": 0.1, "ttft_s_p50_abs_error_max": 0.2, "tpot_s_p90_abs_error_max": 0.2,
         "ttft_s_p90_abs_error_max": 0.3}
    req = pd.concat([_measured_run(), _measured_run(moe=True, run="Y_MoE")])
    r = serving.replay_runs(req, targets=t)
    assert list(r["runs"]["run"]) == ["X_Llama"] and r["skipped"][0]["run"] == "Y_MoE"
    row = r["runs"].iloc[0]
    assert row["tpot_s_p50_error"] == pytest.approx(row["tpot_s_p50_simulated"] / row["tpot_s_p50_measured"] - 1)
    doc = serving.replay_claims(r)
    assert len(doc["claims"]) == 4
    for c in doc["claims"]:
        assert c["met"] == (abs(c["value"]) <= c["target"])


def test_replay_uses_the_kv_block_count_the_run_recorded():
    rows = _measured_run()
    _, free = serving.replay_run(rows)
    _, rec = serving.replay_run(rows.assign(kv_blocks_recorded=123, kv_block_size_recorded=32))
    assert rec.kv_blocks == 123 and rec.policy["block_size"] == 32
    _, none = serving.replay_run(rows.assign(kv_blocks_recorded=-1, kv_block_size_recorded=-1))
    assert none.kv_blocks == free.kv_blocks  # not recorded: the memory model's count


def test_e2_10_puts_the_peer_simulator_beside_steptime():
    t = {"tpot_s_p50_abs_error_max": 0.1, "ttft_s_p50_abs_error_max": 0.2, "tpot_s_p90_abs_error_max": 0.2,
         "ttft_s_p90_abs_error_max": 0.3}
    req = _measured_run()
    peer = req[["run", "request_id", "ttft_s", "tpot_s", "e2e_s"]].assign(tpot_s=req["tpot_s"] * 1.1)
    r = serving.replay_runs(req, targets=t, peer=peer)
    row = r["runs"].iloc[0]
    assert row["tpot_s_p50_llmservingsim_error"] == pytest.approx(0.1)
    assert row["e2e_s_p50_llmservingsim_error"] == pytest.approx(0.0)
    doc = serving.replay_claims(r)
    side = [c for c in doc["claims"] if "side by side" in c["claim"]]
    assert len(side) == 1 and side[0]["value"]["llmservingsim"]["tpot_p50"] == pytest.approx(0.1)
    assert "met" not in side[0]


def test_e2_10_replays_a_gpu_host_with_its_own_engine_profile_and_discloses_it():
    """engine_by_gpu: the runs of a host without GPU peer-to-peer are replayed with vllm-no-p2p (slower TP 2 steps:
    every all-reduce through host memory), the others with the default; the choice travels into the result."""
    t = {"tpot_s_p50_abs_error_max": 0.1, "ttft_s_p50_abs_error_max": 0.2, "tpot_s_p90_abs_error_max": 0.2,
         "ttft_s_p90_abs_error_max": 0.3}
    a = _measured_run(run="A_tp2").assign(tp=2, gpu="h100-sxm")
    b = _measured_run(run="B_tp2").assign(tp=2)
    req = pd.concat([a, b])
    base = serving.replay_runs(req, targets=t)["runs"].set_index("run")
    r = serving.replay_runs(req, targets=t, engine_by_gpu={"rtx-pro-6000": "vllm-no-p2p"}, disclosed="chosen after")
    rows = r["runs"].set_index("run")
    assert rows.loc["A_tp2", "engine_profile"] == "vllm" and rows.loc["B_tp2", "engine_profile"] == "vllm-no-p2p"
    assert rows.loc["A_tp2", "tpot_s_p50_simulated"] == base.loc["A_tp2", "tpot_s_p50_simulated"]
    assert rows.loc["B_tp2", "tpot_s_p50_simulated"] > base.loc["B_tp2", "tpot_s_p50_simulated"]
    doc = serving.replay_claims(r)
    assert doc["metrics"]["disclosed"] == "chosen after " + serving.replay.ASYNC_JOIN_DISCLOSED
    assert doc["metrics"]["latency_clock"] == "engine"
    assert doc["metrics"]["engine_by_gpu"] == {"rtx-pro-6000": "vllm-no-p2p"}
    with pytest.raises(ValueError, match="not in the data"):
        serving.replay_runs(req, targets=t, engine_by_gpu={"b200": "vllm-no-p2p"})


# ---- E2.3 ---------------------------------------------------------------------------------
def test_deadline_queue_serves_tight_deadlines_first():
    from steptime.serve import ScalarEstimator, Workload, policy, simulate

    # two requests waiting behind a long one; the later arrival has the earlier deadline
    wl = Workload([0.0, 0.001, 0.002], [4000, 1000, 1000], [50, 5, 5])
    pol = policy("vllm", max_num_batched_tokens=1024, max_num_seqs=1)
    dl = np.array([100.0, 50.0, 1.0])
    fifo = simulate("llama-3.1-8b", "h100-sxm", wl, pol)
    edf = simulate("llama-3.1-8b", "h100-sxm", wl, pol, deadline=dl, estimator=ScalarEstimator(0.0))
    assert fifo.requests["first_token_s"][1] < fifo.requests["first_token_s"][2]
    assert edf.requests["first_token_s"][2] < edf.requests["first_token_s"][1]
    # an estimator that calls every queued request late sends them all back: order is deadline order again
    late = simulate("llama-3.1-8b", "h100-sxm", wl, pol, deadline=dl, estimator=ScalarEstimator(1e6))
    assert late.requests["first_token_s"][2] < late.requests["first_token_s"][1]
    assert np.isfinite(edf.requests["first_token_estimate_s"][1:]).all()


def test_a_late_request_does_not_make_the_ones_behind_it_late():
    from steptime.serve import ScalarEstimator, StepEstimator
    from steptime.serve.queueing import deadline_split

    # deadline order: a request already past its deadline, then two that meet theirs only if it goes to the back
    est, late = deadline_split(ScalarEstimator(1.0), np.array([500, 500, 500]), np.array([0.5, 1.5, 2.5]), 0.0, 0)
    assert late.tolist() == [True, False, False]
    assert est.tolist() == [1.0, 1.0, 2.0]  # the late one's second is not counted ahead of the others
    st = StepEstimator(StepTimer("llama-3.1-8b", "h100-sxm"), 1024, 500)
    t = st.step_time(4)
    est, late = deadline_split(st, np.array([5000, 500, 500]), np.array([t, 1.5 * t, 1.5 * t]), 0.0, 4)
    assert late.tolist() == [True, False, False]
    assert np.allclose(est, [5 * t, t, t])  # 5000 tokens are 5 steps of 1020; 500 + 500 fit one step
    # a queue with no late request: the split's estimates are the estimator's own over the whole queue
    tok = np.array([500, 500, 100, 2000])
    est, late = deadline_split(st, tok, np.full(4, 1e9), 10.0, 4, ahead=7)
    assert not late.any() and np.allclose(est, st(tok, 10.0, 4, ahead=7))


def test_deadline_queue_serves_feasible_requests_ahead_of_a_late_one():
    from steptime.errors import ServeError
    from steptime.serve import ScalarEstimator, Workload, policy, simulate

    # one running request; queued: a big one whose deadline has passed, then two small ones that can still make it
    wl = Workload([0.0, 0.001, 0.002, 0.003], [2000, 8000, 500, 500], [30, 5, 5, 5])
    pol = policy("vllm", max_num_batched_tokens=2048, max_num_seqs=1)
    dl = np.array([100.0, 0.002, 1.5, 2.5])
    r = simulate("llama-3.1-8b", "h100-sxm", wl, pol, deadline=dl, estimator=ScalarEstimator(1.0)).requests
    f = r["first_token_s"].to_numpy()
    assert f[2] < f[1] and f[3] < f[1]  # the late one does not take the two feasible ones to the back with it
    assert (f[2:] <= dl[2:]).all()
    with pytest.raises(ServeError, match="units"):
        simulate("llama-3.1-8b", "h100-sxm", wl, pol, deadline=dl, estimator=lambda tok, now, n, ahead=0: now + tok)


def test_a_resumed_request_keeps_the_front_of_the_deadline_queue():
    from types import SimpleNamespace
    from steptime.serve import ScalarEstimator
    from steptime.serve.sim import _Engine

    # request 0 was preempted after its first token (resumed); 1 and 2 wait for theirs
    eng = SimpleNamespace(first=np.array([0.5, np.nan, np.nan]), deadline=np.array([0.4, 5.0, 4.0]),
                          ntok=np.array([900, 100, 100]), comp=np.zeros(3, dtype=np.int64),
                          first_est=np.full(3, np.nan), estimator=ScalarEstimator(1.0))
    order = _Engine._deadline_order(eng, [1, 2, 0], 0.5, np.array([], dtype=np.int64))
    assert list(order) == [0, 2, 1]  # past its (met) deadline, yet at the front; the others in deadline order
    assert eng.first_est[2] == 2.5  # the resumed one is served ahead of it, so counted ahead of it


def test_step_estimator_counts_tokens_through_the_budget():
    from steptime.serve import StepEstimator

    est = StepEstimator(StepTimer("llama-3.1-8b", "h100-sxm"), 1024, 500)
    t = est.step_time(4)
    got = est(np.array([500, 500, 100, 2000]), 10.0, 4, ahead=0)
    assert np.allclose(got, 10.0 + np.array([1, 1, 2, 4]) * t)  # 1020 tokens a step: 500, 1000, 1100, 3100
    assert est(np.array([10]), 0.0, 4, ahead=1020)[0] == pytest.approx(2 * t)


def test_e2_3_small():
    r = serving.deadline_queue_attainment(_traces(300), model="llama-3.1-8b", gpu="h100-sxm", trace="splitwise_conv", n=120,
                     rates=[2, 40], classes=[{"name": "a", "share": 0.5, "ttft_slo_s": 0.5},
                                             {"name": "b", "share": 0.5, "ttft_slo_s": 5.0}],
                     budget=2048, seed=0, targets={"steptime_minus_scalar_min": 0.0, "contention_below": 0.95})
    df = r["table"]
    assert df["fcfs_attainment"].iloc[0] >= df["fcfs_attainment"].iloc[-1]
    doc = serving.deadline_queue_claims(r)
    assert len(doc["claims"]) == 2


def test_a_missing_registry_target_is_one_clear_error_not_a_default():
    from steptime.errors import InputError
    from steptime_lab.results import target

    assert target({"goodput_ratio_min": 0.9}, "goodput_ratio_min", "E2.4") == 0.9
    with pytest.raises(InputError, match=r"E2.4: no target 'goodput_ratio_min' under its `targets:`"):
        target({}, "goodput_ratio_min", "E2.4")
    r = {"targets": {}, "cases": [{"model": "opt-13b", "tp": 1, "total_gpus": 2, "same_choice": True,
                                   "choice": {"steptime": "1p1d", "distserve": "1p1d"},
                                   "steptime_choice_under_distserve_ratio": 1.0}], "workload": {}}
    with pytest.raises(InputError, match="no target 'goodput_ratio_min'"):
        serving.pool_sizing_claims(r)


def test_engines_by_gpu_refuses_a_gpu_the_runs_do_not_hold():
    """The E2.10 / E3.4 replays take a GPU -> engine profile map; a GPU absent from the runs is refused by name."""
    from steptime_lab.experiments.serving.replay import engines_by_gpu

    runs = pd.DataFrame({"gpu": ["rtx-4090", "rtx-4090", "rtx-pro-6000"]})
    m = {"rtx-4090": "vllm-no-p2p"}
    got = engines_by_gpu(m, runs)
    assert got == m and got is not m
    assert engines_by_gpu(None, runs) == {}
    with pytest.raises(ValueError, match="h100-sxm"):
        engines_by_gpu({"h100-sxm": "vllm"}, runs)


# ---- E2.9's headroom per chunk (wave 26, helper plan) -------------------------------------------------------
def test_pick_chunk_keeps_the_headroom_per_chunk(timer):
    t = serving.pick_chunk(timer, 32, 1000, 200, 1.0, GRID)["table"]["t_mix_s"].to_numpy()
    slo = float(t[2]) * 1.01  # chunks 128, 256, 512 meet it plainly
    plain = serving.pick_chunk(timer, 32, 1000, 200, slo, GRID)
    # a headroom only on 512 pushes the pick below it; the table says which headroom each chunk carried
    h = [0.0, 0.0, 0.05, 0.0, 0.0]
    room = serving.pick_chunk(timer, 32, 1000, 200, slo, GRID, headroom=h)
    assert plain["chunk"] <= 512 and room["chunk"] <= 256
    tab = room["table"].set_index("chunk")
    assert list(tab["headroom"]) == h and not tab.loc[512, "meets"]
    assert all(tab["meets"] == (tab["t_mix_s"] * (1 + tab["headroom"]) <= slo))
    # one fraction applies to every chunk
    assert list(serving.pick_chunk(timer, 32, 1000, 200, slo, GRID, headroom=0.1)["table"]["headroom"]) == [0.1] * 5


@pytest.mark.parametrize("h", [[0.1, 0.1], -0.1, [0.0, 0.0, float("nan"), 0.0, 0.0]])
def test_pick_chunk_refuses_a_bad_headroom(timer, h):
    with pytest.raises(ValueError, match="headroom must be one fraction >= 0 or one per chunk"):
        serving.pick_chunk(timer, 32, 1000, 200, 0.05, GRID, headroom=h)


def test_chunk_band_reads_only_the_other_gpus_of_the_family():
    from steptime_lab.experiments.serving.chunks import chunk_band

    errs = {"a100-sxm": np.array([0.5, 0.5]), "a40": np.array([-0.2, 0.1]), "h100-sxm": np.array([0.3, 0.0]),
            "h200-sxm": np.array([0.2, 0.4]), "b200": np.array([0.9, 0.9])}
    fam = {"a100-sxm": "ampere", "a40": "ampere", "h100-sxm": "hopper", "h200-sxm": "hopper", "b200": "blackwell"}.get
    band, sib = chunk_band(errs, "a100-sxm", fam)
    assert sib == ["a40"] and list(band) == [0.0, pytest.approx(0.1)]  # its own 0.5 never enters; slow runs give 0
    band, sib = chunk_band(errs, "h100-sxm", fam)
    assert sib == ["h200-sxm"] and list(band) == [pytest.approx(0.2), pytest.approx(0.4)]
    assert chunk_band(errs, "b200", fam) == (None, [])  # no sibling: no band


def test_chunk_errors_is_the_sweeps_p99_over_t_mix(timer):
    from steptime_lab.experiments.serving.chunks import chunk_errors

    table = serving.pick_chunk(timer, 32, 1000, 200, 1.0, GRID)["table"]
    t = table["t_mix_s"].to_numpy()
    sweep = pd.DataFrame({"chunk": GRID, "tbt_p99_s": t * np.array([1.0, 1.1, 0.9, 1.2, 1.0])})
    assert chunk_errors(table, sweep, GRID) == pytest.approx([0.0, 0.1, -0.1, 0.2, 0.0])
    with pytest.raises(ValueError, match="sweep has no chunk 2048"):
        chunk_errors(table, sweep[sweep["chunk"] < 2048], GRID)
    with pytest.raises(ValueError, match="pick table has no chunk 2048"):  # the caller's table, never recomputed
        chunk_errors(table[table["chunk"] < 2048], sweep, GRID)


def test_e2_9_band_comes_from_the_family_sibling_never_the_scored_gpu():
    r = serving.chunk_sizing(_traces(), models=["llama-3.1-8b"], gpus=["h100-sxm"], trace="splitwise_conv", n=200,
                             concurrency=16, grid=GRID, slo_multiples=[2], band_gpus=["h200-sxm", "a40"],
                             targets={"pick_meets_slo_fraction": 1.0, "pick_vs_oracle_min": 0.95,
                                      "pick_equals_oracle_fraction": 1.0})
    b = r["bands"]["llama-3.1-8b|h100-sxm"]
    assert b["from"] == ["h200-sxm"] and b["family"] == "hopper"  # a40 is swept but is not Hopper
    assert set(r["sweeps"]) == {"llama-3.1-8b|h100-sxm"}  # band GPUs are never scored
    assert set(r["band_sweeps"]) == {"llama-3.1-8b|h200-sxm", "llama-3.1-8b|a40"}
    row = r["cases"].iloc[0]
    assert row["pick_headroom"] == pytest.approx(b["headroom"][GRID.index(row["pick"])])
    doc = serving.chunk_sizing_claims(r)
    assert "held-out headroom" in doc["claims"][0]["comparison"] and "chosen after" in doc["metrics"]["disclosed"].lower()
    assert doc["metrics"]["disclosed"].endswith(serving.replay.CLOSED_JOIN_DISCLOSED)  # wave 28: engine_policy's join
    assert any("without the family headroom" in c["claim"] for c in doc["claims"])


# ---- E2.9's spec criterion (wave 39, helper spec9) ----------------------------------------------------------
def _chunk_result(picks, oracles, targets):
    n = len(picks)
    df = pd.DataFrame({"model": "llama-3.1-8b", "gpu": "h100-sxm", "slo_multiple": np.arange(n) + 1.5,
                       "pick": picks, "oracle": oracles, "oracle_sweep_rule": oracles,
                       "pick_meets": True, "pick_tok_s": 100.0, "oracle_tok_s": 100.0,
                       "static_512_meets": False, "static_512_tok_s": 90.0})
    return {"cases": df, "targets": targets, "statics": [512], "workload": {}, "grid": GRID, "sweeps": {}}


def test_e2_9_claims_the_pick_equals_the_oracle_at_every_slo():
    t = {"pick_meets_slo_fraction": 1.0, "pick_vs_oracle_min": 0.95, "pick_equals_oracle_fraction": 1.0}
    doc = serving.chunk_sizing_claims(_chunk_result([192, 384, 512, 512], [192, 512, 512, 512], t))
    c = doc["claims"][-1]  # appended after the existing claims: no claim id moves
    assert "oracle's chunk at every SLO" in c["claim"] and c["op"] == ">=" and c["target"] == 1.0
    assert c["value"] == pytest.approx(0.75) and c["met"] is False
    assert doc["metrics"]["pick_equals_oracle_fraction"] == pytest.approx(0.75)
    # the same picks everywhere meet it; a case with no feasible oracle is the same only where the pick is none too
    ok = serving.chunk_sizing_claims(_chunk_result([192, 512, None], [192, 512, None], t))["claims"][-1]
    assert ok["value"] == 1.0 and ok["met"] is True
    with pytest.raises(Exception, match="pick_equals_oracle_fraction"):  # the target lives in the registry only
        serving.chunk_sizing_claims(_chunk_result([192], [192], {k: v for k, v in t.items()
                                                                  if k != "pick_equals_oracle_fraction"}))
