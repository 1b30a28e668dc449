"""Loaders for NVIDIA AIConfigurator's measured tables (aiconfigurator-core 0.12.0, vLLM backend).

All latencies come back in milliseconds per call (`latency_ms`), GPUs as steptime keys.
Exact duplicate configurations are collapsed by the median and counted in `n_dup`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.io import read_yaml, yaml_problem
from steptime_lab.data import schemas
from steptime_lab.data.checks import aggregate_duplicates, fail_rows, read_parquet, run_schema, time_factor
from steptime_lab.data.manifest import Entry, load_manifest
from steptime.errors import DataError
from steptime.specs import get_gpu, gpu_key

# Unit sanity bounds (a units slip shows up as impossible efficiencies).
MAX_PEAK_FRACTION = 1.25      # no kernel runs faster than 1.25x the datasheet compute peak
MIN_PEAK_FRACTION_BIG = 0.005  # large shapes (>= 100 GFLOP of work) reach at least 0.5% of peak
BIG_FLOPS = 1e11
MAX_HBM_FRACTION_BIG = 1.25   # working sets >= 4x L2 cannot beat HBM bandwidth by much

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "int8": 1, "float32": 4, "float": 4}
DTYPE_NAMES = {"half": "float16", "float": "float32"}


def _gpu_filter(gpu):
    if gpu is None:
        return None

    return [gpu_key(gpu)] if isinstance(gpu, str) else [gpu_key(g) for g in gpu]


def _concat(frames: list[pd.DataFrame], what: str, gpu) -> pd.DataFrame:
    if not frames:
        raise DataError(f"raw/MANIFEST.yaml lists no {what} table" + (f" for GPU {gpu!r}" if gpu else ""))
    return pd.concat(frames, ignore_index=True)


def _spec(entry: Entry):
    if not entry.gpu:
        raise DataError(f"{entry.rel}: raw/MANIFEST.yaml gives no gpu for this file")
    return get_gpu(entry.gpu)


def _peak_for(gpu, dtypes: pd.Series) -> np.ndarray:
    fp8 = (gpu.fp8_dense_tflops or gpu.bf16_dense_tflops) * 1e12
    return np.where(dtypes.to_numpy() == "fp8", fp8, gpu.peak_flops)


def _check_compute(df, file, flops, latency_ms, peak, what: str) -> None:
    eff = flops / (latency_ms * 1e-3) / peak
    fail_rows(df, eff > MAX_PEAK_FRACTION, file, "latency",
              f"{what} implies more than {MAX_PEAK_FRACTION}x the GPU's datasheet peak; wrong units?",
              values=latency_ms)
    fail_rows(df, (flops >= BIG_FLOPS) & (eff < MIN_PEAK_FRACTION_BIG), file, "latency",
              f"{what} on a >= {BIG_FLOPS:.0e} FLOP shape implies < {MIN_PEAK_FRACTION_BIG:.1%} of peak; wrong units?",
              values=latency_ms)


def _meta_cols(df: pd.DataFrame, entry: Entry) -> pd.DataFrame:
    df["framework"] = entry.get("framework")
    df["framework_version"] = str(entry.get("framework_version"))
    return df


# --------------------------------------------------------------------------- GEMM
def read_gemm_file(entry: Entry) -> pd.DataFrame:
    raw = read_parquet(entry.checked_path)
    run_schema(raw, schemas.raw("aic_gemm"), entry.rel)
    g = _spec(entry)
    lat = raw["latency"].to_numpy(dtype="float64") * time_factor(entry, "latency")
    flops = 2.0 * raw["m"].to_numpy("float64") * raw["n"].to_numpy("float64") * raw["k"].to_numpy("float64")
    _check_compute(raw, entry.rel, flops, lat, _peak_for(g, raw["gemm_dtype"]), "GEMM")
    df = pd.DataFrame({"gpu": g.key, "m": raw["m"], "n": raw["n"], "k": raw["k"],
                       "dtype": raw["gemm_dtype"].astype(str), "kernel_source": raw["kernel_source"].astype(str),
                       "latency_ms": lat})
    df = aggregate_duplicates(df, ["gpu", "n", "k", "m", "dtype", "kernel_source"], {"latency_ms": "median"})
    m, n, k = (df[c].to_numpy("float64") for c in ("m", "n", "k"))
    elem = df["dtype"].map(DTYPE_BYTES).fillna(2).to_numpy("float64")
    df["flops"] = 2.0 * m * n * k
    df["min_bytes"] = (m * k + k * n + m * n) * elem
    df["hbm_floor_ms"] = df["min_bytes"] / g.mem_bw * 1e3
    df["above_hbm_roofline"] = df["latency_ms"] < df["hbm_floor_ms"]
    return _meta_cols(df, entry)[GEMM_COLUMNS]


GEMM_COLUMNS = ["gpu", "m", "n", "k", "dtype", "kernel_source", "latency_ms", "n_dup", "flops", "min_bytes",
                "hbm_floor_ms", "above_hbm_roofline", "framework", "framework_version"]


def load_aic_gemm(gpu=None, *, root=None) -> pd.DataFrame:
    """bf16 GEMM latencies: gpu, m, n, k, dtype, kernel_source, latency_ms, n_dup, flops, min_bytes,
    hbm_floor_ms, above_hbm_roofline, framework, framework_version (sorted by gpu, n, k, m)."""
    ents = load_manifest(root).entries("aic_gemm", _gpu_filter(gpu))
    return _concat([read_gemm_file(e) for e in ents], "aic_gemm", gpu)


def load_aic_gemm_engines(gpu=None, *, root=None) -> pd.DataFrame:
    """The other engines' own GEMM tables (TensorRT-LLM, SGLang): bf16 and per-tensor fp8 W8A8 rows, the
    columns of load_aic_gemm; `framework` names the engine (issue 19: fp8 is fitted per engine)."""
    ents = load_manifest(root).entries("aic_gemm_engine", _gpu_filter(gpu))
    return _concat([read_gemm_file(e) for e in ents], "aic_gemm_engine", gpu)


# --------------------------------------------------------------------------- attention
_ATTN_KEYS = ["batch_size", "isl", "step", "num_heads", "num_kv_heads", "head_dim", "beam_width", "attn_dtype",
              "kv_cache_dtype", "window_size", "kernel_source"]


def read_attention_file(entry: Entry) -> pd.DataFrame:
    kind = "context" if entry.table == "aic_context_attention" else "generation"
    raw = read_parquet(entry.checked_path)
    run_schema(raw, schemas.raw(entry.table), entry.rel)
    g = _spec(entry)
    lat = raw["latency"].to_numpy(dtype="float64") * time_factor(entry, "latency")
    win = raw["window_size"] if "window_size" in raw else pd.Series(0, index=raw.index, dtype="int64")
    if kind == "context":
        b, isl, h, d = (raw[c].to_numpy("float64") for c in ("batch_size", "isl", "num_heads", "head_dim"))
        flops = 4.0 * b * h * d * isl * (isl + 1) / 2  # causal QK^T and PV
        fail_rows(raw, raw["step"] != 0, entry.rel, "step",
                  "prefill rows with prior KV (step != 0) are not understood by this loader")
        full = win.to_numpy() == 0
        _check_compute(raw[full], entry.rel, flops[full], lat[full], _peak_for(g, raw["kv_cache_dtype"])[full],
                       "causal prefill attention")
    else:
        kv = (raw["isl"] + raw["step"]).to_numpy("float64")
        eff_kv = np.where(win.to_numpy() > 0, np.minimum(kv, win.to_numpy()), kv)
        elem = raw["kv_cache_dtype"].map(DTYPE_BYTES).fillna(2).to_numpy("float64")
        kv_bytes = raw["batch_size"].to_numpy("float64") * eff_kv * 2 * raw["num_key_value_heads"].to_numpy() \
            * raw["head_dim"].to_numpy() * elem
        bw = kv_bytes / (lat * 1e-3) / g.mem_bw
        fail_rows(raw, (kv_bytes >= 4 * g.l2_bytes) & (bw > MAX_HBM_FRACTION_BIG), entry.rel, "latency",
                  f"decode attention reads its KV cache faster than {MAX_HBM_FRACTION_BIG}x HBM bandwidth; "
                  "wrong units?", values=lat)
    df = pd.DataFrame({"gpu": g.key, "batch_size": raw["batch_size"], "isl": raw["isl"], "step": raw["step"],
                       "num_heads": raw["num_heads"], "num_kv_heads": raw["num_key_value_heads"],
                       "head_dim": raw["head_dim"], "beam_width": raw["beam_width"],
                       "attn_dtype": raw["attn_dtype"].astype(str), "kv_cache_dtype": raw["kv_cache_dtype"].astype(str),
                       "window_size": win.astype("int64"), "kernel_source": raw["kernel_source"].astype(str),
                       "latency_ms": lat})
    df = aggregate_duplicates(df, ["gpu"] + _ATTN_KEYS, {"latency_ms": "median"})
    if kind == "context":
        df = df.drop(columns="step")
        df["num_tokens"] = df["batch_size"] * df["isl"]
    else:
        df["kv_len"] = df["isl"] + df["step"]
    df = _meta_cols(df, entry)
    return df[ATTENTION_COLUMNS[kind]]


_ATTN_TAIL = ["num_heads", "num_kv_heads", "head_dim", "beam_width", "attn_dtype", "kv_cache_dtype", "window_size",
              "kernel_source", "latency_ms", "n_dup", "framework", "framework_version"]
ATTENTION_COLUMNS = {
    "context": ["gpu", "batch_size", "isl", "num_tokens"] + _ATTN_TAIL,
    "generation": ["gpu", "batch_size", "kv_len", "isl", "step"] + _ATTN_TAIL,
}


def load_aic_attention(kind: str = "context", gpu=None, *, root=None) -> pd.DataFrame:
    """Attention latencies, kind 'context' (prefill) or 'generation' (decode).

    context: gpu, batch_size, isl, num_tokens (= batch_size*isl), num_heads, num_kv_heads, head_dim,
    beam_width, attn_dtype, kv_cache_dtype, window_size (0 = full), kernel_source, latency_ms, n_dup,
    framework, framework_version.
    generation: the same with kv_len (= isl + step, KV length read per request), isl, step instead of
    num_tokens.
    """
    if kind not in ("context", "generation"):
        raise ValueError(f"kind must be 'context' or 'generation', not {kind!r}")
    table = f"aic_{kind}_attention"
    ents = load_manifest(root).entries(table, _gpu_filter(gpu))
    return _concat([read_attention_file(e) for e in ents], table, gpu)


# --------------------------------------------------------------------------- quantize (scale_matrix)
def read_scale_matrix_file(entry: Entry) -> pd.DataFrame:
    raw = read_parquet(entry.checked_path)
    run_schema(raw, schemas.raw("aic_scale_matrix"), entry.rel)
    g = _spec(entry)
    lat = raw["latency"].to_numpy(dtype="float64") * time_factor(entry, "latency")
    out_elem = raw["quant_dtype"].map(DTYPE_BYTES).fillna(1).to_numpy("float64")
    nbytes = raw["m"].to_numpy("float64") * raw["k"].to_numpy("float64") * (2 + out_elem)
    bw = nbytes / (lat * 1e-3) / g.mem_bw
    fail_rows(raw, (nbytes >= 4 * g.l2_bytes) & (bw > MAX_HBM_FRACTION_BIG), entry.rel, "latency",
              f"streams a working set >= 4x L2 faster than {MAX_HBM_FRACTION_BIG}x HBM bandwidth; wrong units?",
              values=lat)
    df = pd.DataFrame({"gpu": g.key, "m": raw["m"], "k": raw["k"], "quant_dtype": raw["quant_dtype"].astype(str),
                       "kernel_source": raw["kernel_source"].astype(str), "latency_ms": lat})
    df = aggregate_duplicates(df, ["gpu", "m", "k", "quant_dtype", "kernel_source"], {"latency_ms": "median"})
    df["bytes"] = df["m"].to_numpy("float64") * df["k"].to_numpy("float64") * \
        (2 + df["quant_dtype"].map(DTYPE_BYTES).fillna(1).to_numpy("float64"))
    df["hbm_floor_ms"] = df["bytes"] / g.mem_bw * 1e3
    df["above_hbm_roofline"] = df["latency_ms"] < df["hbm_floor_ms"]
    return _meta_cols(df, entry)[SCALE_MATRIX_COLUMNS]


SCALE_MATRIX_COLUMNS = ["gpu", "m", "k", "quant_dtype", "kernel_source", "latency_ms", "n_dup", "bytes",
                        "hbm_floor_ms", "above_hbm_roofline", "framework", "framework_version"]


def load_aic_scale_matrix(gpu=None, *, root=None) -> pd.DataFrame:
    """fp8 static quantisation of an m x k bf16 matrix (a streaming kernel): gpu, m, k, quant_dtype,
    kernel_source, latency_ms, n_dup, bytes (= m*k*(2 + 1), read bf16 + write fp8), hbm_floor_ms,
    above_hbm_roofline, framework, framework_version."""
    ents = load_manifest(root).entries("aic_scale_matrix", _gpu_filter(gpu))
    return _concat([read_scale_matrix_file(e) for e in ents], "aic_scale_matrix", gpu)


# --------------------------------------------------------------------------- all-reduce
def read_allreduce_file(entry: Entry) -> pd.DataFrame:
    raw = read_parquet(entry.checked_path)
    run_schema(raw, schemas.raw(entry.table), entry.rel)
    g = _spec(entry)
    lat = raw["latency"].to_numpy(dtype="float64") * time_factor(entry, "latency")
    nccl = entry.table == "aic_nccl_allreduce"
    dcol = "nccl_dtype" if nccl else "allreduce_dtype"
    unknown = ~raw[dcol].isin(list(DTYPE_BYTES))
    fail_rows(raw, unknown, entry.rel, dcol, "unknown element type (cannot size the message)")
    dtype = raw[dcol].astype(str).replace(DTYPE_NAMES)
    df = pd.DataFrame({"gpu": g.key, "library": "nccl" if nccl else "vllm_custom",
                       "library_version": str(entry.get("framework_version")),
                       "kernel_source": raw["kernel_source"].astype(str),
                       "backend": raw["backend"].astype(str) if "backend" in raw else "nccl",
                       "dtype": dtype, "num_gpus": raw["num_gpus"], "message_elems": raw["message_size"],
                       "latency_ms": lat})
    df = aggregate_duplicates(df, ["gpu", "library", "library_version", "kernel_source", "backend", "dtype",
                                   "num_gpus", "message_elems"], {"latency_ms": "median"})
    df["message_bytes"] = df["message_elems"] * df["dtype"].map(DTYPE_BYTES).astype("int64")
    n = df["num_gpus"].to_numpy("float64")
    df["busbw_gbps"] = df["message_bytes"] / (df["latency_ms"] * 1e-3) * 2 * (n - 1) / n / 1e9
    return df[ALLREDUCE_COLUMNS]


ALLREDUCE_COLUMNS = ["gpu", "library", "library_version", "kernel_source", "backend", "dtype", "num_gpus",
                     "message_elems", "message_bytes", "latency_ms", "n_dup", "busbw_gbps"]


def load_aic_allreduce(gpu=None, *, root=None, library: str | None = None) -> pd.DataFrame:
    """All-reduce within one node: gpu, library ('nccl' | 'vllm_custom'), library_version, kernel_source,
    backend, dtype, num_gpus, message_elems, message_bytes, latency_ms, n_dup, busbw_gbps
    (= bytes/t * 2(n-1)/n, nccl-tests convention)."""
    ents = []
    man = load_manifest(root)
    if library in (None, "nccl"):
        ents += man.entries("aic_nccl_allreduce", _gpu_filter(gpu))
    if library in (None, "vllm_custom"):
        ents += man.entries("aic_custom_allreduce", _gpu_filter(gpu))
    if library not in (None, "nccl", "vllm_custom"):
        raise ValueError(f"library must be 'nccl' or 'vllm_custom', not {library!r}")
    ents.sort(key=lambda e: e.rel)
    return _concat([read_allreduce_file(e) for e in ents], "all-reduce", gpu)


def load_aic_system(gpu, *, root=None) -> dict:
    """AIConfigurator's own systems/<gpu>.yaml (its datasheet figures), as a dict."""
    import yaml

    ents = load_manifest(root).entries("aic_system", _gpu_filter(gpu))
    if not ents:
        raise DataError(f"raw/MANIFEST.yaml lists no AIConfigurator system file for GPU {gpu!r}")
    try:
        return read_yaml(ents[0].checked_path)
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"{ents[0].rel}: unreadable: {yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else exc}") from None
