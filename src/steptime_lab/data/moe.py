"""Loaders for AIConfigurator's mixture-of-experts tables (aiconfigurator-core 0.12.0, vLLM backend).

Four families (issue 20), each checked for schema, units and value ranges before use:

- `aic_moe`: the fused MoE layer (grouped expert GEMMs with permute/combine) per token count,
  shape, top-k, expert count, moe_tp/moe_ep, dtype and routing distribution; vLLM's tables and, since
  wave 38, TensorRT-LLM's own (one reader; the manifest entry's framework in the column `framework`);
- `aic_mla_context` / `aic_mla_generation`: DeepSeek-V3's MLA attention module, prefill and decode;
- `aic_mla_bmm`: the two batched GEMMs of weight-absorbed MLA decode;
- `aic_moe_a2a` (vLLM) and `aic_moe_a2a_trtllm` (TensorRT-LLM): DeepEP's expert-parallel all-to-all
  (dispatch / combine), per backend and payload dtype;
- `aic_trtllm_alltoall`: TensorRT-LLM's own NVLink all-to-all kernels (prepare / dispatch / combine).

Latencies come back as `latency_ms` per call; exact duplicate configurations are collapsed by
the median and counted in `n_dup`. GPUs are steptime keys.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa

from steptime_lab.data.checks import aggregate_duplicates, fail_rows, read_parquet, run_schema, time_factor
from steptime_lab.data.manifest import Entry, load_manifest
from steptime_lab.data.moe_schemas import A2A_PAYLOAD_BYTES, MOE_DTYPES, RAW_TABLES, TIDY_TABLES, raw_columns, tidy_columns  # noqa: F401

# unit sanity bound: no fused MoE call runs faster than this many times the datasheet peak of its math
MAX_PEAK_FRACTION = 1.25


# the AIC loader's helpers, imported when called (data.aic's wrappers here share their names)
def _gpu_filter(gpu):
    from steptime_lab.data.aic import _gpu_filter as f

    return f(gpu)


def _spec(entry: Entry):
    from steptime_lab.data.aic import _spec as f

    return f(entry)


def _concat(frames, what, gpu):
    from steptime_lab.data.aic import _concat as f

    return f(frames, what, gpu)


def _math_peak(gpu, kind: np.ndarray) -> np.ndarray:
    """An upper bound on the math rate per row: bf16, fp8 (bf16 where the GPU has none), fp4 = 2x fp8."""
    bf16 = gpu.peak_flops
    fp8 = (gpu.fp8_dense_tflops or gpu.bf16_dense_tflops) * 1e12
    return np.select([kind == "fp8", kind == "fp4"], [fp8, 2.0 * fp8], bf16)


def _schema(kind: str, name: str) -> pa.DataFrameSchema:
    cols = raw_columns(name) if kind == "raw" else tidy_columns(name)
    return pa.DataFrameSchema(cols, strict=False, coerce=False, name=name)


def _read(entry: Entry):
    """Every reader's preamble: the file read and held to its table's raw schema, the GPU spec of the entry, and
    the latency column in ms (the manifest's stated unit). Returns (raw frame, GPU spec, latency ms)."""
    raw = read_parquet(entry.checked_path)
    run_schema(raw, _schema("raw", entry.table), entry.rel)
    return raw, _spec(entry), raw["latency"].to_numpy("float64") * time_factor(entry, "latency")


# --------------------------------------------------------------------------- fused MoE
MOE_KEYS = ["gpu", "kernel_source", "dtype", "distribution", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp", "moe_ep", "num_tokens"]
MOE_COLUMNS = [*MOE_KEYS, "latency_ms", "n_dup", "weight_bytes", "flops", "framework", "framework_version"]


def moe_work(num_tokens, hidden, inter, topk, num_experts, tp, ep, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, weight bytes) one GPU of a gated MoE layer does under balanced routing: T*k/ep token-expert
    pairs, each 2*h*3*(inter/tp) FLOPs (gate, up, down); the expert weights it holds and the routing touches."""
    T, h, i, k, E = (np.asarray(x, dtype="float64") for x in (num_tokens, hidden, inter, topk, num_experts))
    tp, ep = np.asarray(tp, "float64"), np.asarray(ep, "float64")
    elem = pd.Series(np.asarray(dtype)).map({d: b for d, (b, _) in MOE_DTYPES.items()}).to_numpy("float64")
    flops = 2.0 * 3.0 * T * k * h * i / (tp * ep)
    local = E / ep
    touched = local * (1.0 - (1.0 - k / E) ** T)      # distinct local experts touched (uniform routing)
    wbytes = touched * 3.0 * h * i / tp * elem
    return flops, wbytes


def read_moe_file(entry: Entry) -> pd.DataFrame:
    raw, g, lat = _read(entry)
    fail_rows(raw, raw["topk"] > raw["num_experts"], entry.rel, "topk", "more experts per token than experts")
    fail_rows(raw, raw["num_experts"] % raw["moe_ep_size"] != 0, entry.rel, "moe_ep_size",
              "does not divide num_experts")
    fail_rows(raw, raw["inter_size"] % raw["moe_tp_size"] != 0, entry.rel, "moe_tp_size",
              "does not divide inter_size")
    df = pd.DataFrame({"gpu": g.key, "kernel_source": raw["kernel_source"].astype(str),
                       "dtype": raw["moe_dtype"].astype(str), "distribution": raw["distribution"].astype(str),
                       "hidden_size": raw["hidden_size"], "inter_size": raw["inter_size"], "topk": raw["topk"],
                       "num_experts": raw["num_experts"], "moe_tp": raw["moe_tp_size"], "moe_ep": raw["moe_ep_size"],
                       "num_tokens": raw["num_tokens"], "latency_ms": lat})
    flops, _ = moe_work(df.num_tokens, df.hidden_size, df.inter_size, df.topk, df.num_experts, df.moe_tp,
                        df.moe_ep, df.dtype)
    kind = df["dtype"].map({d: k for d, (_, k) in MOE_DTYPES.items()}).to_numpy()
    eff = flops / (lat * 1e-3) / _math_peak(g, kind)
    fail_rows(raw, eff > MAX_PEAK_FRACTION, entry.rel, "latency",
              f"fused MoE implies more than {MAX_PEAK_FRACTION}x the GPU's datasheet peak; wrong units?", values=lat)
    df = aggregate_duplicates(df, MOE_KEYS, {"latency_ms": "median"})
    df["flops"], df["weight_bytes"] = moe_work(df.num_tokens, df.hidden_size, df.inter_size, df.topk,
                                               df.num_experts, df.moe_tp, df.moe_ep, df.dtype)
    df["framework"] = entry.get("framework")
    df["framework_version"] = str(entry.get("framework_version"))
    return df[MOE_COLUMNS]


def load_aic_moe(gpu=None, *, root=None) -> pd.DataFrame:
    """Fused MoE latencies: gpu, kernel_source, dtype, distribution, hidden_size, inter_size, topk, num_experts,
    moe_tp, moe_ep, num_tokens, latency_ms, n_dup, weight_bytes (expert weights touched under uniform routing),
    flops (balanced routing, per GPU), framework, framework_version."""
    ents = load_manifest(root).entries("aic_moe", _gpu_filter(gpu))
    return _concat([read_moe_file(e) for e in ents], "aic_moe", gpu)


# --------------------------------------------------------------------------- MLA module
MLA_KEYS = ["gpu", "kernel_source", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "isl", "step"]


def read_mla_file(entry: Entry) -> pd.DataFrame:
    raw, g, lat = _read(entry)
    fail_rows(raw, raw["model"] != "deepseek-ai/DeepSeek-V3", entry.rel, "model",
              "only DeepSeek-V3's MLA shapes are understood by this loader")
    fail_rows(raw, raw["tp_size"] != 1, entry.rel, "tp_size", "expected 1 (heads are given per GPU)")
    df = pd.DataFrame({"gpu": g.key, "kernel_source": raw["kernel_source"].astype(str),
                       "kv_cache_dtype": raw["kv_cache_dtype"].astype(str), "gemm_type": raw["gemm_type"].astype(str),
                       "num_heads": raw["num_heads"], "batch_size": raw["batch_size"], "isl": raw["isl"],
                       "step": raw["step"], "latency_ms": lat})
    df = aggregate_duplicates(df, MLA_KEYS, {"latency_ms": "median"})
    if entry.table == "aic_mla_generation":
        df["kv_len"] = df["isl"] + df["step"]
    df["framework_version"] = str(entry.get("framework_version"))
    return df


def load_aic_mla(kind: str = "generation", gpu=None, *, root=None) -> pd.DataFrame:
    """DeepSeek-V3 MLA module latencies (kind 'context' or 'generation'): gpu, kernel_source, kv_cache_dtype,
    gemm_type, num_heads (per GPU), batch_size, isl, step, latency_ms, n_dup[, kv_len]."""
    if kind not in ("context", "generation"):
        raise ValueError(f"kind must be 'context' or 'generation', not {kind!r}")
    ents = load_manifest(root).entries(f"aic_mla_{kind}", _gpu_filter(gpu))
    return _concat([read_mla_file(e) for e in ents], f"aic_mla_{kind}", gpu)


def read_mla_bmm_file(entry: Entry) -> pd.DataFrame:
    raw, g, lat = _read(entry)
    df = pd.DataFrame({"gpu": g.key, "kernel_source": raw["kernel_source"].astype(str),
                       "op": raw["op_name"].astype(str), "dtype": raw["bmm_dtype"].astype(str),
                       "num_heads": raw["num_heads"], "num_tokens": raw["num_tokens"], "latency_ms": lat})
    return aggregate_duplicates(df, ["gpu", "kernel_source", "op", "dtype", "num_heads", "num_tokens"],
                                {"latency_ms": "median"})


def load_aic_mla_bmm(gpu=None, *, root=None) -> pd.DataFrame:
    """Weight-absorbed MLA decode batched GEMMs: gpu, kernel_source, op (mla_gen_pre | mla_gen_post), dtype,
    num_heads, num_tokens, latency_ms, n_dup."""
    ents = load_manifest(root).entries("aic_mla_bmm", _gpu_filter(gpu))
    return _concat([read_mla_bmm_file(e) for e in ents], "aic_mla_bmm", gpu)


# --------------------------------------------------------------------------- all-to-all
A2A_KEYS = ["gpu", "kernel_source", "backend", "phase", "comm_dtype", "ep_size", "node_num", "sms", "hidden_size", "topk",
            "num_experts", "num_tokens"]


def read_a2a_file(entry: Entry) -> pd.DataFrame:
    """DeepEP all-to-all rows of vLLM (`aic_moe_a2a`, the backend's default bf16 payload) or TensorRT-LLM
    (`aic_moe_a2a_trtllm`, bf16 / fp8 / NVFP4 payloads; its backends' `trtllm_` prefix dropped)."""
    raw, g, lat = _read(entry)
    if entry.table == "aic_moe_a2a":
        fail_rows(raw, raw["comm_dtype"] != "default", entry.rel, "comm_dtype",
                  "only the backend's default (bf16 payload) rows are understood")
    df = pd.DataFrame({"gpu": g.key, "kernel_source": raw["kernel_source"].astype(str),
                       "backend": raw["comm_backend"].astype(str).str.removeprefix("trtllm_"),
                       "phase": raw["phase"].astype(str), "comm_dtype": raw["comm_dtype"].astype(str),
                       "ep_size": raw["ep_size"], "node_num": raw["node_num"], "sms": raw["sms"],
                       "hidden_size": raw["hidden_size"], "topk": raw["topk"], "num_experts": raw["num_experts"],
                       "num_tokens": raw["num_tokens"], "latency_ms": lat})
    df = aggregate_duplicates(df, A2A_KEYS, {"latency_ms": "median"})
    # bytes a GPU sends: each token's hidden vector to the GPUs of its top-k experts that are not its own
    # (uniform routing: a fraction (ep-1)/ep of the T*k copies leave the GPU), at the payload's bytes per element
    T, h, k, ep = (df[c].to_numpy("float64") for c in ("num_tokens", "hidden_size", "topk", "ep_size"))
    df["message_bytes"] = T * k * h * df["comm_dtype"].map(A2A_PAYLOAD_BYTES).to_numpy("float64") * (ep - 1) / ep
    bw = g.mem_bw  # no a2a moves bytes faster than the GPU's own memory can supply them
    fail_rows(df, df["message_bytes"] / (df["latency_ms"] * 1e-3) > 1.25 * bw, entry.rel, "latency",
              "all-to-all implies more bytes per second than HBM bandwidth; wrong units?",
              values=df["latency_ms"])
    fail_rows(df, (df["message_bytes"] < 2**20) & (df["latency_ms"] > 10.0), entry.rel, "latency",
              "all-to-all of under 1 MiB takes more than 10 ms; wrong units?", values=df["latency_ms"])
    return df


def load_aic_moe_a2a(gpu=None, *, root=None, framework: str = "vllm") -> pd.DataFrame:
    """Expert-parallel all-to-all latencies (DeepEP through `framework`: vllm or trtllm): gpu, kernel_source,
    backend (deepep_ht | deepep_ll | ...), phase (dispatch | combine), comm_dtype, ep_size, node_num, sms,
    hidden_size, topk, num_experts, num_tokens (per GPU), latency_ms, n_dup, message_bytes (payload bytes a GPU
    sends under uniform routing)."""
    table = {"vllm": "aic_moe_a2a", "trtllm": "aic_moe_a2a_trtllm"}.get(framework)
    if table is None:
        raise ValueError(f"framework must be 'vllm' or 'trtllm', not {framework!r}")
    ents = load_manifest(root).entries(table, _gpu_filter(gpu))
    return _concat([read_a2a_file(e) for e in ents], table, gpu)


NVLINK_A2A_KEYS = ["gpu", "kernel_source", "op", "dtype", "ep_size", "hidden_size", "topk", "num_experts",
                   "num_tokens"]


def read_nvlink_a2a_file(entry: Entry) -> pd.DataFrame:
    """TensorRT-LLM's NVLink all-to-all (one-sided / two-sided kernels), one row per (op, dtype, ep, tokens)."""
    raw, g, lat = _read(entry)
    fail_rows(raw, raw["distribution"] != "balanced", entry.rel, "distribution", "only balanced routing is understood")
    df = pd.DataFrame({"gpu": g.key, "kernel_source": raw["kernel_source"].astype(str),
                       "op": raw["op_name"].astype(str).str.removeprefix("alltoall_"),
                       "dtype": raw["moe_dtype"].astype(str), "ep_size": raw["moe_ep_size"],
                       "hidden_size": raw["hidden_size"], "topk": raw["topk"], "num_experts": raw["num_experts"],
                       "num_tokens": raw["num_tokens"], "latency_ms": lat})
    fail_rows(df, df["latency_ms"] > 100.0, entry.rel, "latency", "an in-node all-to-all over 100 ms; wrong units?",
              values=df["latency_ms"])
    return aggregate_duplicates(df, NVLINK_A2A_KEYS, {"latency_ms": "median"})


def load_aic_trtllm_alltoall(gpu=None, *, root=None) -> pd.DataFrame:
    """TensorRT-LLM NVLink all-to-all latencies: gpu, kernel_source (NVLinkOneSided | NVLinkTwoSided), op (prepare |
    dispatch | combine | combine_low_precision), dtype, ep_size, hidden_size, topk, num_experts, num_tokens,
    latency_ms, n_dup."""
    ents = load_manifest(root).entries("aic_trtllm_alltoall", _gpu_filter(gpu))
    return _concat([read_nvlink_a2a_file(e) for e in ents], "aic_trtllm_alltoall", gpu)
