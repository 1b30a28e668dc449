"""Wall-clock experiments' library (E1.26, R2.3, E1.18, E2.11): step expansion, the reading
rule, the engine-constant fit, scores, TP scaling and the TPOT approximation, on small
synthetic step tables built here."""
import numpy as np
import pandas as pd
import pytest

from steptime.errors import ServeError, SteptimeError
from steptime_lab.experiments import wallclock as W
from steptime.calibration import Constants


def _steps(tps=(1, 2, 8), seed=0):
    """A toy FPM table: decode sweeps (1..32 requests, repeated), one prefill sweep, a real segment."""
    rng = np.random.default_rng(seed)
    rows, step = [], 0
    for tp in tps:
        for rep in range(3):
            for n in (1, 2, 4, 8, 16, 32):
                rows.append(dict(phase="decode", segment="sweep", ctx_tokens=0, ctx_requests=0, ctx_kv_tokens=0,
                                 decode_requests=n, mean_decode_kv_tokens=4096.0, tp=tp))
            for t in (128, 1024):
                rows.append(dict(phase="prefill", segment="sweep", ctx_tokens=t, ctx_requests=1, ctx_kv_tokens=0,
                                 decode_requests=0, mean_decode_kv_tokens=0.0, tp=tp))
        for n in (1, 32, 32, 20):
            rows.append(dict(phase="decode", segment="real", ctx_tokens=0, ctx_requests=0, ctx_kv_tokens=0,
                             decode_requests=n, mean_decode_kv_tokens=3000.0, tp=tp))
        rows.append(dict(phase="mixed", segment="real", ctx_tokens=512, ctx_requests=2, ctx_kv_tokens=100,
                         decode_requests=10, mean_decode_kv_tokens=2000.0, tp=tp))
    s = pd.DataFrame(rows)
    s["step"] = np.arange(len(s))
    s["gpu"], s["model"], s["engine"] = "h100-sxm", "llama-3.1-8b", "vllm"
    s["latency_ms"] = rng.uniform(5, 50, len(s))
    return s


# -- a synthetic engine: total = a + b N + c [tp > 1] + g * tokens / tp (ms)
def _toy_predictor(a=2.0, b=0.1, c=1.5, g=0.01):
    def f(steps, tp, overrides=None):
        p = {"a": a, "b": b, "c": c, **(overrides or {})}
        n = (steps["decode_requests"] + steps["ctx_requests"]).to_numpy(float)
        tok = (steps["decode_requests"] + steps["ctx_tokens"]).to_numpy(float)
        host = p["a"] + p["b"] * n + (p["c"] if tp > 1 else 0.0)
        gpu = g * tok / tp
        out = {k: np.zeros(len(steps)) for k in W.KINDS}
        out["host"], out["gemm"] = host, gpu
        out["total"] = host + gpu
        return out
    return f


def test_check_steps_names_the_problem():
    s = _steps()
    with pytest.raises(SteptimeError, match="lacks column"):
        W.check_steps(s.drop(columns="latency_ms"))
    with pytest.raises(ValueError, match="unknown phase"):
        W.check_steps(s.assign(phase="context"))
    bad = s.copy()
    bad.loc[0, "decode_requests"] = 0
    with pytest.raises(W.WallclockError, match="no request"):
        W.check_steps(bad)
    W.check_steps(s)


def test_expand_requests_keeps_every_token_and_request():
    s = _steps()
    sid, new, kv = W.expand_requests(s)
    n = np.bincount(sid, minlength=len(s))
    assert np.array_equal(n, (s["decode_requests"] + s["ctx_requests"]).to_numpy())
    tok = np.bincount(sid, weights=new, minlength=len(s))
    assert np.allclose(tok, (s["decode_requests"] + s["ctx_tokens"]).to_numpy())
    mixed = s.index[s["phase"] == "mixed"][0]
    assert kv[(sid == mixed) & (new > 1)].tolist() == [50.0, 50.0]  # 100 cached tokens split over 2 prefills


def test_reading_rule_is_three_compositions_chosen_without_latency_each_read_at_its_median_repeat():
    s = _steps()
    r = W.reading_rule(s)
    assert len(r.rows) == 3
    picked = s.loc[r.rows]
    assert picked["tp"].tolist() == [1, 1, 8]
    assert picked["decode_requests"].tolist() == [1, 32, 1]
    assert (picked["segment"] == "sweep").all()
    # the compositions are chosen without the latencies: shuffling them picks the same compositions
    s2 = s.assign(latency_ms=s["latency_ms"].sample(frac=1.0, random_state=3).to_numpy())
    r2 = W.reading_rule(s2)
    assert s2.loc[r2.rows, ["tp", "decode_requests"]].values.tolist() == picked[["tp", "decode_requests"]].values.tolist()
    # within a composition the reading is the lower-median repeat (not the first, often a warm-up)
    for i in r.rows:
        reps = s[(s["segment"] == "sweep") & (s["phase"] == "decode") & (s["tp"] == s.at[i, "tp"])
                 & (s["decode_requests"] == s.at[i, "decode_requests"])]["latency_ms"].sort_values().to_numpy()
        assert len(reps) == 3 and s.at[i, "latency_ms"] == reps[1]
    early = W.reading_rule(s, pick="earliest")
    assert [s.at[i, "step"] for i in early.rows] == [int(s.loc[(s["tp"] == s.at[i, "tp"]) & (s["segment"] == "sweep")
                                                          & (s["phase"] == "decode") & (s["decode_requests"] == s.at[i, "decode_requests"]),
                                                          "step"].min()) for i in early.rows]
    assert early.excluded == r.excluded  # every repeat of a read composition is held out, whichever is read
    with pytest.raises(W.WallclockError, match="unknown repeat pick"):
        W.reading_rule(s, pick="latest")
    # the repeats of the three sweep cells are excluded; the real segment's steps are not
    ex = s.loc[r.excluded]
    assert len(ex) == 9 and (ex["segment"] == "sweep").all()
    assert not (s.loc[s["segment"] == "real"].index.isin(r.excluded)).any()


def test_the_median_repeat_of_an_even_count_is_the_lower_median_ties_by_step():
    """READING_RULE says the lower median; with three repeats (the rule's test) lower and upper are the same step,
    so the upper median survived a mutation (wave 39). Four repeats tell them apart."""
    cand = pd.DataFrame({"step": [10, 11, 12, 13], "latency_ms": [4.0, 1.0, 3.0, 2.0]}, index=[100, 101, 102, 103])
    assert W.pick_repeat(cand) == 103  # 1, 2, 3, 4 ms: the lower median is 2 ms (step 13)
    tie = pd.DataFrame({"step": [21, 20, 22, 23], "latency_ms": [2.0, 2.0, 5.0, 1.0]}, index=[0, 1, 2, 3])
    assert W.pick_repeat(tie) == 1  # 1, 2, 2, 5 ms: the lower median is a 2 ms tie, broken by the lower step id
    assert W.pick_repeat(cand, "earliest") == 100


def test_reading_rule_refuses_mixed_gpus():
    s = _steps()
    s.loc[0, "gpu"] = "b200"
    with pytest.raises(W.WallclockError, match="one \\(GPU, engine\\)"):
        W.reading_rule(s)


def test_fit_recovers_the_engine_constants_from_three_readings():
    s = _steps()
    truth = _toy_predictor(a=3.0, b=0.2, c=0.7)
    s["latency_ms"] = W.predict_table(s, truth)["pred_ms"]
    r = W.reading_rule(s)
    fit = W.fit_engine_constants(s, r, _toy_predictor(), ["a", "b", "c"], {"a": 1.0, "b": 0.05, "c": 0.1})
    assert fit == pytest.approx({"a": 3.0, "b": 0.2, "c": 0.7}, rel=1e-4)
    with pytest.raises(W.WallclockError, match="cannot be read"):
        W.fit_engine_constants(s, r, _toy_predictor(), ["a", "b", "unused"], {"a": 1.0, "b": 0.05, "unused": 1.0})
    with pytest.raises(W.WallclockError, match="under-determined"):
        W.fit_engine_constants(s, r, _toy_predictor(), ["a", "b", "c", "g"], {"a": 1, "b": 1, "c": 1, "g": 1})


def test_scores_by_phase_and_tp_with_signed_error():
    s = _steps()
    p = W.predict_table(s, _toy_predictor())
    s["latency_ms"] = p["pred_ms"] / 1.1  # every prediction 10% high
    sc = W.score_steps(s, p, n_boot=10)
    assert {(r["tp"], r["phase"]) for r in sc} == {(tp, ph) for tp in (1, 2, 8) for ph in ("decode", "prefill", "mixed")}
    for r in sc:
        assert r["mape"] == pytest.approx(0.1)
        assert r["signed_mean"] == pytest.approx(0.1)


def test_tp_scaling_is_exact_for_a_constant_scale_and_not_for_a_wrong_tp_law():
    s = _steps()
    truth = _toy_predictor()
    s["latency_ms"] = W.predict_table(s, truth)["pred_ms"]
    scaled = W.predict_table(s, truth) * 1.3
    for r in W.tp_scaling(s, scaled):
        assert r["mean_abs_ratio_error"] == pytest.approx(0.0, abs=1e-12)
    wrong = W.predict_table(s, _toy_predictor(c=0.0))  # misses what TP > 1 adds
    res = {r["tp"]: r for r in W.tp_scaling(s, wrong)}
    assert set(res) == {2, 8}
    assert res[2]["mean_abs_ratio_error"] > 0.01
    assert res[8]["predicted_ratio_median"] < res[8]["measured_ratio_median"]


def test_roofline_is_a_lower_bound_of_the_kernel_model_and_grows_with_tokens():
    s = _steps(tps=(1, 2))
    roof = W.predict_table(s, W.make_predictor("roofline", "llama-3.1-8b", "h100-sxm", constants=Constants.default()))
    kern = W.predict_table(s, W.make_predictor("kernels", "llama-3.1-8b", "h100-sxm", constants=Constants.default()))
    assert (roof["pred_ms"] <= kern["pred_ms"]).all()
    assert (roof["host_ms"] == 0).all() and (roof["launch_ms"] == 0).all()
    assert (kern["host_ms"] == 0).all()  # kernels: GPU kernel time only
    pre = s[(s["phase"] == "prefill") & (s["tp"] == 1)]
    r = roof.loc[pre.index, "pred_ms"].to_numpy()
    t = pre["ctx_tokens"].to_numpy()
    assert r[np.argmax(t)] > r[np.argmin(t)]
    parts = roof[[f"{k}_ms" for k in W.KINDS]].sum(axis=1)
    assert np.allclose(parts, roof["pred_ms"])


def test_exposed_host_reads_the_small_decode_steps():
    s = _steps()
    gpu_only = _toy_predictor(a=0.0, b=0.0, c=0.0)
    truth = _toy_predictor(a=2.0, b=0.0, c=1.0)
    s["latency_ms"] = W.predict_table(s, truth)["pred_ms"]
    ex = {r["tp"]: r for r in W.exposed_host(s, W.predict_table(s, gpu_only), max_requests=4)}
    assert ex[1]["exposed_ms_median"] == pytest.approx(2.0)
    assert ex[8]["exposed_ms_median"] == pytest.approx(3.0)


