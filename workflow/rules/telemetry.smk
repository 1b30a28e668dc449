# GPU telemetry of issue 14: collection rules (GPU node; `--profile profiles/pace`) and the
# reductions of the experiments that await it (E1.3b, E1.5-E1.10, E1.14, E1.15, E1.17, E2.8); E1.19 is built on the
# vendored FPM steps and any collected step traces by its own rule (E1_19, at the end of this file).
# A reduction builds once its telemetry is in raw/telemetry/ (rule all: registry `raw:` present).
# COLLECT: config/collect.yaml, validated (and its GPU and model names checked) in common.smk.


# every collected file matching a raw/telemetry glob (one per GPU), sorted
_telemetry = lambda pattern: sorted(glob.glob(pattern))


TELEMETRY = {
    # ID: (telemetry glob, figure stem)
    "E1.5": ("raw/telemetry/ncu/*/gemm_counters.csv", "E1_5_waterfall"),
    "E1.10": ("raw/telemetry/clock/*/clock_sweep.csv", "E1_10_clock"),
    "E1.3b": ("raw/telemetry/gemm_sweep/*/l2.csv", "E1_3b_l2_sweep"),
    "E1.6": ("raw/telemetry/clock/*/maxq_sweep.csv", "E1_6_maxq"),
    "E1.7": ("raw/telemetry/clock/*/clock_sweep.csv", "E1_7_droop"),
    "E1.8": ("raw/telemetry/clock/*/lock_control.csv", "E1_8_lock"),
    "E1.9": ("raw/telemetry/clock/*/cap_sweep.csv", "E1_9_cap_chain"),
    "E1.14": ("raw/telemetry/gemm_sweep/*/duty.csv", "E1_14_duty"),
    "E1.15": ("raw/telemetry/gemm_sweep/l40s/duty.csv", "E1_15_barrier"),
    "E1.17": ("raw/telemetry/engine_kernels/*/ncu.csv", "E1_17_engine_kernels"),
    "E2.8": ("raw/telemetry/clock/*/cap_sweep.csv", "E2_8_placement"),
}


