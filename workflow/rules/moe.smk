# Mixture of experts (issue 20): the fused-MoE kernel term (E3.1) and the expert-parallel all-to-all
# (E3.2), both held out per GPU on AIConfigurator's vLLM tables, and the constants they settle
# (results/calibration/moe.yaml, shipped as src/steptime/calibration/moe.yaml).


from steptime_lab.experiments.moe_parts import ENGINES as E3_1_ENGINES, JOB_ORDER as E3_1_JOB_ORDER


# E3.1's work, one job per engine (wave 40): the engine's own fused-MoE tables held out by GPU (moe.run), written as a
# part (its run and the sha256 of each input) that the rule E3_1 merges; the engines run on as many cores as there are.
rule E3_1_engine:
    input:
        registered=registered_raw("E3.1"),
        data=tidy("moe"),
        code=code_of("E3_1_moe_engine"),
    output:
        part="results/cache/E3_1_{engine}.pkl.zst",
    wildcard_constraints:
        engine=one_of(E3_1_ENGINES),
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E3_1_engine/{engine}.log",
    benchmark:
        "benchmarks/E3_1_engine/{engine}.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.1 fused-MoE kernel term held out per GPU and dtype on {wildcards.engine}'s own tables"
    script:
        "../scripts/E3_1_moe_engine.py"


# E3.1: fused-MoE kernel law per dtype held out by GPU, three bf16 readings of its own; naive dense-GEMM baseline.
# The merge of the engines' parts (E3_1_engine): the result, the constants and the figure, as one process wrote them.
rule E3_1:
    input:
        registered=registered_raw("E3.1"),
        data=tidy("moe"),
        parts=expand(rules.E3_1_engine.output.part, engine=E3_1_JOB_ORDER),  # the longest first
        code=code_of("E3_1_moe_kernel"),
    output:
        result="results/E3_1.json",
        constants="results/calibration/moe_kernel.yaml",
        **figure("fig", "figures/E3_1_moe_kernel"),
    params:
        question=question("E3.1"),
        target_pct=targets("E3.1").get("mape_pct_max"),
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E3_1.log",
    benchmark:
        "benchmarks/E3_1.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.1 fused-MoE kernel term: the engines' parts documented"
    script:
        "../scripts/E3_1_moe_kernel.py"


# E3.2: DeepEP all-to-all (low-latency and high-throughput) held out by GPU, three readings of its own.
rule E3_2:
    input:
        registered=registered_raw("E3.2"),
        data=tidy("moe_a2a"),
        trtllm=tidy("moe_a2a_trtllm"),
        code=code_of("E3_2_moe_a2a"),
    output:
        result="results/E3_2.json",
        constants="results/calibration/moe_a2a.yaml",
        **figure("fig", "figures/E3_2_moe_a2a"),
    params:
        question=question("E3.2"),
        target_pct=targets("E3.2").get("mape_pct_max"),
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E3_2.log",
    benchmark:
        "benchmarks/E3_2.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.2 expert-parallel all-to-all held out per GPU and mode"
    script:
        "../scripts/E3_2_moe_a2a.py"


# E3.3: DeepSeek-V3's MLA attention module from steptime's MLA terms held out by GPU (constants from the other
# GPUs' module and mla_bmm rows, the module floor per path read on the GPU itself); settles the MLA constants.
rule E3_3:
    input:
        registered=registered_raw("E3.3"),
        gen=tidy("mla_generation"),
        ctx=tidy("mla_context"),
        bmm=tidy("mla_bmm"),
        code=code_of("E3_3_mla"),
    output:
        result="results/E3_3.json",
        constants="results/calibration/moe_mla.yaml",
        **figure("fig", "figures/E3_3_mla"),
    params:
        question=question("E3.3"),
        target_pct=targets("E3.3").get("mape_pct_max"),
    threads: 1
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/E3_3.log",
    benchmark:
        "benchmarks/E3_3.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.3 MLA attention module from steptime's MLA terms"
    script:
        "../scripts/E3_3_mla.py"


# The shipped MoE constants: E3.1's, E3.2's and E3.3's fragments merged (copy to src/steptime/calibration/moe.yaml).
rule settle_moe_constants:
    input:
        kernel=rules.E3_1.output.constants,
        a2a=rules.E3_2.output.constants,
        mla=rules.E3_3.output.constants,
        code=code_of("settle_moe_constants"),
    output:
        constants="results/calibration/moe.yaml",
    priority: 40  # main job: critical path first (see Snakefile)
    log:
        "logs/settle_moe_constants.log",
    benchmark:
        "benchmarks/settle_moe_constants.tsv"
    conda:
        CONDA_ENV
    message:
        "MoE constants settled from E3.1, E3.2 and E3.3"
    script:
        "../scripts/settle_moe_constants.py"


# E3.5: what expert parallelism buys (simulated): decode tokens/s per GPU by layout, and the limiting term.
rule E3_5:
    input:
        registered=registered_raw("E3.5"),
        constants=rules.settle_moe_constants.output.constants,
        code=code_of("E3_5_expert_parallel"),
    output:
        result="results/E3_5.json",
        **figure("fig", "figures/E3_5_ep"),
    params:
        question=question("E3.5"),
        settings=settings("E3.5"),
    threads: 1
    log:
        "logs/E3_5.log",
    benchmark:
        "benchmarks/E3_5.tsv"
    conda:
        CONDA_ENV
    message:
        "E3.5 what expert parallelism buys (simulated)"
    script:
        "../scripts/E3_5_expert_parallel.py"