def _tpot_rows(mode="agg"):
    return pd.DataFrame({"batch": [2.5, 8.0], "prompt_tokens": [1000, 1000], "output_tokens": [100, 100],
                         "mode": mode})


def test_tpot_interpolates_the_batch_and_adds_amortised_prefill_only_when_aggregated():
    f = _toy_predictor(a=1.0, b=1.0, c=0.0, g=0.0)  # total = 1 + N ms
    agg = W.predict_tpot(_tpot_rows("agg"), f, kernels=_toy_predictor(a=0, b=0, c=0, g=0.01))
    assert agg["decode_ms"] == pytest.approx([3.5, 9.0])
    # 1 x 1000-token prefill = 10 ms of kernels, batch / output_tokens of them per step
    assert agg["prefill_amortised_ms"] == pytest.approx([10 * 2.5 / 100, 10 * 8 / 100])
    dis = W.predict_tpot(_tpot_rows("disagg"), f, kernels=_toy_predictor(a=0, b=0, c=0, g=0.01))
    assert np.all(dis["prefill_amortised_ms"] == 0)
    with pytest.raises(W.WallclockError, match="batch"):
        W.predict_tpot(_tpot_rows().assign(batch=0.0), f)


def test_mean_context_is_prompt_plus_half_the_output():
    assert W.mean_context([1000], [200]).tolist() == [1100.0]


# -- adapters from the tidy tables ---------------------------------------------------------
def _fpm_tidy():
    s = _steps(tps=(1, 2))
    t = s.rename(columns={"segment": "workload_segment"}).drop(columns=["step", "mean_decode_kv_tokens"])
    t["phase"] = t["phase"].replace({"prefill": "context"})
    t["counter_id"] = np.arange(len(t))
    t["decode_kv_tokens"] = (s["decode_requests"] * s["mean_decode_kv_tokens"]).astype(int)
    t["moe"], t["engine_version"] = False, "0.20.1"
    moe = t.iloc[:3].assign(moe=True, model="some-moe")
    return pd.concat([t, moe], ignore_index=True)


def test_fpm_steps_adapter_maps_phases_versions_and_drops_moe():
    s = W.fpm_steps(_fpm_tidy())
    assert set(s["phase"]) == {"decode", "prefill", "mixed"}
    assert not (s["model"] == "some-moe").any()
    d = s[s["decode_requests"] > 0]
    assert np.allclose(d["mean_decode_kv_tokens"], d["decode_kv_tokens"] / d["decode_requests"])
    W.check_steps(s)


def test_engine_profile_by_version():
    from steptime.specs.engines import get_engine
    sync, unfused = get_engine("vllm-v1-sync"), get_engine("vllm-v1-unfused")
    # the only differences (YAML merge): the overlap, and the server law the synchronous core exposes (wave 12)
    assert sync.get("overlap") == 0.0 and unfused.get("overlap") == 1.0
    # and the step a closed-loop request joins (schedule.join_steps: the synchronous loop's 2; wave 18)
    diff = ("overlap", "server_a_ms", "server_b_ms", "join_steps", "prefix_caching",  # prefix_caching: same value, own source
            "inline_launch_world",  # wave 23: only the async (batch-queue) core launches step n + 1 inline at world size 1
            "read_join_steps")  # wave 28: the async core's read request joins the step after next (2), the sync one's 1
    assert sync.read_join_steps() == 1 and unfused.read_join_steps() == 2
    assert sync.join_steps() == 2 and unfused.join_steps() == 3  # wave 28: the async core's closed loop, one more
    assert "inline_launch_world" not in sync.values and sync.step_time_is_own(1)
    assert "inline_launch_world" in unfused.values and not unfused.step_time_is_own(1) and unfused.step_time_is_own(2)
    assert sync.caches_prefixes() and unfused.caches_prefixes()
    assert {k: v for k, v in sync.values.items() if k not in diff} == \
        {k: v for k, v in unfused.values.items() if k not in diff}
    assert "server_b_ms" in sync.values and "server_b_ms" not in unfused.values
    assert W.engine_profile("vllm", "0.5.4") == "vllm-v0"
    assert W.engine_profile("vllm", "0.11.1") == "vllm-v1-sync"  # before async scheduling became the default
    assert W.engine_profile("vllm", "0.13.0") == "vllm-v1-sync"
    assert W.engine_profile("vllm", "0.14.0") == "vllm-v1-unfused"  # before the -O2 all-reduce + RMSNorm fusion
    assert W.engine_profile("vllm", "0.17.0") == "vllm-v1-unfused"
    assert W.engine_profile("vllm", "0.20.1") == "vllm"
    assert W.engine_profile("vllm", None) == "vllm"
    assert W.engine_profile("trtllm", "1.0.0rc3") == "trtllm"


def _tpot_tables():
    v2 = pd.DataFrame({"dataset": "mlenergy-v2", "task": ["chat", "chat", "code"], "gpu": "h100-sxm",
                       "model": ["llama-3.1-8b", "mixtral", "llama-3.1-8b"], "model_source": "x", "arch": "dense",
                       "moe": [False, True, False], "engine": "vllm", "engine_version": "0.5.4", "dtype": "bfloat16",
                       "tp": 1, "pp": [1, 1, 2], "avg_batch": 8.0, "mean_tpot_ms": 20.0, "avg_output_len": 300.0,
                       "source_file": "f"})
    sil = pd.DataFrame({"id": ["a", "b", "c", "d"], "gpu": "h100-sxm", "model": "llama-3.1-8b", "model_source": "x",
                        "arch": "dense", "moe": False, "engine": "trtllm", "engine_version": "1.0",
                        "precision": ["fp8", "fp4", None, "fp8"], "gemm_quant_mode": ["fp8", "nvfp4", None, "fp8"],
                        "mode": ["agg", "agg", "agg", "disagg"], "isl": 1024, "osl": 128, "concurrency": [4, 4, 1, 4],
                        "tp": 1, "pp": 1, "ttft_ms": 50.0, "tpot_ms": 10.0})
    return v2, sil


def test_tpot_table_counts_every_row_left_out_with_its_reason():
    v2, sil = _tpot_tables()
    rows, skipped = W.tpot_table(mlenergy_v2=v2, silicon=sil, prompt_tokens={("mlenergy-v2", "chat"): 250})
    why = {(s["dataset"], s["reason"]): s["rows"] for s in skipped}
    assert why[("mlenergy-v2", "MoE: scored in E3.4 (MoE wall clock), not here")] == 1
    assert why[("mlenergy-v2", "pipeline parallelism > 1 not modelled")] == 1
    assert why[("aic-silicon", "disaggregated serving (per-pool layout not modelled)")] == 1
    assert why[("aic-silicon", "precision not modelled (fp4 / block-scaled fp8)")] == 1
    assert len(rows) == 1 + 2
    assert rows.loc[rows["dataset"] == "mlenergy-v2", "engine"].tolist() == ["vllm-v0"]
    assert sorted(rows.loc[rows["dataset"] == "aic-silicon", "dtype"]) == ["bf16", "fp8"]
    # every input row is either kept or counted
    assert len(rows) + sum(s["rows"] for s in skipped) == len(v2) + len(sil)


def test_tpot_table_v3_measure_is_the_median_unless_the_steady_state_mean_is_asked_for():
    """V3_STEADY_MEAN_NOTE: ML.ENERGY v3 rows carry the median inter-token latency by default (E2.11b, E1.18 read
    that); v3_measure='steady_mean_itl_ms' gives avg_batch / output throughput x 1000 ms instead, named per row;
    an unknown measure is refused. Toy rows (invented round numbers, not data)."""
    v3 = pd.DataFrame({"task": "lm-arena-chat", "gpu": "b200", "model": "llama-3.1-8b", "model_source": "x",
                       "arch": "dense", "moe": False, "engine": "vllm", "engine_version": "0.11.1", "dtype": "bfloat16",
                       "tp": 1, "ep": 1, "dp": 1, "avg_batch": [8.0, 256.0], "median_itl_ms": [5.0, 20.0],
                       "output_tokens_per_s": [1600.0, 10240.0], "avg_output_len": 400.0, "source_file": "f"})
    prompts = {("mlenergy-v3", "lm-arena-chat"): 250}
    med, _ = W.tpot_table(mlenergy_v3=v3, prompt_tokens=prompts)
    assert med["tpot_ms"].tolist() == [5.0, 20.0] and set(med["measure"]) == {"median_itl_ms"}
    mean, _ = W.tpot_table(mlenergy_v3=v3, prompt_tokens=prompts, v3_measure="steady_mean_itl_ms")
    assert mean["tpot_ms"].tolist() == pytest.approx([5.0, 25.0]) and set(mean["measure"]) == {"steady_mean_itl_ms"}
    assert mean.drop(columns=["tpot_ms", "measure"]).equals(med.drop(columns=["tpot_ms", "measure"]))
    with pytest.raises(W.WallclockError):
        W.tpot_table(mlenergy_v3=v3, prompt_tokens=prompts, v3_measure="mean_itl_ms")


def test_tpot_table_v2_measure_is_the_avg_tpot_unless_the_steady_state_mean_is_asked_for():
    """V2_STEADY_MEAN_NOTE: ML.ENERGY v2 rows carry the leaderboard's Avg TPOT by default; v2_measure='steady_mean_itl_ms' gives avg_batch / output throughput x 1000 ms instead, named per row, and
    leaves v3 rows alone; an unknown measure is refused. Toy rows (invented round numbers, not data)."""
    v2, _ = _tpot_tables()
    v2 = v2.iloc[:1].assign(avg_batch=256.0, mean_tpot_ms=20.0, output_tokens_per_s=10240.0)
    prompts = {("mlenergy-v2", "chat"): 250}
    avg, _ = W.tpot_table(mlenergy_v2=v2, prompt_tokens=prompts)
    assert avg["tpot_ms"].tolist() == [20.0] and set(avg["measure"]) == {"mean_tpot_ms"}
    ss, _ = W.tpot_table(mlenergy_v2=v2, prompt_tokens=prompts, v2_measure="steady_mean_itl_ms")
    assert ss["tpot_ms"].tolist() == pytest.approx([25.0]) and set(ss["measure"]) == {"steady_mean_itl_ms"}
    assert ss.drop(columns=["tpot_ms", "measure"]).equals(avg.drop(columns=["tpot_ms", "measure"]))
    with pytest.raises(W.WallclockError, match="v2 measure"):
        W.tpot_table(mlenergy_v2=v2, prompt_tokens=prompts, v2_measure="median_itl_ms")


