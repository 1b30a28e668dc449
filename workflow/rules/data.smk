# Ingest: every source in raw/ (listed in raw/MANIFEST.yaml) becomes one tidy, checked table
# under results/data/ (one parametrised rule, rows in config/tables.yaml), plus a coverage figure.
# One tidy table from its raw files, through its loader in steptime.data (checked schema, units, ranges).
rule ingest:
    input:
        raw=raw_inputs,
        lib=DATA_LIB,
    output:
        table="results/data/{table}.parquet",
    wildcard_constraints:
        table="|".join(TABLES),
    params:
        about=lambda wc: TABLES[wc.table]["about"],
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


# Coverage of the measured data: GPU x operator family, row counts and shape ranges.
rule data_coverage:
    input:
        gemm=tidy("gemm"),
        attention_context=tidy("attention_context"),
        attention_generation=tidy("attention_generation"),
        scale_matrix=tidy("scale_matrix"),
        allreduce=tidy("allreduce"),
        vidur_mlp=tidy("vidur_mlp"),
        vidur_cpu_overheads=tidy("vidur_cpu_overheads"),
        lib=lib("plotting", "specs"),
    output:
        png="figures/data_coverage.png",
        pdf="figures/data_coverage.pdf",
        caption="figures/data_coverage.caption.txt",
    log:
        "logs/data/data_coverage.log",
    conda:
        CONDA_ENV
    message:
        "Drawing the data coverage figure {output.png}"
    script:
        "../scripts/data_coverage.py"


DATA_TARGETS = [tidy(t) for t in TABLES] + [rules.data_coverage.output.png, rules.data_coverage.output.pdf]
