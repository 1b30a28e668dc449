# Literature (L0.1): the matrix of prior predictors, from the cited data file config/literature.yaml.


# L0.1: prior predictors' efficiency source, GPU coverage, reported accuracy (cited data file).
rule L0_1:
    input:
        registered=registered_raw("L0.1"),
        lit="config/literature.yaml",
        code=code_of("L0_1_literature"),
    output:
        result="results/L0_1.json",
        **figure("fig", "figures/L0_1_literature"),
    params:
        question=question("L0.1"),
    log:
        "logs/L0_1.log",
    benchmark:
        "benchmarks/L0_1.tsv"
    conda:
        CONDA_ENV
    message:
        "L0.1 literature matrix"
    script:
        "../scripts/L0_1_literature.py"
