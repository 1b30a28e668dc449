"""Schemas of AIConfigurator's mixture-of-experts tables (raw and tidy), apart from their loaders
(`steptime_lab.data.moe`) so that `steptime_lab.data.schemas` reaches them without a circle."""

from __future__ import annotations

import pandera.pandas as pa

from steptime_lab.data.columns import Check, _latency, _nonneg_int, _pos_int, _str

# Weight bytes per element by MoE dtype, and which tensor-core peak bounds the compute
# ("bf16": activations stay bf16, weight-only formats dequantise into bf16 math).
MOE_DTYPES = {
    "bfloat16": (2.0, "bf16"),
    "fp8": (1.0, "fp8"),            # per-tensor scaled W8A8
    "fp8_block": (1.0, "fp8"),      # 128x128 block-scaled W8A8 (DeepSeek-V3 style)
    "nvfp4": (0.5, "fp4"),          # NVFP4 W4A4 (Blackwell)
    "w4a8_mxfp4_mxfp8": (0.5, "fp8"),
    "w4a16_mxfp4": (0.5, "bf16"),   # MXFP4 weights, bf16 activations (gpt-oss on Hopper)
    "int4_wo": (0.5, "bf16"),
}

# --------------------------------------------------------------------------- schemas
RAW_TABLES = ("aic_moe", "aic_mla_context", "aic_mla_generation", "aic_mla_bmm", "aic_moe_a2a")
TIDY_TABLES = ("moe", "mla_context", "mla_generation", "mla_bmm", "moe_a2a")


def raw_columns(table: str) -> dict:
    if table == "aic_moe":
        return {"op_name": pa.Column(str, Check.eq("moe")), "kernel_source": _str(),
                "moe_dtype": pa.Column(str, Check.isin(list(MOE_DTYPES))), "num_tokens": _pos_int(),
                "hidden_size": _pos_int(), "inter_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "moe_tp_size": _pos_int(), "moe_ep_size": _pos_int(), "distribution": _str(), "latency": _latency()}
    if table in ("aic_mla_context", "aic_mla_generation"):
        return {"kernel_source": _str(), "model": _str(), "mla_dtype": _str(), "kv_cache_dtype": _str(),
                "gemm_type": _str(), "num_heads": _pos_int(), "batch_size": _pos_int(), "isl": _pos_int(),
                "tp_size": _pos_int(), "step": _nonneg_int(), "latency": _latency()}
    if table == "aic_mla_bmm":
        return {"op_name": pa.Column(str, Check.isin(["mla_gen_pre", "mla_gen_post"])), "kernel_source": _str(),
                "bmm_dtype": _str(), "num_tokens": _pos_int(), "num_heads": _pos_int(), "latency": _latency()}
    if table == "aic_moe_a2a":
        return {"op_name": pa.Column(str, Check.eq("moe_a2a")), "kernel_source": _str(), "comm_backend": _str(),
                "phase": pa.Column(str, Check.isin(["dispatch", "combine"])), "ep_size": pa.Column("int64", Check.ge(2)),
                "node_num": _pos_int(), "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "num_tokens": _pos_int(), "sms": _nonneg_int(), "latency": _latency()}
    raise KeyError(table)  # pragma: no cover


def tidy_columns(name: str) -> dict:
    common = {"gpu": _str(), "latency_ms": _latency(), "n_dup": _pos_int(), "kernel_source": _str()}
    if name == "moe":
        return {**common, "dtype": _str(), "num_tokens": _pos_int(), "hidden_size": _pos_int(),
                "inter_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(), "moe_tp": _pos_int(),
                "moe_ep": _pos_int(), "distribution": _str(), "weight_bytes": pa.Column("float64", Check.gt(0)),
                "flops": pa.Column("float64", Check.gt(0))}
    if name in ("mla_context", "mla_generation"):
        cols = {**common, "num_heads": _pos_int(), "batch_size": _pos_int(), "isl": _pos_int(),
                "kv_cache_dtype": _str(), "gemm_type": _str()}
        if name == "mla_generation":
            cols["kv_len"] = _pos_int()
        return cols
    if name == "mla_bmm":
        return {**common, "op": _str(), "num_tokens": _pos_int(), "num_heads": _pos_int(), "dtype": _str()}
    if name == "moe_a2a":
        return {**common, "backend": _str(), "phase": _str(), "ep_size": _pos_int(), "num_tokens": _pos_int(),
                "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "message_bytes": pa.Column("float64", Check.gt(0))}
    raise KeyError(name)  # pragma: no cover