def test_run_tpot_scores_per_dataset_gpu_engine_and_refuses_unknown_models_with_a_count():
    v2, sil = _tpot_tables()
    rows, _ = W.tpot_table(mlenergy_v2=v2, silicon=sil, prompt_tokens={("mlenergy-v2", "chat"): 250})
    rows = pd.concat([rows, rows.iloc[:1].assign(model="no-such-model", model_source="nobody/none")])
    res = W.run_tpot(rows, n_boot=10, constants=Constants.default())
    pooled = [s for s in res["scores"] if s["subset"] == "tpot"]
    assert {(s["dataset"], s["engine"]) for s in pooled} == {("mlenergy-v2", "vllm-v0"), ("aic-silicon", "trtllm")}
    assert res["skipped"] and res["skipped"][0]["rows"] == 1 and "UnknownModelError" in res["skipped"][0]["reason"]
    # the decode step's GPU part is the engine's own (never above its step; host time is never negative); the
    # synchronous V0 engine adds host work to it
    p = res["pred"]
    assert (p["decode_ms"] >= p["decode_gpu_ms"] - 1e-12).all()
    v0 = (p["engine"] == "vllm-v0").to_numpy()
    assert v0.any() and (p["decode_ms"] > p["decode_gpu_ms"])[v0].all()


def test_evaluate_records_carry_dataset_engine_and_tp():
    recs = W.evaluate_records(_fpm_tidy(), silicon=_tpot_tables()[1], n_boot=10,
                              fit={"fit_names": ["t_samp_ms", "t_samp_b_ms", "comm_offset_us"],
                                   "block_fit_names": ["t_samp_ms", "block_scale", "comm_offset_us"]},
                              prompt_tokens={}, mixed={"chunked": ["trtllm"], "token_budget": 8192}, constants=Constants.default())
    from steptime_lab.evaluate import RECORD_KEYS

    for r in recs:
        assert set(RECORD_KEYS) | {"dataset", "engine", "tp", "variant", "fitted_on"} <= set(r)
        assert r["subset"] in ("decode", "mixed", "prefill", "tpot")
        assert r["variant"] == ("step" if r["dataset"] == "aic-fpm" else r["variant"])
        assert r["fitted_on"]
    tpot = [r for r in recs if r["subset"] == "tpot"]
    assert {r["variant"] for r in tpot} == {"naive", "mixed"}
    assert all(r["tps"] for r in tpot)
    fpm = [r for r in recs if r["dataset"] == "aic-fpm"]
    assert {r["predictor"] for r in fpm} == {"kernels", "roofline", "vllm", "vllm_wallclock_fit"}
    assert {r["tp"] for r in fpm} == {1, 2}
    assert any(r["subset"] == "tpot" for r in recs)


def test_fitted_constants_file_round_trips_into_the_predictor(tmp_path):
    s = W.fpm_steps(_fpm_tidy())
    spec = W.FpmSpec(model="llama-3.1-8b", fit_names=("t_samp_ms", "t_samp_b_ms", "comm_offset_us"),
                     block_fit_names=("t_samp_ms", "block_scale", "comm_offset_us"))
    r = W.run_fpm(s, spec, n_boot=10, constants=Constants.default())
    path = tmp_path / "engine_constants.yaml"
    W.write_fitted_constants(path, W.engine_constants_doc([r], spec))
    vals, cells = W.fitted_values(path, "vllm", "h100-sxm")
    assert vals == pytest.approx({k: round(v, 6) for k, v in r["fitted"].items()}, abs=1e-6)
    assert sorted(cells) == sorted(r["readings"].cells)
    from steptime.specs.engines import get_engine

    assert get_engine("vllm", fitted=path).get("t_samp_ms", __import__("steptime.specs", fromlist=["x"]).get_gpu(
        "h100-sxm")) == pytest.approx(round(r["fitted"]["t_samp_ms"], 6))
    r2 = W.run_fpm(s, spec, fitted_doc=path, n_boot=10, constants=Constants.default())
    a = {(x["tp"], x["phase"]): x["mape"] for x in r["scores"]["vllm_wallclock_fit"]}
    b = {(x["tp"], x["phase"]): x["mape"] for x in r2["scores"]["vllm_wallclock_fit"]}
    assert a == pytest.approx(b, rel=1e-3)
    # constants read from other steps than the rule's are refused
    doc = W.engine_constants_doc([r], spec)
    for sec in doc.values():
        for per_gpu in sec.values():
            for tbl in per_gpu.values():
                for e in tbl.values():
                    e["cells"] = [["h100-sxm", "vllm", 1, "decode", 1, 999999]]
    with pytest.raises(W.WallclockError, match="not the rule's steps"):
        W.run_fpm(s, spec, fitted_doc=doc, n_boot=10, constants=Constants.default())


def test_e1_26_claims_its_readings_against_the_registry_max_readings():
    """E1.26's registry target max_readings was read by no claim until wave 39 (helper spec9): its readings claim
    counts the distinct cells the engine-constants document it read records, against that target."""
    import yaml
    from pathlib import Path

    from steptime.errors import InputError
    from steptime_lab.experiments import wallclock_report as R

    reg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/experiments.yaml").read_text())
    lim = reg["experiments"]["E1.26"]["targets"]["max_readings"]
    s = W.fpm_steps(_fpm_tidy())
    spec = W.FpmSpec(model="llama-3.1-8b", fit_names=("t_samp_ms", "t_samp_b_ms", "comm_offset_us"),
                     block_fit_names=("t_samp_ms", "block_scale", "comm_offset_us"))
    r = W.run_fpm(s, spec, n_boot=10, constants=Constants.default())
    doc = W.engine_constants_doc([r], spec)
    c = R.engine_step_readings_claim(r, {"max_readings": lim}, doc)
    assert (c["value"], c["target"], c["op"], c["met"]) == (len(set(r["readings"].cells)), lim, "<=", True)
    # a target below the readings spent is unmet; a missing target is one clear error naming it
    assert R.engine_step_readings_claim(r, {"max_readings": c["value"] - 1}, doc)["met"] is False
    with pytest.raises(InputError, match="E1.26: no target 'max_readings'"):
        R.engine_step_readings_claim(r, {}, doc)


def test_r2_3_counts_its_readings_from_the_written_constants_records_not_from_its_own_choice():
    """Issue 19 item 8: R2.3's readings claim counts the distinct cells the fitted engine-constants document
    records. Before, it counted the readings the experiment said it chose (len(readings.rows)), so a constant
    that recorded a fourth step still read 3 <= 3."""
    from steptime_lab.experiments import wallclock_report as R

    s = W.fpm_steps(_fpm_tidy())
    spec = W.FpmSpec(model="llama-3.1-8b", fit_names=("t_samp_ms", "t_samp_b_ms", "comm_offset_us"),
                     block_fit_names=("t_samp_ms", "block_scale", "comm_offset_us"))
    r = W.run_fpm(s, spec, n_boot=10, constants=Constants.default())
    doc = W.engine_constants_doc([r], spec)
    first = R.wallclock_constants_document(r, {"max_readings": 3}, {}, doc)["claims"][0]
    assert (first["value"], first["met"]) == (len(set(r["readings"].cells)), True)
    # one constant records a fourth step: the count follows the records
    e = next(e for sec in doc.values() for e in (sec.get("vllm") or {}).get("h100-sxm", {}).values())
    e["cells"] = e["cells"] + [["h100-sxm", "vllm", 2, "decode", 1, 999999]]
    bad = R.wallclock_constants_document(r, {"max_readings": 3}, {}, doc)["claims"][0]
    assert (bad["value"], bad["met"]) == (len(set(r["readings"].cells)) + 1, False)
    with pytest.raises(W.WallclockError, match="no constant of vllm@h100-sxm"):
        R.recorded_wallclock_readings({"engines": {}}, "vllm", "h100-sxm")
    with pytest.raises(W.WallclockError, match="must be a mapping"):
        R.recorded_wallclock_readings(None, "vllm", "h100-sxm")


def test_smallest_batch_rows_keeps_each_groups_smallest_batch_under_the_cap():
    base = dict(dataset="d", gpu="h100-sxm", model="m", engine="vllm", dtype="bf16")
    rows = pd.DataFrame([{**base, "tp": 1, "batch": b} for b in (4.0, 4.0, 32.0)]
                        + [{**base, "tp": 2, "batch": b} for b in (64.0, 128.0)])
    x = W.smallest_batch_rows(rows, 16.0)
    assert x["batch"].tolist() == [4.0, 4.0] and set(x["tp"]) == {1}


def test_scales_act_on_their_term_kinds_and_their_per_op_price_is_measured():
    s = _steps(tps=(1, 8))
    f = W.with_scales(_toy_predictor())
    a = W.predict_table(s, f)
    b = W.predict_table(s, f, {"comm_scale": 0.5, "a": 2.0})
    assert np.allclose(a["gemm_ms"], b["gemm_ms"]) and np.allclose(a["host_ms"], b["host_ms"])
    c = W.predict_table(s, f, {"block_scale": 2.0})
    assert np.allclose(c["gemm_ms"], 2 * a["gemm_ms"]) and np.allclose(c["host_ms"], a["host_ms"])
    assert W.kind_scale({"block_scale": 2.0, "comm_scale": 0.5}, "comm") == pytest.approx(1.0)
    assert W.kind_scale({"comm_scale": 0.5, "t_samp_ms": 3.0}, "gemm") == 1.0
    tables = {"g": ("gemm", np.array([1.0, 2.0]), np.array([1.0, 2.0])),
              "ar": ("comm", np.array([1.0, 2.0]), np.array([1.0, 2.0]))}
    cost = {c["table"]: c for c in W.per_op_cost(tables, {"comm_scale": 0.5}, n_boot=10)}
    assert cost["g"]["delta"] == 0.0
    assert cost["ar"]["mape_wallclock_scaled"] == pytest.approx(0.5)


def test_comm_offset_shifts_every_all_reduce_call_of_tp_steps_only():
    s = _steps(tps=(1, 2))
    f = W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", constants=Constants.default())
    g = W.with_scales(f)
    a = W.predict_table(s, g)
    b = W.predict_table(s, g, {"comm_offset_us": 2.0})
    tp1 = (s["tp"] == 1).to_numpy()
    assert np.allclose(a["pred_ms"][tp1], b["pred_ms"][tp1])
    calls = 2 * 32  # two all-reduces per layer, 32 layers
    assert np.allclose((b["comm_ms"] - a["comm_ms"])[~tp1], calls * 2.0e-3)
    c = W.predict_table(s, g, {"comm_offset_us": -1e6})  # never below zero
    assert (c["comm_ms"] >= 0).all()


def test_per_op_cost_shifts_all_reduce_cells_by_the_fitted_offset():
    tables = {"ar": ("comm", np.array([0.010, 0.020]), np.array([0.010, 0.020]))}
    c = W.per_op_cost(tables, {"comm_offset_us": 5.0}, n_boot=10)[0]
    assert c["mape_wallclock_scaled"] == pytest.approx(np.mean([0.5, 0.25]))


