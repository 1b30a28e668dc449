"""E3.4 (MoE wall clock) and E3.5 (what EP buys): layouts read in steptime's terms, models and dtypes, the
FPM refusals, the documents' structured claims (tests/test_moe_serve.py covers the simulator itself)."""

import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.step import predict_steps
from steptime_lab.experiments import moe as E
from steptime_lab.experiments import moe_wallclock as X


@pytest.mark.parametrize("row,want", [
    ((8, 1, 8, 1), (8, 1, 1)),        # attention TP 8, experts sliced 8 ways
    ((1, 8, 1, 8), (1, 8, 8)),        # attention DP 8, EP 8
    ((8, None, 1, 8), (8, 8, 1)),     # attention TP 8, EP over the same 8 GPUs
    ((1, 4, 2, 2), None),             # MoE TP x EP hybrid: not represented
    ((8, 1, 4, 1), None),             # experts on fewer GPUs than attention: not represented
])
def test_silicon_layouts_in_steptime_terms(row, want):
    got, why = X.silicon_layout(*[np.nan if v is None else v for v in row])
    assert got == want and (bool(why) == (want is None))


@pytest.mark.parametrize("tp,dp,ep,want", [(1, 1, 1, (1, 1, 1)), (2, 1, 1, (2, 1, 1)), (1, 4, 4, (1, 4, 4)),
                                           (1, 1, 8, (8, 8, 1)), (1, 2, 1, None), (2, 2, 4, None)])
def test_mlenergy_layouts_in_steptime_terms(tp, dp, ep, want):
    assert X.mlenergy_layout(tp, dp, ep)[0] == want


def test_models_and_dtypes(repo_root):
    mm = {"Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b"}
    assert X.model_key("deepseek-v3", "deepseek-ai/DeepSeek-R1", mm) == ("deepseek-v3", "specs")
    assert X.model_key("x", "Qwen/Qwen3-30B-A3B-Instruct-2507", mm)[1].startswith("model_map (ASSUMED")
    assert X.model_key("minimax-m2.5", "MiniMaxAI/MiniMax-M2.5", mm) == ("minimax-m2.5", "specs")
    assert X.model_key("glm-5", "zhipuai/GLM-5", mm)[0] is None
    cfg = {"zhipuai/GLM-5": repo_root / "raw/aiconfigurator/model_configs/zai-org--GLM-5_config.json"}
    key, why = X.model_key("glm-5", "zhipuai/GLM-5", mm, cfg)
    assert key is None and "sparse-indexer attention" in why
    assert X.model_key("llama-3.1-8b", "meta-llama/Llama-3.1-8B", mm)[0] is None  # dense: not an MoE row
    dm = {"nvfp4": "fp4", "fp8": "fp8_block"}
    assert X.weight_dtype("nvfp4", "gpt-oss-120b", get_gpu("h100-sxm"), dm)[0] == "mxfp4"
    assert X.weight_dtype("nvfp4", "gpt-oss-120b", get_gpu("b200"), dm)[0] == "nvfp4"
    assert X.weight_dtype("nvfp4", "deepseek-v3", get_gpu("b200"), dm)[0] == "nvfp4"
    assert X.weight_dtype("int4_wo", "deepseek-v3", get_gpu("b200"), dm)[0] is None


def test_fpm_models_steptime_cannot_represent_are_refused_with_its_line():
    parts = X.fpm_parts([{"name": "DeepSeek-V4-Flash", "model": "deepseek-ai/DeepSeek-V4-Flash", "runs": "r"},
                         {"name": "Qwen3-30B-A3B", "model": "qwen3-30b-a3b", "runs": "r", "why": ""}])
    assert not parts[0]["represented"] and "Error" in parts[0]["refusal"]
    assert parts[1]["represented"] and parts[1]["model_key"] == "qwen3-30b-a3b"


def test_no_all_to_all_when_ep_equals_tp():
    """ep = tp (one data-parallel rank): every GPU holds every token; the TP all-reduce combines the experts."""
    kw = dict(dtype="fp8_block")
    same = predict_steps("deepseek-v3", "h200-sxm", np.zeros(16, int), np.ones(16), np.full(16, 1000), 1, tp=8, ep=8, **kw)
    dp = predict_steps("deepseek-v3", "h200-sxm", np.zeros(16, int), np.ones(16), np.full(16, 1000), 1, tp=1, ep=8, **kw)
    assert same["terms_ms"]["moe_a2a"][0] == 0 and same["terms_ms"]["allreduce"][0] > 0
    assert dp["terms_ms"]["moe_a2a"][0] > 0 and dp["terms_ms"]["allreduce"][0] == 0


