# Tensor parallelism and precision (issue 11): the all-reduce term per GPU and implementation
# (E1.25, AIConfigurator's NCCL and vLLM custom all-reduce tables), fp8 W8A8 projection GEMMs
# (E1.27, AIConfigurator's fp8 GEMM tables), both held out per GPU, and the constants they
# settle (results/calibration/comm.yaml: allreduce_curve and gemm_fp8_rel).

# E1.25: all-reduce law (floor + bus bytes over achieved bus bandwidth, per protocol regime).
rule E1_25:
    input:
        registered=registered_raw("E1.25"),
        data=tidy("allreduce"),
        code=code_of("E1_25_allreduce"),
    output:
        result="results/E1_25.json",
        **figure("fig", "figures/E1_25_allreduce"),
    params:
        question=question("E1.25"),
        target_pct=targets("E1.25").get("mape_pct_max"),
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E1_25.log",
    benchmark:
        "benchmarks/E1_25.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.25 all-reduce term held out per GPU (NCCL and vLLM custom all-reduce)"
    script:
        "../scripts/E1_25_allreduce.py"


# E1.27: fp8 W8A8 GEMMs held out per GPU (bf16 GEMM fold + datasheet fp8 peak + fp8 factors of other GPUs),
# per engine (vLLM's, TensorRT-LLM's and SGLang's own fp8 tables; issue 19).
rule E1_27:
    input:
        registered=registered_raw("E1.27"),
        fp8=tidy("gemm_fp8"),
        bf16=tidy("gemm"),
        engines=tidy("gemm_engines"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_27_fp8_gemm"),
    output:
        result="results/E1_27.json",
        **figure("fig", "figures/E1_27_fp8_gemm"),
    params:
        question=question("E1.27"),
        target_pct=targets("E1.27").get("mape_pct_max"),
        seed=config["seed"],
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E1_27.log",
    benchmark:
        "benchmarks/E1_27.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.27 fp8 W8A8 projection GEMMs held out per GPU, per engine"
    script:
        "../scripts/E1_27_fp8_gemm.py"


# The constants E1.25 (all-reduce laws) and E1.27 (fp8 GEMM factors) settle, as a declared output
# (never written into src/; `steptime calibration ship` ships them after gemm.yaml and step.yaml).
rule settle_comm_constants:
    input:
        e1_25=rules.E1_25.output.result,
        e1_27=rules.E1_27.output.result,
        code=code_of("settle_comm_constants"),
    output:
        settled="results/calibration/comm.yaml",
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/settle_comm_constants.log",
    conda:
        CONDA_ENV
    message:
        "Settling the all-reduce (E1.25) and fp8 GEMM (E1.27) constants into {output.settled}"
    script:
        "../scripts/settle_comm_constants.py"


# every settled constants file, in the order they apply (what the wall-clock rules predict with)
SETTLED_ALL = [rules.settle_gemm_constants.output.settled, rules.settle_step_constants.output.settled,
               rules.settle_comm_constants.output.settled]