def test_make_predictor_refuses_unknown_override_names_and_applies_step_adjustments_itself():
    s = _steps(tps=(1, 2))
    f = W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", constants=Constants.default())
    with pytest.raises(W.WallclockError, match="unknown override name.*no_such_constant"):
        W.predict_table(s, f, {"no_such_constant": 1.0})
    a = W.predict_table(s, f)
    b = W.predict_table(s, f, {"comm_offset_us": 2.0})  # no wrapping needed: the constructor applies it
    tp2 = (s["tp"] == 2).to_numpy()
    assert np.allclose((b["comm_ms"] - a["comm_ms"])[tp2], 2 * 32 * 2.0e-3)


def test_fitted_doc_scales_reach_the_predictor_through_the_one_constructor():
    """E1.19's bug: a fitted doc's comm_offset_us (a scale) must move the TP > 1 prediction."""
    s = _steps(tps=(1, 2))
    doc = {"engines": {}, "constants": {},
           "scales": {"vllm": {"h100-sxm": {"comm_offset_us": {"value": 50.0, "cells": []}}}}}
    a = W.predict_table(s, W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", constants=Constants.default()))
    b = W.predict_table(s, W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", fitted=doc, constants=Constants.default()))
    tp2 = (s["tp"] == 2).to_numpy()
    assert np.allclose((b["comm_ms"] - a["comm_ms"])[tp2], 2 * 32 * 50.0e-3)
    assert np.allclose(b["pred_ms"][~tp2], a["pred_ms"][~tp2])


def test_host_floor_r23_arm_carries_the_fitted_comm_offset():
    from steptime_lab.experiments.host import learner as hostfloor

    tidy = _fpm_tidy()
    doc = {"engines": {"vllm": {"h100-sxm": {"t_samp_ms": {"value": 0.2, "cells": [], "provenance": "FITTED",
                                                         "source": "test"}}}}, "constants": {},
           "scales": {"vllm": {"h100-sxm": {"comm_offset_us": {"value": 40.0, "cells": []}}}}}
    no_off = {**doc, "scales": {}}
    a, _ = hostfloor.predict_host_floor(tidy, fitted=no_off, skip_over_budget=False, constants=Constants.default())
    b, _ = hostfloor.predict_host_floor(tidy, fitted=doc, skip_over_budget=False, constants=Constants.default())
    tp = b["tp"].to_numpy() > 1
    assert tp.any() and (~tp).any()
    assert np.allclose(b["r23_ms"].to_numpy()[~tp], a["r23_ms"].to_numpy()[~tp])
    assert (b["r23_ms"].to_numpy()[tp] > a["r23_ms"].to_numpy()[tp] + 1.0).all()


def test_tpot_mixed_variant_runs_the_arriving_prompts_inside_the_steps():
    rows = pd.DataFrame({"batch": [8.0, 8.0, 8.0], "prompt_tokens": [1000.0, 1000.0, 20000.0],
                         "output_tokens": [200.0, 200.0, 200.0], "mode": ["agg", "static", "agg"]})
    f = _toy_predictor(a=2.0, b=0.1, c=0.0, g=0.01)
    naive = W.predict_tpot(rows, f, f, variant="naive")
    mixed = W.predict_tpot(rows, f, f, variant="mixed", chunked=True, token_budget=8192)
    t_dec = 2.0 + 0.1 * 8 + 0.01 * 8
    assert np.allclose(mixed["decode_ms"], t_dec)
    # row 0: P = 8 x 1000 / 200 = 40 prefill tokens per step in chunks of 1000: f = 0.04 mixed steps,
    # each one more request and 1000 more tokens than the decode step
    assert mixed["pred_ms"][0] == pytest.approx(t_dec + 0.04 * (0.1 + 0.01 * 1000))
    assert mixed["pred_ms"][1] == pytest.approx(t_dec) == naive["pred_ms"][1]  # a static batch: the decode step
    # row 2: a 20000-token prompt is chunked by the budget: chunk = 8192 - 8, f = 800 / 8184
    assert mixed["pred_ms"][2] == pytest.approx(t_dec + 800 / 8184 * (0.1 + 0.01 * 8184))
    # an engine that does not chunk runs each prompt as a prefill step of its own
    v0 = W.predict_tpot(rows, f, f, variant="mixed", chunked=False)
    assert v0["pred_ms"][0] == pytest.approx(t_dec + 40 / 1000 * (2.0 + 0.1 + 0.01 * 1000))
    with pytest.raises(W.WallclockError, match="unknown TPOT variant"):
        W.predict_tpot(rows, f, f, variant="simulated")
    with pytest.raises(W.WallclockError, match="token budget"):
        W.predict_tpot(rows, f, f, variant="mixed", chunked=True, token_budget=None)


def test_tpot_prefill_first_wave_charges_a_request_only_the_rest_of_its_own_wave():
    """WAVE_NOTE: an engine that runs prefill first in steps of its own (SGLang) on a closed loop with fixed
    lengths: request i waits, after its first token, for its wave's prefill steps after the one that carried it;
    TPOT = t_decode + mean wait / (OSL - 1). Other rows of such an engine: a prompt is a prefill step of its own."""
    rows = pd.DataFrame({"batch": [16.0, 4.0, 16.0], "prompt_tokens": [1024.0, 3000.0, 1024.0],
                         "output_tokens": [129.0, 101.0, 129.0], "mode": "agg"})
    f = _toy_predictor(a=2.0, b=0.1, c=0.0, g=0.01)
    loop = np.array([True, True, False])
    r = W.predict_tpot(rows, f, f, variant="mixed", chunked=True, token_budget=8192, prefill_first=True,
                       closed_loop=loop)
    # row 0: 16 x 1024 = two full steps of 8 prompts; the first 8 requests wait for the second step, the rest none
    t_step = 2.0 + 0.1 * 8 + 0.01 * 8192
    assert r["pred_ms"][0] == pytest.approx(2.0 + 0.1 * 16 + 0.01 * 16 + 0.5 * t_step / 128)
    # row 1: 4 x 3000 = 8192 + 3808 tokens; requests 0 and 1 finish in step 1 and wait for the last (1 prompt)
    t_last = 2.0 + 0.1 * 1 + 0.01 * 3808
    assert r["pred_ms"][1] == pytest.approx(2.0 + 0.1 * 4 + 0.01 * 4 + 0.5 * t_last / 100)
    # row 2 (not a closed loop): spread arrivals, each prompt a prefill step of its own
    t_dec = 2.0 + 0.1 * 16 + 0.01 * 16
    assert r["pred_ms"][2] == pytest.approx(t_dec + (16 / 129) * (2.0 + 0.1 + 0.01 * 1024))
    # the naive variant and an engine that mixes are untouched by the flag
    assert np.allclose(W.predict_tpot(rows, f, f, variant="naive", prefill_first=True, closed_loop=loop)["pred_ms"],
                       W.predict_tpot(rows, f, f, variant="naive")["pred_ms"])
    mixed = W.predict_tpot(rows, f, f, variant="mixed", chunked=True, token_budget=8192)
    assert mixed["pred_ms"][0] > r["pred_ms"][0]  # the spread amortisation charges every prompt of the round
    # one request: its own prefill carries its first token, no wait
    one = W.predict_tpot(rows.iloc[:1].assign(batch=1.0), f, f, variant="mixed", token_budget=8192,
                         prefill_first=True, closed_loop=[True])
    assert one["pred_ms"][0] == pytest.approx(2.0 + 0.1 + 0.01)
    with pytest.raises(W.WallclockError, match="token budget"):
        W.predict_tpot(rows, f, f, variant="mixed", token_budget=None, prefill_first=True, closed_loop=loop)


def test_tpot_claim_text_names_a_prefill_first_engines_schedule():
    from steptime_lab.experiments import wallclock_report as R

    assert R.variant_text("mixed", "vllm", "aic-silicon") == R.VARIANT_TEXT["mixed"]
    assert R.variant_text("naive", "sglang", "aic-silicon") == R.VARIANT_TEXT["naive"]
    assert "prefill first" in R.variant_text("mixed", "sglang", "aic-silicon")
    assert "WAVE_NOTE" in R.variant_text("mixed", "sglang", "aic-silicon")
    assert "WAVE_NOTE" not in R.variant_text("mixed", "sglang", "mlenergy-v3")


def _ttft_rows(c, isl=1024, osl=128):
    return pd.DataFrame({"batch": [float(c)], "prompt_tokens": [float(isl)], "output_tokens": [float(osl)]})


def test_ttft_wave_is_the_prefill_stream_of_the_wave_and_queues_beyond_the_kv_cache():
    """TTFT (W.TTFT_NOTE): one client = one prefill step of its prompt; c clients in lockstep = the mean over
    their prompts' completion steps of budget-sized prefill steps; a KV cache smaller than the wave queues the
    rest behind a whole wave; the steady schedule is half a decode step plus the mixed steps."""
    f = W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", engine="vllm", constants=Constants.default())
    one = W.predict_ttft(_ttft_rows(1), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192)
    pf = f(W.tokens._prefill_steps([1024], [1], 1), 1, None)["total"]
    assert one[0] == pytest.approx(pf[0])
    eight = W.predict_ttft(_ttft_rows(8), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192)
    pf8 = f(W.tokens._prefill_steps([8192], [8], 1), 1, None)["total"]
    assert eight[0] == pytest.approx(pf8[0])  # eight prompts of 1024 fill one 8192-token step
    sixteen = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192)
    assert sixteen[0] == pytest.approx(1.5 * pf8[0])  # half finish with the first full step, half with the second
    tight = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192, mem_util=0.21)
    # H100's 80 GiB is 85.9e9 bytes (gpus.yaml mem_gb, wave 31)
    assert tight[0] > sixteen[0]  # fewer requests fit (18.0 GB less 16.1 of weights): the rest wait for a wave
    with pytest.raises(ServeError, match="leave no KV cache"):  # 15.5 GB: the weights leave no cache (kv_budget)
        W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192, mem_util=0.18)
    steady = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192, variant="steady")
    assert 0 < steady[0] < sixteen[0]
    with pytest.raises(W.WallclockError):
        W.predict_ttft(_ttft_rows(1), f, "llama-3.1-8b", "h100-sxm", 1, token_budget=8192, variant="burst")


def test_ttft_over_isolated_prefill_is_the_median_ratio_per_concurrency_and_prompt():
    """E2.11's TTFT diagnostic: measured TTFT over the predicted isolated prefill of the same prompt, the
    median per (dataset, gpu, engine, concurrency) and per prompt length."""
    p = pd.DataFrame({"dataset": "aic-silicon", "gpu": "h100-sxm", "engine": "trtllm",
                      "batch": [8.0, 8.0, 8.0, 16.0], "prompt_tokens": [1024.0, 1024.0, 4096.0, 1024.0],
                      "ttft_ms": [300.0, 330.0, 1200.0, 400.0], "ttft_isolated_prefill_ms": [100.0, 100.0, 400.0, 100.0]})
    out = W.tokens.ttft_over_prefill(p)
    assert [(o["concurrency"], o["rows"]) for o in out] == [(8.0, 3), (16.0, 1)]
    assert out[0]["median_ratio"] == pytest.approx(3.0)
    assert out[0]["by_prompt_tokens"] == {"1024": pytest.approx(3.15), "4096": pytest.approx(3.0)}
    assert W.tokens.ttft_over_prefill(p.drop(columns=["ttft_isolated_prefill_ms"])) == []


