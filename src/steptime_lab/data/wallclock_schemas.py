"""pandera schemas of the wall-clock sets: the raw files as published and the tidy tables."""

from __future__ import annotations

import pandera.pandas as pa

from steptime_lab.data.columns import FINITE, Check, _latency, _nonneg_int, _pos_int, _str


def _nonneg_float(**kw):
    return pa.Column("float64", [Check.ge(0), FINITE], **kw)


def _pos_float(**kw):
    return pa.Column("float64", [Check.gt(0), FINITE], **kw)


def _opt_pos_float(**kw):
    return pa.Column("float64", Check.gt(0), nullable=True, **kw)


_FPM_COUNTS = ("ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_tokens", "decode_requests", "decode_kv_tokens",
               "queued_ctx_tokens", "queued_ctx_requests", "queued_decode_requests", "queued_decode_kv_tokens")
_MODEL = {"model": _str(), "model_source": _str(), "arch": pa.Column(str, Check.isin(["dense", "moe", "hybrid"])),
          "moe": pa.Column(bool)}


def raw_columns(table: str) -> dict:
    if table in ("aic_fpm_steps", "aic_fpm_moe_steps"):
        return {"phase": pa.Column(str, Check.isin(["context", "decode", "mixed"])),
                "workload_segment": pa.Column(str, Check.isin(["sweep", "real"])),
                "counter_id": _nonneg_int(), **{c: _nonneg_int() for c in _FPM_COUNTS},
                "mean_decode_kv_tokens": _nonneg_float(), "latency_ms": _latency()}
    if table == "aic_fpm_steps_detail":
        return {"counter_id": _nonneg_int(), "sum_prefill_tokens": _nonneg_int(), "num_prefill_requests": _nonneg_int(),
                "sum_decode_kv_tokens": _nonneg_int(), "num_decode_requests": _nonneg_int(),
                "var_prefill_length": _nonneg_float(), "var_decode_kv_tokens": _nonneg_float(), "latency_ms": _latency()}
    if table == "aic_fpm_workload":
        return {"workload_label": _str(), "request_index": _nonneg_int(), "endpoint": _str(),
                "target_isl": _pos_int(), "target_osl": _pos_int(), "prompt_tokens": _pos_int(),
                "max_tokens": _pos_int(), "prompt_token_mode": _str(), "shape_source": _str()}
    if table == "llmservingsim_requests":
        return {"request_id": _str(), "input_toks": _pos_int(), "output_toks": _pos_int(),
                "arrival_time": _pos_float(), "queued_ts": _pos_float(), "scheduled_ts": _pos_float(),
                "first_token_ts": _pos_float(), "last_token_ts": _pos_float()}
    if table == "llmservingsim_sim":
        return {"request id": _nonneg_int(), "input": _pos_int(), "output": _pos_int(), "arrival": _nonneg_int(),
                "end_time": _pos_int(), "latency": _pos_int(), "queuing_delay": _nonneg_int(), "TTFT": _pos_int(),
                "TPOT": _nonneg_int()}
    if table == "llmservingsim_timeseries":
        return {"t": _nonneg_float(), "prompt_throughput": _nonneg_float(), "gen_throughput": _nonneg_float(),
                "running": _nonneg_int(), "waiting": _nonneg_int(),
                "kv_cache_pct": pa.Column("float64", [Check.ge(0), Check.le(100)])}
    if table == "mlenergy_v2":
        return {"Model": _str(), "GPU": _str(), "TP": _pos_int(), "PP": _pos_int(), "Energy/req (J)": _pos_float(),
                "Avg TPOT (s)": _pos_float(), "Token tput (tok/s)": _pos_float(), "Avg Output Tokens": _pos_float(),
                "Avg BS (reqs)": _pos_float(), "Max BS (reqs)": _pos_int(),
                "task": pa.Column(str, Check.isin(["chat", "code"])), "file": _str()}
    if table == "mlenergy_v3":
        return {"task": _str(), "model_id": _str(), "architecture": _str(), "weight_precision": _str(),
                "total_params_billions": _pos_float(), "activated_params_billions": _pos_float(), "gpu_model": _str(),
                "num_gpus": _pos_int(), "tensor_parallel": _pos_int(), "expert_parallel": _pos_int(),
                "data_parallel": _pos_int(), "max_num_seqs": _pos_int(), "avg_batch_size": _pos_float(),
                "median_itl_ms": _pos_float(), "p90_itl_ms": _pos_float(), "p95_itl_ms": _pos_float(),
                "p99_itl_ms": _pos_float(), "output_throughput_tokens_per_sec": _pos_float(),
                "avg_output_len": _pos_float(), "avg_power_watts": _pos_float(),
                "energy_per_token_joules": _pos_float(), "energy_per_request_joules": _pos_float(), "nickname": _str()}
    if table == "aic_silicon":
        opt = {c: _opt_pos_float() for c in ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
                                             "moe_ep_size")}
        for c in ("attention_dp_size", "moe_tp_size", "moe_ep_size"):  # some rows carry 0 here
            opt[c] = pa.Column("float64", Check.ge(0), nullable=True)
        return {"id": _str(), "silicon_data_source": _str(), "backend": _str(), "model_path": _str(),
                "system": _str(), "mode": pa.Column(str, Check.isin(["agg", "disagg"])), "isl": _pos_int(),
                "osl": _pos_int(), **opt, "silicon_ttft_ms": _pos_float(), "silicon_tpot_ms": _pos_float()}
    raise KeyError(table)


