# The whole step (issue 5): the attention/light/host constants settled, the Vidur per-layer
# step (E1.1, E1.1b residual, E1.20 ablation ladder), the error atlas (E1.22) and a walkthrough.


# The constants E1.24, E1.1c and E1.4 settle, as a settled file (with provenance) later rules load.
rule settle_step_constants:
    input:
        registered=registered_raw("E1.1"),
        e1_24=rules.E1_24.output.result,
        e1_1c=rules.E1_1c.output.result,
        e1_4=rules.E1_4.output.result,
        code=code_of("settle_step_constants"),
    output:
        settled="results/calibration/step.yaml",
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/settle_step_constants.log",
    benchmark:
        "benchmarks/settle_step_constants.tsv"
    conda:
        CONDA_ENV
    message:
        "Settling the attention, light-kernel and host constants into {output.settled}"
    script:
        "../scripts/settle_step_constants.py"


# E1.1 / E1.1b / E1.20: whole per-layer Vidur step, residual by term, ablation ladder.
rule E1_1:
    input:
        registered=registered_raw("E1.1", "E1.1b", "E1.20"),
        data=tidy("vidur_mlp"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("E1_1_step"),
    output:
        e1_1="results/E1_1.json",
        e1_1b="results/E1_1b.json",
        e1_20="results/E1_20.json",
        pred="results/cache/E1_1_pred.parquet",
        **figure("fig1", "figures/E1_1_step"),
        **figure("fig1b", "figures/E1_1b_residual"),
        **figure("fig20", "figures/E1_20_ladder"),
    params:
        q1=question("E1.1"),
        targets=targets("E1.1"),
        q1b=question("E1.1b"),
        q20=question("E1.20"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 6  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E1_1.log",
    benchmark:
        "benchmarks/E1_1.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.1/E1.1b/E1.20 Vidur per-layer step: held-out scores, residual by term, ablation ladder"
    script:
        "../scripts/E1_1_step.py"


# E1.20b: the ladder's per-term change in step MAPE as a tornado, read from E1.20's result.
rule E1_20_tornado:
    input:
        registered=registered_raw("E1.20"),
        result=rules.E1_1.output.e1_20,
        code=code_of("E1_20_tornado"),
    output:
        **figure("fig", "figures/E1_20_tornado"),
    log:
        "logs/E1_20_tornado.log",
    conda:
        CONDA_ENV
    message:
        "E1.20b per-term change in step MAPE (tornado) from E1.20's ladder"
    script:
        "../scripts/E1_20_tornado.py"


# E1.22: signed-error atlas over attention (tokens x KV) and Vidur step (m x shape).
rule E1_22:
    input:
        registered=registered_raw("E1.22"),
        attn=rules.E1_24.output.pred,
        step=rules.E1_1.output.pred,
        code=code_of("E1_22_error_atlas"),
    output:
        result="results/E1_22.json",
        **figure("fig_attn", "figures/E1_22_attention_atlas"),
        **figure("fig_step", "figures/E1_22_step_atlas"),
    params:
        question=question("E1.22"),
    log:
        "logs/E1_22.log",
    benchmark:
        "benchmarks/E1_22.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.22 error atlas with the dominant term of each bad region"
    script:
        "../scripts/E1_22_error_atlas.py"


# Walkthrough: every term's share of a llama-3.1-8b step on h100-sxm over batch and KV length.
rule walkthrough:
    input:
        registered=registered_raw("E1.1"),
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("walkthrough"),
    output:
        **figure("fig", "figures/walkthrough_llama-3_1-8b_h100-sxm"),
    params:
        model="llama-3.1-8b",
        gpu="h100-sxm",
    log:
        "logs/walkthrough.log",
    benchmark:
        "benchmarks/walkthrough.tsv"
    conda:
        CONDA_ENV
    message:
        "Walkthrough figure: term shares of {params.model} on {params.gpu}"
    script:
        "../scripts/walkthrough.py"
