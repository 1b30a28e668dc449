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
RAW_TABLES = ("aic_moe", "aic_mla_context", "aic_mla_generation", "aic_mla_bmm", "aic_moe_a2a", "aic_moe_a2a_trtllm",
              "aic_trtllm_alltoall")
TIDY_TABLES = ("moe", "mla_context", "mla_generation", "mla_bmm", "moe_a2a", "moe_a2a_trtllm", "trtllm_alltoall")
# bytes per payload element of an all-to-all by comm_dtype ('default': the backend's bf16; NVFP4: 4 bits plus one
# fp8 scale per 16 elements; TensorRT-LLM's low-latency "fp4" rows taken as the same format, ASSUMED)
A2A_PAYLOAD_BYTES = {"default": 2.0, "bfloat16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16, "fp4": 0.5 + 1.0 / 16}


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
    if table in ("aic_moe_a2a", "aic_moe_a2a_trtllm"):
        return {"op_name": pa.Column(str, Check.eq("moe_a2a")), "kernel_source": _str(), "comm_backend": _str(),
                "comm_dtype": pa.Column(str, Check.isin(list(A2A_PAYLOAD_BYTES))),
                "phase": pa.Column(str, Check.isin(["dispatch", "combine"])), "ep_size": pa.Column("int64", Check.ge(2)),
                "node_num": _pos_int(), "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "num_tokens": _pos_int(), "sms": _nonneg_int(), "latency": _latency()}
    if table == "aic_trtllm_alltoall":
        return {"op_name": pa.Column(str, Check.isin(["alltoall_prepare", "alltoall_dispatch", "alltoall_combine",
                                                      "alltoall_combine_low_precision"])),
                "kernel_source": _str(), "moe_dtype": pa.Column(str, Check.isin(list(A2A_PAYLOAD_BYTES))),
                "num_tokens": _pos_int(), "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "moe_ep_size": pa.Column("int64", Check.ge(2)), "distribution": _str(), "latency": _latency()}
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
    if name in ("moe_a2a", "moe_a2a_trtllm"):
        return {**common, "backend": _str(), "phase": _str(), "ep_size": _pos_int(), "num_tokens": _pos_int(),
                "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int(),
                "message_bytes": pa.Column("float64", Check.gt(0)), "comm_dtype": _str()}
    if name == "trtllm_alltoall":
        return {**common, "op": _str(), "dtype": _str(), "ep_size": _pos_int(), "num_tokens": _pos_int(),
                "hidden_size": _pos_int(), "topk": _pos_int(), "num_experts": _pos_int()}
    raise KeyError(name)  # pragma: no cover