def test_token_rows_predicted_and_scored_per_group():
    rows = pd.DataFrame({"dataset": "aic-silicon", "gpu": "h200-sxm", "model": "qwen3-235b-a22b", "model_found": "specs",
                         "engine": "vllm", "tp": [4, 4], "ep": [1, 1], "dp": 1, "dtype": "fp8", "mode": "agg",
                         "batch": [8.0, 16.0], "prompt_tokens": 1024.0, "output_tokens": 256.0,
                         "tpot_ms": [30.0, 33.0], "measure": "tpot_ms", "source_id": ["a", "b"]})
    tok = X.predict_tokens(rows, mixed={"chunked": ["vllm"], "token_budget": 8192}, n_boot=10,
                           constants=Constants.default())
    assert len(tok["pred"]) == 2 and np.all(tok["pred"]["pred_ms"] > 0) and len(tok["scores"]) == 1
    doc = X.document(tok, {"runs": [], "skipped": []}, [], [], {"tpot_mape_per_group": 0.15, "fpm_mape_per_phase": 0.12})
    c = doc["claims"][0]
    assert c["op"] == "<=" and c["target"] == 0.15 and c["met"] == (c["value"] <= 0.15)
    assert doc["metrics"]["targets_total"] == 1 and len(doc["metrics"]["missed"]) == (0 if c["met"] else 1)


def test_ep_sweep_names_the_limit_and_keeps_misfits():
    df = E.ep_sweep(["qwen3-30b-a3b", "deepseek-v3"], ["h100-sxm"], layouts=[(1, 1), (1, 8), (8, 8)])
    fit = df.dropna(subset=["tok_s_per_gpu"])
    assert set(fit["limit"]) <= set(fit.columns.tolist() + list(predict_steps.__globals__["TERMS"]) +
                                    ["moe_experts", "moe_a2a", "router", "shared_experts", "mla_absorb", "dense_mlp"])
    assert df[(df.model == "deepseek-v3") & (df.tp == 1) & (df.ep == 1)]["error"].str.contains("GB").all()
    doc = E.document_ep(df)
    assert all("met" not in c and "no measured truth" in c["claim"] for c in doc["claims"])
    assert E.ep_layouts(8) == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (2, 8), (4, 1), (4, 4), (4, 8),
                               (8, 1), (8, 8)]


def test_fp8_label_on_a_block_scaled_checkpoint_runs_block_scaled():
    dm = {"fp8": "fp8"}
    assert X.weight_dtype("fp8", "minimax-m2.5", get_gpu("h200-sxm"), dm)[0] == "fp8_block"
    assert X.weight_dtype("fp8", "qwen3-235b-a22b", get_gpu("h200-sxm"), dm)[0] == "fp8"
    # the served checkpoint decides: Qwen3-235B-A22B-FP8's own config.json is block-scaled (weight_block_size)
    assert X.weight_dtype("fp8", "qwen3-235b-a22b", get_gpu("h200-sxm"), dm, block_scaled=True)[0] == "fp8_block"


def test_served_checkpoint_config_decides_block_scaling(repo_root, tmp_path):
    root = repo_root / "raw/aiconfigurator/model_configs"
    assert X.block_scaled_checkpoint(root / "Qwen--Qwen3-235B-A22B-FP8_config.json")
    assert not X.block_scaled_checkpoint(root / "Qwen--Qwen3-235B-A22B_config.json")
    ck = {"Qwen/Qwen3-235B-A22B-FP8": root / "Qwen--Qwen3-235B-A22B-FP8_config.json"}
    kw = dict(model_map={}, dtype_map={"fp8": "fp8"})
    lay = ((2, 1, 1), "")
    got, _ = X.resolve_row("Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B-FP8", lay, "fp8", "h200-sxm", **kw,
                           checkpoints=ck)
    assert got[-1] == "fp8_block"
    got, _ = X.resolve_row("Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B-FP8", lay, "fp8", "h200-sxm", **kw)
    assert got[-1] == "fp8"   # no checkpoint config given: the label and the model spec decide


