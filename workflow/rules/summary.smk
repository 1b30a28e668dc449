# One page of every result's claims with its verdict (met / missed), for readers.


# One page listing every result's claims with its verdict (met / missed), for readers.
rule summary:
    input:
        results=lambda wc: experiment_results(),
        code=lib("io"),
    output:
        "results/SUMMARY.md",
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    conda:
        CONDA_ENV
    message:
        "Summarising every result's claims"
    script:
        "../scripts/summary.py"
