"""Wall-clock sets (raw/wallclock/) and the fp8 GEMM rows: real files, then corrupted copies."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from rawcopy import mini_root, rewrite, set_at  # tests/rawcopy.py
from steptime_lab import data
from steptime_lab.data.wallclock import RESERVED_MODELS, model_arch
from steptime.errors import DataError, UnknownModelError

FPM = "raw/wallclock/aic_fpm/qwen3-32b_tp{tp}/"
LSS = "raw/wallclock/llmservingsim/{run}/"
V2 = "raw/wallclock/mlenergy/mlenergy_leaderboard_v2_llm.csv"
V3 = "raw/wallclock/mlenergy/mlenergy_leaderboard_v3_llm.csv"
SILICON = "raw/wallclock/aic_silicon/silicon_sample_no_llama31.csv"
FP8_H100 = "raw/aiconfigurator/h100_sxm/gemm/vllm/0.24.0/gemm_perf.fp8.parquet"


def fpm_files(tp: int) -> list[str]:
    d = FPM.format(tp=tp)
    return [d + f for f in ("fpm_metrics_phase.csv", "fpm_metrics_detail.csv", "vllm_metadata.json")]


# --------------------------------------------------------------------------- AIConfigurator FPM
def test_fpm_steps_real():
    df = data.load_fpm_steps()
    assert set(df["tp"]) == {1, 2, 4, 8} and set(df["gpu"]) == {"b300"} and set(df["model"]) == {"qwen3-32b"}
    assert not df["moe"].any() and set(df["arch"]) == {"dense"} and df["arch_verified"].all()
    assert set(df["phase"]) == {"context", "decode", "mixed"} and set(df["engine_version"]) == {"0.20.1"}
    assert len(df) == 26819
    assert (df["num_tokens"] == df["ctx_tokens"] + df["decode_tokens"]).all()
    dec = df[df.phase == "decode"]
    assert (dec["ctx_tokens"] == 0).all() and (dec["decode_tokens"] == dec["decode_requests"]).all()
    # mean KV length per decode request is the sum over the count
    np.testing.assert_allclose(dec["mean_decode_kv_tokens"], dec["decode_kv_tokens"] / dec["decode_requests"],
                               rtol=1e-3, atol=1e-3)
    # tensor parallelism shortens a real decode step, but far from ideally (the wall-clock lesson)
    med = dec.groupby("tp")["latency_ms"].median()
    assert med[1] > med[2] > med[4] > med[8] and med[1] / med[8] < 8
    # a longer isolated prefill takes longer
    ctx = df[(df.phase == "context") & (df.tp == 1)].groupby("ctx_tokens")["latency_ms"].median()
    assert ctx.is_monotonic_increasing
    flagged = df[df.over_token_budget]
    assert len(flagged) == 732 and (flagged["num_tokens"] > 2048).all()
    assert data.load_fpm_steps(tp=8)["tp"].eq(8).all()


def test_fpm_workload_real():
    w = data.load_fpm_workload()
    assert set(w["tp"]) == {1, 2, 4, 8} and (w["prompt_tokens"] >= 1).all() and not w["moe"].any()


def test_fpm_impossible_decode_step(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, fpm_files(2))
    p = root / FPM.format(tp=2) / "fpm_metrics_phase.csv"
    df = pd.read_csv(p)
    i = int(np.flatnonzero(df.phase.eq("decode"))[5])
    df.loc[i, "ctx_tokens"] = 64
    df.to_csv(p, index=False)
    with pytest.raises(DataError, match=rf"fpm_metrics_phase.csv: row {i} \(line {i + 2}\), column 'decode_requests'"
                                        r": a decode step needs"):
        data.load_fpm_steps(root=root)


def test_fpm_detail_must_agree(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, fpm_files(1))
    rewrite(root / FPM.format(tp=1) / "fpm_metrics_detail.csv",
            set_at(10, "latency_ms", lambda d: d.loc[10, "latency_ms"] * 2), record=False)
    with pytest.raises(DataError, match=r"fpm_metrics_detail.csv: row 10, column 'latency_ms': disagrees"):
        data.load_fpm_steps(root=root)


def test_fpm_negative_latency_and_missing_column(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, fpm_files(4))
    p = root / FPM.format(tp=4) / "fpm_metrics_phase.csv"
    rewrite(p, set_at(3, "latency_ms", -1.0), record=False)
    with pytest.raises(DataError, match=r"row 3 \(line 5\), column 'latency_ms'"):
        data.load_fpm_steps(root=root)
    rewrite(p, lambda d: d.drop(columns="decode_kv_tokens"), record=False)
    with pytest.raises(DataError, match=r"row all, column 'decode_kv_tokens': required column missing"):
        data.load_fpm_steps(root=root)


def test_fpm_metadata_tp_mismatch(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, fpm_files(8))
    p = root / FPM.format(tp=8) / "vllm_metadata.json"
    doc = json.loads(p.read_text())
    doc["effective_config"]["parallel_config.tensor_parallel_size"] = 4
    p.write_text(json.dumps(doc))
    from steptime_lab.data.manifest import load_manifest
    from steptime_lab.data.tables import read_entry

    e = load_manifest(root).entries("aic_fpm_metadata")[0]
    with pytest.raises(DataError, match="vllm_metadata.json: row all, column 'parallel_config.tensor_parallel_size'"):
        read_entry(e)


# --------------------------------------------------------------------------- LLMServingSim
def test_servingsim_real():
    r = data.load_servingsim_requests()
    assert r.groupby("run").size().eq(300).all() and r["run"].nunique() == 4
    assert set(r["gpu"]) == {"rtx-4090", "rtx-pro-6000"}
    moe_runs = set(r.loc[r.moe, "run"])
    assert moe_runs == {"RTXPRO6000_Qwen3-30B-A3B-Instruct-2507"}
    q = r[r.run == "RTXPRO6000_Qwen3-32B"]
    assert set(q["tp"]) == {2} and set(q["arch"]) == {"dense"}
    assert (r["ttft_s"] >= 0).all() and (r["e2e_s"] >= r["ttft_s"]).all()
    assert (r.groupby("run")["arrival_s"].min() == 0).all() and (r.groupby("run")["queued_s"].min() == 0).all()
    ok = r["output_tokens"] > 1
    np.testing.assert_allclose(r.loc[ok, "tpot_s"] * (r.loc[ok, "output_tokens"] - 1),
                               r.loc[ok, "last_token_s"] - r.loc[ok, "first_token_s"], rtol=1e-9)
    ts = data.load_servingsim_timeseries()
    assert ts["run"].nunique() == 4 and ts.groupby("run")["t_s"].apply(lambda s: s.is_monotonic_increasing).all()


def test_servingsim_own_simulator_outputs_and_recorded_kv_blocks():
    sim = data.load_servingsim_sim()
    assert sim.groupby("run").size().eq(300).all() and sim["run"].nunique() == 4
    assert (sim["e2e_s"] >= sim["ttft_s"]).all() and (sim["tpot_s"] > 0).all()
    q = sim[sim.run == "RTXPRO6000_Qwen3-32B"]
    assert 0.05 < q["tpot_s"].median() < 0.15  # ns in the file, seconds here (LLMServingSim's summary: 85.0 ms)
    r = data.load_servingsim_requests()
    kv = r.groupby("run")["kv_blocks_recorded"].first()
    assert kv["RTX4090_Llama-3.1-8B"] == 2588 and (kv.drop("RTX4090_Llama-3.1-8B") == -1).all()


def test_servingsim_sim_checks(tmp_path, repo_root):
    d = LSS.format(run="RTX4090_Llama-3.1-8B")
    root = mini_root(tmp_path, repo_root, [d + "sim.csv"])
    rewrite(root / d / "sim.csv", set_at(5, "TTFT", lambda x: x.loc[5, "latency"] + 1))
    with pytest.raises(DataError, match=r"sim.csv: .*'TTFT': longer than the request's latency"):
        data.load_servingsim_sim(root=root)


def test_servingsim_timestamps_out_of_order(tmp_path, repo_root):
    run = "RTX4090_Llama-3.1-8B"
    d = LSS.format(run=run)
    root = mini_root(tmp_path, repo_root, [d + "requests.jsonl", d + "meta.json"])
    p = root / d / "requests.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[7])
    rec["first_token_ts"] = rec["queued_ts"] - 1.0
    lines[7] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"requests.jsonl: row 7, column 'first_token_ts': earlier than scheduled_ts"):
        data.load_servingsim_requests(root=root)
    lines[7] = lines[7][:40]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"requests.jsonl: row 7 \(line 8\): unreadable JSON line"):
        data.load_servingsim_requests(root=root)


# --------------------------------------------------------------------------- ML.ENERGY
def test_mlenergy_real():
    v2 = data.load_mlenergy("v2")
    assert len(v2) == 314 and set(v2["gpu"]) == {"a100-sxm-40gb", "h100-sxm"}
    assert set(v2.loc[v2.moe, "model_source"]) == {"mistralai/Mixtral-8x7B-Instruct-v0.1",
                                                    "mistralai/Mixtral-8x22B-Instruct-v0.1"}
    assert v2.loc[v2.moe, "arch_verified"].all()  # both Mixtral configs read (num_local_experts 8)
    # the 9B and 27B Gemma-2 configs were read (models.yaml gemma-2-9b, gemma-2-27b); the 2B one was not
    gemma2 = v2[v2.model_source.str.startswith("google/gemma-2")].groupby("model_source")["arch_verified"].all()
    assert gemma2.to_dict() == {"google/gemma-2-27b-it": True, "google/gemma-2-2b-it": False,
                                "google/gemma-2-9b-it": True}
    assert (v2["max_batch"] == v2["max_num_seqs"] * v2["pp"]).all()
    assert (v2["avg_batch"] <= v2["max_batch"] * 1.0001).all()
    # seconds -> ms: a decode token takes tens of ms, not tens of seconds or microseconds
    assert 5 < v2["mean_tpot_ms"].median() < 500
    v3 = data.load_mlenergy("v3")
    assert len(v3) == 838 and set(v3["gpu"]) == {"h100-sxm", "b200"}
    raw = pd.read_csv(data.find_root() / V3)
    assert (v3["moe"].to_numpy() == raw["architecture"].eq("MoE").to_numpy()).all()
    assert (v3["median_itl_ms"] <= v3["p90_itl_ms"]).all()
    with pytest.raises(ValueError):
        data.load_mlenergy("v4")


def test_mlenergy_unknown_gpu_and_wrong_arch(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [V2, V3])
    rewrite(root / V2, set_at(12, "GPU", "NVIDIA V100"), record=False)
    with pytest.raises(DataError, match=r"mlenergy_leaderboard_v2_llm.csv: row 12 \(line 14\), column 'GPU'"):
        data.load_mlenergy("v2", root=root)
    p3 = root / V3
    df = pd.read_csv(p3)
    i = int(np.flatnonzero(df.model_id.eq("Qwen/Qwen3-32B"))[0])
    df.loc[i, "architecture"] = "MoE"  # the configuration facts say dense
    df.to_csv(p3, index=False)
    with pytest.raises(DataError, match=rf"row {i} \(line {i + 2}\), column 'architecture': disagrees"):
        data.load_mlenergy("v3", root=root)


def test_mlenergy_unclassified_model_refused(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [V2])
    rewrite(root / V2, set_at(20, "Model", "someone/Unheard-Of-13B"), record=False)
    with pytest.raises(DataError, match=r"row 20 \(line 22\), column 'Model': model 'someone/Unheard-Of-13B': no architecture"):
        data.load_mlenergy("v2", root=root)


# --------------------------------------------------------------------------- AIConfigurator silicon
def test_silicon_has_no_reserved_rows_and_dense_qwen(repo_root):
    raw = pd.read_csv(repo_root / SILICON, usecols=["model_path"])
    assert not raw["model_path"].str.contains(RESERVED_MODELS).any()
    assert not raw["model_path"].str.contains("llama-3.1", case=False).any()
    s = data.load_aic_silicon()
    assert len(s) == 4536 and not s["model_source"].str.contains("Llama", case=False).any()
    qwen = s[(s.model_source == "Qwen/Qwen3-32B") & (s.gpu == "h100-sxm") & (s["mode"] == "agg")]
    assert set(qwen["engine"]) == {"trtllm", "vllm", "sglang"} and not qwen["moe"].any()
    assert set(qwen["tp"].dropna().astype(int)) == {1, 2, 4, 8}
    assert s.loc[s.model_source.str.startswith("deepseek-ai/"), "moe"].all()


def test_silicon_refuses_reserved_row(tmp_path, repo_root):
    assert RESERVED_MODELS.search("meta-llama/Meta-Llama-3.1-70B-Instruct")
    assert RESERVED_MODELS.search("meta-llama/Llama-3.1-8B") and not RESERVED_MODELS.search("Llama-3.1-405B")
    root = mini_root(tmp_path, repo_root, [SILICON])
    rewrite(root / SILICON, set_at(30, "model_path", "meta-llama/Llama-3.1-8B-Instruct"), record=False)
    with pytest.raises(DataError, match=r"row 30 \(line 32\), column 'model_path': a reserved Llama-3.1"):
        data.load_aic_silicon(root=root)


# --------------------------------------------------------------------------- fp8 GEMM
def test_gemm_fp8_real():
    g = data.load_aic_gemm_fp8()
    assert set(g["dtype"]) == {"fp8"} and set(g["kernel_source"]) == {"CutlassFP8ScaledMMLinearKernel"}
    assert "a100-sxm" not in set(g["gpu"]) and g["gpu"].nunique() == 8
    from steptime.specs import get_gpu

    for gpu, d in g.groupby("gpu"):
        peak = get_gpu(gpu).fp8_dense_tflops * 1e12
        assert (d["flops"] / (d["latency_ms"] * 1e-3) <= 1.25 * peak).all()
    # on big shapes fp8 is mostly faster than bf16 on the same GPU and grid
    b = data.load_aic_gemm("h100")
    m = g[g.gpu == "h100-sxm"].merge(b, on=["m", "n", "k"], suffixes=("_fp8", "_bf16"))
    big = m[m.flops_fp8 > 1e12]
    assert len(big) > 1000 and (big.latency_ms_fp8 < big.latency_ms_bf16).mean() > 0.7
    # the bf16 table is untouched by the fp8 rows
    assert set(b["dtype"]) == {"bfloat16"}


def test_gemm_fp8_wrong_units(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [FP8_H100])
    # past the checksum: the unit check must catch it
    rewrite(root / FP8_H100, lambda d: d.assign(latency=d["latency"] / 1000.0))
    with pytest.raises(DataError, match=r"gemm_perf.fp8.parquet: row \d+, column 'latency': GEMM implies more than"):
        data.load_aic_gemm_fp8(root=root)


# --------------------------------------------------------------------------- model facts
def test_model_arch_facts():
    assert model_arch("Qwen/Qwen3-32B") == "dense"
    assert model_arch("meta-llama/Llama-3.1-8B") == "dense"  # in models.yaml
    assert model_arch("Qwen/Qwen3-30B-A3B-Instruct-2507") == "moe"
    assert model_arch("nvidia/NVIDIA-Nemotron-Nano-9B-v2") == "hybrid"
    with pytest.raises(UnknownModelError, match="no architecture fact"):
        model_arch("someone/Unheard-Of-13B")


def test_model_arch_file_agrees_with_models_yaml():
    from steptime_lab.data.wallclock import ARCH_FILE
    from steptime.errors import UnknownModelError as UME
    from steptime.specs import get_model

    doc = yaml.safe_load(ARCH_FILE.read_text())["models"]
    for mid, fact in doc.items():
        assert fact["evidence"], mid
        try:
            m = get_model(mid)
        except UME:
            continue
        kind = "moe" if getattr(m, "is_moe", False) else "dense"  # moe_models.yaml or models.yaml
        assert fact["arch"] == kind, f"{mid} is a {kind} model in steptime's specs but {ARCH_FILE.name} says {fact['arch']}"
        # a moe entry must cite an expert count or a MoE architecture column
    for mid, fact in doc.items():
        if fact["arch"] == "moe":
            assert any(re.search(r"experts|MoE|Mixtral", e) for e in fact["evidence"]), mid


def test_wallclock_tidy_tables_deterministic(tmp_path):
    for name in ("servingsim_requests", "mlenergy_v2"):
        a, b = tmp_path / f"{name}_a.parquet", tmp_path / f"{name}_b.parquet"
        data.write_parquet(data.tidy_table(name), a)
        data.write_parquet(data.tidy_table(name), b)
        assert a.read_bytes() == b.read_bytes()


def test_fpm_workload_bad_prompt_tokens(tmp_path, repo_root):
    p_rel = FPM.format(tp=1) + "request_workload.csv"
    root = mini_root(tmp_path, repo_root, [p_rel])
    df = pd.read_csv(root / p_rel)
    df.loc[4, "prompt_tokens"] = 0
    df.to_csv(root / p_rel, index=False)
    with pytest.raises(DataError, match=r"request_workload.csv: row 4 \(line 6\), column 'prompt_tokens'"):
        data.load_fpm_workload(root=root)


def test_servingsim_timeseries_and_meta_checks(tmp_path, repo_root):
    d = LSS.format(run="RTXPRO6000_Qwen3-32B")
    root = mini_root(tmp_path, repo_root, [d + "timeseries.csv", d + "meta.json", d + "requests.jsonl"])
    ts = pd.read_csv(root / d / "timeseries.csv")
    ts.loc[9, "kv_cache_pct"] = 140.0
    ts.to_csv(root / d / "timeseries.csv", index=False)
    with pytest.raises(DataError, match=r"timeseries.csv: row 9 \(line 11\), column 'kv_cache_pct'"):
        data.load_servingsim_timeseries(root=root)
    meta = json.loads((root / d / "meta.json").read_text())
    meta["engine_kwargs"]["tensor_parallel_size"] = 1  # the manifest says TP 2
    (root / d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"meta.json: row all, column 'engine_kwargs.tensor_parallel_size'"):
        data.load_servingsim_requests(root=root)