def test_tp_labels_that_cannot_be_attention_tp_flag_their_whole_source_group():
    """A source file that labels DeepSeek (128 heads) with TP 52 counts GPUs in that column: all its rows for that
    model, GPU and engine are flagged (the TP 64 row of the same file too); another file's rows are not."""
    def row(tp, src, engine="trtllm"):
        return {"gpu": "gb200", "model": "deepseek-v3", "model_source": "deepseek-ai/DeepSeek-R1", "engine": engine,
                "tp": tp, "silicon_data_source": f"source_file={src}; model=DeepSeek-R1"}
    s = pd.DataFrame([row(52, "a.csv"), row(64, "a.csv"), row(8, "b.csv"), row(64, "a.csv", engine="sglang")])
    got = X.tp_not_attention_tp(s, model_map={})
    assert got.tolist() == [True, True, False, False]
    # an unknown model is not flagged here (it is left out as unresolved)
    s2 = s.assign(model="no-such-moe", model_source="x/no-such-moe")
    assert not X.tp_not_attention_tp(s2, model_map={}).any()


def test_gdn_eager_launch_fit_leaves_the_scored_layout_out():
    """fit_gdn_eager_launch: the grid value of least pooled MAPE over every layout but the held-out one."""
    import numpy as np
    import pytest

    from steptime.errors import SteptimeError
    from steptime_lab.experiments.moe_wallclock import GDN_EAGER_GRID_US, fit_gdn_eager_launch

    grid = GDN_EAGER_GRID_US
    best = {"a": 10.0, "b": 40.0}
    ape = {k: np.abs(grid - v)[:, None] * np.ones((1, 3)) for k, v in best.items()}
    assert fit_gdn_eager_launch(ape, "a") == 40.0 and fit_gdn_eager_launch(ape, "b") == 10.0
    assert fit_gdn_eager_launch(ape, None) == 10.0  # tie over both: the lowest value
    with pytest.raises(SteptimeError, match="no layout left"):
        fit_gdn_eager_launch({"a": ape["a"]}, "a")


def test_flop_bound_is_a_lower_bound_of_the_predicted_step():
    """The active-parameter FLOP bound E3.4 flags impossible FPM steps with sits below steptime's own prediction of
    the same step (the model can never be faster than it), scales as tokens / TP, and leaves out embedding and head."""
    import numpy as np
    import pandas as pd

    from steptime.specs import get_gpu, get_model
    from steptime.step import predict_steps
    from steptime_lab.experiments.moe_wallclock import flop_bound_ms

    m, g = get_model("qwen3.6-35b-a3b"), get_gpu("b300")
    rows = pd.DataFrame({"num_tokens": [928, 928, 4096], "tp": [1, 4, 4]})
    b = flop_bound_ms(rows, "qwen3.6-35b-a3b", "b300")
    assert b[0] == pytest.approx(4 * b[1]) and b[2] == pytest.approx(b[1] * 4096 / 928)
    emb = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    assert b[0] == pytest.approx(928 * 2.0 * (m.n_active_params() - emb) / g.peak_flops * 1e3)
    for tokens, tp in ((928, 1), (4096, 4)):
        r = predict_steps("qwen3.6-35b-a3b", "b300", np.array([0]), np.array([tokens]), np.array([0]), 1, tp=tp,
                          ep=tp, engine="vllm")
        assert r["total_ms"][0] > flop_bound_ms(pd.DataFrame({"num_tokens": [tokens], "tp": [tp]}),
                                               "qwen3.6-35b-a3b", "b300")[0]


def test_same_label_measured_apart_and_scored_per_release():
    pred = pd.DataFrame({"dataset": "aic-silicon", "gpu": "b200", "engine": "trtllm", "model": "deepseek-v3",
                         "dtype": "fp8_block", "tp": 8, "ep": 1, "batch": [4.0, 4.0, 8.0, 8.0],
                         "prompt_tokens": 1024.0, "output_tokens": 1024.0, "tpot_ms": [10.0, 4.0, 11.0, 10.0],
                         "pred_ms": [12.0, 12.0, 13.0, 13.0], "engine_version": ["a", "b", "a", "b"]})
    spread = X.same_label_spread(pred)
    assert len(spread) == 1   # batch 4: 10 vs 4 ms (> 1.5x); batch 8: 11 vs 10 ms is not listed
    s = spread[0]
    assert s["batch"] == 4.0 and s["version_fastest"] == "b" and s["version_slowest"] == "a" and s["rows"] == 2
    by = {v["engine_version"]: v for v in X.version_scores(pred)}
    assert by["a"]["cells"] == 2 and by["b"]["signed_mean"] == round(((12 - 4) / 4 + (13 - 10) / 10) / 2, 4)
    assert X.version_scores(pred.drop(columns="engine_version")) == []


