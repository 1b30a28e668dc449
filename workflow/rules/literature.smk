# Literature (L0.1): the matrix of prior predictors, from the cited data file config/literature.yaml.


# L0.1: prior predictors' efficiency source, GPU coverage, reported accuracy (cited data file).
rule L0_1:
    input:
        lit="config/literature.yaml",
        code=STEP_LIB,
    output:
        result="results/L0_1.json",
        fig="figures/L0_1_literature.png",
    params:
        question=EXPERIMENTS["L0.1"]["question"],
    log:
        "logs/L0_1.log",
    conda:
        CONDA_ENV
    message:
        "L0.1 literature matrix"
    script:
        "../scripts/L0_1.py"
