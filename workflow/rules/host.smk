# Host floor (issue 5): E1.4, the scheduler floor S(N) = a + b(N-1) and its parts.


# E1.4: host floor S(N) = a + b(N-1) and its parts on Vidur's cpu_overheads.
rule E1_4:
    input:
        registered=registered_raw("E1.4"),
        data=tidy("vidur_cpu_overheads"),
        settled=rules.settle_gemm_constants.output.settled,
        code=code_of("E1_4_host_floor"),
    output:
        result="results/E1_4.json",
        **figure("fig", "figures/E1_4_host"),
    params:
        question=question("E1.4"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E1_4.log",
    benchmark:
        "benchmarks/E1_4.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.4 host floor and its parts against the GPU work of a decode step"
    script:
        "../scripts/E1_4_host_floor.py"