def test_residual_per_request_reads_a_per_request_host_cost_off_the_misses():
    """E2.11's residual diagnostic: a miss of b ms per running request shows as the line's slope b."""
    from steptime_lab.experiments import wallclock_report as WR

    batch = np.array([8.0, 16.0, 64.0, 128.0])
    pred = pd.DataFrame({"dataset": "d", "gpu": "g", "engine": "e", "tp": [1, 1, 2, 2], "batch": batch,
                         "pred_ms": 10.0, "tpot_ms": 10.0 + 1.0 + 0.3 * batch})
    rec = WR.residual_per_request(pred)[0]
    assert rec["line"]["b_ms_per_request"] == pytest.approx(0.3) and rec["line"]["a_ms"] == pytest.approx(1.0)
    assert set(rec["by_tp"]) == {"1", "2"} and rec["rows"] == 4


def test_tpot_error_table_places_each_row_once_per_model_and_per_batch_bin():
    """E2.11's error table (ERROR_TABLE_NOTE): every row counted once per table, the batch bins' edges as stated
    (lower inclusive, the last open), MAPE and signed error per cell from the rows in it, both variants side by
    side; naive and mixed predictions over different rows are refused."""
    from steptime_lab.experiments import wallclock_report as WR

    batch = np.array([8.0, 20.0, 64.0, 128.0, 600.0, 1000.0])
    meas = np.full(6, 10.0)
    base = pd.DataFrame({"dataset": "d", "gpu": "g", "engine": "e", "tp": [1, 1, 1, 8, 8, 8], "model": "m",
                         "task": ["a", "a", "b", "a", "a", "a"], "batch": batch, "tpot_ms": meas})
    naive = {"pred": base.assign(pred_ms=[11.0, 9.0, 10.0, 15.0, 20.0, 5.0])}
    mixed = {"pred": base.assign(pred_ms=[10.0, 10.0, 12.0, 10.0, 10.0, 10.0])}
    t = WR.tpot_error_table(naive, mixed)
    assert sum(r["rows"] for r in t["by_model"]) == 6 and sum(r["rows"] for r in t["by_batch"]) == 6
    cell = {(r["tp"], r["task"]): r for r in t["by_model"]}
    assert cell[(1, "a")]["rows"] == 2 and cell[(1, "a")]["naive"] == {"mape": 0.1, "signed": 0.0}
    assert cell[(8, "a")]["naive"]["mape"] == pytest.approx((0.5 + 1.0 + 0.5) / 3, abs=1e-4)
    assert cell[(1, "b")]["mixed"] == {"mape": 0.2, "signed": 0.2}
    bins = {(r["tp"], tuple(r["batch_bin"])): r["rows"] for r in t["by_batch"]}
    assert bins == {(1, (0.0, 20.0)): 1, (1, (20.0, 70.0)): 2, (8, (70.0, 200.0)): 1, (8, (600.0, None)): 2}
    assert t["batch_bins"][-1] is None
    with pytest.raises(ValueError):
        WR.tpot_error_table(naive, {"pred": mixed["pred"].iloc[::-1]})


def _v0_rows():
    """Toy ML.ENERGY-v2-like TPOT rows of vLLM V0 on two GPUs (measured = invented round numbers, not data)."""
    rows = []
    for gpu in ("a100-sxm", "h100-sxm"):
        for b in (16.0, 64.0, 128.0):
            rows.append(dict(dataset="mlenergy-v2", gpu=gpu, model="llama-3.1-8b", model_source="x", engine="vllm-v0",
                             tp=1, dtype="bf16", mode="agg", batch=b, prompt_tokens=250.0, output_tokens=400.0,
                             tpot_ms=20.0 + 0.3 * b, measure="mean_tpot_ms", task="chat", source_id=f"{gpu}{b}"))
    return pd.DataFrame(rows)


def test_server_law_is_fitted_held_out_by_gpu_and_enters_the_scheduler_floor():
    """W.SERVER_NOTE: a GPU's server law (host.server_a_ms + server_b_ms N) comes from the OTHER GPUs' rows
    only (changing this GPU's measured times leaves its law unchanged), the fit is non-negative, and the
    fitted law raises exactly that engine's predicted TPOT on that GPU."""
    c = Constants.default()
    rows = _v0_rows()
    mixed = {"chunked": ["vllm"], "token_budget": 8192}
    r = W.fit_server_host(rows, constants=c, mixed=mixed)
    per = {x["gpu"]: x for x in r["per_gpu"]}
    assert per["a100-sxm"]["fitted_on"] == ["h100-sxm"] and per["h100-sxm"]["fitted_on"] == ["a100-sxm"]
    assert all(x["server_a_ms"] >= 0 and x["server_b_ms"] >= 0 for x in r["per_gpu"])
    assert r["all_rows"]["rows"] == 6
    moved = rows.copy()
    moved.loc[moved.gpu == "h100-sxm", "tpot_ms"] *= 3.0  # h100's own rows must not reach h100's law
    r2 = W.fit_server_host(moved, constants=c, mixed=mixed)
    per2 = {x["gpu"]: x for x in r2["per_gpu"]}
    assert per2["h100-sxm"]["server_a_ms"] == per["h100-sxm"]["server_a_ms"]
    assert per2["h100-sxm"]["server_b_ms"] == per["h100-sxm"]["server_b_ms"]
    assert per2["a100-sxm"]["server_b_ms"] != per["a100-sxm"]["server_b_ms"]  # a100's law reads h100's rows
    zero = W.tokens._with_server(None, "vllm-v0", {"h100-sxm": (0.0, 0.0, "test")})
    base = W.run_tpot(rows, n_boot=1, fitted=zero, constants=c)["pred"].sort_index()
    withl = W.run_tpot(rows, n_boot=1, fitted=r["fitted"], constants=c)["pred"].sort_index()
    h = (base.gpu == "h100-sxm").to_numpy()
    x = per["h100-sxm"]
    # naive variant: one decode step at the batch (linear between integer batches) + GPU-kernel prefill
    assert np.allclose(withl["pred_ms"].to_numpy()[h] - base["pred_ms"].to_numpy()[h],
                       x["server_a_ms"] + x["server_b_ms"] * base["batch"].to_numpy()[h])
    both = W.fit_server_hosts(rows, constants=c, mixed=mixed)  # every profile with a server law; v0 has rows here
    assert set(both["engines"]) == {"vllm-v0"} and both["engines"]["vllm-v0"]["per_gpu"] == r["per_gpu"]
    text = W.tpot_fitted_on(None, "vllm-v0", "h100-sxm", both)
    assert "fitted on a100-sxm's 3 TPOT rows, not on h100-sxm's" in text
    assert "server law" not in W.tpot_fitted_on(None, "vllm-v1-sync", "h100-sxm", both)
    assert W.server_fitted({"server_host": {"engines": both["engines"]}}, None)["engines"]["vllm-v0"]["h100-sxm"][
        "server_b_ms"]["value"] == per["h100-sxm"]["server_b_ms"]


def test_server_law_reports_its_held_out_mape_and_an_in_sample_fit_that_predicts_nothing():
    """SERVER_OWN_ROWS_NOTE: per GPU, mape_mixed is the mixed variant's MAPE on that GPU's rows under the held-out
    law (the score run_tpot gives with the fitted doc), and own_rows_fit is the same fit on the GPU's own rows with
    the MAPE it would give; the own fit follows the GPU's own rows but never reaches the fitted doc."""
    c = Constants.default()
    rows = _v0_rows()
    mixed = {"chunked": ["vllm"], "token_budget": 8192}
    r = W.fit_server_host(rows, constants=c, mixed=mixed)
    per = {x["gpu"]: x for x in r["per_gpu"]}
    pred = W.run_tpot(rows, n_boot=1, fitted=r["fitted"], variant="mixed", mixed=mixed, constants=c)["pred"]
    for g in ("a100-sxm", "h100-sxm"):
        d = pred[pred["gpu"] == g]
        assert per[g]["mape_mixed"] == pytest.approx(np.mean(np.abs(d["pred_ms"] / d["tpot_ms"] - 1.0)), abs=1e-4)
        own = per[g]["own_rows_fit"]
        assert own["rows"] == 3 and own["server_a_ms"] >= 0 and own["server_b_ms"] >= 0
        doc = W.tokens._with_server(None, "vllm-v0", {g: (own["server_a_ms"], own["server_b_ms"], "test")})
        p2 = W.run_tpot(rows[rows["gpu"] == g], n_boot=1, fitted=doc, variant="mixed", mixed=mixed, constants=c)["pred"]
        assert own["mape_mixed"] == pytest.approx(np.mean(np.abs(p2["pred_ms"] / p2["tpot_ms"] - 1.0)), abs=2e-4)
        assert own["mape_mixed"] <= per[g]["mape_mixed"] + 1e-4  # in-sample: at least as close on these toy rows
    moved = rows.copy()
    moved.loc[moved.gpu == "h100-sxm", "tpot_ms"] *= 3.0
    per2 = {x["gpu"]: x for x in W.fit_server_host(moved, constants=c, mixed=mixed)["per_gpu"]}
    assert per2["h100-sxm"]["own_rows_fit"]["server_b_ms"] > per["h100-sxm"]["own_rows_fit"]["server_b_ms"]
    assert per2["h100-sxm"]["server_b_ms"] == per["h100-sxm"]["server_b_ms"]  # the held-out law did not move
    assert "own_rows_fit" in W.fit_server_hosts(rows, constants=c, mixed=mixed)["note"]


def test_server_law_parts_split_the_held_out_law_by_dataset_exactly():
    """SERVER_OWN_ROWS_NOTE's law_parts: per GPU and dataset, the held-out law, its per-request part alone, its
    per-step part alone and no law, each the MAPE / signed mean run_tpot gives with that law laid over the doc."""
    c = Constants.default()
    rows = _v0_rows()
    rows.loc[rows["batch"] == 128.0, "dataset"] = "mlenergy-v2b"  # a second dataset on each GPU
    mixed = {"chunked": ["vllm"], "token_budget": 8192}
    per = {x["gpu"]: x for x in W.fit_server_host(rows, constants=c, mixed=mixed)["per_gpu"]}
    for g in ("a100-sxm", "h100-sxm"):
        x = per[g]
        assert [(p["dataset"], p["rows"]) for p in x["law_parts"]] == [("mlenergy-v2", 2), ("mlenergy-v2b", 1)]
        for part in x["law_parts"]:
            for key, ab in (("law", (x["server_a_ms"], x["server_b_ms"])), ("per_request_only", (0.0, x["server_b_ms"])),
                            ("per_step_only", (x["server_a_ms"], 0.0)), ("none", (0.0, 0.0))):
                doc = W.tokens._with_server(None, "vllm-v0", {g: (*ab, "test")})
                sel = rows[(rows["gpu"] == g) & (rows["dataset"] == part["dataset"])]
                d = W.run_tpot(sel, n_boot=1, fitted=doc, variant="mixed", mixed=mixed, constants=c)["pred"]
                e = d["pred_ms"].to_numpy() / d["tpot_ms"].to_numpy() - 1.0
                assert part[key]["mape"] == pytest.approx(np.mean(np.abs(e)), abs=2e-4), (g, key)
                assert part[key]["signed"] == pytest.approx(np.mean(e), abs=2e-4), (g, key)
        assert x["law_parts"][0]["none"]["signed"] < x["law_parts"][0]["law"]["signed"]  # the law adds host time
    assert "law_parts" in W.fit_server_hosts(rows, constants=c, mixed=mixed)["note"]


