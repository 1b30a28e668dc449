# Serving peers side by side (issue 13, E2.12). Optional: needs the `peers` extra
# (pip install -e '.[peers]', AIConfigurator's aiconfigurator-core==0.12.0). E2.12 is
# registered with status `optional`, so rule all never asks for it; build it by name:
#   snakemake -j1 results/E2_12.json


rule E2_12:
    input:
        registered=registered_raw("E2.12"),
        silicon=tidy("aic_silicon"),
        traces=tidy("traces"),
        coefficients=tidy("distserve"),
        max_tokens=tidy("distserve_max_num_tokens"),
        servingsim_requests=tidy("servingsim_requests"),
        servingsim_timeseries=tidy("servingsim_timeseries"),
        code=code_of("E2_12_serving_peers"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_12.json",
        timing="results/E2_12_timing.json",
        **figure("fig", "figures/E2_12_peers"),
    params:
        question=question("E2.12"),
        settings=settings("E2.12"),
        targets=targets("E2.12"),
    threads: 1
    log:
        "logs/E2_12.log",
    benchmark:
        "benchmarks/E2_12.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.12 serving peers side by side: steptime.serve vs AIConfigurator vs measured; DistServe agreement"
    script:
        "../scripts/E2_12_serving_peers.py"


# E2.13: the planner's simulation against AIC's measured frontiers (GPU held out), and its cost picks.
rule E2_13:
    input:
        registered=registered_raw("E2.13"),
        silicon=tidy("aic_silicon"),
        code=code_of("E2_13_planner"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_13.json",
        **figure("fig", "figures/E2_13_frontier"),
    params:
        question=question("E2.13"),
        settings=settings("E2.13"),
        targets=targets("E2.13"),
    threads: two_threads_if_room
    priority: 10  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E2_13.log",
    benchmark:
        "benchmarks/E2_13.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.13 planner vs measured frontiers (held-out GPU) and cost picks (simulated)"
    script:
        "../scripts/E2_13_planner.py"
