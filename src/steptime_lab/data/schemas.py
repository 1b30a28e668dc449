"""pandera schemas: the raw files as published, and the tidy tables the loaders return."""

from __future__ import annotations

from functools import lru_cache

import pandera.pandas as pa

from steptime_lab.data import moe_schemas, wallclock_schemas
from steptime_lab.data.columns import FINITE, Check, _latency, _nonneg_int, _pos_int, _str  # noqa: F401


# --------------------------------------------------------------------------- raw files
@lru_cache(maxsize=None)
def raw(table: str) -> pa.DataFrameSchema:
    if table == "aic_gemm":
        cols = {"m": _pos_int(), "n": _pos_int(), "k": _pos_int(), "gemm_dtype": _str(),
                "kernel_source": _str(), "latency": _latency()}
    elif table in ("aic_context_attention", "aic_generation_attention"):
        cols = {"batch_size": _pos_int(), "isl": _pos_int(), "num_heads": _pos_int(),
                "num_key_value_heads": _pos_int(), "head_dim": _pos_int(), "beam_width": _pos_int(),
                "attn_dtype": _str(), "kv_cache_dtype": _str(), "step": _nonneg_int(),
                "window_size": _nonneg_int(required=False), "kernel_source": _str(), "latency": _latency()}
    elif table == "aic_scale_matrix":
        cols = {"m": _pos_int(), "k": _pos_int(), "quant_dtype": _str(), "kernel_source": _str(),
                "latency": _latency()}
    elif table == "aic_nccl_allreduce":
        cols = {"op_name": pa.Column(str, Check.eq("all_reduce")), "nccl_dtype": _str(),
                "num_gpus": pa.Column("int64", Check.ge(2)), "message_size": _pos_int(),
                "kernel_source": _str(), "latency": _latency()}
    elif table == "aic_custom_allreduce":
        cols = {"op_name": pa.Column(str, Check.eq("all_reduce")), "allreduce_dtype": _str(),
                "num_gpus": pa.Column("int64", Check.ge(2)), "message_size": _pos_int(),
                "kernel_source": _str(), "backend": _str(), "latency": _latency()}
    elif table == "vidur_mlp":
        cols = {"num_tokens": _pos_int(), "num_tensor_parallel_workers": _pos_int(),
                "n_head": _pos_int(), "n_kv_head": _pos_int(), "n_embd": _pos_int(),
                "n_expanded_embd": _pos_int(), "vocab_size": _pos_int(), "use_gated_mlp": pa.Column(bool),
                # time_stats.<op>.<stat> columns: checked by regex below
                "time_stats\\..+\\.(min|max|mean|median)": pa.Column("float64", [Check.gt(0), FINITE], regex=True),
                "time_stats\\..+\\.std": pa.Column("float64", [Check.ge(0), FINITE], regex=True)}
    elif table == "vidur_cpu_overheads":
        cols = {"model_name": _str(), "batch_size": _pos_int(), "tensor_parallel_degree": _pos_int(),
                ".+_(mean|median)": pa.Column("float64", [Check.gt(0), FINITE], regex=True)}
    elif table == "vidur_trace":
        cols = {"num_prefill_tokens": _pos_int(), "num_decode_tokens": _pos_int(),
                "arrived_at": pa.Column("float64", [Check.ge(0), FINITE], required=False)}
    elif table == "distserve_max_num_tokens":
        cols = {"model": _str(), "tp": _pos_int(), "pp": _pos_int(), "max_num_tokens": _pos_int()}
    elif table in _wallclock().RAW_TABLES:
        cols = _wallclock().raw_columns(table)
    elif table in _moe().RAW_TABLES:
        cols = _moe().raw_columns(table)
    else:  # pragma: no cover
        raise KeyError(table)
    return pa.DataFrameSchema(cols, strict=False, coerce=False, name=table)


# --------------------------------------------------------------------------- tidy tables
@lru_cache(maxsize=None)
def tidy(name: str) -> pa.DataFrameSchema:
    common = {"gpu": _str(), "latency_ms": _latency(), "n_dup": _pos_int()}
    if name in ("gemm", "gemm_fp8", "gemm_engines"):
        cols = {**common, "m": _pos_int(), "n": _pos_int(), "k": _pos_int(), "dtype": _str(),
                "kernel_source": _str(), "flops": pa.Column("float64", Check.gt(0)),
                "min_bytes": pa.Column("float64", Check.gt(0)), "hbm_floor_ms": pa.Column("float64", Check.gt(0)),
                "above_hbm_roofline": pa.Column(bool)}
    elif name in ("attention_context", "attention_generation"):
        cols = {**common, "batch_size": _pos_int(), "isl": _pos_int(), "num_heads": _pos_int(),
                "num_kv_heads": _pos_int(), "head_dim": _pos_int(), "kv_cache_dtype": _str(),
                "window_size": _nonneg_int(), "kernel_source": _str()}
        if name == "attention_generation":
            cols["kv_len"] = _pos_int()
    elif name == "scale_matrix":
        cols = {**common, "m": _pos_int(), "k": _pos_int(), "quant_dtype": _str(), "kernel_source": _str(),
                "above_hbm_roofline": pa.Column(bool)}
    elif name == "allreduce":
        cols = {**common, "library": _str(), "num_gpus": pa.Column("int64", Check.ge(2)),
                "message_elems": _pos_int(), "message_bytes": _pos_int(), "dtype": _str()}
    elif name == "vidur_mlp":
        cols = {**common, "model": _str(), "tp": _pos_int(), "num_tokens": _pos_int(), "op": _str(),
                "latency_mean_ms": _latency(), "latency_std_ms": pa.Column("float64", Check.ge(0))}
    elif name == "vidur_cpu_overheads":
        cols = {"gpu": _str(), "model": _str(), "tp": _pos_int(), "batch_size": _pos_int(), "n_dup": _pos_int(),
                ".+_ms": pa.Column("float64", [Check.gt(0), FINITE], regex=True)}
    elif name == "traces":
        cols = {"trace": _str(), "request_id": _nonneg_int(), "num_prefill_tokens": _pos_int(),
                "num_decode_tokens": _pos_int(), "arrived_at_s": pa.Column("float64", Check.ge(0), nullable=True)}
    elif name == "distserve":
        cols = {"engine": _str(), "model": _str(), "tp": _pos_int(), "phase": _str(),
                "a_ms": pa.Column("float64", FINITE), "b_ms": pa.Column("float64", FINITE),
                "c_ms": pa.Column("float64", FINITE), "bs_threshold": _pos_int()}
    elif name == "distserve_max_num_tokens":
        cols = {"model": _str(), "tp": _pos_int(), "pp": _pos_int(), "max_num_tokens": _pos_int()}
    elif name in _wallclock().TIDY_TABLES:
        cols = _wallclock().tidy_columns(name)
    elif name in _moe().TIDY_TABLES:
        cols = _moe().tidy_columns(name)
    else:  # pragma: no cover
        raise KeyError(name)
    return pa.DataFrameSchema(cols, strict=False, coerce=False, name=name)


def _wallclock():
    """The wall-clock sets' schemas (their own module)."""
    return wallclock_schemas


def _moe():
    """The MoE tables' schemas (their own module)."""
    return moe_schemas