def _leaderboard_rows():
    """Toy ML.ENERGY-v3-like rows on two GPUs, predictions given (invented round numbers, not data): h100 clean and
    monotone; b200 with a fall (10 -> 8 ms at a larger batch), a wide ITL tail, and one run slower than h100's."""
    pred, raw = [], []
    for gpu, meas, est, disp in (("b200", (10.0, 8.0, 40.0), (10.0, 12.0, 15.0), (1.0, 2.0, 1.2)),
                                 ("h100-sxm", (20.0, 22.0, 30.0), (20.0, 22.0, 30.0), (1.05, 1.05, 1.05))):
        for seqs, t, p, q in zip((8, 16, 32), meas, est, disp):
            b = seqs - 0.1
            pred.append(dict(dataset="mlenergy-v3", gpu=gpu, engine="vllm-v1-sync", model="m", task="chat", tp=1,
                             batch=b, tpot_ms=t, pred_ms=p))
            raw.append(dict(gpu=gpu, model="m", task="chat", tp=1, avg_batch=b, max_num_seqs=seqs,
                            median_itl_ms=10.0, p90_itl_ms=10.0 * q))
    pred.append(dict(dataset="mlenergy-v2", gpu="b200", engine="vllm-v0", model="m", task="chat", tp=1, batch=3.0,
                     tpot_ms=9.0, pred_ms=1.0))  # another dataset: left out
    return pd.DataFrame(pred), pd.DataFrame(raw)


def test_leaderboard_consistency_counts_falls_bins_errors_by_itl_tail_and_pairs_runs_across_gpus():
    pred, raw = _leaderboard_rows()
    out = W.leaderboard_consistency(pred, raw)
    assert "falls" in out["note"] and out["bins"] == list(W.DISPERSION_BINS)
    g = {x["gpu"]: x for x in out["groups"]}
    assert set(g) == {"b200", "h100-sxm"}
    b = g["b200"]
    assert (b["rows"], b["pairs"], b["falls"]) == (3, 2, 1) and (g["h100-sxm"]["falls"], g["h100-sxm"]["mape"]) == (0, 0.0)
    assert b["dispersion"] == [1.0, 1.2, 2.0]
    assert b["mape"] == pytest.approx((0.0 + 0.5 + 0.625) / 3, abs=1e-4)
    bins = {tuple(x["p90_over_median"]): (x["rows"], x["mape"], x["signed"]) for x in b["by_dispersion"]}
    assert bins == {(1.0, 1.15): (1, 0.0, 0.0), (1.15, 1.3): (1, 0.625, -0.625), (1.6, None): (1, 0.5, 0.5)}
    assert b["by_task"] == {"chat": {"rows": 3, "mape": round((0.0 + 0.5 + 0.625) / 3, 4),
                                     "signed": round((0.0 + 0.5 - 0.625) / 3, 4)}}
    (c,) = out["cross_gpu"]
    assert c["gpus"] == ["b200", "h100-sxm"] and c["pairs"] == 3
    assert c["contrary"] == 1  # max_num_seqs 32: b200 measured 40 / 30 > 1, predicted 15 / 30 < 1
    assert c["measured_ratio"] == [0.364, 0.5, 1.333] and c["predicted_ratio"] == [0.5, 0.5, 0.545]
    assert c["by_task"]["chat"]["contrary"] == 1


def test_leaderboard_consistency_refuses_missing_columns_unknown_runs_bad_percentiles_and_bins():
    pred, raw = _leaderboard_rows()
    with pytest.raises(W.WallclockError, match="p90_itl_ms"):
        W.leaderboard_consistency(pred, raw.drop(columns="p90_itl_ms"))
    with pytest.raises(W.WallclockError, match="pred_ms"):
        W.leaderboard_consistency(pred.drop(columns="pred_ms"), raw)
    with pytest.raises(W.WallclockError, match="not in the ML.ENERGY v3 table"):
        W.leaderboard_consistency(pred, raw.iloc[1:])
    with pytest.raises(W.WallclockError, match="> 0"):
        W.leaderboard_consistency(pred, raw.assign(p90_itl_ms=0.0))
    with pytest.raises(W.WallclockError, match="two runs"):
        W.leaderboard_consistency(pred, pd.concat([raw, raw.iloc[:1]]))
    with pytest.raises(W.WallclockError, match="bin edges"):
        W.leaderboard_consistency(pred, raw, bins=(1.0, 1.3, 1.2))


def test_server_law_fit_recovers_a_known_per_tp_rank_part_held_out_by_gpu():
    """SERVER_TP_NOTE: where the profile declares host.server_tp_ms (vllm-v0), the least squares has a third column,
    server_tp (TP - 1); toy rows whose measured TPOT is the prediction under a known law (every GPU the same) give it
    back on each GPU held out and on all rows; the claim and server_fitted carry the held-out value; v1-sync's
    profile has no such field, so its fit has no such column."""
    c = Constants.default()
    mixed = {"chunked": ["vllm"], "token_budget": 8192}
    rows = []
    for gpu in ("a100-sxm", "h100-sxm"):
        for tp in (1, 2, 4):
            for b in (16.0, 96.0):
                rows.append(dict(dataset="mlenergy-v2", gpu=gpu, model="llama-3.1-8b", model_source="x",
                                 engine="vllm-v0", tp=tp, dtype="bf16", mode="agg", batch=b, prompt_tokens=250.0,
                                 output_tokens=400.0, tpot_ms=1.0, measure="mean_tpot_ms", task="chat",
                                 source_id=f"{gpu}{tp}{b}"))
    rows = pd.DataFrame(rows)
    truth = (1.5, 0.2, 4.0)
    doc = W.tokens._with_server(None, "vllm-v0", {g: (*truth, "truth") for g in ("a100-sxm", "h100-sxm")})
    pred = W.run_tpot(rows, n_boot=1, fitted=doc, variant="mixed", mixed=mixed, constants=c)["pred"].sort_index()
    rows.loc[pred.index, "tpot_ms"] = pred["pred_ms"]
    r = W.fit_server_host(rows, constants=c, mixed=mixed)
    for x in r["per_gpu"] + [r["all_rows"]]:
        got = (x["server_a_ms"], x["server_b_ms"], x["server_tp_ms"])
        assert got == pytest.approx(truth, abs=2e-3), x.get("gpu")
    tp1 = W.fit_server_host(rows[rows["tp"] == 1], constants=c, mixed=mixed)  # no TP > 1 row: the column is left out
    assert all(x["server_tp_ms"] == 0.0 for x in tp1["per_gpu"])
    assert {p["dataset"] for p in r["per_gpu"][0]["law_parts"]} == {"mlenergy-v2"}
    assert "per_tp_rank_only" in r["per_gpu"][0]["law_parts"][0]
    srv = {"engines": {"vllm-v0": {"per_gpu": r["per_gpu"], "all_rows": r["all_rows"]}}}
    lay = W.server_fitted({"server_host": srv}, None)["engines"]["vllm-v0"]["h100-sxm"]
    assert lay["server_tp_ms"]["value"] == r["per_gpu"][1]["server_tp_ms"]
    from steptime_lab.experiments.wallclock_report import token_time_document

    res = {"scores": [], "pred": pred}
    doc = token_time_document(res, [], {"tpot_mape": 0.12}, [], server=srv)
    (cl,) = [x for x in doc["claims"] if "server_tp_ms x (TP - 1)" in x["claim"]]
    assert cl["value"]["a100-sxm"]["server_tp_ms"] == r["per_gpu"][0]["server_tp_ms"]
    v1 = rows.assign(engine="vllm-v1-sync", model="qwen3-8b")
    assert "server_tp_ms" not in W.fit_server_host(v1, engine="vllm-v1-sync", constants=c, mixed=mixed)["all_rows"]


def test_server_law_engines_are_the_profiles_that_carry_one():
    """One place: the engines E2.11 fits a server law for are the profiles with host.server_* fields (the
    synchronous engines whose front-end or output work sits in the step loop)."""
    assert set(W.server_engines()) == {"vllm-v0", "vllm-v1-sync"}


def test_server_fields_are_optional_and_zero_where_a_profile_has_none():
    from steptime.specs import get_gpu
    from steptime.specs.engines import get_engine
    from steptime.terms.host import scheduler_floor

    g = get_gpu("h100-sxm")
    c = Constants.default()
    v1 = get_engine("vllm")
    assert "server_a_ms" not in v1.values and v1.get_or("server_b_ms", g, c) == 0.0
    v0 = get_engine("vllm-v0")
    lawless = v0.with_fitted("h100-sxm", {"server_a_ms": 0.0, "server_b_ms": 0.0}, source="test")
    laws = v0.with_fitted("h100-sxm", {"server_a_ms": 2.0, "server_b_ms": 0.5}, source="test")
    n = np.array([0, 1, 10])
    d = scheduler_floor(n, g, c, engine=laws) - scheduler_floor(n, g, c, engine=lawless)
    assert np.allclose(d, [0.0, 2.5e-3, 7.0e-3])  # s_a + s_b N per non-empty step, in seconds


@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v1-sync"])
def test_shipped_server_law_is_the_fit_e2_11_reports(engine):
    """engines.yaml <engine> host.server_* = E2.11's fit on every row (metrics.server_host.engines.<engine>.all_rows)
    of the committed result: one number, one source."""
    import json
    from pathlib import Path

    from steptime.specs.engines import get_engine

    res = Path(__file__).resolve().parents[1] / "results" / "E2_11.json"
    if not res.exists():
        pytest.skip("results/E2_11.json not built")
    fit = json.loads(res.read_text())["metrics"]["server_host"]["engines"][engine]["all_rows"]
    e = get_engine(engine)
    assert e.get("server_a_ms") == pytest.approx(fit["server_a_ms"], abs=1e-4)
    assert e.get("server_b_ms") == pytest.approx(fit["server_b_ms"], abs=1e-5)
    # host.server_tp_ms where the profile declares it (vllm-v0, SERVER_TP_NOTE): the fit's third column
    assert ("server_tp_ms" in e.values) == ("server_tp_ms" in fit) == (engine == "vllm-v0")
    if "server_tp_ms" in fit:
        assert e.get("server_tp_ms") == pytest.approx(fit["server_tp_ms"], abs=1e-4)