def _fpm_group(tp, dp, lat, phase, tokens, start=10):
    n = len(lat)
    return pd.DataFrame({"gpu": "b300", "engine": "vllm", "model": "qwen3.6-35b-a3b", "tp": tp, "ep": 1, "dp": dp,
                         "step": np.arange(start, start + n), "latency_ms": lat, "phase": phase, "num_tokens": tokens})


def test_own_step_rows_and_own_of_follow_the_engine_fact():
    """own_step_rows: vLLM's world-size-1 layout records rows that are not its own steps (engines.yaml
    schedule.inline_launch_world), every multi-rank layout does; own_of broadcasts a layout's flag over its rows and
    refuses rows of several layouts or an unknown one."""
    from steptime.errors import SteptimeError

    assert not X.own_step_rows("vllm", 1, 1) and X.own_step_rows("vllm", 2, 1) and X.own_step_rows("vllm", 1, 2)
    g1, g2 = _fpm_group(1, 1, [3.0, 2.0], "decode", [1, 1]), _fpm_group(2, 1, [3.0, 2.0], "decode", [1, 1])
    own = {("b300", "vllm", "qwen3.6-35b-a3b", 1, 1, 1): False, ("b300", "vllm", "qwen3.6-35b-a3b", 2, 1, 1): True}
    assert not X.own_of(g1, own).any() and X.own_of(g2, own).all()
    with pytest.raises(SteptimeError, match="2 layouts"):
        X.own_of(pd.concat([g1, g2]), own)
    with pytest.raises(SteptimeError, match="no own-step flag"):
        X.own_of(g1, {})


def test_host_fit_rows_only_one_ranks_own_steps():
    """host_fit_rows: only a layout whose rows are one rank's own steps fits a host constant: not vLLM's world-size-1
    layout (rows not its own steps), not an attention-DP layout (rank 0's view gated by the other ranks), at any tp;
    bad ranks are refused."""
    from steptime.errors import SteptimeError

    assert X.host_fit_rows("vllm", 2, 1) and X.host_fit_rows("vllm", 8, 1)
    assert not X.host_fit_rows("vllm", 1, 1)
    assert not any(X.host_fit_rows("vllm", tp, dp) for tp, dp in [(1, 2), (1, 8), (2, 2), (4, 2), (2, 4)])
    with pytest.raises(SteptimeError, match="must be >= 1"):
        X.host_fit_rows("vllm", 2, 0)


def test_row_reading_finds_eager_steps_recorded_too_fast_and_the_step_before():
    """row_reading: an eager step (above graph_max_tokens) recorded under FAST_EAGER_MS is counted, and the step
    just before it (consecutive id) is reported with its measured and predicted median; none where none is fast."""
    lat = [3.0, 46.0, 2.0, 3.0]
    g = _fpm_group(1, 1, lat, ["decode", "decode", "mixed", "decode"], [1, 1, 900, 1])
    g2 = _fpm_group(2, 1, [3.0, 40.0], ["decode", "mixed"], [1, 900])
    pred = {k: (lambda st, tp, ov=None: {"total": np.full(len(st), 7.0), **{q: np.zeros(len(st)) for q in KINDS}})
            for k in (("b300", "vllm", "qwen3.6-35b-a3b", 1, 1, 1), ("b300", "vllm", "qwen3.6-35b-a3b", 2, 1, 1))}
    out = X.row_reading([(("b300", "vllm", "qwen3.6-35b-a3b", 1, 1, 1), g), (("b300", "vllm", "qwen3.6-35b-a3b", 2, 1, 1), g2)],
                        pred)["by_layout"]
    assert out[0]["rows_own_step"] is False and out[0]["eager_steps"] == 1 and out[0]["eager_steps_under_fast_ms"] == 1
    assert out[0]["steps_before_them"] == 1 and out[0]["steps_before_measured_median_ms"] == 46.0
    assert out[0]["steps_before_predicted_median_ms"] == 7.0
    assert out[1]["rows_own_step"] is True and out[1]["eager_steps_under_fast_ms"] == 0
    assert "steps_before_them" not in out[1]


