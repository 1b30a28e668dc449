# Wall clock (issue 11): the engine step inside real serving engines, scored on real engine steps
# (AIConfigurator forward-pass metrics) and token times (ML.ENERGY, AIConfigurator silicon).
# R2.3 reads each (GPU, engine)'s constants from three steps and writes them as a declared output,
# results/calibration/engine_constants.yaml, which every later wall-clock rule takes as an input.

WC_FIT = settings("R2.3").get("fit", {})
WC_PROMPTS = settings("E2.11").get("prompt_tokens", {})
WC_TOKENS = dict(
    mlenergy_v2=tidy("mlenergy_v2"),
    mlenergy_v3=tidy("mlenergy_v3"),
    silicon=tidy("aic_silicon"),
)


# R2.3: engine constants from three wall-clock steps per (GPU, engine); gain and per-operator price.
rule R2_3:
    input:
        registered=registered_raw("R2.3"),
        fpm=tidy("fpm_steps"),
        gemm=tidy("gemm"),
        attn_ctx=tidy("attention_context"),
        attn_gen=tidy("attention_generation"),
        allreduce=tidy("allreduce"),
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("R2_3_wallclock_constants"),
    output:
        result="results/R2_3.json",
        constants="results/calibration/engine_constants.yaml",
        **figure("fig", "figures/R2_3_calibration"),
    params:
        question=question("R2.3"),
        targets=targets("R2.3"),
        settings=settings("R2.3"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    priority: 35  # main job: critical path first (see Snakefile)
    log:
        "logs/R2_3.log",
    benchmark:
        "benchmarks/R2_3.tsv"
    conda:
        CONDA_ENV
    message:
        "R2.3 engine constants from three wall-clock steps; gain over per-operator calibration"
    script:
        "../scripts/R2_3_wallclock_constants.py"


# E1.16: the metric-divergence lesson, read from R2.3's scores (per-operator tables vs held-out wall clock).
rule E1_16:
    input:
        registered=registered_raw("E1.16"),
        r2_3=rules.R2_3.output.result,
        code=code_of("E1_16_divergence"),
    output:
        result="results/E1_16.json",
        **figure("fig", "figures/E1_16_divergence"),
    params:
        question=question("E1.16"),
        targets=targets("E1.16"),
    log:
        "logs/E1_16.log",
    benchmark:
        "benchmarks/E1_16.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.16 the metric-divergence lesson from R2.3's per-operator and wall-clock scores"
    script:
        "../scripts/E1_16_divergence.py"


# E1.26: every FPM step, kernels / shipped profile / three readings / roofline, per phase x TP.
rule E1_26:
    input:
        registered=registered_raw("E1.26"),
        fpm=tidy("fpm_steps"),
        constants=rules.R2_3.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E1_26_wallclock"),
    output:
        result="results/E1_26.json",
        **figure("fig", "figures/E1_26_wallclock"),
    params:
        question=question("E1.26"),
        targets=targets("E1.26"),
        settings={"fit": WC_FIT, **settings("E1.26")},
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    priority: 3  # main job's tail: the longest of the jobs left for the end start first (see Snakefile)
    log:
        "logs/E1_26.log",
    benchmark:
        "benchmarks/E1_26.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.26 real vLLM engine steps predicted vs measured per phase and TP"
    script:
        "../scripts/E1_26_wallclock.py"


# E1.18: exposed host time per engine from the smallest steps.
rule E1_18:
    input:
        registered=registered_raw("E1.18"),
        fpm=tidy("fpm_steps"),
        **WC_TOKENS,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E1_18_exposed_host"),
    output:
        result="results/E1_18.json",
        **figure("fig", "figures/E1_18_exposed_host"),
    params:
        question=question("E1.18"),
        settings={**settings("E1.18"), "prompt_tokens": WC_PROMPTS},
        seed=config["seed"],
    log:
        "logs/E1_18.log",
    benchmark:
        "benchmarks/E1_18.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.18 exposed host time per engine"
    script:
        "../scripts/E1_18_exposed_host.py"


# E1.21: prefill on wall clock across GPUs where the sets hold isolated prefills.
rule E1_21:
    input:
        registered=registered_raw("E1.21"),
        fpm=tidy("fpm_steps"),
        **WC_TOKENS,
        constants=rules.R2_3.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E1_21_prefill"),
    output:
        result="results/E1_21.json",
        **figure("fig", "figures/E1_21_prefill"),
    params:
        question=question("E1.21"),
        targets=targets("E1.21"),
        settings={"fit": WC_FIT},
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    log:
        "logs/E1_21.log",
    benchmark:
        "benchmarks/E1_21.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.21 wall-clock prefill across GPUs"
    script:
        "../scripts/E1_21_prefill.py"


# E2.11: token time as one decode step at the measured mean batch (an approximation of a schedule).
rule E2_11:
    input:
        registered=registered_raw("E2.11"),
        **WC_TOKENS,
        constants=rules.R2_3.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E2_11_token_time"),
    output:
        result="results/E2_11.json",
        **figure("fig", "figures/E2_11_tpot"),
    params:
        question=question("E2.11"),
        targets=targets("E2.11"),
        settings=settings("E2.11"),
        seed=config["seed"],
        n_boot=config["bootstrap"],
    threads: 1
    priority: 35  # main job: critical path first (see Snakefile)
    log:
        "logs/E2_11.log",
    benchmark:
        "benchmarks/E2_11.tsv"
    conda:
        CONDA_ENV
    message:
        "E2.11 TPOT across GPUs and engines (one-step approximation)"
    script:
        "../scripts/E2_11_token_time.py"


# E1.28: what TP costs: measured and predicted per-GPU efficiency at TP 1/2/4/8, and the term that carries the loss.
rule E1_28:
    input:
        registered=registered_raw("E1.28"),
        fpm=tidy("fpm_steps"),
        silicon=tidy("aic_silicon"),
        constants=rules.R2_3.output.constants,
        settled=SETTLED_ALL,  # this run's settled constants (the predictions read them, not src/)
        code=code_of("E1_28_tp_cost"),
    output:
        result="results/E1_28.json",
        **figure("fig", "figures/E1_28_tp_cost"),
    params:
        question=question("E1.28"),
        targets=targets("E1.28"),
        # E2.11's mixed settings: the silicon rows' TPOT predicted as E2.11 predicts it (tp_cost.SILICON_TPOT_NOTE)
        settings={"kv_bucket": WC_FIT.get("kv_bucket", 512), "prompt_tokens": WC_PROMPTS,
                  "mixed": settings("E2.11").get("mixed"),
                  "silicon_claim_form": settings("E1.28").get("silicon_claim_form", "decode_at_concurrency")},
    threads: 1
    log:
        "logs/E1_28.log",
    benchmark:
        "benchmarks/E1_28.tsv"
    conda:
        CONDA_ENV
    message:
        "E1.28 what tensor parallelism costs: per-GPU efficiency at TP 1-8, measured vs predicted"
    script:
        "../scripts/E1_28_tp_cost.py"