def test_harness_step_budget_as_the_generator_deploys_each_engine():
    """AIConfigurator's generator: max_num_tokens = c + ISL + 1500 for TensorRT-LLM (no chunking: a step carries
    floor((ISL + 1500) / ISL) whole prompts beside the c decodes) and for vLLM V1 (chunked: ISL + 1500 prompt tokens a
    step, not V1's default 8192); SGLang, left at its defaults, carries the token budget."""
    per, chunked = W.harness_step_budget("trtllm", [8, 64], [1024, 4096], 8192)
    assert not chunked and list(per) == [2048.0, 4096.0]
    mnt, chunked = W.harness_schedule("trtllm", 64, 4096)
    assert mnt == 64 + 4096 + 1500 and not chunked
    for eng in ("vllm", "vllm-v1-sync", "vllm-v1-unfused"):
        mnt, chunked = W.harness_schedule(eng, 64, 4096)
        assert mnt == 64 + 4096 + 1500 and chunked
        per, chunked = W.harness_step_budget(eng, [8, 64], [1024, 4096], 8192)
        assert chunked and list(per) == [1024.0 + 1500, 4096.0 + 1500]
    assert W.harness_schedule("sglang", 64, 4096) is None
    per, chunked = W.harness_step_budget("sglang", [8], [1024], 8192)
    assert chunked and list(per) == [8192.0]
    with pytest.raises(W.WallclockError, match="token budget"):
        W.harness_step_budget("sglang", [8], [1024], None)
    with pytest.raises(W.WallclockError, match=">= 1"):
        W.harness_step_budget("trtllm", [0], [1024], 8192)


def test_harness_burst_ttft_rounds_of_a_burst_and_the_join_steps():
    """HARNESS_TTFT_NOTE on a unit-step predictor (every step 1 ms, a decode step 1 ms): c = 4 prompts, one a step,
    join 3: round 1 waits 1, 2, 3, 4 steps (mean 2.5); a later round's request at burst step b waits
    min(b, 2) burst steps and 2 - min(b, 2) decode steps before its own: 3 steps each. Mean over 10 rounds:
    (2.5 + 9 x 3) / 10. With a slower prefill-carrying step the later rounds weigh it min(b, 2) + 1 times."""
    unit = lambda fr, tp, _: {"total": np.ones(len(fr))}
    got = W.harness_burst_ttft([4], [1000], [100], [1000], 3, unit, 1)
    assert got[0] == pytest.approx((2.5 + 9 * 3.0) / 10)
    slow = lambda fr, tp, _: {"total": np.where(fr["ctx_tokens"].to_numpy() > 0, 10.0, 1.0)}
    got = W.harness_burst_ttft([4], [1000], [100], [1000], 3, slow, 1)
    later = np.mean([2 * 1 + 1 * 10, 1 * 1 + 2 * 10, 3 * 10, 3 * 10])
    assert got[0] == pytest.approx((25.0 + 9 * later) / 10)
    sync = W.harness_burst_ttft([4], [1000], [100], [1000], 2, slow, 1)
    assert sync[0] < got[0]  # a synchronous loop joins one step sooner
    with pytest.raises(W.WallclockError, match=">= 1"):
        W.harness_burst_ttft([4], [1000], [100], [1000], 0, unit, 1)


def test_ttft_harness_is_the_wave_for_a_prefill_first_engine_and_needs_the_engine():
    """The harness schedule: SGLang (prefill first) keeps every round a wave, so it is the wave schedule; a mixing
    engine (TensorRT-LLM) is priced by the burst; without the engine the schedule is refused."""
    f = W.make_predictor("vllm", "llama-3.1-8b", "h100-sxm", engine="vllm", constants=Constants.default())
    kw = dict(token_budget=8192)
    wave = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, **kw)
    sg = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, variant="harness", engine="sglang", **kw)
    assert sg[0] == pytest.approx(wave[0])
    trt = W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, variant="harness", engine="trtllm", **kw)
    burst = W.harness_burst_ttft([16], [1024], [128], [2048], 3, f, 1)
    assert trt[0] == pytest.approx(burst[0])
    with pytest.raises(W.WallclockError, match="needs the engine"):
        W.predict_ttft(_ttft_rows(16), f, "llama-3.1-8b", "h100-sxm", 1, variant="harness", **kw)


def test_ttft_document_appends_the_harness_disclosure_to_the_results_own():
    """document_ttft keeps the result's other disclosures and appends the harness schedule's; a group of too few
    rows is reported, not claimed."""
    from steptime_lab.experiments import wallclock_report as R

    sc = [{"dataset": "aic-silicon", "gpu": "h100-sxm", "engine": "trtllm", "subset": "ttft", "variant": v, "cells": n,
           "tps": [1], "models": ["m"], "signed_mean": 0.1, "mape": 0.2, "tp": "all"}
          for v in W.TTFT_VARIANTS for n in (12,)]
    ttft = {"scores": sc, "skipped": [], "pred": pd.DataFrame({"x": range(12)})}
    doc = R.document_ttft(ttft, {"ttft_mape": 0.25}, min_rows=10, disclosed="earlier text.")
    assert doc["metrics"]["disclosed"].startswith("earlier text. ") and R.TTFT_HARNESS_DISCLOSED in doc["metrics"]["disclosed"]
    assert len(doc["claims"]) == len(W.TTFT_VARIANTS) and any("harness schedule" in c["claim"] for c in doc["claims"])
    assert R.document_ttft(ttft, {"ttft_mape": 0.25}, min_rows=13)["claims"] == []


def _consistency_rows():
    """Two closed-loop groups and one leaderboard group (left out): A clean and monotone, B with a pair of twins
    5x apart and a fall of TPOT at a higher concurrency."""
    rows = []
    for b, t in ((1, 10.0), (4, 11.0), (16, 14.0)):
        rows.append(dict(dataset="aic-silicon", gpu="h100-sxm", engine="trtllm", batch=b, tpot_ms=t, pred_ms=10.0))
    for b, t in ((1, 8.0), (1, 40.0), (4, 30.0), (8, 15.0)):
        rows.append(dict(dataset="aic-silicon", gpu="gb200", engine="trtllm", batch=b, tpot_ms=t, pred_ms=10.0))
    rows.append(dict(dataset="mlenergy-v2", gpu="a100-sxm", engine="vllm", batch=3.5, tpot_ms=99.0, pred_ms=1.0))
    d = pd.DataFrame(rows)
    return d.assign(model="qwen3-32b", dtype="bf16", tp=2, prompt_tokens=2000.0, output_tokens=500.0)


def test_silicon_consistency_finds_twins_that_disagree_and_token_times_that_fall_with_concurrency():
    out = W.silicon_consistency(_consistency_rows())
    assert "twins" in out["note"]
    g = {x["gpu"]: x for x in out["groups"]}
    assert set(g) == {"h100-sxm", "gb200"}  # the leaderboard's measured-batch rows are not a closed loop
    clean, bad = g["h100-sxm"], g["gb200"]
    assert (clean["twins"], clean["twin_spread"], clean["pairs"], clean["falls"], clean["deepest_fall"]) == (0, 1.0, 2, 0, 1.0)
    assert clean["ratio"] == [1.0, 1.1, 1.4] and clean["gap_ms"] == [0.0, 1.0, 4.0]
    assert (bad["rows"], bad["twins"], bad["twin_spread"]) == (4, 1, 5.0)
    assert bad["twin_ttft_spread"] == 1.0  # no TTFT column: nothing to compare
    ttft = np.where(d_gb := _consistency_rows()["gpu"].eq("gb200"), 100.0, 50.0)
    ttft[np.flatnonzero(d_gb)[1]] = 250.0  # the second twin's first token 2.5x later
    again = {x["gpu"]: x for x in W.silicon_consistency(_consistency_rows().assign(ttft_ms=ttft))["groups"]}
    assert (again["gb200"]["twin_ttft_spread"], again["h100-sxm"]["twin_ttft_spread"]) == (2.5, 1.0)
    # batch means 24 -> 30 -> 15: two pairs, one fall (15 / 30)
    assert (bad["pairs"], bad["falls"], bad["deepest_fall"]) == (2, 1, 0.5)
    assert bad["gap_ms"] == [-2.0, 12.5, 30.0]


def test_silicon_consistency_serial_bound_flags_a_token_time_slower_than_serving_the_batch_one_at_a_time():
    # the bound: B x (t1 + f1 / (OSL - 1)), t1 / f1 the sweep's fastest batch-1 row (8 ms, 100 ms first token, OSL 500)
    d = _consistency_rows().assign(ttft_ms=100.0)
    g = {x["gpu"]: x for x in W.silicon_consistency(d)["groups"]}
    per = 8.0 + 100.0 / 499.0
    # gb200: the 40 ms batch-1 twin is over (40 / per); batch 4 at 30 ms is under 4 x per, batch 8 at 15 ms far under
    assert (g["gb200"]["serial_checked"], g["gb200"]["serial_over"]) == (3, 1)
    assert g["gb200"]["serial_worst"] == round(40.0 / per, 3)
    clean = g["h100-sxm"]  # reference 10 ms: 11 ms at batch 4 and 14 ms at batch 16 are well inside
    assert (clean["serial_checked"], clean["serial_over"]) == (2, 0)
    assert clean["serial_worst"] == round(11.0 / (4 * (10.0 + 100.0 / 499.0)), 3)
    # no batch-1 row in a sweep, or no TTFT to price the arriving prompts: nothing is checked
    no_one = {x["gpu"]: x for x in W.silicon_consistency(d[d["batch"] > 1])["groups"]}
    assert no_one["gb200"]["serial_checked"] == 0 and no_one["gb200"]["serial_worst"] == 0.0
    assert {x["gpu"]: x["serial_checked"] for x in W.silicon_consistency(_consistency_rows())["groups"]} == {
        "h100-sxm": 0, "gb200": 0}
    assert "serial" in W.SILICON_CONSISTENCY_NOTE


def test_silicon_consistency_refuses_a_frame_without_predictions_or_with_a_zero_time():
    d = _consistency_rows()
    with pytest.raises(W.WallclockError, match="pred_ms"):
        W.silicon_consistency(d.drop(columns="pred_ms"))
    with pytest.raises(W.WallclockError, match="> 0"):
        W.silicon_consistency(d.assign(tpot_ms=np.where(d["gpu"] == "gb200", 0.0, d["tpot_ms"])))


