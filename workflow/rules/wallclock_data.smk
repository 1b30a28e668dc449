# Ingest the real wall-clock sets (raw/wallclock/, issue 11) and AIConfigurator's fp8 GEMM rows:
# each becomes one tidy, checked table under results/data/, through steptime.data.wallclock.
# Data-driven: one rule for every table in WALLCLOCK_TABLES (tidy table -> the manifest tables it reads).
WALLCLOCK_TABLES = {
    "gemm_fp8": ["aic_gemm_fp8"],
    "fpm_steps": ["aic_fpm_steps", "aic_fpm_steps_detail", "aic_fpm_metadata"],
    "fpm_workload": ["aic_fpm_workload"],
    "servingsim_requests": ["llmservingsim_requests", "llmservingsim_meta", "llmservingsim_config"],
    "servingsim_timeseries": ["llmservingsim_timeseries"],
    "mlenergy_v2": ["mlenergy_v2"],
    "mlenergy_v3": ["mlenergy_v3"],
    "aic_silicon": ["aic_silicon"],
}


# One wall-clock tidy table: real engine steps, serving runs, leaderboards, silicon rows, fp8 GEMMs.
rule data_wallclock:
    input:
        # the raw files behind the table, plus the manifest (once)
        raw=lambda wc: sorted({p for t in WALLCLOCK_TABLES[wc.wctable] for p in RAW[t]}),
        lib=DATA_LIB,
    output:
        table="results/data/{wctable}.parquet",
    wildcard_constraints:
        wctable="|".join(WALLCLOCK_TABLES),
    params:
        table=lambda wildcards: wildcards.wctable,
    log:
        "logs/data/{wctable}.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting the {wildcards.wctable} wall-clock table into {output.table}"
    script:
        "../scripts/ingest_table.py"


WALLCLOCK_DATA_TARGETS = expand("results/data/{wctable}.parquet", wctable=list(WALLCLOCK_TABLES))
DATA_TARGETS.extend(WALLCLOCK_DATA_TARGETS)
