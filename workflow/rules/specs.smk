# The GPU and model tables the library knows, exported for readers and the paper.


# Export the library's GPU and model tables (with sources) as JSON.
rule specs_tables:
    input:
        lib("specs"),
    output:
        gpus="results/specs/gpus.json",
        models="results/specs/models.json",
    log:
        "logs/specs_tables.log",
    benchmark:
        "benchmarks/specs_tables.tsv"
    conda:
        CONDA_ENV
    message:
        "Exporting GPU and model spec tables"
    script:
        "../scripts/specs_tables.py"
