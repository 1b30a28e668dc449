# E2.11b (issue 13, helper R): the E2.11 token-time rows replayed through the serving simulator
# (closed loop at each row's concurrency), beside E2.11's one-step approximation. Simulated.
rule E2_11b:
    input:
        registered=registered_raw("E2.11b"),
        mlenergy_v2=tidy("mlenergy_v2"),
        mlenergy_v3=tidy("mlenergy_v3"),
        silicon=tidy("aic_silicon"),
        constants=rules.R2_3.output.constants,
        one_step=rules.E2_11.output.result,
        settled=SETTLED_ALL,  # this run's settled constants (declared inputs)
        code=code_of("E2_11b_token_replay"),
    output:
        result="results/E2_11b.json",
        **figure("fig", "figures/E2_11b_replay"),
    params:
        question=question("E2.11b"),
        targets=targets("E2.11b"),
        settings=settings("E2.11b"),
        prompt_tokens=WC_PROMPTS,
        seed=config["seed"],
        bootstrap=config["bootstrap"],
    threads: 1
    priority: 30  # main job: critical path first (see Snakefile)
    log:
        "logs/E2_11b.log",
    benchmark:
        "benchmarks/E2_11b.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.11b token time by closed-loop replay on the serving simulator (simulated) beside E2.11's one step"
    script:
        "../scripts/E2_11b_token_replay.py"