def tidy_columns(name: str) -> dict:
    if name == "fpm_steps":
        return {"gpu": _str(), **_MODEL, "engine": _str(), "engine_version": _str(), "tp": _pos_int(), "run": _str(),
                "phase": pa.Column(str, Check.isin(["context", "decode", "mixed"])), "workload_segment": _str(),
                "counter_id": _nonneg_int(), **{c: _nonneg_int() for c in _FPM_COUNTS}, "num_tokens": _pos_int(),
                "var_prefill_length": _nonneg_float(), "var_decode_kv_tokens": _nonneg_float(),
                "latency_ms": _latency(), "max_num_batched_tokens": _pos_int(), "max_num_seqs": _pos_int(),
                "over_token_budget": pa.Column(bool)}
    if name == "fpm_moe_steps":
        return {"gpu": _str(), **_MODEL, "engine": _str(), "engine_version": _str(), "tp": _pos_int(), "ep": _pos_int(),
                "dp": _pos_int(), "dp_rank": _nonneg_int(), "run": _str(),
                "phase": pa.Column(str, Check.isin(["context", "decode", "mixed"])), "workload_segment": _str(),
                "counter_id": _nonneg_int(), **{c: _nonneg_int() for c in _FPM_COUNTS}, "num_tokens": _pos_int(),
                "latency_ms": _latency(), "max_num_batched_tokens": _pos_int(), "max_num_seqs": _pos_int(),
                "over_token_budget": pa.Column(bool)}
    if name == "fpm_workload":
        return {"gpu": _str(), **_MODEL, "tp": _pos_int(), "run": _str(), "prompt_tokens": _pos_int(),
                "max_tokens": _pos_int()}
    if name == "servingsim_requests":
        return {"gpu": _str(), **_MODEL, "engine": _str(), "engine_version": _str(), "tp": _pos_int(), "dp": _pos_int(),
                "run": _str(), "request_id": _str(), "input_tokens": _pos_int(), "output_tokens": _pos_int(),
                "arrival_s": _nonneg_float(), "queued_s": _nonneg_float(), "ttft_s": _nonneg_float(),
                "e2e_s": _nonneg_float(), "tpot_s": pa.Column("float64", Check.ge(0), nullable=True)}
    if name == "servingsim_sim":
        return {"gpu": _str(), **_MODEL, "tp": _pos_int(), "run": _str(), "request_id": _str(),
                "input_tokens": _pos_int(), "output_tokens": _pos_int(), "ttft_s": _nonneg_float(),
                "tpot_s": _nonneg_float(), "e2e_s": _nonneg_float()}
    if name == "servingsim_timeseries":
        return {"gpu": _str(), **_MODEL, "tp": _pos_int(), "run": _str(), "t_s": _nonneg_float(),
                "running": _nonneg_int(), "waiting": _nonneg_int()}
    if name in ("mlenergy_v2", "mlenergy_v3"):
        cols = {"dataset": _str(), "task": _str(), "gpu": _str(), **_MODEL, "engine": _str(), "engine_version": _str(),
                "tp": _pos_int(), "num_gpus": _pos_int(), "max_num_seqs": _pos_int(), "avg_batch": _pos_float(),
                "output_tokens_per_s": _pos_float()}
        if name == "mlenergy_v2":
            cols.update(pp=_pos_int(), mean_tpot_ms=_latency())
        else:
            cols.update(ep=_pos_int(), dp=_pos_int(), median_itl_ms=_latency(), p90_itl_ms=_latency())
        return cols
    if name == "aic_silicon":
        return {"id": _str(), "gpu": _str(), **_MODEL, "engine": _str(), "mode": _str(), "isl": _pos_int(),
                "osl": _pos_int(), "ttft_ms": _latency(), "tpot_ms": _latency()}
    raise KeyError(name)


RAW_TABLES = ("aic_fpm_steps", "aic_fpm_moe_steps", "aic_fpm_steps_detail", "aic_fpm_workload", "llmservingsim_requests",
              "llmservingsim_timeseries", "llmservingsim_sim", "mlenergy_v2", "mlenergy_v3", "aic_silicon")
TIDY_TABLES = ("fpm_steps", "fpm_moe_steps", "fpm_workload", "servingsim_requests", "servingsim_timeseries", "servingsim_sim",
               "mlenergy_v2",
               "mlenergy_v3", "aic_silicon")
