# Part 1, the rest of the step (issue 5): attention (E1.24), light kernels (E1.1c), host
# floor (E1.4), the whole Vidur step (E1.1, E1.1b), ablation ladder (E1.20), error atlas
# (E1.22), literature matrix (L0.1), the constants they settle, and a walkthrough figure.

STEP_LIB = lib("terms", "step.py", "experiments/__init__", "experiments/attention", "experiments/gemm", "experiments/light",
               "experiments/host", "experiments/step", "experiments/literature", "calibration/__init__", "metrics",
               "results", "plotting", "specs", "data", "io")


# E1.24: attention held out per GPU (per kernel family) on AIConfigurator's attention tables.
rule E1_24:
    input:
        data=[rules.data_attention_generation.output.table, rules.data_attention_context.output.table],
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=STEP_LIB,
    output:
        result="results/E1_24.json",
        pred="results/cache/E1_24_pred.parquet",
        fig_acc="figures/E1_24_accuracy.png",
        fig_fac="figures/E1_24_factors.png",
    params:
        question=EXPERIMENTS["E1.24"]["question"],
    log:
        "logs/E1_24.log",
    conda:
        CONDA_ENV
    message:
        "E1.24 attention: leave-one-GPU-out fits per kernel family, per-GPU constants from the GEMM readings, scores"
    script:
        "../scripts/E1_24.py"


# E1.1c: per-kernel launch floor + achieved bandwidth on Vidur's light operators.
rule E1_1c:
    input:
        data=rules.data_vidur_mlp.output.table,
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=STEP_LIB,
    output:
        result="results/E1_1c.json",
        fig="figures/E1_1c_light.png",
    params:
        question=EXPERIMENTS["E1.1c"]["question"],
    log:
        "logs/E1_1c.log",
    conda:
        CONDA_ENV
    message:
        "E1.1c light kernels: floor + bytes/achieved bandwidth, held out per GPU"
    script:
        "../scripts/E1_1c.py"


# E1.4: host floor S(N) = a + b(N-1) and its parts on Vidur's cpu_overheads.
rule E1_4:
    input:
        data=rules.data_vidur_cpu_overheads.output.table,
        settled=rules.settle_gemm_constants.output.settled,
        code=STEP_LIB,
    output:
        result="results/E1_4.json",
        fig="figures/E1_4_host.png",
    params:
        question=EXPERIMENTS["E1.4"]["question"],
    log:
        "logs/E1_4.log",
    conda:
        CONDA_ENV
    message:
        "E1.4 host floor and its parts against the GPU work of a decode step"
    script:
        "../scripts/E1_4.py"


# The constants E1.24, E1.1c and E1.4 settle, as a settled file (with provenance) later rules load.
rule settle_step_constants:
    input:
        e1_24=rules.E1_24.output.result,
        e1_1c=rules.E1_1c.output.result,
        e1_4=rules.E1_4.output.result,
        code=lib("calibration", "io"),
    output:
        settled="results/calibration/step.yaml",
    log:
        "logs/settle_step_constants.log",
    conda:
        CONDA_ENV
    message:
        "Settling the attention, light-kernel and host constants into {output.settled}"
    script:
        "../scripts/settle_step_constants.py"


# E1.1 / E1.1b / E1.20: whole per-layer Vidur step, residual by term, ablation ladder.
rule E1_1:
    input:
        data=rules.data_vidur_mlp.output.table,
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=STEP_LIB,
    output:
        e1_1="results/E1_1.json",
        e1_1b="results/E1_1b.json",
        e1_20="results/E1_20.json",
        pred="results/cache/E1_1_pred.parquet",
        fig1="figures/E1_1_step.png",
        fig1b="figures/E1_1b_residual.png",
        fig20="figures/E1_20_ladder.png",
    params:
        q1=EXPERIMENTS["E1.1"]["question"],
        q1b=EXPERIMENTS["E1.1b"]["question"],
        q20=EXPERIMENTS["E1.20"]["question"],
    log:
        "logs/E1_1.log",
    conda:
        CONDA_ENV
    message:
        "E1.1/E1.1b/E1.20 Vidur per-layer step: held-out scores, residual by term, ablation ladder"
    script:
        "../scripts/E1_1.py"


# E1.22: signed-error atlas over attention (tokens x KV) and Vidur step (m x shape).
rule E1_22:
    input:
        attn=rules.E1_24.output.pred,
        step=rules.E1_1.output.pred,
        code=STEP_LIB,
    output:
        result="results/E1_22.json",
        fig_attn="figures/E1_22_attention_atlas.png",
        fig_step="figures/E1_22_step_atlas.png",
    params:
        question=EXPERIMENTS["E1.22"]["question"],
    log:
        "logs/E1_22.log",
    conda:
        CONDA_ENV
    message:
        "E1.22 error atlas with the dominant term of each bad region"
    script:
        "../scripts/E1_22.py"


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


# Walkthrough: every term's share of a llama-3.1-8b step on h100-sxm over batch and KV length.
rule walkthrough:
    input:
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=STEP_LIB,
    output:
        fig="figures/walkthrough_llama-3_1-8b_h100-sxm.png",
    params:
        model="llama-3.1-8b",
        gpu="h100-sxm",
    log:
        "logs/walkthrough.log",
    conda:
        CONDA_ENV
    message:
        "Walkthrough figure: term shares of {params.model} on {params.gpu}"
    script:
        "../scripts/walkthrough.py"
