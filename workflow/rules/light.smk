# Light kernels (issue 5): E1.1c, launch floor + bytes over achieved bandwidth per kernel.


# E1.1c: per-kernel launch floor + achieved bandwidth on Vidur's light operators.
rule E1_1c:
    input:
        data=tidy("vidur_mlp"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=STEP_LIB,
    output:
        result="results/E1_1c.json",
        fig="figures/E1_1c_light.png",
    params:
        question=EXPERIMENTS["E1.1c"]["question"],
        seed=config["seed"],
        n_boot=config["bootstrap"],
    log:
        "logs/E1_1c.log",
    conda:
        CONDA_ENV
    message:
        "E1.1c light kernels: floor + bytes/achieved bandwidth, held out per GPU"
    script:
        "../scripts/E1_1c.py"
