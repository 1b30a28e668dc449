"""steptime_lab.data loaders: on the real vendored files (subsets) and on corrupted copies."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rawcopy import mini_root, rerecord, rewrite, set_at  # tests/rawcopy.py
from steptime_lab import data
from steptime.errors import DataError, UnknownGPUError

VIDUR_7B_A100 = "raw/vidur/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
GEMM_H100 = "raw/aiconfigurator/h100_sxm/gemm/vllm/0.24.0/gemm_perf.bf16.parquet"
CTX_A100 = "raw/aiconfigurator/a100_sxm/attention/vllm/0.14.0/context_attention_perf.parquet"
DISTSERVE = "raw/distserve/profiler-a100-80g.distserve.json"
TRACE_CODE = "raw/vidur/processed_traces/splitwise_code.csv"


# --------------------------------------------------------------------------- real files
def test_gemm_h100_tidy_columns_and_physics():
    df = data.load_aic_gemm("h100")  # alias resolves to the canonical key
    assert list(df.columns) == ["gpu", "m", "n", "k", "dtype", "kernel_source", "latency_ms", "n_dup", "flops",
                                "min_bytes", "hbm_floor_ms", "above_hbm_roofline", "framework",
                                "framework_version"]
    assert set(df["gpu"]) == {"h100-sxm"} and set(df["dtype"]) == {"bfloat16"}
    assert len(df) == 35742 and (df["n_dup"] == 1).all()
    assert (df[["m", "n", "k"]] >= 1).all().all() and (df["latency_ms"] > 0).all()
    # never faster than the datasheet compute peak
    from steptime.specs import get_gpu

    g = get_gpu("h100-sxm")
    assert (df["flops"] / (df["latency_ms"] * 1e-3) <= g.peak_flops).all()
    # the HBM flag is exactly "min bytes at datasheet bandwidth take longer than measured"
    floor = (df.m * df.k + df.k * df.n + df.m * df.n) * 2 / g.mem_bw * 1e3
    assert (df["above_hbm_roofline"] == (df["latency_ms"] < floor)).all()
    assert 0 < df["above_hbm_roofline"].sum() < 200


def test_context_attention_duplicates_collapsed_by_median():
    raw = pd.read_parquet(Path(data.find_root()) / CTX_A100)
    df = data.load_aic_attention("context", gpu="a100-sxm")
    assert len(raw) == 5457 and len(df) == 5049 and df["n_dup"].max() == 2
    keys = ["batch_size", "isl", "num_heads", "num_kv_heads", "head_dim", "kv_cache_dtype", "window_size",
            "kernel_source"]
    assert not df.duplicated(keys).any()
    assert (df["window_size"] == 0).all()  # no window column in vLLM 0.14.0: full attention
    dup = df[df["n_dup"] == 2].iloc[0]
    sel = raw[(raw.batch_size == dup.batch_size) & (raw.isl == dup.isl) & (raw.num_heads == dup.num_heads)
              & (raw.num_key_value_heads == dup.num_kv_heads)]
    assert len(sel) == 2 and math.isclose(dup.latency_ms, sel["latency"].median())
    assert (df["num_tokens"] == df["batch_size"] * df["isl"]).all()


def test_generation_attention_kv_len():
    df = data.load_aic_attention(kind="generation", gpu="a100")
    assert (df["kv_len"] == df["isl"] + df["step"]).all()
    kv = df["kv_len"].to_numpy()
    assert ((kv & (kv - 1)) == 0).all()  # KV lengths 2, 4, ..., 131072
    with pytest.raises(ValueError):
        data.load_aic_attention("prefill")


def test_scale_matrix_and_allreduce():
    sm = data.load_aic_scale_matrix("h200")
    assert len(sm) == 1628 and (sm["bytes"] == sm["m"] * sm["k"] * 3).all()
    ar = data.load_aic_allreduce("h100")
    assert set(ar["library"]) == {"nccl", "vllm_custom"}
    two = ar["dtype"].isin(["bfloat16", "float16"])
    assert (ar.loc[two, "message_bytes"] == 2 * ar.loc[two, "message_elems"]).all()
    nccl8 = ar[(ar.library == "nccl") & (ar.num_gpus == 8) & (ar.dtype == "float16")]
    assert 300 < nccl8["busbw_gbps"].max() < 480  # NVLink4: 450 GB/s per direction
    assert ar["n_dup"].max() == 2  # the NCCL 2.27.3 table was recorded twice


def test_vidur_mlp_units_and_shapes():
    df = data.load_vidur_mlp(gpu="a100", model="meta-llama/Llama-2-7b-hf")
    assert set(df["model"]) == {"llama-2-7b"} and set(df["gpu"]) == {"a100-sxm"}
    assert set(df["op"]) == {"emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"}
    qkv = df[(df.op == "attn_pre_proj") & (df.tp == 1) & (df.num_tokens == 1)].iloc[0]
    assert (qkv.gemm_m, qkv.gemm_n, qkv.gemm_k) == (1, 3 * 4096, 4096)
    # milliseconds: 100.7 MB of weights at 2039 GB/s need >= 0.049 ms; measured 0.065 ms
    assert 0.049 < qkv.latency_ms < 0.1
    assert df.loc[df.op == "emb", "gemm_m"].isna().all()
    assert df.loc[df.num_tokens == 4096, "n_dup"].eq(2).all()
    assert (df["num_tokens"] >= 1).all() and (df["latency_ms"] > 0).all()


def test_vidur_cpu_overheads_traces_distserve():
    cpu = data.load_vidur_cpu_overheads("a100")
    assert {"schedule_median_ms", "ray_comm_time_mean_ms", "n_dup"} <= set(cpu.columns)
    assert len(cpu) == 72 and cpu["n_dup"].sum() == 78
    tr = data.load_traces()
    assert tr["trace"].nunique() == 3
    assert tr.groupby("trace")["arrived_at_s"].apply(lambda s: s.isna().all()).sum() == 1
    ds = data.load_distserve()
    row = ds[(ds.engine == "distserve") & (ds.model == "opt-13b") & (ds.tp == 1) & (ds.phase == "prefill")]
    assert len(row) == 1 and math.isclose(row.a_ms.iloc[0], 18.10254647486372)
    assert set(ds["phase"]) == {"prefill", "decode_small_bs", "decode_large_bs"}
    mx = data.load_distserve_max_tokens()
    assert (mx["max_num_tokens"] >= 1).all()


def test_unknown_gpu_and_root_discovery(monkeypatch, tmp_path, repo_root):
    with pytest.raises(UnknownGPUError):
        data.load_aic_gemm("v100-nonexistent")
    with pytest.raises(DataError, match="lists no aic_gemm table"):
        data.load_aic_gemm("a40")  # a real GPU with no AIConfigurator data
    monkeypatch.delenv("STEPTIME_ROOT")
    monkeypatch.chdir(repo_root / "raw" / "vidur")
    assert data.find_root() == repo_root
    monkeypatch.setenv("STEPTIME_ROOT", str(tmp_path))
    with pytest.raises(DataError, match="no manifest"):
        data.load_traces()


def test_import_steptime_does_not_import_pandas():
    code = "import sys, steptime, steptime_lab.data; assert 'pandas' not in sys.modules and 'pandera' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- corrupted copies


def test_truncated_parquet(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [GEMM_H100])
    p = root / GEMM_H100
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(DataError, match="gemm_perf.bf16.parquet: 105067 bytes, raw/MANIFEST.yaml says 210135"):
        data.load_aic_gemm(root=root)
    rerecord(p)  # past the checksum, the parquet reader still refuses it
    with pytest.raises(DataError, match="gemm_perf.bf16.parquet: unreadable parquet.*truncated"):
        data.load_aic_gemm(root=root)


def test_truncated_csv_names_row_and_column(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [VIDUR_7B_A100])
    p = root / VIDUR_7B_A100
    text = p.read_text()
    p.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # cut the last line in half
    rerecord(p)
    last = len(text.splitlines()) - 2  # 0-based data row of the cut line
    with pytest.raises(DataError) as ei:
        data.load_vidur_mlp(root=root)
    msg = str(ei.value)
    assert "Llama-2-7b-hf/mlp.csv" in msg and f"row {last} (line {last + 2})" in msg and "column '" in msg


def test_missing_column(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [GEMM_H100])
    rewrite(root / GEMM_H100, lambda d: d.drop(columns="latency"))
    with pytest.raises(DataError, match=r"gemm_perf.bf16.parquet: row all, column 'latency': required column missing"):
        data.load_aic_gemm(root=root)


def test_nan_latency(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [CTX_A100])

    def poison(d):
        d.loc[7, "latency"] = np.nan
        return d

    rewrite(root / CTX_A100, poison)
    with pytest.raises(DataError, match=r"context_attention_perf.parquet: row 7, column 'latency'"):
        data.load_aic_attention("context", root=root)


def test_negative_tokens(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [VIDUR_7B_A100, TRACE_CODE])
    rewrite(root / VIDUR_7B_A100, set_at(3, "num_tokens", -4))
    with pytest.raises(DataError, match=r"row 3 \(line 5\), column 'num_tokens'"):
        data.load_vidur_mlp(root=root)
    rewrite(root / TRACE_CODE, set_at(10, "num_decode_tokens", 0))
    with pytest.raises(DataError, match=r"splitwise_code.csv: row 10 \(line 12\), column 'num_decode_tokens'"):
        data.load_traces(root=root)


def test_wrong_units_gemm_in_seconds(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [GEMM_H100])

    def to_seconds(d):
        d["latency"] = d["latency"] / 1000.0
        return d

    rewrite(root / GEMM_H100, to_seconds)
    with pytest.raises(DataError, match=r"row \d+, column 'latency': GEMM implies more than .*wrong units"):
        data.load_aic_gemm(root=root)


def test_wrong_units_vidur_in_microseconds(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [VIDUR_7B_A100])

    def to_microseconds(d):
        for c in [c for c in d.columns if c.startswith("time_stats.")]:
            d[c] = d[c] * 1000.0

    rewrite(root / VIDUR_7B_A100, to_microseconds)
    with pytest.raises(DataError, match=r"mlp.csv: row \d+ \(line \d+\), column 'time_stats\..*wrong units"):
        data.load_vidur_mlp(root=root)


def test_wrong_units_in_manifest(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [GEMM_H100, VIDUR_7B_A100],
                     units={GEMM_H100: {"latency": "furlongs"}, VIDUR_7B_A100: {"time_stats.*": "us"}})
    with pytest.raises(DataError, match=r"gemm_perf.bf16.parquet: column 'latency': unknown time unit 'furlongs'"):
        data.load_aic_gemm(root=root)
    # a real ms file declared as microseconds becomes 1000x too fast: caught, not silently converted
    with pytest.raises(DataError, match="wrong units"):
        data.load_vidur_mlp(root=root)


def test_distserve_bad_json(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [DISTSERVE])
    p = root / DISTSERVE
    doc = json.loads(p.read_text())
    doc["facebook/opt-13b"]["2"]["prefill"][1] = None
    p.write_text(json.dumps(doc))
    rerecord(p)
    with pytest.raises(DataError, match=r"distserve.json: row facebook/opt-13b/tp=2, column 'prefill'"):
        data.load_distserve(root=root)
    p.write_text(p.read_text()[:200])
    rerecord(p)
    with pytest.raises(DataError, match="unreadable JSON"):
        data.load_distserve(root=root)


def test_tidy_tables_deterministic(tmp_path):
    df = data.tidy_table("distserve")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    data.write_parquet(df, a)
    data.write_parquet(data.tidy_table("distserve"), b)
    assert a.read_bytes() == b.read_bytes()
