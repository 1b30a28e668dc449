# Serving simulation (issue 13): the Part-2 integrations rebuilt on steptime.serve. Every
# outcome of these rules is simulated (scheduler model + predicted step times) and says so.


# E2.9: Sarathi chunk sizing for a TBT SLO: steptime's pick vs static 512/2048 vs the simulated oracle.
rule E2_9:
    input:
        registered=registered_raw("E2.9"),
        traces=tidy("traces"),
        code=code_of("E2_9_chunk_budget"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_9.json",
        **figure("fig", "figures/E2_9_chunk"),
    params:
        question=question("E2.9"),
        settings=settings("E2.9"),
        targets=targets("E2.9"),
    threads: 1
    priority: 5  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E2_9.log",
    benchmark:
        "benchmarks/E2_9.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.9 Sarathi chunk sizing on the serving simulator (simulated)"
    script:
        "../scripts/E2_9_chunk_budget.py"


# E2.4: prefill/decode pool sizing, steptime vs DistServe's own fitted model driving the same simulator.
rule E2_4:
    input:
        registered=registered_raw("E2.4"),
        traces=tidy("traces"),
        coefficients=tidy("distserve"),
        max_tokens=tidy("distserve_max_num_tokens"),
        code=code_of("E2_4_pools"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_4.json",
        **figure("fig", "figures/E2_4_pools"),
    params:
        question=question("E2.4"),
        settings=settings("E2.4"),
        targets=targets("E2.4"),
    threads: 1
    log:
        "logs/E2_4.log",
    benchmark:
        "benchmarks/E2_4.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.4 disaggregated pool sizing: steptime vs DistServe's fitted model (simulated)"
    script:
        "../scripts/E2_4_pools.py"


# E2.10: end-to-end replay of LLMServingSim's real vLLM 0.19 runs (same arrivals), per-request TTFT/TPOT/e2e.
rule E2_10:
    input:
        registered=registered_raw("E2.10"),
        requests=tidy("servingsim_requests"),
        llmservingsim=tidy("servingsim_sim"),  # LLMServingSim's own simulated replay, scored beside steptime's
        code=code_of("E2_10_replay"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_10.json",
        **figure("fig", "figures/E2_10_replay"),
    params:
        question=question("E2.10"),
        settings=settings("E2.10"),
        targets=targets("E2.10"),
    threads: 1
    log:
        "logs/E2_10.log",
    benchmark:
        "benchmarks/E2_10.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.10 replay of real vLLM runs through the serving simulator"
    script:
        "../scripts/E2_10_replay.py"


# E2.3: QLM-style deadline queue with steptime's waiting-time estimate vs a scalar one, under contention.
rule E2_3:
    input:
        registered=registered_raw("E2.3"),
        traces=tidy("traces"),
        code=code_of("E2_3_deadlines"),
        settled=SETTLED_ALL,
    output:
        result="results/E2_3.json",
        **figure("fig", "figures/E2_3_deadlines"),
    params:
        question=question("E2.3"),
        settings=settings("E2.3"),
        targets=targets("E2.3"),
    threads: 1
    log:
        "logs/E2_3.log",
    benchmark:
        "benchmarks/E2_3.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.3 deadline queue: steptime vs scalar waiting-time estimate (simulated)"
    script:
        "../scripts/E2_3_deadlines.py"