from steptime_lab.experiments.wallclock.steps import KINDS  # noqa: E402


def _bound_rows(tpot):
    """Two gpt-oss-120b H100 token rows priced at 512 running, TP 8 (the E3.4 silicon shape)."""
    return pd.DataFrame({"dataset": "aic-silicon", "gpu": "h100-sxm", "engine": "vllm-v1-sync", "engine_version": "0.11.2",
                         "model": "gpt-oss-120b", "tp": 8, "ep": 1, "dp": 1, "dtype": "mxfp4", "batch": 512.0,
                         "running": 512.0, "prompt_tokens": [8192.0, 1024.0], "output_tokens": [1024.0, 8192.0],
                         "tpot_ms": tpot, "pred_ms": [60.0, 40.0], "ttft_ms": [19691.5, 1000.0],
                         "source_id": ["a", "b"]})


def test_kv_read_bound_is_running_times_full_layer_kv_times_context_over_bandwidth():
    """kv_read_bound_ms: 512 requests of gpt-oss-120b (18 full-attention layers of 8 KV heads x 64 x K,V in bf16, one
    KV head per GPU at TP 8; the 18 sliding-window layers left out) at the mean context ISL + OSL/2, read once at
    the H100's datasheet bandwidth; a row lacking a column is refused."""
    from steptime.errors import SteptimeError

    rows = _bound_rows([4.449, 3.571])
    got = X.kv_read_bound_ms(rows)
    per_token = 18 * 2 * 1 * 64 * 2.0  # bytes on one GPU per cached token
    want = 512 * per_token * np.array([8192 + 512, 1024 + 4096]) / get_gpu("h100-sxm").mem_bw * 1e3
    assert np.allclose(got, want, rtol=1e-9)
    with pytest.raises(SteptimeError, match="lack running"):
        X.kv_read_bound_ms(rows.drop(columns="running"))


def test_token_row_checks_flag_rows_below_the_bound_and_the_claim_says_so():
    """A row measured below its priced batch's KV read time is listed (with the group's MAPE without it) and its
    group's claim names it; the claim's value stays the MAPE of every row. Little's law: 512 clients whose TTFT is
    20 s against 4.5 s of decode hold about 95 requests in decode, flagged against 512 priced."""
    rows = _bound_rows([4.449, 30.0])
    p = rows.assign(kv_read_bound_ms=X.kv_read_bound_ms(rows), in_flight_implied=X.in_flight_implied(rows))
    assert p["in_flight_implied"].iloc[0] == pytest.approx(512 * 1023 * 4.449 / (19691.5 + 1023 * 4.449))
    chk = X.token_row_checks(p)
    g = chk["kv_read_bound"]["groups"]
    assert len(g) == 1 and g[0]["below"] == 1 and g[0]["mape_within_bound"] == pytest.approx(round(10 / 30, 4))
    assert [r["source_id"] for r in chk["kv_read_bound"]["rows"]] == ["a"]
    assert [r["source_id"] for r in chk["in_flight"]["rows"]] == ["a"]
    sc = [{"dataset": "aic-silicon", "gpu": "h100-sxm", "engine": "vllm-v1-sync", "models": ["gpt-oss-120b"],
           "layouts": ["tp8/ep1"], "cells": 2, "mape": 7.0, "median_ape": 7.0, "mape_ci": [6.0, 8.0],
           "signed_mean": 7.0, "below_kv_bound_rows": 1}]
    doc = X.document({"scores": sc, "pred": p, "skipped": []}, {"runs": [], "skipped": []}, [], [],
                     {"tpot_mape_per_group": 0.15, "fpm_mape_per_phase": 0.12})
    c = doc["claims"][0]
    assert "1 of these rows measured below" in c["claim"] and c["value"] == 7.0
    assert doc["metrics"]["token_row_checks"]["kv_read_bound"]["groups"][0]["below"] == 1
    sc[0]["below_kv_bound_rows"] = 0
    assert "measured below" not in X.document({"scores": sc, "pred": p, "skipped": []}, {"runs": [], "skipped": []},
                                              [], [], {"tpot_mape_per_group": 0.15,
                                                       "fpm_mape_per_phase": 0.12})["claims"][0]["claim"]


