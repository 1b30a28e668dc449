# Light kernels (issue 5): E1.1c, launch floor + bytes over achieved bandwidth per kernel.


# E1.1c: per-kernel launch floor + achieved bandwidth on Vidur's light operators.
rule E1_1c:
    input:
        registered=registered_raw("E1.1c"),
        data=tidy("vidur_mlp"),
        scale=tidy("scale_matrix"),  # the row floor law (AIConfigurator's vLLM quantize kernel)
        generation=tidy("attention_generation"),  # kv_write's bandwidth (the prefill tables' KV-cache write)
        context=tidy("attention_context"),
        gemm_constants=rules.settle_gemm_constants.output.constants,
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_1c_light"),
    output:
        result="results/E1_1c.json",
        **figure("fig", "figures/E1_1c_light"),
    params:
        question=question("E1.1c"),
        targets=targets("E1.1c"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1  # one BLAS thread: the fits are deterministic only single-threaded
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E1_1c.log",
    benchmark:
        "benchmarks/E1_1c.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.1c light kernels: floor + bytes/achieved bandwidth, held out per GPU"
    script:
        "../scripts/E1_1c_light.py"
