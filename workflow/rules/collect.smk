# GPU telemetry: collection rules (need a GPU node; run them with --profile profiles/pace)
# (the reductions of E1.5 and E1.10 run with the other awaiting experiments in telemetry.smk).
# COLLECT: config/collect.yaml, validated in common.smk.


# Sweep the sustained SM clock under GEMM load on one GPU (n randomised runs).
rule collect_clock_sweep:
    output:
        "raw/telemetry/clock/{gpu}/clock_sweep.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        runs=COLLECT["clock_sweep"]["runs"],
        hold=COLLECT["clock_sweep"]["hold_s"],
        cool=COLLECT["clock_sweep"]["cool_s"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_clock_sweep/{gpu}.log",
    benchmark:
        "benchmarks/collect_clock_sweep/{gpu}.tsv"
    conda:
        CONDA_ENV
    message:
        "Collecting the clock sweep on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.clock --out {output:q} --runs {params.runs:q} "
        "--hold-s {params.hold:q} --cool-s {params.cool:q} > {log:q} 2>&1"


# Profile the GEMM kernels of the m ladder with Nsight Compute on one GPU.
rule collect_ncu_gemm:
    output:
        "raw/telemetry/ncu/{gpu}/gemm_counters.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        m=COLLECT["ncu"]["m"],
        shapes=COLLECT["ncu"]["shapes"],
        clock=COLLECT["ncu"]["clock_control"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_ncu_gemm/{gpu}.log",
    benchmark:
        "benchmarks/collect_ncu_gemm/{gpu}.tsv"
    conda:
        CONDA_ENV
    message:
        "Collecting Nsight Compute GEMM counters on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.ncu --out {output:q} --m {params.m:q} --shapes {params.shapes:q} "
        "--clock-control {params.clock:q} > {log:q} 2>&1"
