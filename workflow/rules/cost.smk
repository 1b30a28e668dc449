# Calibration cost (issue 6): rows profiled and wall seconds against GPUs covered and home accuracy (E2.5).


# E2.5: rows profiled and wall seconds against GPUs covered and home accuracy.
rule E2_5:
    input:
        registered=registered_raw("E2.5"),
        e2_1=rules.E2_1.output.result,
        **UTILITY_DATA["aic_gemm"],
        **UTILITY_DATA["vidur_step"],
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        models=expand("results/cache/rf/{dataset}_{gpu}.joblib", dataset=RF_DATASETS, gpu=RF_HOMES),
        # the readings count (nine per GPU, three per family) from every settled file and R2.3's
        # wall-clock readings, with the tables that time the read cells
        readings_settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled,
                          "results/calibration/comm.yaml"],  # settle_comm_constants (comm.smk, included later)
        engine_constants="results/calibration/engine_constants.yaml",  # R2_3 (wallclock.smk, included later)
        allreduce=tidy("allreduce"),
        fpm=tidy("fpm_steps"),
        code=code_of("E2_5_calibration_cost"),
    output:
        result="results/E2_5.json",
        timing="results/E2_5_timing.json",
        **figure("figure", "figures/E2_5_ledger"),
    params:
        question=question("E2.5"),
        fast=config["fast"],
        full_grid=config["rf"]["full_grid"],
        reading_repeats=settings("E2.5").get("reading_repeats"),  # the registry names it (not .test/)
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    log:
        "logs/E2_5.log",
    benchmark:
        "benchmarks/E2_5.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.5 calibration cost vs coverage ledger"
    script:
        "../scripts/E2_5_calibration_cost.py"