# Clock sweep under power caps (E1.9, E2.8): changes the power limit, so it passes --allow-set-power
# explicitly; the collector restores the previous limit on exit, error or signal.
rule collect_cap_sweep:
    output:
        "raw/telemetry/clock/{gpu}/cap_sweep.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        runs=COLLECT["cap_sweep"]["runs"],
        caps=lambda wc: ",".join(str(c) for c in COLLECT["gpus"][wc.gpu].get("caps_w", [])),
        m=COLLECT["cap_sweep"]["m"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_cap_sweep/{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting the power-cap clock sweep on {wildcards.gpu} (GPU node, power limit restored after)"
    shell:
        "python -m steptime_collect.clock --out {output:q} --runs {params.runs:q} --m {params.m:q} "
        "--caps {params.caps:q} --allow-set-power > {log:q} 2>&1"


# Free-running vs locked SM clock (E1.8); the lock is reset on exit.
rule collect_lock_control:
    output:
        "raw/telemetry/clock/{gpu}/lock_control.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        runs=COLLECT["lock_control"]["runs"],
        lock=lambda wc: COLLECT["gpus"][wc.gpu].get("lock_mhz", ""),
        m=COLLECT["lock_control"]["m"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_lock_control/{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting the locked-clock control on {wildcards.gpu} (GPU node, clocks reset after)"
    shell:
        "python -m steptime_collect.clock --out {output:q} --runs {params.runs:q} --m {params.m:q} "
        "--lock-mhz none,{params.lock:q} --allow-lock-clocks > {log:q} 2>&1"


# The Blackwell Max-Q clock sweep (E1.6): the card as found, no setting changed.
rule collect_maxq_sweep:
    output:
        "raw/telemetry/clock/{gpu}/maxq_sweep.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        runs=COLLECT["clock_sweep"]["runs"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_maxq_sweep/{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting the Max-Q clock sweep on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.clock --out {output:q} --runs {params.runs:q} > {log:q} 2>&1"


# GEMM latency sweeps: the dense m ladder (plan duty: E1.14, E1.15) and L2 working sets (plan l2: E1.3b).
rule collect_gemm_sweep:
    output:
        "raw/telemetry/gemm_sweep/{gpu}/{plan}.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
        plan=one_of(["duty", "l2"]),
    params:
        repeats=COLLECT["gemm_sweep"]["repeats"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_gemm_sweep/{gpu}_{plan}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting the {wildcards.plan} GEMM sweep on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.gemm_sweep --plan {wildcards.plan:q} --gpu {wildcards.gpu:q} "
        "--repeats {params.repeats:q} --out {output:q} > {log:q} 2>&1"


# cuBLASLt's dispatch log over the dense m ladder (tiles, stages, clusters; E1.14).
rule collect_dispatch_log:
    output:
        "raw/telemetry/dispatch/{gpu}/cublaslt.log",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_dispatch_log/{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting cuBLASLt's dispatch log on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.dispatch --gpu {wildcards.gpu:q} --out {output:q} > {log:q} 2>&1"


# Nsight Compute over a short eager decode run: the engine's own kernels (E1.17).
rule collect_engine_kernels:
    output:
        "raw/telemetry/engine_kernels/{gpu}/ncu.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        model=COLLECT["steptrace"]["model"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_engine_kernels/{gpu}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting engine-kernel counters on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.engine_kernels --model {params.model:q} --gpu {wildcards.gpu:q} --out {output:q} "
        "> {log:q} 2>&1"


# Per-step wall time of a serving engine with each step's composition, FPM layout (E1.19).
rule collect_steptrace:
    input:
        traces=tidy("traces"),
    output:
        "raw/telemetry/steptrace/{gpu}/{model}.csv",
    wildcard_constraints:
        gpu=COLLECT_GPUS,
    params:
        trace=COLLECT["steptrace"]["trace"],
        requests=COLLECT["steptrace"]["requests"],
    resources:
        gpu_model=collect_gpu_model,
        slurm_extra=COLLECT_SLURM_EXTRA,
    log:
        "logs/collect_steptrace/{gpu}_{model}.log",
    conda:
        CONDA_ENV
    message:
        "Collecting a serving step trace of {wildcards.model} on {wildcards.gpu} (GPU node)"
    shell:
        "python -m steptime_collect.steptrace --model {wildcards.model:q} --trace {params.trace:q} "
        "--traces-table {input.traces:q} --requests {params.requests:q} --out {output:q} > {log:q} 2>&1"


# The reductions: one rule per awaiting experiment, all through one thin script.
for _eid, (_tglob, _stem) in TELEMETRY.items():

    rule:
        name:
            f"telemetry_{_eid.replace('.', '_')}"
        input:
            registered=registered_raw(_eid),
            telemetry=_telemetry(_tglob),
            dispatch=_telemetry("raw/telemetry/dispatch/*/cublaslt.log") if _eid == "E1.14" else [],
            code=code_of("telemetry_experiment"),
        output:
            result=f"results/{_eid.replace('.', '_')}.json",
            **figure("fig", f"figures/{_stem}"),
        params:
            id=_eid,
            question=question(_eid),
            seed=config["seed"],
            bootstrap=config["bootstrap"],
        log:
            f"logs/{_eid.replace('.', '_')}.log",
        conda:
            CONDA_ENV
        message:
            f"{_eid}: reducing the collected GPU telemetry"
        script:
            "../scripts/telemetry_experiment.py"


# E1.19: the host-floor learner on real engine steps: the tidy FPM table (AIConfigurator's vendored vLLM steps)
# and every collected step trace in the same layout (raw/telemetry/steptrace/<gpu>/<model>.csv, none yet),
# read by one code path (steptime_lab.experiments.host.learner); R2.3's three-reading constants as a side-by-side arm.
rule E1_19:
    input:
        registered=registered_raw("E1.19"),
        fpm=tidy("fpm_steps"),
        steptrace=_telemetry("raw/telemetry/steptrace/*/*.csv"),
        constants=rules.R2_3.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E1_19_host_learner"),
    output:
        result="results/E1_19.json",
        **figure("fig", "figures/E1_19_host_learner"),
    params:
        question=question("E1.19"),
        settings=settings("E1.19"),
        round1=EXPERIMENTS.get("E1.19", {}).get("round1"),
        seed=config["seed"],
    threads: 1
    log:
        "logs/E1_19.log",
    benchmark:
        "benchmarks/E1_19.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.19: online host-floor learner (frozen at deploy) vs the shipped profile, stationary and shift"
    script:
        "../scripts/E1_19_host_learner.py"
