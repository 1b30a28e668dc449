"""The mixture-of-experts tables (issue 20): AIConfigurator's fused MoE, MLA, MLA bmm and all-to-all."""
from __future__ import annotations

import pytest

from rawcopy import mini_root, rewrite, set_at  # tests/rawcopy.py
from steptime_lab import data
from steptime.errors import DataError

MOE_H100 = "raw/aiconfigurator/h100_sxm/moe/vllm/0.24.0/moe_perf.parquet"
A2A_H100 = "raw/aiconfigurator/h100_sxm/comm/vllm/0.24.0/moe_a2a_perf.parquet"
MLA_H100 = "raw/aiconfigurator/h100_sxm/mla/vllm/0.24.0/mla_generation_module_perf.parquet"


def test_moe_real():
    d = data.load_aic_moe("h100")
    # the three engines' tables (TensorRT-LLM's since wave 38, SGLang's since wave 39)
    assert set(d["framework"]) == {"vllm", "trtllm", "sglang"}
    d = d[d.framework == "vllm"]
    assert len(d) > 40000 and set(d["gpu"]) == {"h100-sxm"}
    assert {"bfloat16", "fp8_block", "w4a16_mxfp4"} <= set(d["dtype"])
    assert "nvfp4" not in set(d["dtype"])  # no NVFP4 tensor cores on Hopper, and none measured
    assert {"balanced", "power_law_1.01", "power_law_1.2"} == set(d["distribution"])
    # more tokens never make the same bf16 balanced layer much faster (monotone up to noise)
    one = d[(d.dtype == "bfloat16") & (d.distribution == "balanced") & (d.hidden_size == 4096)
            & (d.inter_size == 1536) & (d.num_experts == 128) & (d.topk == 8) & (d.moe_tp == 1) & (d.moe_ep == 1)]
    one = one.sort_values("num_tokens")
    assert len(one) > 10
    assert (one.latency_ms.diff().dropna() > -0.1 * one.latency_ms.iloc[:-1].to_numpy()).all()
    # the expert weights touched grow with tokens and saturate at all local experts
    assert one.weight_bytes.is_monotonic_increasing
    full = 128 * 3 * 4096 * 1536 * 2
    assert one.weight_bytes.iloc[-1] == pytest.approx(full, rel=1e-6)


def test_moe_nvfp4_only_on_blackwell():
    d = data.load_aic_moe()
    fp4 = set(d.loc[d.dtype == "nvfp4", "gpu"])
    from steptime.specs import get_gpu

    assert fp4 and all(get_gpu(g).architecture == "blackwell" for g in fp4)


def test_moe_wrong_units(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [MOE_H100])
    rewrite(root / MOE_H100, lambda d: d.assign(latency=d["latency"] / 1000.0))
    with pytest.raises(DataError, match=r"moe_perf.parquet: row \d+, column 'latency': fused MoE implies more"):
        data.load_aic_moe(root=root)


def test_moe_bad_ep(tmp_path, repo_root):
    root = mini_root(tmp_path, repo_root, [MOE_H100])
    rewrite(root / MOE_H100, set_at(5, "moe_ep_size", 3))
    with pytest.raises(DataError, match=r"row 5, column 'moe_ep_size': does not divide num_experts"):
        data.load_aic_moe(root=root)


def test_a2a_real_and_units(tmp_path, repo_root):
    d = data.load_aic_moe_a2a()
    assert {"deepep_ht", "deepep_ll"} <= set(d["backend"]) and set(d["phase"]) == {"dispatch", "combine"}
    assert (d.latency_ms > 0.01).all()  # tens of microseconds at least: the latency column is in us
    root = mini_root(tmp_path / "ms", repo_root, [A2A_H100], units={A2A_H100: {"latency": "ms"}})
    with pytest.raises(DataError, match="all-to-all of under 1 MiB takes more than 10 ms"):
        data.load_aic_moe_a2a(root=root)
    root = mini_root(tmp_path / "ns", repo_root, [A2A_H100], units={A2A_H100: {"latency": "ns"}})
    with pytest.raises(DataError, match="all-to-all implies more bytes per second than HBM"):
        data.load_aic_moe_a2a(root=root)


def test_mla_real_and_missing_column(tmp_path, repo_root):
    g = data.load_aic_mla("generation", "h200")
    assert (g.kv_len == g.isl + g.step).all() and g.num_heads.max() == 128
    c = data.load_aic_mla("context")
    assert "a100-sxm" not in set(c.gpu)  # no vLLM MLA table for A100 in the wheel
    b = data.load_aic_mla_bmm()
    assert set(b.op) == {"mla_gen_pre", "mla_gen_post"}
    root = mini_root(tmp_path, repo_root, [MLA_H100])
    rewrite(root / MLA_H100, lambda d: d.drop(columns=["num_heads"]))
    with pytest.raises(DataError, match="num_heads"):
        data.load_aic_mla("generation", root=root)
    with pytest.raises(ValueError):
        data.load_aic_mla("prefill")
