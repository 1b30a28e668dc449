# GPU ranking (issue 6): rank GPUs per workload against the measured-table sums (E2.2), tie-aware (E2.6).


# E2.2 + E2.6: rank GPUs per workload against measured-table sums, tie-aware.
rule E2_2:
    input:
        registered=registered_raw("E2.2", "E2.6"),
        **UTILITY_DATA["aic_gemm"],
        **UTILITY_DATA["aic_attention"],
        gemm_rf="results/cache/rf/aic_gemm_a100-sxm.joblib",
        attn_rf="results/cache/rf/aic_attention_a100-sxm.joblib",
        greybox=expand("results/cache/greybox/{dataset}.joblib", dataset=["aic_gemm", "aic_attention"]),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        attention=rules.E1_24.output.result,
        settled=[rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled],
        code=code_of("E2_2_ranking"),
    output:
        e2_2="results/E2_2.json",
        e2_6="results/E2_6.json",
        **figure("fig2", "figures/E2_2_ranking"),
        **figure("fig6", "figures/E2_6_ties"),
    params:
        q2=question("E2.2"),
        targets=targets("E2.2"),
        q6=question("E2.6"),
        seed=config["seed"],
        fast=config["fast"],  # the grey box's fit sizes (greybox.SIZES)
        cv_sizes=size("greybox_cv"),  # the grey box's nested-CV tree sizes (config sizes greybox_cv)
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 8  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E2_2.log",
    benchmark:
        "benchmarks/E2_2.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.2/E2.6 GPU ranking, tie-aware"
    script:
        "../scripts/E2_2_ranking.py"
