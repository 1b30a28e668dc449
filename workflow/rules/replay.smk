# E2.11b (issue 13, helper R): the E2.11 token-time rows replayed through the serving simulator
# (closed loop at each row's concurrency), beside E2.11's one-step approximation. Simulated.
rule E2_11b:
    input:
        mlenergy_v2="results/data/mlenergy_v2.parquet",
        mlenergy_v3="results/data/mlenergy_v3.parquet",
        silicon="results/data/aic_silicon.parquet",
        constants=rules.R2_3.output.constants,
        one_step=rules.E2_11.output.result,
        settled=SETTLED_ALL,  # this run's settled constants (declared inputs)
        code=lib("experiments/replay", "experiments/wallclock", "serve", "step", "terms", "specs", "calibration",
                 "metrics", "results", "plotting"),
    output:
        result="results/E2_11b.json",
        fig="figures/E2_11b_replay.png",
    params:
        question=EXPERIMENTS["E2.11b"]["question"],
        targets=EXPERIMENTS["E2.11b"]["targets"],
        settings=EXPERIMENTS["E2.11b"]["settings"],
        prompt_tokens=EXPERIMENTS["E2.11"]["settings"]["prompt_tokens"],
        seed=config["seed"],
        bootstrap=config["bootstrap"],
    log:
        "logs/E2_11b.log",
    conda:
        CONDA_ENV
    message:
        "E2.11b token time by closed-loop replay on the serving simulator (simulated) beside E2.11's one step"
    script:
        "../scripts/E2_11b.py"
