# GPU telemetry: collection rules (need a GPU node; run them with --profile profiles/slurm)
# and the reductions of experiments that await that telemetry (E1.5, E1.10).
# COLLECT: config/collect.yaml, validated in common.smk.


# Sweep the sustained SM clock under GEMM load on one GPU (n randomised runs).
rule collect_clock_sweep:
    output:
        "raw/telemetry/clock/{gpu}/clock_sweep.csv",
    params:
        runs=COLLECT["clock_sweep"]["runs"],
        hold=COLLECT["clock_sweep"]["hold_s"],
        cool=COLLECT["clock_sweep"]["cool_s"],
    resources:
        gpu_model=lambda wc: COLLECT["gpus"][wc.gpu]["gres"],
        slurm_extra=lambda wc: f"'--gres=gpu:{COLLECT['gpus'][wc.gpu]['gres']}:1 --exclusive'",
    log:
        "logs/collect_clock_sweep/{gpu}.log",
    benchmark:
        "benchmarks/collect_clock_sweep/{gpu}.tsv"
    conda:
        CONDA_ENV
    message:
        "Collecting the clock sweep on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime.collect.clock --out {output} --runs {params.runs} "
        "--hold-s {params.hold} --cool-s {params.cool} > {log} 2>&1"


# Profile the GEMM kernels of the m ladder with Nsight Compute on one GPU.
rule collect_ncu_gemm:
    output:
        "raw/telemetry/ncu/{gpu}/gemm_counters.csv",
    params:
        m=COLLECT["ncu"]["m"],
        shapes=COLLECT["ncu"]["shapes"],
        clock=COLLECT["ncu"]["clock_control"],
    resources:
        gpu_model=lambda wc: COLLECT["gpus"][wc.gpu]["gres"],
        slurm_extra=lambda wc: f"'--gres=gpu:{COLLECT['gpus'][wc.gpu]['gres']}:1 --exclusive'",
    log:
        "logs/collect_ncu_gemm/{gpu}.log",
    benchmark:
        "benchmarks/collect_ncu_gemm/{gpu}.tsv"
    conda:
        CONDA_ENV
    message:
        "Collecting Nsight Compute GEMM counters on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime.collect.ncu --out {output} --m {params.m} --shapes {params.shapes} "
        "--clock-control {params.clock} > {log} 2>&1"


# E1.5: reduce the ncu counters of every collected GPU to the five-factor waterfall.
rule E1_5:
    input:
        counters=lambda wc: sorted(glob.glob("raw/telemetry/ncu/*/gemm_counters.csv")),
        code=lib("collect", "results", "plotting"),
    output:
        result="results/E1_5.json",
        **figure("fig", "figures/E1_5_waterfall"),
    params:
        question=question("E1.5"),
    log:
        "logs/E1_5.log",
    benchmark:
        "benchmarks/E1_5.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.5: five-factor waterfall from Nsight Compute counters"
    script:
        "../scripts/E1_5.py"


# E1.10: reduce the clock sweeps to sustained clock vs m with 95% intervals.
rule E1_10:
    input:
        sweeps=lambda wc: sorted(glob.glob("raw/telemetry/clock/*/clock_sweep.csv")),
        code=lib("collect", "results", "plotting"),
    output:
        result="results/E1_10.json",
        **figure("fig", "figures/E1_10_clock"),
    params:
        question=question("E1.10"),
        seed=config["seed"],
    log:
        "logs/E1_10.log",
    benchmark:
        "benchmarks/E1_10.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.10: sustained clock under GEMM load vs m"
    script:
        "../scripts/E1_10.py"
