# Mixture of experts on the wall clock (issue 20): after wallclock.smk (R2.3's engine constants) and moe.smk
# (the settled MoE constants).


# E3.4: MoE wall clock: silicon / ML.ENERGY v3 token times as the mixed steps the engine runs, LLMServingSim's MoE run
# replayed like E2.10, the FPM MoE runs scored where representable (refused with steptime's line where not).
rule E3_4:
    input:
        registered=registered_raw("E3.4"),
        silicon=tidy("aic_silicon"),
        mlenergy_v3=tidy("mlenergy_v3"),
        requests=tidy("servingsim_requests"),
        fpm_moe=tidy("fpm_moe_steps"),
        model_configs="raw/aiconfigurator/model_configs",
        constants=rules.R2_3.output.constants,
        moe=rules.settle_moe_constants.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E3_4_moe_wallclock"),
    output:
        result="results/E3_4.json",
        **figure("fig", "figures/E3_4_moe_wallclock"),
    params:
        question=question("E3.4"),
        targets=targets("E3.4"),
        settings=settings("E3.4"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    priority: 7  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E3_4.log",
    benchmark:
        "benchmarks/E3_4.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.4 MoE wall clock: token times, the LLMServingSim MoE replay, the FPM MoE runs"
    script:
        "../scripts/E3_4_moe_wallclock.py"
