# Design-time choices (issue 12): each decision made looking at every GPU's table, with the
# held-out metric under every alternative (collected from E1.11/E1.3/E1.13; the GEMM fit's
# warm start and attention's LLM weight refitted per held-out target here).
from steptime.specs import gpu_keys as _gpu_keys

AIC_GPUS = _gpu_keys(tables="aic")


# R2.1: the design-choice table (results/R2_1.json).

rule design_choices:
    input:
        gemm="results/data/gemm.parquet",
        attention=["results/data/attention_generation.parquet", "results/data/attention_context.parquet"],
        gemm_constants="results/calibration/gemm_constants.json",
        e1_11="results/E1_11.json",
        e1_3="results/E1_3.json",
        e1_13="results/E1_13.json",
        code=lib("experiments/design", "experiments/gemm", "experiments/attention", "terms", "calibration"),
    output:
        result="results/R2_1.json",
    params:
        question=question("R2.1"),
        fast=config["fast"],
        seed=config["seed"],
        # fast: three held-out targets (one per architecture family with siblings); else all nine
        targets=["h100-sxm", "b200", "l40s"] if config["fast"] else AIC_GPUS,
        gemm_n_per_gpu=500 if config["fast"] else 2000,
        gemm_max_nfev=30 if config["fast"] else 80,
        attn_n_sample=300 if config["fast"] else 800,
        attn_max_nfev=15 if config["fast"] else 40,
    log:
        "logs/design_choices.log",
    conda:
        CONDA_ENV
    message:
        "R2.1 design-time choices with the held-out metric under each alternative"
    script:
        "../scripts/design_choices.py"