def test_low_occupancy_lists_rows_below_the_floor_and_their_groups_mape_without_them():
    """low_occupancy: Little's law on a row's own TTFT, TPOT and output length; 512 clients whose TTFT is 20 s against
    4.5 s of decode hold ~96 in decode (0.19 of 512: listed); 1 s of TTFT against 29 s of decode does not. The group's
    MAPE without the listed row is context; token_row_checks carries it and the claim's value stays all rows'."""
    from steptime.errors import SteptimeError

    p = _bound_rows([4.449, 3.571])
    p["pred_ms"] = [8.898, 3.928]  # 100% and 10% off
    occ = X.low_occupancy(p)
    assert [r["source_id"] for r in occ["rows"]] == ["a"]
    assert occ["rows"][0]["occupancy"] == pytest.approx(1023 * 4.449 / (19691.5 + 1023 * 4.449), abs=1e-3)
    g = occ["groups"]
    assert len(g) == 1 and g[0]["low_occupancy"] == 1 and g[0]["rows"] == 2
    assert g[0]["mape_all"] == pytest.approx(0.55, abs=1e-4)
    assert g[0]["mape_without_low_occupancy"] == pytest.approx(0.1, abs=1e-4)
    assert X.low_occupancy(p, floor=0.1)["rows"] == []  # 0.19 is above a floor of 0.1
    assert X.low_occupancy(p.assign(ttft_ms=np.nan))["rows"] == []  # no TTFT: never flagged
    one = X.low_occupancy(p.iloc[:1])
    assert one["groups"][0]["mape_without_low_occupancy"] is None
    p2 = p.assign(kv_read_bound_ms=X.kv_read_bound_ms(p), in_flight_implied=X.in_flight_implied(p))
    assert X.token_row_checks(p2)["occupancy"] == occ
    with pytest.raises(SteptimeError, match="floor"):
        X.low_occupancy(p, floor=0.0)
    with pytest.raises(SteptimeError, match="lack batch"):
        X.low_occupancy(p.drop(columns="batch"))


def test_pair_sum_scores_conserve_a_launch_moved_into_the_row_before():
    """pair_sum_scores: where step n's row holds n + 1's host time (n + 1's row only its tail), each row alone is far
    off but the pair is exact; unsorted or misaligned input is refused."""
    from steptime.errors import SteptimeError

    g = _fpm_group(1, 1, [10.0, 48.0, 2.0, 10.0], ["decode", "decode", "mixed", "decode"], [1, 1, 900, 1])
    out = X.pair_sum_scores(g, np.array([10.0, 10.0, 40.0, 10.0]))
    assert out == {"mixed": {"pairs": 1, "mape": 0.0, "median_ape": 0.0, "signed_mean": 0.0}}
    with pytest.raises(SteptimeError, match="sorted"):
        X.pair_sum_scores(g.iloc[::-1], np.full(4, 10.0))
    with pytest.raises(SteptimeError, match="aligned"):
        X.pair_sum_scores(g, np.full(3, 10.0))


def test_gap_by_tokens_bands_the_non_decode_steps_by_their_tokens():
    """gap_by_tokens: the median measured - predicted per phase and token band (graphed <= 512, eager above in
    three bands); decode steps left out; misaligned predictions refused."""
    from steptime.errors import SteptimeError

    g = _fpm_group(2, 2, [10.0, 30.0, 60.0, 70.0, 90.0], ["decode", "mixed", "mixed", "mixed", "prefill"],
                   [1, 300, 1000, 5000, 5000])
    out = X.gap_by_tokens(g, np.array([10.0, 20.0, 50.0, 40.0, 50.0]))
    assert out == {"mixed": {"0-512": {"steps": 1, "median_gap_ms": 10.0}, "512-2048": {"steps": 1, "median_gap_ms": 10.0},
                             ">4096": {"steps": 1, "median_gap_ms": 30.0}},
                   "context": {">4096": {"steps": 1, "median_gap_ms": 40.0}}}
    with pytest.raises(SteptimeError, match="aligned"):
        X.gap_by_tokens(g, np.full(2, 1.0))


