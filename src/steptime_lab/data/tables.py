"""Which reader checks which manifest table, and the tidy tables the pipeline writes."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from steptime.errors import DataError
from steptime.io import atomic_path, read_yaml, yaml_problem
from steptime_lab.data import schemas
from steptime_lab.data.checks import run_schema

# manifest `table` -> (module, per-file reader returning a tidy DataFrame)
READERS = {
    "aic_gemm": ("steptime_lab.data.aic", "read_gemm_file"),
    "aic_context_attention": ("steptime_lab.data.aic", "read_attention_file"),
    "aic_generation_attention": ("steptime_lab.data.aic", "read_attention_file"),
    "aic_scale_matrix": ("steptime_lab.data.aic", "read_scale_matrix_file"),
    "aic_nccl_allreduce": ("steptime_lab.data.aic", "read_allreduce_file"),
    "aic_custom_allreduce": ("steptime_lab.data.aic", "read_allreduce_file"),
    "vidur_mlp": ("steptime_lab.data.vidur", "read_mlp_file"),
    "vidur_cpu_overheads": ("steptime_lab.data.vidur", "read_cpu_overheads_file"),
    "vidur_trace": ("steptime_lab.data.vidur", "read_trace_file"),
    "distserve_coefficients": ("steptime_lab.data.distserve", "read_coefficients_file"),
    "distserve_max_num_tokens": ("steptime_lab.data.distserve", "read_max_tokens_file"),
    # wall-clock sets and the fp8 GEMM rows (issue 11)
    "aic_gemm_fp8": ("steptime_lab.data.aic", "read_gemm_file"),
    "aic_gemm_engine": ("steptime_lab.data.aic", "read_gemm_file"),  # TRT-LLM / SGLang bf16 + fp8 (issue 19)
    "aic_fpm_steps": ("steptime_lab.data.wallclock", "read_fpm_file"),
    "aic_fpm_steps_detail": ("steptime_lab.data.wallclock", "read_fpm_detail_file"),
    "aic_fpm_moe_steps": ("steptime_lab.data.wallclock", "read_fpm_moe_file"),
    "aic_fpm_metadata": ("steptime_lab.data.wallclock", "read_fpm_metadata"),
    "aic_fpm_workload": ("steptime_lab.data.wallclock", "read_fpm_workload_file"),
    "llmservingsim_requests": ("steptime_lab.data.wallclock", "read_servingsim_requests_file"),
    "llmservingsim_timeseries": ("steptime_lab.data.wallclock", "read_servingsim_timeseries_file"),
    "llmservingsim_sim": ("steptime_lab.data.wallclock", "read_servingsim_sim_file"),
    "llmservingsim_meta": ("steptime_lab.data.wallclock", "read_servingsim_meta"),
    "llmservingsim_config": ("steptime_lab.data.wallclock", "read_servingsim_config"),
    "mlenergy_v2": ("steptime_lab.data.wallclock", "read_mlenergy_v2_file"),
    "mlenergy_v3": ("steptime_lab.data.wallclock", "read_mlenergy_v3_file"),
    "aic_silicon": ("steptime_lab.data.wallclock", "read_silicon_file"),
    # mixture of experts (issue 20)
    "aic_moe": ("steptime_lab.data.moe", "read_moe_file"),
    "aic_mla_context": ("steptime_lab.data.moe", "read_mla_file"),
    "aic_mla_generation": ("steptime_lab.data.moe", "read_mla_file"),
    "aic_mla_bmm": ("steptime_lab.data.moe", "read_mla_bmm_file"),
    "aic_moe_a2a": ("steptime_lab.data.moe", "read_a2a_file"),
    "aic_moe_a2a_trtllm": ("steptime_lab.data.moe", "read_a2a_file"),
    "aic_trtllm_alltoall": ("steptime_lab.data.moe", "read_nvlink_a2a_file"),
}
YAML_TABLES = {"aic_system", "aic_query_versions"}
JSON_TABLES = {"aic_model_config"}  # Hugging Face config.json copies (a model's structure, not a measurement)
TEXT_TABLES = {"licence", "dataset_card"}

# tidy table name -> (module, loader, kwargs); what results/data/<name>.parquet holds
TIDY = {
    "gemm": ("steptime_lab.data.aic", "load_aic_gemm", {}),
    "attention_context": ("steptime_lab.data.aic", "load_aic_attention", {"kind": "context"}),
    "attention_generation": ("steptime_lab.data.aic", "load_aic_attention", {"kind": "generation"}),
    "scale_matrix": ("steptime_lab.data.aic", "load_aic_scale_matrix", {}),
    "allreduce": ("steptime_lab.data.aic", "load_aic_allreduce", {}),
    "vidur_mlp": ("steptime_lab.data.vidur", "load_vidur_mlp", {}),
    "vidur_cpu_overheads": ("steptime_lab.data.vidur", "load_vidur_cpu_overheads", {}),
    "traces": ("steptime_lab.data.vidur", "load_traces", {}),
    "distserve": ("steptime_lab.data.distserve", "load_distserve", {}),
    "distserve_max_num_tokens": ("steptime_lab.data.distserve", "load_distserve_max_tokens", {}),
    # wall-clock sets and the fp8 GEMM rows (issue 11)
    "gemm_fp8": ("steptime_lab.data.wallclock", "load_aic_gemm_fp8", {}),
    "gemm_engines": ("steptime_lab.data.aic", "load_aic_gemm_engines", {}),
    "fpm_steps": ("steptime_lab.data.wallclock", "load_fpm_steps", {}),
    "fpm_moe_steps": ("steptime_lab.data.wallclock", "load_fpm_moe_steps", {}),
    "fpm_workload": ("steptime_lab.data.wallclock", "load_fpm_workload", {}),
    "servingsim_requests": ("steptime_lab.data.wallclock", "load_servingsim_requests", {}),
    "servingsim_timeseries": ("steptime_lab.data.wallclock", "load_servingsim_timeseries", {}),
    "servingsim_sim": ("steptime_lab.data.wallclock", "load_servingsim_sim", {}),
    "mlenergy_v2": ("steptime_lab.data.wallclock", "load_mlenergy", {"version": "v2"}),
    "mlenergy_v3": ("steptime_lab.data.wallclock", "load_mlenergy", {"version": "v3"}),
    "aic_silicon": ("steptime_lab.data.wallclock", "load_aic_silicon", {}),
    # mixture of experts (issue 20)
    "moe": ("steptime_lab.data.moe", "load_aic_moe", {}),
    "mla_context": ("steptime_lab.data.moe", "load_aic_mla", {"kind": "context"}),
    "mla_generation": ("steptime_lab.data.moe", "load_aic_mla", {"kind": "generation"}),
    "mla_bmm": ("steptime_lab.data.moe", "load_aic_mla_bmm", {}),
    "moe_a2a": ("steptime_lab.data.moe", "load_aic_moe_a2a", {}),
    "moe_a2a_trtllm": ("steptime_lab.data.moe", "load_aic_moe_a2a", {"framework": "trtllm"}),
    "trtllm_alltoall": ("steptime_lab.data.moe", "load_aic_trtllm_alltoall", {}),
}


def read_entry(entry):
    """Read and check one manifest entry's file; a DataFrame for tables, None for other files."""
    t = entry.table
    if t in READERS:
        mod, fn = READERS[t]
        return getattr(importlib.import_module(mod), fn)(entry)
    if t in YAML_TABLES:
        import yaml

        try:
            doc = read_yaml(entry.checked_path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            why = yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else exc
            raise DataError(f"{entry.rel}: unreadable YAML: {why}") from None
        if not isinstance(doc, dict):
            raise DataError(f"{entry.rel}: row all, column all: expected a YAML mapping")
        return None
    if t in JSON_TABLES:
        import json

        try:
            doc = json.loads(entry.checked_path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{entry.rel}: unreadable JSON: {exc}") from None
        if not isinstance(doc, dict) or "model_type" not in doc:
            raise DataError(f"{entry.rel}: row all, column model_type: expected a config.json mapping with a model_type")
        return None
    if t in TEXT_TABLES:
        try:
            text = entry.checked_path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{entry.rel}: unreadable text: {exc}") from None
        if "License" not in text and "LICENSE" not in text:
            raise DataError(f"{entry.rel}: does not look like a licence text")
        return None
    raise DataError(f"{entry.rel}: unknown table {t!r} in raw/MANIFEST.yaml (known: "
                    f"{', '.join(sorted({*READERS, *YAML_TABLES, *JSON_TABLES, *TEXT_TABLES}))})")


def tidy_table(name: str, root=None):
    """The tidy DataFrame behind results/data/<name>.parquet."""
    if name not in TIDY:
        raise KeyError(f"unknown tidy table {name!r} (known: {', '.join(TIDY)})")
    mod, fn, kw = TIDY[name]
    df = getattr(importlib.import_module(mod), fn)(root=root, **kw)

    schema_name = {"distserve_max_num_tokens": "distserve_max_num_tokens"}.get(name, name)
    run_schema(df, schemas.tidy(schema_name), f"tidy table {name}")
    return df.reset_index(drop=True)


def write_parquet(df, path: str | os.PathLike) -> Path:
    """Write a DataFrame as parquet, atomically and byte-for-byte reproducibly."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=max(len(df), 1), write_statistics=True)
    return Path(path)
