"""Checked loaders for the measured tables in raw/ (see raw/MANIFEST.yaml).

    from steptime.data import load_aic_gemm
    df = load_aic_gemm("h100")        # tidy pandas DataFrame, latency_ms, gpu as a steptime key

Every loader finds its files through raw/MANIFEST.yaml (repository root from $STEPTIME_ROOT or
the working directory upwards, or `root=`), validates them (pandera schemas, value ranges,
unit sanity) and raises steptime.errors.DataError naming the file, row and column on failure.
pandas and pandera are imported only when a loader is first used.
"""

from __future__ import annotations

_EXPORTS = {
    "load_aic_gemm": "steptime.data.aic",
    "load_aic_attention": "steptime.data.aic",
    "load_aic_scale_matrix": "steptime.data.aic",
    "load_aic_allreduce": "steptime.data.aic",
    "load_aic_system": "steptime.data.aic",
    "load_vidur_mlp": "steptime.data.vidur",
    "load_vidur_cpu_overheads": "steptime.data.vidur",
    "load_traces": "steptime.data.vidur",
    "load_distserve": "steptime.data.distserve",
    "load_distserve_max_tokens": "steptime.data.distserve",
    "load_aic_gemm_fp8": "steptime.data.wallclock",
    "load_fpm_steps": "steptime.data.wallclock",
    "load_fpm_workload": "steptime.data.wallclock",
    "load_servingsim_requests": "steptime.data.wallclock",
    "load_servingsim_timeseries": "steptime.data.wallclock",
    "load_mlenergy": "steptime.data.wallclock",
    "load_aic_silicon": "steptime.data.wallclock",
    "model_arch": "steptime.data.wallclock",
    "load_aic_moe": "steptime.data.moe",
    "load_aic_mla": "steptime.data.moe",
    "load_aic_mla_bmm": "steptime.data.moe",
    "load_aic_moe_a2a": "steptime.data.moe",
    "tidy_table": "steptime.data.tables",
    "write_parquet": "steptime.data.tables",
    "TIDY": "steptime.data.tables",
    "load_manifest": "steptime.data.manifest",
    "find_root": "steptime.data.manifest",
    "verify": "steptime.data.verify",
}

__all__ = sorted(_EXPORTS) + ["cli_main"]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'steptime.data' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


def cli_main(argv: list[str]) -> int:
    """`steptime data <subcommand> ...`: verify (check raw/ against its manifest), list (what is there)."""
    from steptime.data.verify import cli

    return cli(list(argv))
