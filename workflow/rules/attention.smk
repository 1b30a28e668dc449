# Attention (issue 5): E1.24, attention held out per GPU per kernel family, its constants
# carried from the GEMM's deploy readings.


# E1.24: attention held out per GPU (per kernel family) on AIConfigurator's attention tables.
rule E1_24:
    input:
        registered=registered_raw("E1.24"),
        generation=tidy("attention_generation"),
        context=tidy("attention_context"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_24_attention"),
    output:
        result="results/E1_24.json",
        pred="results/cache/E1_24_pred.parquet",
        **figure("fig_acc", "figures/E1_24_accuracy"),
        **figure("fig_fac", "figures/E1_24_factors"),
    params:
        question=question("E1.24"),
        targets=targets("E1.24"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
        fit_sample=size("e1_24_fit_sample"),
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E1_24.log",
    benchmark:
        "benchmarks/E1_24.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.24 attention: leave-one-GPU-out fits per kernel family, per-GPU constants from the GEMM readings, scores"
    script:
        "../scripts/E1_24_attention.py"


# E1.29: the GEMM and attention laws at the TP-split (per-rank) shapes of the known models, held out by GPU.
rule E1_29:
    input:
        registered=registered_raw("E1.29"),
        gemm=tidy("gemm"),
        vidur=tidy("vidur_mlp"),
        generation=tidy("attention_generation"),
        context=tidy("attention_context"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        e1_23=rules.E1_23.output.result,
        e1_24=rules.E1_24.output.result,
        code=code_of("E1_29_tp_shapes"),
    output:
        result="results/E1_29.json",
        **figure("fig", "figures/E1_29_tp_shapes"),
    params:
        question=question("E1.29"),
        targets=targets("E1.29"),
        settings=settings("E1.29"),
    threads: 1
    log:
        "logs/E1_29.log",
    benchmark:
        "benchmarks/E1_29.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.29 GEMM and attention at the TP-split shapes, held out per GPU x TP"
    script:
        "../scripts/E1_29_tp_shapes.py"
