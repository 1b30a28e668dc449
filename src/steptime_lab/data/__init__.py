"""Checked loaders for the measured tables in raw/ (see raw/MANIFEST.yaml).

    from steptime_lab.data import load_aic_gemm
    df = load_aic_gemm("h100")        # tidy pandas DataFrame, latency_ms, gpu as a steptime key

Every loader finds its files through raw/MANIFEST.yaml (repository root from $STEPTIME_ROOT or
the working directory upwards, or `root=`), validates them (pandera schemas, value ranges,
unit sanity) and raises steptime.errors.DataError naming the file, row and column on failure.
pandas and pandera are imported only when a loader is first used.
"""

from __future__ import annotations

_EXPORTS = {
    "load_aic_gemm": "steptime_lab.data.aic",
    "load_aic_attention": "steptime_lab.data.aic",
    "load_aic_scale_matrix": "steptime_lab.data.aic",
    "load_aic_allreduce": "steptime_lab.data.aic",
    "load_aic_system": "steptime_lab.data.aic",
    "load_vidur_mlp": "steptime_lab.data.vidur",
    "load_vidur_cpu_overheads": "steptime_lab.data.vidur",
    "load_traces": "steptime_lab.data.vidur",
    "load_distserve": "steptime_lab.data.distserve",
    "load_distserve_max_tokens": "steptime_lab.data.distserve",
    "load_aic_gemm_fp8": "steptime_lab.data.wallclock",
    "load_aic_gemm_engines": "steptime_lab.data.aic",
    "load_fpm_steps": "steptime_lab.data.wallclock",
    "load_fpm_workload": "steptime_lab.data.wallclock",
    "load_servingsim_requests": "steptime_lab.data.wallclock",
    "load_servingsim_timeseries": "steptime_lab.data.wallclock",
    "load_servingsim_sim": "steptime_lab.data.wallclock",
    "load_mlenergy": "steptime_lab.data.wallclock",
    "load_aic_silicon": "steptime_lab.data.wallclock",
    "model_arch": "steptime_lab.data.wallclock",
    "load_aic_moe": "steptime_lab.data.moe",
    "load_aic_mla": "steptime_lab.data.moe",
    "load_aic_mla_bmm": "steptime_lab.data.moe",
    "load_aic_moe_a2a": "steptime_lab.data.moe",
    "load_aic_trtllm_alltoall": "steptime_lab.data.moe",
    "tidy_table": "steptime_lab.data.tables",
    "write_parquet": "steptime_lab.data.tables",
    "TIDY": "steptime_lab.data.tables",
    "load_manifest": "steptime_lab.data.manifest",
    "find_root": "steptime_lab.data.manifest",
    "verify": "steptime_lab.data.verify",
}

__all__ = sorted(_EXPORTS) + ["cli_main"]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'steptime_lab.data' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


def cli_main(argv: list[str]) -> int:
    """`steptime data <subcommand> ...`: verify (check raw/ against its manifest), list (what is there)."""
    from steptime_lab.data.verify import cli  # here, not at the top: `import steptime_lab.data` loads no pandas

    return cli(list(argv))
