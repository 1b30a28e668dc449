# Ingest: every source in raw/ (listed in raw/MANIFEST.yaml) becomes one tidy, checked table
# under results/data/, through the loaders in steptime.data; plus a coverage figure.
import collections
import yaml as _yaml

# raw files per manifest table (read once, at parse time), each list ending with the manifest;
# without a manifest every rule just asks for raw/MANIFEST.yaml (and says so when run).
RAW_MANIFEST = "raw/MANIFEST.yaml"
_RAW_FILES = (
    _yaml.safe_load(Path(RAW_MANIFEST).read_text())["files"]
    if Path(RAW_MANIFEST).exists()
    else []
)
RAW = collections.defaultdict(
    lambda: [RAW_MANIFEST],
    {
        _t: sorted(_f["path"] for _f in _RAW_FILES if _f.get("table") == _t)
        + [RAW_MANIFEST]
        for _t in sorted({_f.get("table") for _f in _RAW_FILES})
    },
)
DATA_LIB = lib("data", "specs", "errors", "io")


# bf16 GEMM latencies (AIConfigurator, vLLM), flagged where faster than HBM allows.
rule data_gemm:
    input:
        raw=RAW["aic_gemm"],
        lib=DATA_LIB,
    output:
        table="results/data/gemm.parquet",
    params:
        table="gemm",
    log:
        "logs/data/gemm.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting AIConfigurator GEMM tables into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Prefill attention latencies (AIConfigurator), duplicates collapsed by median.
rule data_attention_context:
    input:
        raw=RAW["aic_context_attention"],
        lib=DATA_LIB,
    output:
        table="results/data/attention_context.parquet",
    params:
        table="attention_context",
    log:
        "logs/data/attention_context.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting AIConfigurator context-attention tables into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Decode attention latencies (AIConfigurator) with KV length kv_len = isl + step.
rule data_attention_generation:
    input:
        raw=RAW["aic_generation_attention"],
        lib=DATA_LIB,
    output:
        table="results/data/attention_generation.parquet",
    params:
        table="attention_generation",
    log:
        "logs/data/attention_generation.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting AIConfigurator generation-attention tables into {output.table}"
    script:
        "../scripts/ingest_table.py"


# fp8 scale_matrix latencies (AIConfigurator): a streaming-bandwidth microbenchmark.
rule data_scale_matrix:
    input:
        raw=RAW["aic_scale_matrix"],
        lib=DATA_LIB,
    output:
        table="results/data/scale_matrix.parquet",
    params:
        table="scale_matrix",
    log:
        "logs/data/scale_matrix.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting AIConfigurator scale_matrix tables into {output.table}"
    script:
        "../scripts/ingest_table.py"


# NCCL and vLLM custom all-reduce latencies per message size (AIConfigurator).
rule data_allreduce:
    input:
        raw=RAW["aic_nccl_allreduce"] + RAW["aic_custom_allreduce"][:-1],
        lib=DATA_LIB,
    output:
        table="results/data/allreduce.parquet",
    params:
        table="allreduce",
    log:
        "logs/data/allreduce.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting AIConfigurator all-reduce tables into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Vidur per-operator layer times, long format (one row per gpu, model, tp, tokens, op).
rule data_vidur_mlp:
    input:
        raw=RAW["vidur_mlp"],
        lib=DATA_LIB,
    output:
        table="results/data/vidur_mlp.parquet",
    params:
        table="vidur_mlp",
    log:
        "logs/data/vidur_mlp.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting Vidur mlp.csv profiles into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Vidur host-side time per engine step (the scheduler floor S(N) as measured).
rule data_vidur_cpu_overheads:
    input:
        raw=RAW["vidur_cpu_overheads"],
        lib=DATA_LIB,
    output:
        table="results/data/vidur_cpu_overheads.parquet",
    params:
        table="vidur_cpu_overheads",
    log:
        "logs/data/vidur_cpu_overheads.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting Vidur cpu_overheads into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Request length traces (Splitwise conversation/code, arXiv summarization).
rule data_traces:
    input:
        raw=RAW["vidur_trace"],
        lib=DATA_LIB,
    output:
        table="results/data/traces.parquet",
    params:
        table="traces",
    log:
        "logs/data/traces.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting request traces into {output.table}"
    script:
        "../scripts/ingest_table.py"


# DistServe's fitted step-latency coefficients (A100-80GB, OPT models).
rule data_distserve:
    input:
        raw=RAW["distserve_coefficients"],
        lib=DATA_LIB,
    output:
        table="results/data/distserve.parquet",
    params:
        table="distserve",
    log:
        "logs/data/distserve.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting DistServe latency-model coefficients into {output.table}"
    script:
        "../scripts/ingest_table.py"


# DistServe's KV-cache capacity estimate per (model, tp, pp).
rule data_distserve_max_num_tokens:
    input:
        raw=RAW["distserve_max_num_tokens"],
        lib=DATA_LIB,
    output:
        table="results/data/distserve_max_num_tokens.parquet",
    params:
        table="distserve_max_num_tokens",
    log:
        "logs/data/distserve_max_num_tokens.log",
    conda:
        CONDA_ENV
    message:
        "Ingesting DistServe max_num_tokens into {output.table}"
    script:
        "../scripts/ingest_table.py"


# Coverage of the measured data: GPU x operator family, row counts and shape ranges.
rule data_coverage:
    input:
        gemm=rules.data_gemm.output.table,
        attention_context=rules.data_attention_context.output.table,
        attention_generation=rules.data_attention_generation.output.table,
        scale_matrix=rules.data_scale_matrix.output.table,
        allreduce=rules.data_allreduce.output.table,
        vidur_mlp=rules.data_vidur_mlp.output.table,
        vidur_cpu_overheads=rules.data_vidur_cpu_overheads.output.table,
        # wall-clock tables and fp8 GEMMs (workflow/rules/wallclock_data.smk)
        gemm_fp8="results/data/gemm_fp8.parquet",
        fpm_steps="results/data/fpm_steps.parquet",
        servingsim_requests="results/data/servingsim_requests.parquet",
        mlenergy_v2="results/data/mlenergy_v2.parquet",
        mlenergy_v3="results/data/mlenergy_v3.parquet",
        aic_silicon="results/data/aic_silicon.parquet",
        lib=lib("plotting", "specs"),
    output:
        png="figures/data_coverage.png",
        pdf="figures/data_coverage.pdf",
        caption="figures/data_coverage.caption.txt",
    log:
        "logs/data/data_coverage.log",
    conda:
        CONDA_ENV
    message:
        "Drawing the data coverage figure {output.png}"
    script:
        "../scripts/data_coverage.py"


DATA_TARGETS = [
    rules.data_gemm.output.table,
    rules.data_attention_context.output.table,
    rules.data_attention_generation.output.table,
    rules.data_scale_matrix.output.table,
    rules.data_allreduce.output.table,
    rules.data_vidur_mlp.output.table,
    rules.data_vidur_cpu_overheads.output.table,
    rules.data_traces.output.table,
    rules.data_distserve.output.table,
    rules.data_distserve_max_num_tokens.output.table,
    rules.data_coverage.output.png,
    rules.data_coverage.output.pdf,
]
