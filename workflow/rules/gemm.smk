# Part 1, the GEMM term (issue 4): SM fill on Ampere/Ada (E1.2), Hopper clusters (E1.2b,
# E1.11), the Blackwell paradigm (E1.12), the memory law (E1.3), the factor product vs a
# scalar (E1.13), the head-to-head (E1.23), the implied-alpha ledger (L0.2), and the
# constants they settle (leave-one-GPU-out fits + three deploy readings per GPU).

# E1.11: Hopper grid cap from GPC geometry vs blind; which cluster size the latency data supports.
rule E1_11:
    input:
        registered=registered_raw("E1.11"),
        gemm=tidy("gemm"),
        code=code_of("E1_11_gemm_cluster"),
    output:
        result="results/E1_11.json",
        **figure("fig", "figures/E1_11_cluster_cap"),
    params:
        question=question("E1.11"),
        seed=config["seed"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 45  # main job: the GEMM settle waits on it; priority does not propagate upstream (see Snakefile)
    log:
        "logs/E1_11.log",
    benchmark:
        "benchmarks/E1_11.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.11 Hopper cluster cap: geometry vs blind, leave-one-GPU-out fits per cluster size"
    script:
        "../scripts/E1_11_gemm_cluster.py"


# E1.3: memory efficiency as one law in working set over L2 or in bytes read, per GPU and held out.
rule E1_3:
    input:
        registered=registered_raw("E1.3"),
        gemm=tidy("gemm"),
        scale=tidy("scale_matrix"),
        code=code_of("E1_3_gemm_memory"),
    output:
        result="results/E1_3.json",
        **figure("fig", "figures/E1_3_memory_law"),
    params:
        question=question("E1.3"),
        targets=targets("E1.3"),
    priority: 45  # main job: the GEMM settle waits on it; priority does not propagate upstream (see Snakefile)
    log:
        "logs/E1_3.log",
    benchmark:
        "benchmarks/E1_3.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.3 memory law: per-GPU, global and held-out fits on memory-bound GEMM and scale_matrix cells"
    script:
        "../scripts/E1_3_gemm_memory.py"


# The GEMM constants: leave-one-GPU-out fits of the global constants + per-GPU deploy readings;
# the all-GPU fit, the readings and the E1.11/E1.3 decisions go to a settled file downstream rules load.
rule settle_gemm_constants:
    input:
        registered=registered_raw("E1.23"),
        gemm=tidy("gemm"),
        e1_11=rules.E1_11.output.result,
        e1_3=rules.E1_3.output.result,
        code=code_of("settle_gemm_constants"),
    output:
        constants="results/calibration/gemm_constants.json",
        settled="results/calibration/gemm.yaml",
    params:
        seed=config["seed"],
        # worker processes for the nine leave-one-GPU-out folds (each one BLAS thread: deterministic; the same
        # numbers at any count). Two, though the rule holds one thread: on a 2-core run nothing else is ready while
        # the settle runs (every fit waits on it), and a 2-thread job would first wait for both cores at once
        fold_jobs=2,
    threads: 1  # one BLAS thread per process: the fits are deterministic only single-threaded
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/settle_gemm_constants.log",
    benchmark:
        "benchmarks/settle_gemm_constants.tsv"
    conda:
        CONDA_ENV
    message:
        "Settling the GEMM constants (leave-one-GPU-out) into {output.settled}"
    script:
        "../scripts/settle_gemm_constants.py"


# E1.23: head-to-head on the same cells vs bare roofline, datasheet alphas, AIC empirical, calibrated roofline.
rule E1_23:
    input:
        registered=registered_raw("E1.23"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_23_gemm_h2h"),
    output:
        result="results/E1_23.json",
        **figure("fig", "figures/E1_23_head_to_head"),
        **figure("atlas", "figures/E1_23_error_atlas"),
    params:
        question=question("E1.23"),
        targets=targets("E1.23"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 4  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E1_23.log",
    benchmark:
        "benchmarks/E1_23.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.23 GEMM head-to-head: held-out steptime vs four roofline baselines, per GPU and subset"
    script:
        "../scripts/E1_23_gemm_h2h.py"


# E1.23b: what the uncalibrated (datasheet + family constants) mode costs, on E1.23's held-out cells.
rule E1_23b:
    input:
        registered=registered_raw("E1.23b"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_23b_uncalibrated"),
    output:
        result="results/E1_23b.json",
        **figure("fig", "figures/E1_23b_uncalibrated"),
    params:
        question=question("E1.23b"),
        targets=targets("E1.23b"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    log:
        "logs/E1_23b.log",
    benchmark:
        "benchmarks/E1_23b.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.23b uncalibrated mode: held-out GEMM MAPE with and without each GPU's own deploy readings"
    script:
        "../scripts/E1_23b_uncalibrated.py"


# E1.2: tile ladder + last-wave tail on Ampere/Ada (A100, L40S) and on Vidur's A40 GEMM operators.
rule E1_2:
    input:
        registered=registered_raw("E1.2"),
        gemm=tidy("gemm"),
        vidur=tidy("vidur_mlp"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_2_gemm_wave"),
    output:
        result="results/E1_2.json",
        **figure("fig", "figures/E1_2_staircase"),
    params:
        question=question("E1.2"),
    log:
        "logs/E1_2.log",
    benchmark:
        "benchmarks/E1_2.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.2 wave quantisation on Ampere/Ada: staircases in m, with and without the fill factor"
    script:
        "../scripts/E1_2_gemm_wave.py"


# E1.2b: Hopper latency curves under the persistent cluster model (settled cluster size vs 16).
rule E1_2b:
    input:
        registered=registered_raw("E1.2b"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        e1_11=rules.E1_11.output.result,
        code=code_of("E1_2b_gemm_hopper"),
    output:
        result="results/E1_2b.json",
        **figure("fig", "figures/E1_2b_hopper"),
    params:
        question=question("E1.2b"),
    log:
        "logs/E1_2b.log",
    benchmark:
        "benchmarks/E1_2b.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.2b Hopper persistent-cluster model: latency curves and staircases"
    script:
        "../scripts/E1_2b_gemm_hopper.py"


# E1.12: which SM-fill paradigm each Blackwell GPU's curves follow.
rule E1_12:
    input:
        registered=registered_raw("E1.12"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_12_gemm_blackwell"),
    output:
        result="results/E1_12.json",
        **figure("fig", "figures/E1_12_blackwell_paradigm"),
        **figure("curves", "figures/E1_12_curves"),
    params:
        question=question("E1.12"),
        seed=config["seed"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    log:
        "logs/E1_12.log",
    benchmark:
        "benchmarks/E1_12.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.12 Blackwell: wave vs persistent SM fill per GPU, held out"
    script:
        "../scripts/E1_12_gemm_blackwell.py"


# E1.13: the factor product vs one scalar efficiency per GPU, and the scalar's drift.
rule E1_13:
    input:
        registered=registered_raw("E1.13"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_13_gemm_scalar"),
    output:
        result="results/E1_13.json",
        **figure("fig", "figures/E1_13_scalar_vs_factors"),
    params:
        question=question("E1.13"),
        seed=config["seed"],
        fast=config["fast"],
        ablation=size("e1_13_ablation"),
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 35  # main job: the longest job after the GEMM settle, and R2.1 waits on it (see Snakefile)
    log:
        "logs/E1_13.log",
    benchmark:
        "benchmarks/E1_13.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.13 factor product vs scalar efficiency per GPU"
    script:
        "../scripts/E1_13_gemm_scalar.py"


# L0.2: the efficiency a bare roofline needs per cell, on both branches, before and after our factors.
rule L0_2:
    input:
        registered=registered_raw("L0.2"),
        gemm=tidy("gemm"),
        constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("L0_2_gemm_alpha"),
    output:
        result="results/L0_2.json",
        **figure("fig", "figures/L0_2_implied_alpha"),
    params:
        question=question("L0.2"),
    log:
        "logs/L0_2.log",
    benchmark:
        "benchmarks/L0_2.tsv"
    conda:
        CONDA_ENV
    message:
        "L0.2 implied-alpha ledger on compute- and memory-bound GEMM cells"
    script:
        "../scripts/L0_2_gemm_alpha.py"
