# Cross-GPU transfer (issue 6): a profiled Vidur-style random forest per home GPU (rf_fit,
# cached) against steptime on every other GPU (E2.1), and the opt-in full-grid check (E2.1 grid).
RF_DATASETS = ["vidur_step", "aic_gemm", "aic_attention"]
RF_HOMES = ["a100-sxm", "h100-sxm"]
# the tidy tables (name -> path) each dataset's cells are built from
UTILITY_DATA = {
    "vidur_step": {"vidur_mlp": tidy("vidur_mlp")},
    "aic_gemm": {"gemm": tidy("gemm")},
    "aic_attention": {
        "attention_context": tidy("attention_context"),
        "attention_generation": tidy("attention_generation"),
    },
}
UTILITY_ALL_DATA = {k: v for d in UTILITY_DATA.values() for k, v in d.items()}
# The profile fitted with Vidur's full grid when rf.grid_check is on (hours for every profile on
# 2 cores; this one takes minutes), and the outputs rule all then adds.
GRID_CHECK = ("aic_gemm", "a100-sxm")
GRID_CHECK_TARGETS = ["results/E2_1_grid.json", "results/E2_1_grid_timing.json"]


# Fit Vidur's RF + polynomial predictors on one home GPU's table (cached, keyed by inputs and grid).
rule rf_fit:
    input:
        unpack(lambda wc: UTILITY_DATA[wc.dataset]),
        code=code_of("E2_rf_fit"),
    output:
        model="results/cache/rf/{dataset}_{gpu}.joblib",
    wildcard_constraints:
        dataset=one_of(RF_DATASETS),
        gpu=one_of(RF_HOMES),
    threads: two_threads_if_room
    params:
        full_grid=config["rf"]["full_grid"],
        fast=config["fast"],
        seed=config["seed"],
    priority: 45  # main job: early, beside the tidy tables (see Snakefile)
    log:
        "logs/rf_fit/{dataset}_{gpu}.log",
    benchmark:
        "benchmarks/rf_fit/{dataset}_{gpu}.tsv"
    conda:
        CONDA_ENV
    message:
        "Fitting the Vidur-style RF on {wildcards.dataset} for home {wildcards.gpu} (full grid: {params.full_grid})"
    script:
        "../scripts/E2_rf_fit.py"


# Vidur's full grid on the grid-check profile, beside the fast grid (built only when rf.grid_check is on).
rule rf_fit_full:
    input:
        unpack(lambda wc: UTILITY_DATA[wc.dataset]),
        code=code_of("E2_rf_fit"),
    output:
        model="results/cache/rf_full/{dataset}_{gpu}.joblib",
    wildcard_constraints:
        dataset=one_of(RF_DATASETS),
        gpu=one_of(RF_HOMES),
    threads: two_threads_if_room
    params:
        full_grid=True,
        fast=config["fast"],
        seed=config["seed"],
    log:
        "logs/rf_fit_full/{dataset}_{gpu}.log",
    benchmark:
        "benchmarks/rf_fit_full/{dataset}_{gpu}.tsv"
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
        gemm=UTILITY_DATA[GRID_CHECK[0]]["gemm"],
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("E2_1_grid"),
    output:
        result="results/E2_1_grid.json",
        timing="results/E2_1_grid_timing.json",
    params:
        question=question("E2.1") + " (grid check: does Vidur's full grid change the forest?)",
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    log:
        "logs/E2_1_grid.log",
    benchmark:
        "benchmarks/E2_1_grid.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.1 grid check: fast vs full Vidur grid on {GRID_CHECK}"
    script:
        "../scripts/E2_1_grid.py"


# The grey box's per-term corrections fitted on every GPU's tables (shipped by `steptime calibration ship
# results/calibration/greybox.npz` as src/steptime/calibration/greybox.npz, for `steptime predict --explain`).
rule settle_greybox_corrections:
    input:
        registered=registered_raw("E2.1"),
        **UTILITY_ALL_DATA,
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("settle_greybox_corrections"),
    output:
        corrections="results/calibration/greybox.npz",
    params:
        seed=config["seed"],
        fast=config["fast"],  # the boosted trees' sizes (greybox.SIZES)
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    log:
        "logs/settle_greybox_corrections.log",
    benchmark:
        "benchmarks/settle_greybox_corrections.tsv"
    conda:
        CONDA_ENV
    message:
        "Grey-box per-term corrections fitted on every GPU's tables into {output.corrections}"
    script:
        "../scripts/settle_greybox_corrections.py"


# The grey box fitted once per table, every GPU held out in turn (cached): E2.1 scores it, E2.2 ranks with
# it (the same cells, held-out constants and readings; each adopts the cache only if it fits its own data).
rule greybox_fit:
    input:
        unpack(lambda wc: UTILITY_DATA[wc.dataset]),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("E2_greybox_fit"),
    output:
        fits="results/cache/greybox/{dataset}.joblib",
    wildcard_constraints:
        dataset=one_of(RF_DATASETS),
    params:
        seed=config["seed"],
        fast=config["fast"],  # the boosted trees' sizes and bandwidths (greybox.SIZES, BANDWIDTHS)
        cv_sizes=size("greybox_cv"),  # the grey box's nested-CV tree sizes (config sizes greybox_cv)
        full_grid=config["rf"]["full_grid"],  # Vidur's TP grid (as E2.1's cells)
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 30  # main job: critical path first (see Snakefile)
    log:
        "logs/greybox_fit/{dataset}.log",
    benchmark:
        "benchmarks/greybox_fit/{dataset}.tsv"
    conda:
        CONDA_ENV
    message:
        "Grey-box fits on {wildcards.dataset}, every GPU held out in turn"
    script:
        "../scripts/E2_greybox_fit.py"


# E2.1: home RF (held-out), verbatim and spec-scaled RF, and steptime (held-out folds) on every target GPU.
rule E2_1:
    input:
        registered=registered_raw("E2.1"),
        **UTILITY_ALL_DATA,
        models=expand("results/cache/rf/{dataset}_{gpu}.joblib", dataset=RF_DATASETS, gpu=RF_HOMES),
        greybox=expand("results/cache/greybox/{dataset}.joblib", dataset=RF_DATASETS),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("E2_1_transfer"),
    output:
        result="results/E2_1.json",
        **figure("figure", "figures/E2_1_transfer"),
    params:
        question=question("E2.1"),
        targets=targets("E2.1"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
        fast=config["fast"],
        full_grid=config["rf"]["full_grid"],
        cv_sizes=size("greybox_cv"),  # the grey box's nested-CV tree sizes (config sizes greybox_cv)
        ml_tuned=not config["fast"],  # ml_loo's fair best (all rows, nested GPU-grouped CV): fast: false
        settings=settings("E2.1"),  # ml_tuned_full_tables: where the fast job also scores ml_loo's fair best
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 30  # main job: critical path first (see Snakefile)
    log:
        "logs/E2_1.log",
    benchmark:
        "benchmarks/E2_1.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.1 cross-GPU transfer: profiled RF vs steptime"
    script:
        "../scripts/E2_1_transfer.py"