def test_row_reading_fpm_signatures_and_bad_input():
    """row_reading_fpm: the decode row before an eager step vs before a decode, the own-step flag by world size,
    and a row under its roofline with its sum with the previous row."""
    rows = []
    for tp in (1, 2):
        for i in range(6):
            rows.append(dict(phase="decode", ctx_tokens=0, ctx_requests=0, decode_requests=4, latency_ms=10.0))
            rows.append(dict(phase="prefill", ctx_tokens=4096, ctx_requests=1, decode_requests=0, latency_ms=200.0))
        for r in rows[-12:]:
            r["tp"] = tp
    s = pd.DataFrame(rows)
    s["step"] = np.arange(len(s))
    s["segment"], s["ctx_kv_tokens"], s["mean_decode_kv_tokens"] = "sweep", 0, 0.0
    s["gpu"], s["model"], s["engine"] = "b300", "qwen3-32b", "vllm"
    s.loc[(s.tp == 1) & (s.phase == "decode"), "latency_ms"] = 20.0  # TP 1: each decode row carries the launch
    s.loc[s.index[(s.tp == 1)][4:6], "latency_ms"] = [390.0, 10.0]   # a doubled row, then a fast one
    pred = np.where(s.phase == "decode", 10.0, 200.0)
    floor = pred * 0.7
    out = {r["tp"]: r for r in W.row_reading_fpm(s, pred, floor, cap=512)}
    assert out[1]["rows_own_step"] is False and out[2]["rows_own_step"] is True
    assert out[1]["decode_before_eager"]["measured_over_predicted_median"] == pytest.approx(2.0)
    assert out[2]["decode_before_eager"]["measured_over_predicted_median"] == pytest.approx(1.0)
    assert out[1]["decode_before_decode"]["rows"] == 0 and out[1]["decode_before_decode"][
        "measured_over_predicted_median"] is None
    (b,) = out[1]["below_roofline"]
    assert b["measured_ms"] == 10.0 and b["sum_with_previous_measured_ms"] == pytest.approx(400.0)
    assert b["sum_with_previous_predicted_ms"] == pytest.approx(210.0) and out[2]["below_roofline"] == []
    with pytest.raises(W.WallclockError, match="aligned"):
        W.row_reading_fpm(s, pred[:-1], floor, cap=512)
    with pytest.raises(W.WallclockError, match="positive"):
        W.row_reading_fpm(s, np.zeros(len(s)), floor, cap=512)


def test_row_caveat_only_where_rows_are_not_own_steps():
    from steptime_lab.experiments import wallclock_report as R
    assert R._row_caveat("vllm", 1) == R.ROW_CAVEAT and R._row_caveat("vllm", 2) == ""
    assert R._row_caveat("vllm-v1-sync", 1) == ""  # no async scheduling: each row is its own step


def _prefill_sweep(a=0.0, b_us=0.0, per_prompt=0.0, tps=(1, 2)):
    """Sweep prefills (one prompt at 128 / 1024 / 4096 tokens, two at 8192) over a flat prediction of 10 ms + 1 us
    per token (half of it GEMM), measured with a per-step a ms, b_us per token and per_prompt ms per extra prompt."""
    rows = []
    for tp in tps:
        for rep in range(2):
            for t, n in ((128, 1), (1024, 1), (4096, 1), (8192, 2)):
                rows.append(dict(phase="prefill", segment="sweep", ctx_tokens=t, ctx_requests=n, ctx_kv_tokens=0,
                                 decode_requests=0, mean_decode_kv_tokens=0.0, tp=tp))
        rows.append(dict(phase="decode", segment="sweep", ctx_tokens=0, ctx_requests=0, ctx_kv_tokens=0,
                         decode_requests=4, mean_decode_kv_tokens=1000.0, tp=tp))
    s = pd.DataFrame(rows)
    s["step"] = np.arange(len(s))
    s["gpu"], s["model"], s["engine"] = "b300", "qwen3-32b", "vllm"
    pred_ms = 10.0 + 1e-3 * s["ctx_tokens"]
    s["latency_ms"] = pred_ms + a + 1e-3 * b_us * s["ctx_tokens"] + per_prompt * (s["ctx_requests"] - 1).clip(0)
    pred = pd.DataFrame({"pred_ms": pred_ms, **{f"{k}_ms": 0.0 for k in W.KINDS}}, index=s.index)
    pred["gemm_ms"] = pred_ms / 2
    return s, pred


def test_prefill_residual_separates_a_per_step_a_per_token_and_a_per_prompt_cost():
    """E1.26's prefill diagnostic (issue 19): a per-step constant is the line's intercept, a per-token cost its
    slope, a per-prompt cost the two-prompt composition's excess over the line; decode steps take no part."""
    s, pred = _prefill_sweep(a=1.5, b_us=7.0, per_prompt=2.0)
    out = W.prefill_residual(s, pred)
    assert [e["tp"] for e in out] == [1, 2]
    for e in out:
        assert e["line"]["a_ms"] == pytest.approx(1.5) and e["line"]["b_us_per_token"] == pytest.approx(7.0)
        two = [c for c in e["compositions"] if c["prompts"] == 2]
        assert len(two) == 1 and two[0]["excess_per_extra_prompt_ms"] == pytest.approx(2.0)
        assert {c["tokens"] for c in e["compositions"]} == {128, 1024, 4096, 8192}
        c = next(c for c in e["compositions"] if c["tokens"] == 4096)
        assert c["residual_over_gemm"] == pytest.approx((1.5 + 7.0 * 4.096) / ((10.0 + 4.096) / 2))
        # the sweep cycles 128 -> 1024 -> 4096 -> 8192 -> 128: each row's next step is a prefill but the last one's
        assert c["residual_by_next_phase_ms"] == {"prefill": pytest.approx(1.5 + 7.0 * 4.096)}
    last = next(c for c in out[1]["compositions"] if c["tokens"] == 8192)
    assert set(last["residual_by_next_phase_ms"]) == {"prefill", "decode"}
    # no missing cost: nothing to read
    e = W.prefill_residual(*_prefill_sweep())[0]
    assert e["line"]["a_ms"] == pytest.approx(0.0, abs=1e-9) and e["line"]["b_us_per_token"] == pytest.approx(0.0, abs=1e-9)


def test_prefill_residual_refuses_bad_input():
    s, pred = _prefill_sweep()
    with pytest.raises(W.WallclockError, match="aligned"):
        W.prefill_residual(s, pred.iloc[1:])
    with pytest.raises(W.WallclockError, match="aligned"):
        W.prefill_residual(s, pred.drop(columns=["gemm_ms"]))
    with pytest.raises(W.WallclockError, match="no sweep prefill"):
        dec = s[s["phase"] == "decode"]
        W.prefill_residual(dec, pred.loc[dec.index])
    two = pd.concat([s, s.assign(gpu="b200", step=s["step"] + 1000)], ignore_index=True)
    with pytest.raises(W.WallclockError, match="one \\(gpu, engine\\)"):
        W.prefill_residual(two, pd.concat([pred, pred], ignore_index=True))


def _silicon_rows(tpot):
    return pd.DataFrame({"dataset": "aic-silicon", "gpu": "h100-sxm", "engine": "vllm-v1-sync", "model": "qwen3-32b",
                         "tp": 1, "dtype": "fp8", "batch": 24.0, "running": 24.0, "prompt_tokens": 4000.0,
                         "output_tokens": 1000.0, "tpot_ms": tpot, "pred_ms": [18.0, 33.0], "source_id": ["a", "b"]})


def test_kv_read_bound_with_weights_adds_a_dense_models_projection_weights():
    """E2.11's bound (KV_WEIGHT_BOUND_NOTE): Qwen3-32B at TP 1, 24 requests at ISL 4000 + OSL 1000 / 2, bf16 KV (64
    layers x 8 KV heads x 128 x K,V x 2 B a token) plus the fp8 projection weights of 64 layers (qkv 10240 x 5120, o
    5120 x 8192, gate/up 51200 x 5120, down 5120 x 25600, 1 B each), read once at the H100's bandwidth. The KV read
    alone (E3.4's bound, weights off) is 8.45 ms, above neither row; with the weights 17.8 ms, above the 16.85 ms row."""
    from steptime.specs import get_gpu

    rows = _silicon_rows([16.855, 30.0]).assign(ep=1)
    bw = get_gpu("h100-sxm").mem_bw
    kv = 24 * 64 * 8 * 128 * 2 * 2.0 * 4500
    weights = 64 * (10240 * 5120 + 5120 * 8192 + 51200 * 5120 + 5120 * 25600) * 1.0
    assert np.allclose(W.kv_read_bound_ms(rows), kv / bw * 1e3, rtol=1e-9)
    assert np.allclose(W.kv_read_bound_ms(rows, weights=True), (kv + weights) / bw * 1e3, rtol=1e-9)
    assert W.kv_read_bound_ms(rows)[0] < 16.855 < W.kv_read_bound_ms(rows, weights=True)[0]


def test_token_kv_bound_lists_rows_below_and_their_groups_mape_with_and_without_them():
    """E2.11's metrics.kv_read_bound: per variant, the row below the bound and its group's MAPE on every row (what
    the claim scores) and without it (context); rows lacking a column get a one-line error."""
    chk = W.token_kv_bound({"mixed": _silicon_rows([16.855, 30.0])})
    assert chk["note"] == W.KV_WEIGHT_BOUND_NOTE
    assert [r["source_id"] for r in chk["mixed"]["rows"]] == ["a"]
    g = chk["mixed"]["groups"]
    assert len(g) == 1 and g[0]["below"] == 1 and g[0]["rows"] == 2
    assert g[0]["mape_all"] == pytest.approx(round(((18 - 16.855) / 16.855 + 0.1) / 2, 4))
    assert g[0]["mape_within_bound"] == pytest.approx(0.1)
    assert W.token_kv_bound({"mixed": _silicon_rows([20.0, 30.0])})["mixed"] == {"groups": [], "rows": []}
    with pytest.raises(SteptimeError, match="lack pred_ms"):
        W.kv_bound_check(_silicon_rows([16.855, 30.0]).assign(kv_read_bound_ms=1.0).drop(columns="pred_ms"))


def test_committed_e2_11_lists_the_two_silicon_rows_below_the_read_bound():
    """The committed result carries the check (context, no claim): in both variants exactly the ISL 4000 / OSL 1000
    silicon H100 vLLM rows at TP 1 c = 24 and TP 2 c = 48 (issue 19 item 4, helper e211t) are below the bound."""
    import json
    from pathlib import Path

    res = Path(__file__).resolve().parents[1] / "results" / "E2_11.json"
    if not res.exists():
        pytest.skip("results/E2_11.json not built")
    chk = json.loads(res.read_text())["metrics"]["kv_read_bound"]
    assert chk["note"] == W.KV_WEIGHT_BOUND_NOTE
    for variant in ("naive", "mixed"):
        rows = chk[variant]["rows"]
        assert sorted((r["dataset"], r["gpu"], r["engine"], r["tp"], r["batch"], r["prompt_tokens"], r["output_tokens"])
                      for r in rows) == [("aic-silicon", "h100-sxm", "vllm-v1-sync", 1, 24.0, 4000.0, 1000.0),
                                         ("aic-silicon", "h100-sxm", "vllm-v1-sync", 2, 48.0, 4000.0, 1000.0)]
        assert [(g["gpu"], g["engine"], g["below"]) for g in chk[variant]["groups"]] == [("h100-sxm", "vllm-v1-sync", 2)]