def test_pred_ms_of_one_tp_equals_predict_table():
    """_pred_ms (the grid fit's direct call) gives predict_table's pred_ms to the bit, for one TP and several."""
    from steptime_lab.experiments.wallclock import predict_table

    calls = []

    def pred(steps, tp, ov=None):
        calls.append((tp, tuple(steps.index)))
        t = steps["latency_ms"].to_numpy() * (1.0 + 0.1 * tp) + float((ov or {}).get("x", 0.0))
        return {"total": t, **{k: t * 0 for k in __import__("steptime_lab.experiments.wallclock.steps",
                                                              fromlist=["KINDS"]).KINDS}}

    s = pd.DataFrame({"tp": [2, 2, 2], "latency_ms": [1.5, 0.3, 7.0]}, index=[5, 1, 9])
    assert X._pred_ms(s, pred, {"x": 0.25}).tobytes() == \
        predict_table(s, pred, {"x": 0.25})["pred_ms"].to_numpy().tobytes()
    assert calls[0] == (2, (5, 1, 9))  # the frame in its own order, one call
    m = pd.DataFrame({"tp": [1, 2, 1], "latency_ms": [1.5, 0.3, 7.0]})
    assert X._pred_ms(m, pred, None).tobytes() == predict_table(m, pred)["pred_ms"].to_numpy().tobytes()


def _fpm_tidy(tp, dp, rows):
    """A tidy FPM MoE table of one layout (qwen3-30b-a3b: a MoE without Gated DeltaNet layers, so no host fit runs):
    rows = [(phase, ctx_tokens, ctx_kv_tokens, decode_requests, latency_ms), ...] at consecutive counter ids."""
    ph, ct, kv, dr, lat = zip(*rows)
    n = len(rows)
    return pd.DataFrame({"gpu": "b300", "model": "qwen3-30b-a3b", "moe": True, "engine": "vllm",
                         "engine_version": "0.20.1", "tp": tp, "ep": tp * dp, "dp": dp, "phase": list(ph),
                         "workload_segment": "sweep", "counter_id": np.arange(100, 100 + n), "ctx_tokens": list(ct),
                         "ctx_requests": [1 if c else 0 for c in ct], "ctx_kv_tokens": list(kv),
                         "decode_requests": list(dr), "decode_kv_tokens": [512 * d for d in dr],
                         "num_tokens": [c + d for c, d in zip(ct, dr)], "latency_ms": list(lat)})


def test_fpm_world_size_1_scored_under_the_engines_row_reading_too():
    """score_fpm_moe scores a world-size-1 layout a second time with wallclock.inline_row_ms (scores_engine_row);
    a multi-rank layout only once; document() adds one claim per such score and keeps the plain claims."""
    rows = [("decode", 0, 0, 4, 5.0), ("decode", 0, 0, 4, 40.0), ("mixed", 3000, 0, 4, 1.0), ("decode", 0, 0, 4, 5.0),
            ("context", 2048, 0, 0, 40.0), ("context", 1024, 2048, 0, 1.0), ("decode", 0, 0, 1, 3.0)]
    tidy = pd.concat([_fpm_tidy(1, 1, rows), _fpm_tidy(1, 2, rows)], ignore_index=True)
    # an eager kernel launch of 100 us makes the eager steps' host launch outlast the GPU work before them
    r = X.score_fpm_moe(tidy, constants=Constants.default().with_overrides({"t_launch_us": 100.0}), n_boot=10)
    row = r["scores_engine_row"]
    assert {(s["tp"], s["dp"]) for s in row} == {(1, 1)} and {s["phase"] for s in row} == {"decode", "mixed", "prefill"}
    plain = {s["phase"]: s["mape"] for s in r["scores"] if s["dp"] == 1}
    assert all(s["mape"] != plain[s["phase"]] for s in row if s["phase"] != "decode")
    doc = X.document({"scores": [], "pred": pd.DataFrame(), "skipped": []}, {"runs": [], "skipped": []}, [], [],
                     {"tpot_mape_per_group": 0.15, "fpm_mape_per_phase": 0.12}, fpm_scores=r)
    read = [c for c in doc["claims"] if "loop times it" in c["claim"]]
    units = r["scores_engine_row_units"]  # the row reading again, each row under its FLOP bound merged with the one before
    merged = [c for c in doc["claims"] if "merged with the row before it" in c["claim"]]
    assert len(read) == 3 and len(merged) == len(units) and len(doc["claims"]) == len(r["scores"]) + 3 + len(units)
    assert doc["metrics"]["fpm_scores_engine_row"]["scores"] == row
    assert doc["metrics"]["fpm_scores_collection_units"]["scores"] == units
    # world size 1 only; the 1 ms mixed and context rows (under their FLOP bound) each join the 40 ms row before them
    assert {(s["tp"], s["dp"]) for s in units} == {(1, 1)}
    assert sum(s["cells"] for s in units) == sum(s["cells"] for s in row) - 2


