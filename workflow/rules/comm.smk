# Tensor parallelism and precision (issue 11): the all-reduce term per GPU and implementation
# (E1.25, AIConfigurator's NCCL and vLLM custom all-reduce tables), fp8 W8A8 projection GEMMs
# (E1.27, AIConfigurator's fp8 GEMM tables), both held out per GPU, and the constants they
# settle (defaults.yaml allreduce_curve and gemm_fp8_rel).

COMM_LIB = lib("terms/comm", "experiments/__init__", "experiments/comm", "calibration/__init__", "results",
               "plotting", "specs", "io", "errors")


# E1.25: all-reduce law (floor + bus bytes over achieved bus bandwidth, per protocol regime).
rule E1_25:
    input:
        data=rules.data_allreduce.output.table,
        code=COMM_LIB,
    output:
        result="results/E1_25.json",
        fig="figures/E1_25_allreduce.png",
    params:
        question=EXPERIMENTS["E1.25"]["question"],
        target_pct=EXPERIMENTS["E1.25"]["targets"]["mape_pct_max"],
    log:
        "logs/E1_25.log",
    conda:
        CONDA_ENV
    message:
        "E1.25 all-reduce term held out per GPU (NCCL and vLLM custom all-reduce)"
    script:
        "../scripts/E1_25.py"


# E1.27: fp8 W8A8 GEMMs held out per GPU (bf16 GEMM fold + datasheet fp8 peak + fp8 factors of other GPUs).
rule E1_27:
    input:
        fp8="results/data/gemm_fp8.parquet",
        bf16=rules.data_gemm.output.table,
        gemm_constants=rules.settle_gemm_constants.output.constants,
        code=lib("terms", "experiments/__init__", "experiments/precision", "experiments/gemm", "evaluate",
                 "calibration/__init__", "results", "plotting", "specs", "io", "errors"),
    output:
        result="results/E1_27.json",
        fig="figures/E1_27_fp8_gemm.png",
    params:
        question=EXPERIMENTS["E1.27"]["question"],
        target_pct=EXPERIMENTS["E1.27"]["targets"]["mape_pct_max"],
        seed=config["seed"],
    log:
        "logs/E1_27.log",
    conda:
        CONDA_ENV
    message:
        "E1.27 fp8 W8A8 projection GEMMs held out per GPU"
    script:
        "../scripts/E1_27.py"


# Write E1.25's and E1.27's constants into defaults.yaml (after the other writers).
rule comm_constants:
    input:
        e1_25=rules.E1_25.output.result,
        e1_27=rules.E1_27.output.result,
        step=rules.step_constants.output.stamp,  # serialises the writes to defaults.yaml
    output:
        stamp="results/constants/comm.json",
    log:
        "logs/comm_constants.log",
    conda:
        CONDA_ENV
    message:
        "Writing the all-reduce constants of E1.25 into src/steptime/calibration/defaults.yaml"
    script:
        "../scripts/comm_constants.py"
