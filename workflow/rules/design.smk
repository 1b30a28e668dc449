# Design-time choices (issue 12): each decision made looking at every GPU's table, with the
# held-out metric under every alternative (collected from E1.11/E1.3/E1.13; the GEMM fit's
# warm start and attention's LLM weight refitted per held-out target here).
from steptime.specs import gpu_keys as _gpu_keys

AIC_GPUS = _gpu_keys(tables="aic")


# R2.1: the design-choice table (results/R2_1.json).

rule design_choices:
    input:
        registered=registered_raw("R2.1"),
        gemm=tidy("gemm"),
        attention=[tidy("attention_generation"), tidy("attention_context")],
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,  # as E1.24 fits attention: the settled GEMM constants
        e1_11="results/E1_11.json",
        e1_3="results/E1_3.json",
        e1_13="results/E1_13.json",
        code=code_of("design_choices"),
    output:
        result="results/R2_1.json",
    params:
        question=question("R2.1"),
        fast=config["fast"],
        seed=config["seed"],
        # config sizes r2_1_design: fast, three held-out targets (one per architecture family with siblings);
        # full (targets null), every GPU with AIConfigurator tables
        targets=size("r2_1_design")["targets"] or AIC_GPUS,
        gemm_n_per_gpu=size("r2_1_design")["gemm_n_per_gpu"],
        gemm_max_nfev=size("r2_1_design")["gemm_max_nfev"],
        attn_n_sample=size("r2_1_design")["attn_n_sample"],
        attn_max_nfev=size("r2_1_design")["attn_max_nfev"],
        cluster_tie_band=size("r2_1_design")["cluster_tie_band"],
    threads: 1
    priority: 35  # main job: long, and starts only after E1.13 (see Snakefile)
    log:
        "logs/design_choices.log",
    benchmark:
        "benchmarks/design_choices.tsv"
    conda:
        CONDA_ENV
    message:
        "R2.1 design-time choices with the held-out metric under each alternative"
    script:
        "../scripts/design_choices.py"
