"""Loaders for Microsoft Vidur's profiling tables and request traces (MIT).

Vidur's times are milliseconds (checked against the datasheets; see raw/MANIFEST.yaml notes);
the unit is read from the manifest and converted explicitly, never assumed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime_lab.data import schemas
from steptime_lab.data.aic import BIG_FLOPS, MAX_PEAK_FRACTION, MIN_PEAK_FRACTION_BIG, _concat, _gpu_filter, _spec
from steptime_lab.data.checks import aggregate_duplicates, fail_rows, read_csv, run_schema, time_factor
from steptime_lab.data.manifest import Entry, load_manifest
from steptime.errors import DataError, UnknownModelError
from steptime.specs import vidur_operators
from steptime.specs import get_model

VIDUR_OPS = tuple(vidur_operators())  # Vidur's operators in execution order (specs/operators.yaml)
GEMM_OPS = tuple(vidur_operators(kind="gemm"))
STATS = ("min", "max", "mean", "median", "std")
CPU_STAGES = ("schedule", "sampler_launch", "sampler_e2e", "prepare_inputs_launch", "prepare_inputs_e2e",
              "model_execution_launch", "model_execution_e2e", "process_model_outputs")


def model_key(name: str) -> str:
    """steptime's model key for a Hugging Face id (its last path part, lower-cased, if steptime lacks it)."""
    try:
        return get_model(name).key
    except UnknownModelError:
        return str(name).split("/")[-1].lower()


def _model_filter(model):
    if model is None:
        return None
    return [model_key(model)] if isinstance(model, str) else [model_key(m) for m in model]


