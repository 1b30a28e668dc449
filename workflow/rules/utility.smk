# Part 2, utility (issue 6): cross-GPU transfer against a profiled Vidur-style random
# forest (E2.1), GPU ranking (E2.2, tie-aware re-score E2.6), calibration cost (E2.5).

RF_DATASETS = ["vidur_step", "aic_gemm", "aic_attention"]
RF_HOMES = ["a100-sxm", "h100-sxm"]
UTILITY_DATA = {
    "vidur_step": ["results/data/vidur_mlp.parquet"],
    "aic_gemm": ["results/data/gemm.parquet"],
    "aic_attention": ["results/data/attention_context.parquet", "results/data/attention_generation.parquet"],
}
UTILITY_ALL_DATA = sorted({p for v in UTILITY_DATA.values() for p in v})
# The profile fitted with Vidur's full grid when rf.grid_check is on (hours for every profile on
# 2 cores; this one takes minutes), and the outputs rule all then adds.
GRID_CHECK = ("aic_gemm", "a100-sxm")
GRID_CHECK_TARGETS = ["results/E2_1_grid.json", "results/E2_1_grid_timing.json"]


# Fit Vidur's RF + polynomial predictors on one home GPU's table (cached, keyed by inputs and grid).
rule rf_fit:
    input:
        data=lambda wc: UTILITY_DATA[wc.dataset],
        code=lib("baselines", "experiments/transfer/profiled", "experiments/cells", "specs", "data"),
    output:
        model="results/cache/rf/{dataset}_{gpu}.joblib",
    wildcard_constraints:
        dataset="|".join(RF_DATASETS),
        gpu="|".join(RF_HOMES),
    params:
        full_grid=config["rf"]["full_grid"],
        fast=config["fast"],
    log:
        "logs/rf_fit/{dataset}_{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Fitting the Vidur-style RF on {wildcards.dataset} for home {wildcards.gpu} (full grid: {params.full_grid})"
    script:
        "../scripts/E2_rf_fit.py"


# Vidur's full grid on the grid-check profile, beside the fast grid (built only when rf.grid_check is on).
rule rf_fit_full:
    input:
        data=lambda wc: UTILITY_DATA[wc.dataset],
        code=lib("baselines", "experiments/transfer/profiled", "experiments/cells", "specs", "data"),
    output:
        model="results/cache/rf_full/{dataset}_{gpu}.joblib",
    wildcard_constraints:
        dataset="|".join(RF_DATASETS),
        gpu="|".join(RF_HOMES),
    params:
        full_grid=True,
        fast=config["fast"],
    log:
        "logs/rf_fit_full/{dataset}_{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Fitting the Vidur-style RF on {wildcards.dataset} for home {wildcards.gpu} with Vidur's full grid"
    script:
        "../scripts/E2_rf_fit.py"


# E2.1 grid check: the RF rows of E2.1 with the fast and the full grid, and their predict speed.
rule E2_1_grid:
    input:
        fast=f"results/cache/rf/{GRID_CHECK[0]}_{GRID_CHECK[1]}.joblib",
        full=f"results/cache/rf_full/{GRID_CHECK[0]}_{GRID_CHECK[1]}.joblib",
        data=UTILITY_DATA[GRID_CHECK[0]],
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        code=lib(),
    output:
        result="results/E2_1_grid.json",
        timing="results/E2_1_grid_timing.json",
    params:
        question=EXPERIMENTS["E2.1"]["question"] + " (grid check: does Vidur's full grid change the forest?)",
    log:
        "logs/E2_1_grid.log",
    conda:
        CONDA_ENV
    message:
        "E2.1 grid check: fast vs full Vidur grid on {GRID_CHECK}"
    script:
        "../scripts/E2_1_grid.py"


# E2.1: home RF (held-out), verbatim and spec-scaled RF, and steptime (held-out folds) on every target GPU.
rule E2_1:
    input:
        data=UTILITY_ALL_DATA,
        models=expand("results/cache/rf/{dataset}_{gpu}.joblib", dataset=RF_DATASETS, gpu=RF_HOMES),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        code=lib(),
    output:
        result="results/E2_1.json",
        figure="figures/E2_1_transfer.png",
    params:
        question=EXPERIMENTS["E2.1"]["question"],
    log:
        "logs/E2_1.log",
    conda:
        CONDA_ENV
    message:
        "E2.1 cross-GPU transfer: profiled RF vs steptime"
    script:
        "../scripts/E2_1.py"


# E2.2 + E2.6: rank GPUs per workload against measured-table sums, tie-aware.
rule E2_2:
    input:
        data=UTILITY_DATA["aic_gemm"] + UTILITY_DATA["aic_attention"],
        gemm_rf="results/cache/rf/aic_gemm_a100-sxm.joblib",
        attn_rf="results/cache/rf/aic_attention_a100-sxm.joblib",
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        code=lib(),
    output:
        e2_2="results/E2_2.json",
        e2_6="results/E2_6.json",
        fig2="figures/E2_2_ranking.png",
        fig6="figures/E2_6_ties.png",
    params:
        q2=EXPERIMENTS["E2.2"]["question"],
        q6=EXPERIMENTS["E2.6"]["question"],
    log:
        "logs/E2_2.log",
    conda:
        CONDA_ENV
    message:
        "E2.2/E2.6 GPU ranking, tie-aware"
    script:
        "../scripts/E2_2.py"


# E2.5: rows profiled and wall seconds against GPUs covered and home accuracy.
rule E2_5:
    input:
        e2_1=rules.E2_1.output.result,
        data=UTILITY_DATA["aic_gemm"],
        models=expand("results/cache/rf/{dataset}_{gpu}.joblib", dataset=RF_DATASETS, gpu=RF_HOMES),
        code=lib(),
    output:
        result="results/E2_5.json",
        timing="results/E2_5_timing.json",
        figure="figures/E2_5_ledger.png",
    params:
        question=EXPERIMENTS["E2.5"]["question"],
    log:
        "logs/E2_5.log",
    conda:
        CONDA_ENV
    message:
        "E2.5 calibration cost vs coverage ledger"
    script:
        "../scripts/E2_5.py"
