# Tensor parallelism (issue 11): the all-reduce term per GPU and implementation (E1.25), held
# out per GPU on AIConfigurator's NCCL and vLLM custom all-reduce tables, and the constants
# it settles for the engines (defaults.yaml allreduce_curve per GPU).

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


# Write E1.25's per-GPU all-reduce constants into defaults.yaml (after the other writers).
rule comm_constants:
    input:
        e1_25=rules.E1_25.output.result,
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
