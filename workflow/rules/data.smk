# Ingest: every source in raw/ (listed in raw/MANIFEST.yaml) becomes one tidy, checked table
# under results/data/ (one parametrised rule, rows in config/tables.yaml), plus a coverage figure.
# One tidy table from its raw files, through its loader in steptime_lab.data (checked schema, units, ranges).
rule ingest:
    input:
        raw=raw_inputs,
        lib=DATA_LIB,
    output:
        table="results/data/{table}.parquet",
    wildcard_constraints:
        table=one_of(TABLES),
    params:
        about=lambda wc: TABLES[wc.table]["about"],
    priority: 50  # main job: critical path first (see Snakefile)
    log:
        "logs/data/{table}.log",
    benchmark:
        "benchmarks/data/{table}.tsv"
    conda:
        CONDA_ENV
    message:
        "Ingesting {wildcards.table} ({params.about}) into {output.table}"
    script:
        "../scripts/ingest_table.py"


COVERAGE_TABLES = {"gemm", "attention_context", "attention_generation", "scale_matrix", "allreduce", "vidur_mlp",
                   "vidur_cpu_overheads", "gemm_fp8", "fpm_steps", "servingsim_requests", "mlenergy_v2",
                   "mlenergy_v3", "aic_silicon"}


# Coverage of the measured data: GPU x operator family, row counts and shape ranges.
rule data_coverage:
    input:
        **{t: f"results/data/{t}.parquet" for t in COVERAGE_TABLES},
        lib=lib("plotting", "specs"),
    output:
        **figure("png", "figures/data_coverage"),
    log:
        "logs/data/data_coverage.log",
    benchmark:
        "benchmarks/data/data_coverage.tsv"
    conda:
        CONDA_ENV
    message:
        "Drawing the data coverage figure {output.png}"
    script:
        "../scripts/data_coverage.py"


# every tidy table; the coverage figure where all its tables are configured (not in .test/)
DATA_TARGETS = [tidy(t) for t in TABLES]
if COVERAGE_TABLES <= set(TABLES):
    DATA_TARGETS += [rules.data_coverage.output.png, rules.data_coverage.output.png_pdf]