def gemm_shapes(op: str, tokens, tp, n_head, n_kv_head, n_embd, n_expanded, gated):
    """(m, n, k) of a Vidur GEMM operator on one tensor-parallel shard (arrays in, int arrays out)."""
    hd = n_embd // n_head
    heads = -(-n_head // tp)
    kv_heads = -(-n_kv_head // tp)
    if op == "attn_pre_proj":
        return tokens, (heads + 2 * kv_heads) * hd, n_embd
    if op == "attn_post_proj":
        return tokens, n_embd, heads * hd
    if op == "mlp_up_proj":
        return tokens, np.where(gated, 2, 1) * (-(-n_expanded // tp)), n_embd
    if op == "mlp_down_proj":
        return tokens, n_embd, -(-n_expanded // tp)
    raise KeyError(op)


# --------------------------------------------------------------------------- mlp.csv
def read_mlp_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.checked_path)
    run_schema(raw, schemas.raw("vidur_mlp"), entry.rel, csv=True)
    ops = []
    for c in raw.columns:
        if c.startswith("time_stats."):
            parts = c.split(".")
            if len(parts) != 3 or parts[2] not in STATS:
                raise DataError(f"{entry.rel}: row all, column {c!r}: not a time_stats.<op>.<stat> column")
            if parts[1] not in VIDUR_OPS:
                raise DataError(f"{entry.rel}: row all, column {c!r}: unknown Vidur operator {parts[1]!r}")
            if parts[1] not in ops:
                ops.append(parts[1])
    if not ops:
        raise DataError(f"{entry.rel}: row all, column 'time_stats.*': no operator columns")
    for op in ops:
        for s in STATS:
            if f"time_stats.{op}.{s}" not in raw:
                raise DataError(f"{entry.rel}: row all, column 'time_stats.{op}.{s}': required column missing")
    f = time_factor(entry, "time_stats.*")
    g = _spec(entry)
    tokens = raw["num_tokens"].to_numpy("int64")
    tp = raw["num_tensor_parallel_workers"].to_numpy("int64")
    shape_args = (raw["n_head"].to_numpy("int64"), raw["n_kv_head"].to_numpy("int64"), raw["n_embd"].to_numpy("int64"),
                  raw["n_expanded_embd"].to_numpy("int64"), raw["use_gated_mlp"].to_numpy(bool))
    model = entry.get("model") or model_key(entry.get("model_source", "?"))
    frames = []
    for op in ops:
        t = {s: raw[f"time_stats.{op}.{s}"].to_numpy("float64") * f for s in STATS}
        if op in GEMM_OPS:
            m, n, k = gemm_shapes(op, tokens, tp, *shape_args)
            flops = 2.0 * m * n * k
            eff = flops / (t["median"] * 1e-3) / g.peak_flops
            col = f"time_stats.{op}.median"
            fail_rows(raw, eff > MAX_PEAK_FRACTION, entry.rel, col,
                      f"implies more than {MAX_PEAK_FRACTION}x the GPU's bf16 peak; wrong units?",
                      values=raw[col].to_numpy(), csv=True)
            fail_rows(raw, (flops >= BIG_FLOPS) & (eff < MIN_PEAK_FRACTION_BIG), entry.rel, col,
                      f"a >= {BIG_FLOPS:.0e} FLOP GEMM at < {MIN_PEAK_FRACTION_BIG:.1%} of peak; wrong units?",
                      values=raw[col].to_numpy(), csv=True)
        else:
            m = n = k = np.full(len(raw), -1)
        frames.append(pd.DataFrame({
            "gpu": g.key, "model": model, "tp": tp, "num_tokens": tokens, "op": op,
            "latency_ms": t["median"], "latency_mean_ms": t["mean"], "latency_std_ms": t["std"],
            "latency_min_ms": t["min"], "latency_max_ms": t["max"],
            "n_head": shape_args[0], "n_kv_head": shape_args[1], "n_embd": shape_args[2],
            "n_expanded_embd": shape_args[3], "vocab_size": raw["vocab_size"].to_numpy("int64"),
            "use_gated_mlp": shape_args[4], "gemm_m": m, "gemm_n": n, "gemm_k": k}))
    df = pd.concat(frames, ignore_index=True)
    keys = ["gpu", "model", "tp", "num_tokens", "op", "n_head", "n_kv_head", "n_embd", "n_expanded_embd",
            "vocab_size", "use_gated_mlp", "gemm_m", "gemm_n", "gemm_k"]
    df = aggregate_duplicates(df, keys, {c: "median" for c in ("latency_ms", "latency_mean_ms", "latency_std_ms",
                                                                 "latency_min_ms", "latency_max_ms")})
    for c in ("gemm_m", "gemm_n", "gemm_k"):
        df[c] = df[c].astype("Int64").where(df[c] >= 0, pd.NA)
    df["model_source"] = entry.get("model_source")
    order = ["gpu", "model", "tp", "num_tokens", "op", "latency_ms", "latency_mean_ms", "latency_std_ms",
             "latency_min_ms", "latency_max_ms", "n_dup", "n_head", "n_kv_head", "n_embd", "n_expanded_embd",
             "vocab_size", "use_gated_mlp", "gemm_m", "gemm_n", "gemm_k", "model_source"]
    op_rank = {o: i for i, o in enumerate(VIDUR_OPS)}
    df = df.sort_values(["gpu", "model", "tp", "num_tokens", "op"], key=lambda s: s.map(op_rank) if s.name == "op"
                        else s, kind="stable").reset_index(drop=True)
    return df[order]


def load_vidur_mlp(gpu=None, model=None, *, root=None) -> pd.DataFrame:
    """Vidur per-operator times of one layer, long/tidy: gpu, model, tp, num_tokens, op, latency_ms (median),
    latency_mean_ms, latency_std_ms, latency_min_ms, latency_max_ms, n_dup, n_head, n_kv_head, n_embd,
    n_expanded_embd, vocab_size, use_gated_mlp, gemm_m/gemm_n/gemm_k (per-shard GEMM shape, <NA> for
    non-GEMM ops), model_source (Hugging Face id)."""
    ents = load_manifest(root).entries("vidur_mlp", _gpu_filter(gpu), _model_filter(model))
    return _concat([read_mlp_file(e) for e in ents], "vidur_mlp", gpu or model)


# --------------------------------------------------------------------------- cpu_overheads
def read_cpu_overheads_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.checked_path)
    run_schema(raw, schemas.raw("vidur_cpu_overheads"), entry.rel, csv=True)
    g = _spec(entry)
    cols = [f"{s}_{stat}" for s in CPU_STAGES for stat in ("mean", "median")] + ["ray_comm_time_mean"]
    for c in cols:
        if c not in raw:
            raise DataError(f"{entry.rel}: row all, column {c!r}: required column missing")
    fm, fd = time_factor(entry, "*_mean"), time_factor(entry, "*_median")
    df = pd.DataFrame({"gpu": g.key, "model": raw["model_name"].map(model_key), "model_source": raw["model_name"],
                       "tp": raw["tensor_parallel_degree"], "batch_size": raw["batch_size"]})
    for c in cols:
        df[f"{c}_ms"] = raw[c].to_numpy("float64") * (fd if c.endswith("_median") else fm)
    df = aggregate_duplicates(df, ["gpu", "model", "model_source", "tp", "batch_size"],
                              {f"{c}_ms": "median" for c in cols})
    return df[["gpu", "model", "tp", "batch_size", "n_dup"] + [f"{c}_ms" for c in cols] + ["model_source"]]


def load_vidur_cpu_overheads(gpu=None, *, root=None) -> pd.DataFrame:
    """Host time per engine step (Vidur, Sarathi-Serve engine): gpu, model, model_source, tp, batch_size,
    <stage>_mean_ms and <stage>_median_ms for stage in schedule, sampler_launch, sampler_e2e,
    prepare_inputs_launch, prepare_inputs_e2e, model_execution_launch, model_execution_e2e,
    process_model_outputs; ray_comm_time_mean_ms; n_dup."""
    ents = load_manifest(root).entries("vidur_cpu_overheads", _gpu_filter(gpu))
    return _concat([read_cpu_overheads_file(e) for e in ents], "vidur_cpu_overheads", gpu)


# --------------------------------------------------------------------------- traces
def read_trace_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.checked_path)
    run_schema(raw, schemas.raw("vidur_trace"), entry.rel, csv=True)
    name = entry.path.stem
    if "arrived_at" in raw:
        units = (entry.get("units") or {}).get("arrived_at")
        if units != "s":
            raise DataError(f"{entry.rel}: row all, column 'arrived_at': unit {units!r} in raw/MANIFEST.yaml, "
                            "expected 's'")
        arr = raw["arrived_at"].to_numpy("float64")
    else:
        arr = np.full(len(raw), np.nan)
    return pd.DataFrame({"trace": name, "request_id": np.arange(len(raw), dtype="int64"),
                         "arrived_at_s": arr, "num_prefill_tokens": raw["num_prefill_tokens"].to_numpy("int64"),
                         "num_decode_tokens": raw["num_decode_tokens"].to_numpy("int64")})


def load_traces(trace: str | None = None, *, root=None) -> pd.DataFrame:
    """Request length traces: trace (file stem), request_id (row in the file), arrived_at_s (seconds since
    the trace start; NaN where the trace has no arrival times), num_prefill_tokens, num_decode_tokens."""
    ents = load_manifest(root).entries("vidur_trace")
    if trace is not None:
        ents = [e for e in ents if e.path.stem == trace or e.path.stem.startswith(trace)]
    return _concat([read_trace_file(e) for e in ents], "trace", trace)