def test_dp_matched_sweep_pairs_a_dp_layout_with_dp_1_at_its_tp_by_composition():
    """dp_matched_sweep: the DP layout's sweep cells matched by composition to the dp 1 layout at the same TP whose
    rows are its own steps (world size 1 is not), per class (decode, piecewise <= graph_max_tokens, eager above), the
    medians of measured / predicted and of their DP - dp 1 differences; chat-segment rows and unmatched cells left
    out; a DP layout with no usable dp 1 layout left out; misaligned predictions refused."""
    from steptime.errors import SteptimeError

    def grp(tp, ep, dp, lat, phase, ctx, dec, seg=None):
        n = len(lat)
        return pd.DataFrame({"gpu": "b300", "engine": "vllm", "model": "qwen3.6-35b-a3b", "tp": tp, "ep": ep, "dp": dp,
                             "step": np.arange(n), "latency_ms": lat, "phase": phase, "ctx_tokens": ctx,
                             "ctx_requests": [1 if c else 0 for c in ctx], "ctx_kv_tokens": 0,
                             "decode_requests": dec, "num_tokens": [c + d for c, d in zip(ctx, dec)],
                             "segment": seg or ["sweep"] * n})

    ph = ["decode", "prefill", "prefill", "prefill"]
    ref = grp(2, 2, 1, [4.0, 16.0, 40.0, 50.0], ph, [0, 128, 1024, 3168], [4, 0, 0, 0])
    dpl = grp(2, 4, 2, [6.0, 25.0, 55.0, 62.0, 99.0, 70.0], ph + ["prefill", "prefill"], [0, 128, 1024, 3168, 900, 1024],
              [4, 0, 0, 0, 0, 0], seg=["sweep"] * 5 + ["real"])
    tp1 = grp(1, 1, 1, [4.0], ["decode"], [0], [4])
    tp1dp = grp(1, 2, 2, [5.0], ["decode"], [0], [4])
    keys = [("b300", "vllm", "qwen3.6-35b-a3b", *k) for k in ((2, 2, 1), (2, 4, 2), (1, 1, 1), (1, 2, 2))]
    groups = list(zip(keys, (ref, dpl, tp1, tp1dp)))
    pred = {keys[0]: np.array([4.0, 16.0, 45.0, 45.0]), keys[1]: np.array([5.0, 16.0, 45.0, 45.0, 45.0, 45.0]),
            keys[2]: np.array([4.0]), keys[3]: np.array([4.5])}
    out = X.dp_matched_sweep(groups, pred)
    assert [r["layout"] for r in out] == ["tp2 ep4 dp2"] and out[0]["reference"] == "tp2 ep2 dp1"
    r = out[0]
    assert r["decode"] == {"cells": 1, "measured_ms": 6.0, "measured_ref_ms": 4.0, "predicted_ms": 5.0,
                           "predicted_ref_ms": 4.0, "measured_diff_ms": 2.0, "predicted_diff_ms": 1.0}
    assert r["piecewise"]["cells"] == 1 and r["piecewise"]["measured_diff_ms"] == 9.0
    assert r["eager"]["cells"] == 2 and r["eager"]["measured_diff_ms"] == 13.5 and r["eager"]["predicted_diff_ms"] == 0.0
    assert r["eager"]["measured_ms"] == 58.5  # the chat-segment 1024-token row (70 ms) and the unmatched 900 left out
    with pytest.raises(SteptimeError, match="aligned"):
        X.dp_matched_sweep(groups, {**pred, keys[1]: np.zeros(2)})
