#!/usr/bin/env python
"""Vendor the public measured tables the project uses into raw/ and write raw/MANIFEST.yaml.

    python workflow/scripts/vendor_raw.py \
        --aic /tmp/aic/x/aiconfigurator_core          # unpacked wheel dir, or the .whl itself
        --datasets /work/shared/datasets              # holds vidur/, distserve/ and wallclock/
        --out raw

Rows are filtered (never edited): AIConfigurator GEMM tables keep bf16 rows (and, in a
second file, the per-tensor fp8 W8A8 rows; for TensorRT-LLM and SGLang, one file per GPU
with both, issue 19), the NCCL tables keep all_reduce rows; every
other file is copied byte for byte (the wall-clock sets under raw/wallclock/ too). The committed
raw/ is this script's output; rerunning it on the same inputs gives the same bytes.
Get the wheel with `pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

from steptime.io import read_yaml

AIC_VERSION = "0.12.0"
AIC_GPUS = ["a100_sxm", "h100_sxm", "h200_sxm", "l40s", "b200_sxm", "gb200", "b300_sxm", "gb300",
            "rtx_pro_6000_server"]
FRAMEWORK = "vllm"
# the other engines whose GEMM tables are vendored (bf16 and per-tensor fp8 rows): precision is
# a property of the engine's kernels (issue 19 item 5), so each engine's fp8 is fitted on its own
ENGINE_GEMM_FRAMEWORKS = ("trtllm", "sglang")
ENGINE_GEMM_MEASURES = {
    "trtllm": "TensorRT-LLM (PyTorch flow) linear layer, bf16 rows and per-tensor fp8 W8A8 rows (fp8 weights and "
              "activations, bf16 output)",
    "sglang": "SGLang linear layer, bf16 rows (torch linear) and per-tensor fp8 W8A8 rows (sgl-kernel fp8_scaled_mm, "
              "bf16 output)",
}
KV_DTYPES = ("bfloat16", "fp8")
# the Hugging Face config.json copies in the wheel's model_configs/ that src/steptime/specs/moe_models.yaml
# reads its mixture-of-experts shapes from (issue 20), and those whose structure steptime refuses (the reason
# is read from them): vendored byte for byte so a test holds every spec to its config
MODEL_CONFIGS = (
    "deepseek-ai--DeepSeek-V3_config.json", "deepseek-ai--DeepSeek-R1_config.json",
    "nvidia--DeepSeek-V3.1-NVFP4_config.json", "moonshotai--Kimi-K2-Instruct_config.json",
    "moonshotai--Kimi-K2.5_config.json", "Qwen--Qwen3-30B-A3B_config.json", "Qwen--Qwen3-235B-A22B_config.json",
    "openai--gpt-oss-20b_config.json", "openai--gpt-oss-120b_config.json", "mistralai--Mixtral-8x7B-v0.1_config.json",
    "MiniMaxAI--MiniMax-M2.5_config.json", "zai-org--GLM-5_config.json", "Qwen--Qwen3.5-397B-A17B_config.json",
    "Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json", "Qwen--Qwen3-235B-A22B-FP8_config.json",
    # the only config.json of Qwen/Qwen3.6-35B-A3B in the wheel (NVIDIA's NVFP4 repackaging): its text_config's
    # structure is the model's; the FPM runs served the bf16 checkpoint, so its quantization_config is not read
    "nvidia--Qwen3.6-35B-A3B-NVFP4_config.json",
    # Llama 4 (wave 13): multimodal configs whose text_config steptime reads (interleaved MoE, chunked attention)
    "meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json", "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json",
)

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_CPU_COMMIT = "6d98aa8f71696520acc603d87439e77cc78160a7"
DISTSERVE_COMMIT = "82831f1604cc6b10bebd360f6c437a07790dde9f"

AIC_LICENCE = "raw/aiconfigurator/LICENSE"
VIDUR_LICENCE = "raw/vidur/LICENSE"
DISTSERVE_LICENCE = "raw/distserve/LICENSE"

# wall-clock sets (shared/datasets/wallclock/README.md)
AIC_FPM_COMMIT = "abbac647cd87e18557a8cb398b347db2257a6a9a"
AIC_FPM_BRANCH = "simonec/dev-layerwise-collector-clean-base"
AIC_FPM_RUN = "fpm_upfront_qwen32_full_once_20260613_194007"
AIC_FPM_TPS = (1, 2, 4, 8)
AIC_FPM_LICENCE = "raw/wallclock/aic_fpm/LICENSE"
# the hybrid MoE runs (issue 20, wave 12): Qwen/Qwen3.6-35B-A3B, bf16, every TP/EP/DP layout of two run folders
AIC_FPM_MOE_RUNS = ("fpm_upfront_qwen36_moe_full_once_20260613_201336", "fpm_gap_qwen36_dp_ep_official_20260614_025420")
LSS_COMMIT = "5daddb2"
LSS_LICENCE = "raw/wallclock/llmservingsim/LICENSE"
MLE_V2_COMMIT = "c3af7f31e231a2a7021c5f8e2a54dd712d02e6e2"
MLE_V3_COMMIT = "0cd52dab897c5d91a45f4d413038f3b8b4251b0f"
MLE_V2_LICENCE = "raw/wallclock/mlenergy/LICENSE_leaderboard_v2"
MLE_V3_LICENCE = "raw/wallclock/mlenergy/LICENSE_dataset_apache2"
SILICON_LICENCE = "raw/wallclock/aic_silicon/LICENSE"

VIDUR_OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]


# --------------------------------------------------------------------------- helpers
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


# the fused-MoE tables' column units (vLLM's and TensorRT-LLM's tables share the collector's columns; each
# manifest entry gets its own copy, so yaml writes no alias between them)
MOE_UNITS = {"latency": "ms", "num_tokens": "tokens", "hidden_size": "features",
             "inter_size": "features per expert (one branch, before TP slicing)", "topk": "experts per token",
             "num_experts": "routed experts of the whole model layer"}


def vkey(v: str) -> tuple:
    """Sort key for dotted versions such as 0.24.0, 2.27, 0.5.6.post2, 1.3.0rc20."""
    out = []
    for part in v.replace("rc", ".-1.").replace("post", ".").split("."):
        try:
            out.append(int(part))
        except ValueError:
            out.append(-2)
    return tuple(out)


def copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def filter_parquet(src: Path, dst: Path, column: str | None, keep: tuple[str, ...] | None) -> tuple[int, int]:
    """Write the rows of `src` whose `column` is in `keep` (all rows if column is None)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    n0 = table.num_rows
    if column is not None:
        table = table.filter(pc.is_in(table[column], value_set=pa.array(list(keep))))
    dst.parent.mkdir(parents=True, exist_ok=True)
    if table.num_rows == n0:  # nothing filtered out: keep the original bytes
        shutil.copyfile(src, dst)
        return n0, n0
    # zstd like the originals; one row group; fixed options -> same bytes on rerun.
    pq.write_table(table, dst, compression="zstd", row_group_size=max(table.num_rows, 1),
                   write_statistics=True, store_schema=True)
    return n0, table.num_rows


def value_counts(path: Path, column: str) -> dict:
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=[column])[column].to_pylist()
    out: dict = {}
    for v in col:
        out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items()))


def canonical_gpu(name: str) -> str:
    from steptime.specs import gpu_key

    return gpu_key(name)


def resolve_aic(arg: str, tmp: Path) -> tuple[Path, str | None, str | None]:
    """The unpacked `aiconfigurator_core` directory (unzipping a wheel if given one)."""
    p = Path(arg)
    wheel_sha = wheel_name = None
    if p.is_file() and p.suffix == ".whl":
        wheel_sha, wheel_name = sha256(p), p.name
        with zipfile.ZipFile(p) as zf:
            zf.extractall(tmp)
        p = tmp / "aiconfigurator_core"
    elif p.is_dir() and (p / "aiconfigurator_core").is_dir():
        p = p / "aiconfigurator_core"
    if not (p / "systems" / "query_versions.yaml").exists():
        sys.exit(f"{arg}: not an unpacked aiconfigurator_core (no systems/query_versions.yaml)")
    if wheel_sha is None:
        whls = sorted(p.parent.parent.glob("aiconfigurator_core-*.whl")) + sorted(p.parent.glob("aiconfigurator_core-*.whl"))
        if whls:
            wheel_sha, wheel_name = sha256(whls[0]), whls[0].name
    meta = p.parent / f"aiconfigurator_core-{AIC_VERSION}.dist-info" / "METADATA"
    if meta.exists():
        text = meta.read_text()
        if f"Version: {AIC_VERSION}" not in text:
            sys.exit(f"{meta}: not version {AIC_VERSION}")
    return p, wheel_sha, wheel_name


def find_apache_text(arg: str | None) -> tuple[Path, str]:
    if arg:
        return Path(arg), arg
    dist = importlib.metadata.distribution("packaging")
    for f in dist.files or []:
        if f.name == "LICENSE.APACHE":
            return Path(dist.locate_file(f)), f"packaging-{dist.version} dist-info {f}"
    sys.exit("no Apache-2.0 licence text found; pass --apache-license PATH")


# --------------------------------------------------------------------------- AIConfigurator
def vendor_aic(aic: Path, out_root: Path, repo_root: Path, apache: tuple[Path, str]) -> tuple[list, list]:
    entries, notes = [], []
    systems = aic / "systems"
    qv = read_yaml(systems / "query_versions.yaml")
    lic_dst = repo_root / AIC_LICENCE
    copy(apache[0], lic_dst)
    base = {"source": "aiconfigurator-core", "version": AIC_VERSION, "licence": "Apache-2.0",
            "licence_file": AIC_LICENCE}
    entries.append({"path": AIC_LICENCE, "table": "licence", **base,
                    "original_path": f"(not in the wheel) {apache[1]}",
                    "measures": "Apache License 2.0 text. The aiconfigurator-core 0.12.0 wheel declares "
                                "License-Expression: Apache-2.0 (dist-info/METADATA) and SPDX headers "
                                "'Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES' but ships no "
                                "licence file, so the standard text is copied from an installed package.",
                    "units": None, "gpu": None, "framework": None})
    copy(systems / "query_versions.yaml", repo_root / "raw/aiconfigurator/query_versions.yaml")
    entries.append({"path": "raw/aiconfigurator/query_versions.yaml", "table": "aic_query_versions", **base,
                    "original_path": "aiconfigurator_core/systems/query_versions.yaml",
                    "measures": "which (framework, version) each system's data is queried at; names the "
                                "vLLM versions vendored here", "units": None, "gpu": None, "framework": None})

    for name in MODEL_CONFIGS:
        dst = f"raw/aiconfigurator/model_configs/{name}"
        copy(aic / "model_configs" / name, repo_root / dst)
        entries.append({"path": dst, "table": "aic_model_config", **base,
                        "original_path": f"aiconfigurator_core/model_configs/{name}",
                        "measures": "a Hugging Face model's config.json as copied in the wheel (the model's structure: "
                                    "layers, widths, heads, experts, attention kind); not a measurement",
                        "units": None, "gpu": None, "framework": None,
                        "model_source": name.removesuffix("_config.json").replace("--", "/", 1)})

    for g in AIC_GPUS:
        key = canonical_gpu(g)
        def current(fw: str) -> str:
            return qv.get("overrides", {}).get(g, {}).get(fw, qv["defaults"][fw])["current"]

        data = systems / "data" / g
        sys_yaml = read_yaml(systems / f"{g}.yaml")
        nccl_ver = str(sys_yaml.get("misc", {}).get("nccl_version"))
        gbase = {**base, "gpu": key}
        # systems/<gpu>.yaml: the package's own datasheet figures
        dst = f"raw/aiconfigurator/{g}/system.yaml"
        copy(systems / f"{g}.yaml", repo_root / dst)
        entries.append({"path": dst, "table": "aic_system", **gbase,
                        "original_path": f"aiconfigurator_core/systems/{g}.yaml",
                        "measures": "AIConfigurator's datasheet figures for the system (mem_bw B/s, "
                                    "*_tc_flops FLOP/s, mem_capacity bytes, power W, link bandwidths B/s, "
                                    "misc.nccl_version); the package's, not steptime's",
                        "units": {"mem_bw": "B/s", "bfloat16_tc_flops": "FLOP/s", "mem_capacity": "bytes",
                                  "power": "W", "intra_node_bw": "B/s", "inter_node_bw": "B/s"},
                        "framework": None})

        def pick(family: str, framework: str, target: str, fname: str) -> tuple[str | None, str]:
            """The version dir to take: `target` if it holds `fname`, else the newest older one."""
            d = data / family / framework
            if (d / target / fname).exists():
                return target, ""
            older = sorted((v.name for v in d.iterdir() if (v / fname).exists() and vkey(v.name) <= vkey(target)),
                           key=vkey) if d.exists() else []
            if older:
                return older[-1], (f"{g}: {family}/{framework}/{target}/{fname} is absent in the wheel; "
                                   f"took {family}/{framework}/{older[-1]} (newest older version)")
            return None, f"{g}: no {family}/{framework} {fname} at or below {target}; nothing vendored"

        specs = [
            ("gemm", FRAMEWORK, "gemm_perf.parquet", "aic_gemm", "gemm_dtype", ("bfloat16",),
             "gemm_perf.bf16.parquet",
             "dense GEMM C[m,n] = A[m,k] @ W[k,n] via the framework's linear op, latency per call; "
             "measured as six layer instances in one CUDA graph, mean of replays divided by six",
             {"latency": "ms", "m": "rows (tokens)", "n": "output features", "k": "input features"}),
            ("gemm", FRAMEWORK, "gemm_perf.parquet", "aic_gemm_fp8", "gemm_dtype", ("fp8",),
             "gemm_perf.fp8.parquet",
             "fp8 W8A8 GEMM (per-tensor scaled fp8 weights and activations, bf16 output; vLLM's "
             "CutlassFP8ScaledMMLinearKernel) C[m,n] = A[m,k] @ W[k,n], latency per call; measured like the "
             "bf16 rows (six layer instances in one CUDA graph, mean of replays divided by six)",
             {"latency": "ms", "m": "rows (tokens)", "n": "output features", "k": "input features"}),
            ("attention", FRAMEWORK, "context_attention_perf.parquet", "aic_context_attention",
             "kv_cache_dtype", KV_DTYPES, "context_attention_perf.parquet",
             "prefill attention: batch_size requests of isl new tokens each (no prior KV), latency per call",
             {"latency": "ms", "isl": "tokens per request", "window_size": "tokens (0 = full attention)"}),
            ("attention", FRAMEWORK, "generation_attention_perf.parquet", "aic_generation_attention",
             "kv_cache_dtype", KV_DTYPES, "generation_attention_perf.parquet",
             "decode attention: batch_size requests, one new token each, KV length isl + step, latency per call",
             {"latency": "ms", "isl": "tokens", "step": "tokens (KV length = isl + step)",
              "window_size": "tokens (0 = full attention)"}),
            ("quantize", FRAMEWORK, "scale_matrix_perf.parquet", "aic_scale_matrix", None, None,
             "scale_matrix_perf.parquet",
             "static per-tensor fp8 quantisation of an m x k bf16 matrix: memory-bound elementwise kernel "
             "(reads 2*m*k bytes, writes m*k bytes)",
             {"latency": "ms", "m": "rows", "k": "columns"}),
            ("comm", FRAMEWORK, "custom_allreduce_perf.parquet", "aic_custom_allreduce", "op_name",
             ("all_reduce",), "custom_allreduce_perf.parquet",
             "vLLM custom all-reduce (CUDA graph and eager) across num_gpus GPUs of one node",
             {"latency": "ms", "message_size": "elements of allreduce_dtype per GPU"}),
            ("comm", "nccl", "nccl_perf.parquet", "aic_nccl_allreduce", "op_name", ("all_reduce",),
             "nccl_perf.all_reduce.parquet",
             "NCCL all-reduce across num_gpus GPUs of one node (nccl-tests style)",
             {"latency": "ms", "message_size": "elements of nccl_dtype per GPU"}),
            # ---- mixture of experts (issue 20): all rows, every dtype and routing distribution
            ("moe", FRAMEWORK, "moe_perf.parquet", "aic_moe", None, None, "moe_perf.parquet",
             "fused MoE layer (router top-k already chosen; permute, grouped expert GEMMs gate_up and down with "
             "the activation, unpermute/combine) for num_tokens tokens, latency per call on one GPU holding "
             "num_experts/moe_ep_size experts each sliced 1/moe_tp_size along inter_size; distribution is the "
             "collector's token-to-expert routing (balanced or power_law_<alpha>)",
             dict(MOE_UNITS)),
            ("mla", FRAMEWORK, "mla_context_module_perf.parquet", "aic_mla_context", None, None,
             "mla_context_module_perf.parquet",
             "DeepSeek-V3 multi-head latent attention module in prefill (the package's 'complete self_attn "
             "forward'; its sdk/operations/mla.py uses it in place of q_b_proj + kv_b_proj + context MLA + "
             "output projection) for batch_size requests of isl new tokens, num_heads local heads, latency per call",
             {"latency": "ms", "isl": "tokens per request", "num_heads": "local attention heads"}),
            ("mla", FRAMEWORK, "mla_generation_module_perf.parquet", "aic_mla_generation", None, None,
             "mla_generation_module_perf.parquet",
             "DeepSeek-V3 multi-head latent attention module in decode (the package's sdk/operations/mla.py "
             "uses it in place of the absorbed bmm pre + generation MLA + bmm post) for batch_size requests, one "
             "new token each, KV length isl + step, num_heads local heads, latency per call",
             {"latency": "ms", "isl": "tokens", "step": "tokens (KV length = isl + step)",
              "num_heads": "local attention heads"}),
            ("mla_bmm", FRAMEWORK, "mla_bmm_perf.parquet", "aic_mla_bmm", None, None, "mla_bmm_perf.parquet",
             "the batched GEMMs of weight-absorbed MLA decode (mla_gen_pre: q_nope x W_UK into the latent "
             "space; mla_gen_post: latent output x W_UV), num_tokens tokens x num_heads heads, latency per call",
             {"latency": "ms", "num_tokens": "tokens", "num_heads": "local attention heads"}),
            ("comm", FRAMEWORK, "moe_a2a_perf.parquet", "aic_moe_a2a", None, None, "moe_a2a_perf.parquet",
             "expert-parallel all-to-all (dispatch or combine phase) of num_tokens tokens per GPU, hidden_size "
             "features each, topk destinations among num_experts experts over ep_size GPUs of node_num nodes, "
             "by comm_backend (DeepEP high-throughput / low-latency / v2); latency per call",
             {"latency": "us", "transmit_us": "us", "notify_us": "us", "num_tokens": "tokens per GPU",
              "hidden_size": "features", "sms": "SMs given to the communication kernel (0 = backend default)"}),
        ]
        # TensorRT-LLM's expert-parallel all-to-all (issue 20, E3.2): DeepEP inside TensorRT-LLM and its own
        # NVLink all-to-all kernels (one-sided / two-sided), at the version query_versions.yaml names or older
        specs += [("comm", "trtllm", "moe_a2a_perf.parquet", "aic_moe_a2a_trtllm", None, None, "moe_a2a_perf.parquet",
                   "expert-parallel all-to-all (dispatch or combine phase) in TensorRT-LLM through DeepEP "
                   "(comm_backend trtllm_deepep_ht high-throughput / trtllm_deepep_ll low-latency) of num_tokens "
                   "tokens per GPU, hidden_size features each in comm_dtype, topk destinations among num_experts "
                   "experts over ep_size GPUs of node_num nodes; latency per call",
                   {"latency": "us", "transmit_us": "us", "notify_us": "us", "num_tokens": "tokens per GPU",
                    "hidden_size": "features", "sms": "SMs given to the communication kernel (0 = backend default)"}),
                  ("comm", "trtllm", "trtllm_alltoall_perf.parquet", "aic_trtllm_alltoall", None, None,
                   "trtllm_alltoall_perf.parquet",
                   "TensorRT-LLM's NVLink all-to-all for expert parallelism (kernel_source NVLinkOneSided / "
                   "NVLinkTwoSided; op_name alltoall_prepare, alltoall_dispatch, alltoall_combine, "
                   "alltoall_combine_low_precision) of num_tokens tokens per GPU in moe_dtype over moe_ep_size "
                   "GPUs; latency per call",
                   {"latency": "ms", "num_tokens": "tokens per GPU", "hidden_size": "features"})]
        # TensorRT-LLM's own fused-MoE tables (issue 20, wave 38): all rows, like vLLM's, at the version
        # query_versions.yaml names (1.3.0rc20; 1.0.0 on a100_sxm); the same table (aic_moe), framework trtllm
        specs += [("moe", "trtllm", "moe_perf.parquet", "aic_moe", None, None, "moe_perf.parquet",
                   "TensorRT-LLM's fused MoE layer (PyTorch flow; router top-k already chosen; permute, grouped expert "
                   "GEMMs gate_up and down with the activation, unpermute/combine) for num_tokens tokens by kernel_source "
                   "(moe_torch_flow_cutlass: the CUTLASS fused MoE; moe_torch_flow_min_latency: the TRT-LLM-gen "
                   "low-latency kernels; deepgemm: DeepGEMM's grouped GEMM; moe_torch_flow_nongated: non-gated "
                   "experts), latency per call on one GPU holding num_experts/moe_ep_size experts each sliced "
                   "1/moe_tp_size along inter_size; distribution is the collector's token-to-expert routing (balanced "
                   "or power_law_<alpha>)",
                   dict(MOE_UNITS))]
        # SGLang's own fused-MoE tables (issue 20, wave 39): all rows, at the version query_versions.yaml names
        # (0.5.14; 0.5.10 on a100_sxm); the same table (aic_moe), framework sglang. Only moe_perf.parquet, the plain
        # fused-MoE layer SGLang runs by default (moe_a2a_backend none); its wideep_* tables (DeepEP wide-EP MoE) and
        # dsv4_megamoe_* (DeepSeek-V4's MegaMoE module) are other modes, not vendored
        specs += [("moe", "sglang", "moe_perf.parquet", "aic_moe", None, None, "moe_perf.parquet",
                   "SGLang's fused MoE layer (router top-k already chosen; permute, grouped expert GEMMs gate_up and "
                   "down with the activation, unpermute/combine) for num_tokens tokens by kernel_source, the "
                   "moe_runner_backend the collector ran for the model and dtype (sglang_fused_moe_triton: SGLang's "
                   "Triton fused MoE; sglang_flashinfer_trtllm_moe / sglang_mxfp4_flashinfer_trtllm_moe: FlashInfer's "
                   "TRT-LLM-gen MoE; sglang_flashinfer_cutlass_moe: FlashInfer's CUTLASS MoE; sglang_marlin_moe: "
                   "Marlin; *_situ_as_silu: a SiTU model timed with the silu epilogue), latency per call on one GPU "
                   "holding num_experts/moe_ep_size experts each sliced 1/moe_tp_size along inter_size; distribution "
                   "is the collector's token-to-expert routing (balanced or power_law_<alpha>)",
                   dict(MOE_UNITS))]
        specs += [("gemm", fw, "gemm_perf.parquet", "aic_gemm_engine", "gemm_dtype", ("bfloat16", "fp8"),
                   "gemm_perf.bf16_fp8.parquet",
                   ENGINE_GEMM_MEASURES[fw] + ": C[m,n] = A[m,k] @ W[k,n], latency per call, as AIConfigurator "
                   "collects every engine's GEMM table",
                   {"latency": "ms", "m": "rows (tokens)", "n": "output features", "k": "input features"})
                  for fw in ENGINE_GEMM_FRAMEWORKS]
        for family, fw, fname, table, col, keep, out_name, measures, units in specs:
            target = nccl_ver if fw == "nccl" else current(fw)
            ver, note = pick(family, fw, target, fname)
            if note:
                notes.append(note)
            if ver is None:
                continue
            src = data / family / fw / ver / fname
            dst = f"raw/aiconfigurator/{g}/{family}/{fw}/{ver}/{out_name}"
            n0, n1 = filter_parquet(src, repo_root / dst, col, keep)
            if n1 == 0:  # e.g. no fp8 rows on Ampere: vendor nothing rather than an empty table
                (repo_root / dst).unlink()
                notes.append(f"{g}: {family}/{fw}/{ver}/{fname} holds no rows with {col} in {list(keep)}; "
                             "nothing vendored")
                continue
            e = {"path": dst, "table": table, **gbase,
                 "original_path": f"aiconfigurator_core/systems/data/{g}/{family}/{fw}/{ver}/{fname}",
                 "original_sha256": sha256(src), "original_bytes": src.stat().st_size,
                 "measures": measures, "units": units,
                 "framework": fw,
                 "framework_version": ver,
                 "filter": (f"{col} in {list(keep)}" if col else "none (all rows)"),
                 "rows_original": n0, "rows": n1}
            if fw == "nccl":
                e["why_this_version"] = f"systems/{g}.yaml misc.nccl_version = {nccl_ver!r}"
            else:
                e["why_this_version"] = f"query_versions.yaml: {fw} current for {g} = {current(fw)}"
            entry_notes = [note] if note else []
            if "kernel_source" in _columns(repo_root / dst):
                e["kernel_sources"] = value_counts(repo_root / dst, "kernel_source")
                if len(e["kernel_sources"]) > 1:
                    entry_notes.append("mixed kernel sources: vLLM's backend choice differs by kv_cache_dtype, "
                                       "head_dim, window and (for context tables) isl=1 rows going to the decode "
                                       "kernel; keep kernel_source in any key"
                                       if family == "attention" else "several kernel sources in one table")
            if family in ("attention", "comm", "moe", "mla", "mla_bmm"):
                n_dup = _duplicate_configs(repo_root / dst)
                if n_dup:
                    entry_notes.append(f"{n_dup} configurations appear more than once (same shape, dtype, "
                                       "kernel_source); the loader aggregates exact duplicates by median "
                                       "and reports n_dup")
            if g == "a100_sxm" and family == "attention":
                entry_notes.append("no window_size column in vLLM 0.14.0 tables: full attention (window 0) "
                                   "is implied; the loader adds window_size = 0")
            if table == "aic_gemm_fp8":
                entry_notes.append("same file, version and grid as the bf16 rows of this GPU; the fp8_block "
                                   "(block-scaled) and nvfp4 rows of the file are not vendored")
            if table == "aic_gemm_engine":
                entry_notes.append("bf16 and per-tensor fp8 rows of the engine's own GEMM table (column gemm_dtype); "
                                   "its fp8_block, nvfp4 and weight-only rows are not vendored")
            if family == "gemm" and g == "a100_sxm" and fw == FRAMEWORK:
                entry_notes.append("thinner grid than the 0.24.0 tables: 21 m values x 440 (n, k) pairs; "
                                   "kernel_source 'vllm_default'")
            if entry_notes:
                e["notes"] = entry_notes
            entries.append(e)
    return entries, notes


def _duplicate_configs(path: Path) -> int:
    import pyarrow.parquet as pq

    df = pq.read_table(path).to_pandas()
    keys = [c for c in df.columns if c != "latency"]
    return int(df[df.duplicated(keys, keep=False)].drop_duplicates(keys).shape[0])


def _columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


# --------------------------------------------------------------------------- Vidur
def vendor_vidur(src: Path, repo_root: Path) -> list:
    entries = []
    base = {"source": "vidur", "licence": "MIT", "licence_file": VIDUR_LICENCE}
    copy(src / "LICENSE", repo_root / VIDUR_LICENCE)
    entries.append({"path": VIDUR_LICENCE, "table": "licence", **base, "commit": VIDUR_COMMIT,
                    "original_path": "LICENSE", "measures": "MIT licence of microsoft/vidur",
                    "units": None, "gpu": None, "framework": None})
    for f in sorted((src / "profiling" / "compute").glob("*/*/*/mlp.csv")):
        gpu_dir, org, model = f.parts[-4], f.parts[-3], f.parts[-2]
        rel = f.relative_to(src).as_posix()
        dst = f"raw/vidur/{rel}"
        copy(f, repo_root / dst)
        from steptime.specs import get_model

        entries.append({
            "path": dst, "table": "vidur_mlp", **base, "commit": VIDUR_COMMIT,
            "original_path": f"data/{rel}",
            "gpu": canonical_gpu(gpu_dir), "vidur_gpu": gpu_dir,
            "model": get_model(model).key, "model_source": f"{org}/{model}",
            "framework": "vidur profiler (PyTorch CUDA events, Sarathi-Serve model code)",
            "measures": "per-operator CUDA time of one transformer layer's non-attention operators "
                        f"({', '.join(VIDUR_OPS)}), swept over num_tokens and num_tensor_parallel_workers",
            "units": {"time_stats.*": "ms", "num_tokens": "tokens", "n_embd": "features"},
            "unit_check": "ms verified by arithmetic (see notes at top of this manifest)",
            "notes": ["num_tokens 2048 and 4096 (and 8192..32768 for Llama-3) appear twice per tp; "
                      "the loader aggregates duplicates by median and reports n_dup"]
            + (["phi-2 has no post_attention_layernorm column and tp=1 only"] if model == "phi-2" else []),
        })
    for g in ("a100", "a40"):
        dst = f"raw/vidur/profiling/cpu_overheads/{g}.csv"
        copy(src / "profiling" / "cpu_overheads" / f"{g}.csv", repo_root / dst)
        entries.append({
            "path": dst, "table": "vidur_cpu_overheads", **base, "commit": VIDUR_CPU_COMMIT,
            "original_path": f"data/profiling/{g}/cpu_overheads.csv",
            "gpu": canonical_gpu(g), "vidur_gpu": g, "framework": "vidur profiler (Sarathi-Serve engine)",
            "measures": "host-side time per engine step (schedule, sampler, prepare_inputs, model_execution "
                        "launch/e2e, process_model_outputs, ray_comm_time) against batch_size and "
                        "tensor_parallel_degree, per model",
            "units": {"*_mean": "ms", "*_median": "ms", "ray_comm_time_mean": "ms", "batch_size": "requests"},
            "notes": ["repeated (model, batch_size, tensor_parallel_degree) rows exist "
                      "(a100: 6, a40: 17); the loader aggregates them by median and reports n_dup",
                      "the unnamed first column is a row index from the original export"],
        })
    for f in sorted((src / "processed_traces").glob("*.csv")):
        rel = f.relative_to(src).as_posix()
        dst = f"raw/vidur/{rel}"
        copy(f, repo_root / dst)
        entries.append({
            "path": dst, "table": "vidur_trace", **base, "commit": VIDUR_COMMIT,
            "original_path": f"data/{rel}", "gpu": None, "framework": None,
            "measures": "request length trace: prefill and decode token counts per request "
                        "(Splitwise Azure LLM inference traces; arXiv summarization with the Llama-2 "
                        "tokenizer); workload inputs, not latencies",
            "units": {"arrived_at": "s", "num_prefill_tokens": "tokens",
                      "num_decode_tokens": "tokens"},
            "notes": ["arrived_at is seconds since the trace start (Splitwise traces); the arXiv trace has "
                      "no arrival times and carries derived num_total_tokens and pd_ratio columns"],
        })
    return entries


# --------------------------------------------------------------------------- DistServe
def vendor_distserve(src: Path, repo_root: Path) -> list:
    entries = []
    base = {"source": "distserve", "licence": "Apache-2.0", "licence_file": DISTSERVE_LICENCE,
            "commit": DISTSERVE_COMMIT, "gpu": "a100-sxm", "framework": None}
    orig = "simdistserve/estimators/profile_data"
    for f in sorted(src.iterdir()):
        dst = f"raw/distserve/{f.name}"
        copy(f, repo_root / dst)
        e = {"path": dst, **base, "original_path": f"{orig}/{f.name}" if f.name != "LICENSE" else "LICENSE"}
        if f.name == "LICENSE":
            e.update(table="licence", gpu=None, measures="Apache License 2.0 of LLMServe/DistServe", units=None)
        elif f.suffix == ".json":
            engine = f.name.split(".")[-2]
            e.update(table="distserve_coefficients", engine=engine,
                     framework="DistServe" if engine == "distserve" else "vLLM",
                     measures=f"fitted coefficients of DistServe's step-latency model for the {engine} engine "
                              "on A100-80GB, per model and tensor-parallel degree. time_estimator.py: prefill "
                              "= a + b*sum(prompt_len) + c*sum(prompt_len^2); decode = a + b*sum(context_len) "
                              "+ c*batch_size, with decoding_smallbs when batch_size < "
                              "decoding_large_small_bs_threshold, else decoding_largebs",
                     units={"result": "ms", "a": "ms", "b": "ms per token", "c (prefill)": "ms per token^2",
                            "c (decode)": "ms per request"},
                     notes=["fitted model coefficients, not raw timings: a peer baseline, not ground truth",
                            "covers facebook/opt-13b (tp 1, 2, 4) and facebook/opt-66b (tp 2, 3, 4, 8); "
                            "no OPT-175B coefficients",
                            "formula read from simdistserve/estimators/time_estimator.py (public repository "
                            "index, commit 33c3d3b08a442d5228094a468f97046132bb1537)"])
        else:
            e.update(table="distserve_max_num_tokens", framework="DistServe",
                     measures="KV-cache capacity in tokens per (model, tp, pp) on A100-80GB, from DistServe's "
                              "memory estimator",
                     units={"max_num_tokens": "tokens"},
                     notes=["an estimate of capacity, not a latency; covers opt-13b, opt-66b, opt-175b"])
        entries.append(e)
    return entries


# --------------------------------------------------------------------------- wall clock
B300_REASONING = (
    "GPU not written in the files; recorded as B300 (HGX B300 SXM, steptime key b300) because (1) the "
    "collector of this branch defaults to B300 SXM, (2) the KV-cache block count of the TP1 run only fits "
    "in a 288 GB part and (3) sibling files of the same branch name 'NVIDIA B300 SXM6 AC' "
    "(shared/datasets/wallclock/README.md)")


def _fpm_meta(path: Path) -> dict:
    import json

    doc = json.loads(path.read_text())
    return doc["effective_config"]


LSS_SIM_MEASURES = ("SIMULATED, not measured: LLMServingSim's own simulator replaying this run (profiled on this GPU, "
                    "committed by its authors as outputs/sim.csv), one row per request: input and output tokens, "
                    "arrival, end time, latency, queuing delay, TTFT, TPOT and the inter-token latencies")
LSS_SIM_UNITS = {"input": "tokens", "output": "tokens", "arrival": "ns", "end_time": "ns", "latency": "ns",
                 "queuing_delay": "ns", "TTFT": "ns", "TPOT": "ns", "ITL": "ns (list)"}


def fpm_moe_layout(cfg: dict, requested: dict) -> tuple[int, int, int]:
    """(tp, ep, dp) of an FPM run from its vllm_metadata.json: attention TP, data-parallel ranks, and expert
    parallelism over every GPU (tp x dp) when --enable-expert-parallel was given (vLLM), else 1."""
    tp = int(cfg["parallel_config.tensor_parallel_size"])
    dp = int(cfg.get("parallel_config.data_parallel_size") or 1)
    ep = tp * dp if "--enable-expert-parallel" in (requested.get("extra_args") or []) else 1
    return tp, ep, dp


# a fresh copy per manifest entry (a shared dict would be written as a YAML anchor)
FPM_STEP_UNITS = {"latency_ms": "ms", "*_tokens": "tokens", "*_requests": "requests"}
# the engine settings a run's vllm_metadata.json records that its steps' manifest entry carries
FPM_ENGINE_CONFIG = ("model_config.dtype", "compilation_config.cudagraph_mode", "compilation_config.mode",
                     "scheduler_config.max_num_batched_tokens", "scheduler_config.max_num_seqs",
                     "cache_config.enable_prefix_caching", "cache_config.block_size")


def _fpm_engine_config(cfg: dict) -> dict:
    return {k.split(".")[-1]: cfg[k] for k in FPM_ENGINE_CONFIG}


def vendor_fpm_moe(fpm: Path, repo_root: Path, base: dict) -> list:
    """The Qwen3.6-35B-A3B FPM runs: each layout's fpm_metrics_phase.csv and vllm_metadata.json, byte for byte."""
    import json

    entries = []
    for run_dir in AIC_FPM_MOE_RUNS:
        for meta in sorted((fpm / run_dir).rglob("vllm_metadata.json")):
            d = meta.parent
            doc = json.loads(meta.read_text())
            cfg, req = doc["effective_config"], doc["requested"]["deployment_config"]
            if req["model"] != "Qwen/Qwen3.6-35B-A3B" or cfg["model_config.dtype"] != "torch.bfloat16":
                sys.exit(f"{meta}: expected Qwen/Qwen3.6-35B-A3B in bf16, got {req['model']} {cfg['model_config.dtype']}")
            tp, ep, dp = fpm_moe_layout(cfg, req)
            run = f"qwen3.6-35b-a3b_tp{tp}_ep{ep}_dp{dp}"
            rel = d.relative_to(fpm)
            common = {**base, "gpu": "b300", "gpu_evidence": B300_REASONING, "framework": "vllm",
                      "framework_version": str(cfg["vllm_version"]), "model": "qwen3.6-35b-a3b",
                      "model_source": "Qwen/Qwen3.6-35B-A3B", "tp": tp, "ep": ep, "dp": dp, "run": run}
            out = f"raw/wallclock/aic_fpm/{run}"
            for fname, table, measures, units in (
                    ("fpm_metrics_phase.csv", "aic_fpm_moe_steps",
                     "one row per real vLLM engine step of DP rank 0 (Dynamo forward-pass metrics), the columns of "
                     "aic_fpm_steps plus worker_id and dp_rank: batch composition, queue sizes and latency_ms",
                     dict(FPM_STEP_UNITS)),
                    ("vllm_metadata.json", "aic_fpm_metadata",
                     "the engine's effective configuration for the run (vLLM version, dtype, CUDA graph mode, "
                     "tensor and data parallel sizes, prefix caching off) and the requested engine arguments "
                     "(--enable-expert-parallel)", None)):
                dst = f"{out}/{fname}"
                copy(d / fname, repo_root / dst)
                e = {"path": dst, "table": table, **common,
                     "original_path": f"fpm_golden_runs/{rel}/{fname}", "measures": measures, "units": units}
                if table == "aic_fpm_moe_steps":
                    e["engine_config"] = _fpm_engine_config(cfg)
                entries.append(e)
    return entries


def vendor_wallclock(src: Path, repo_root: Path, lss_repo: Path | None = None) -> tuple[list, list]:
    """The real wall-clock sets of shared/datasets/wallclock: byte-for-byte copies."""
    entries, notes = [], []

    # AIConfigurator forward-pass metrics (Dynamo FPM), Qwen3-32B dense, TP 1/2/4/8
    fpm = src / "aic_fpm_b300_vllm"
    base = {"source": "aiconfigurator-fpm", "commit": AIC_FPM_COMMIT, "licence": "Apache-2.0",
            "licence_file": AIC_FPM_LICENCE}
    copy(fpm / "LICENSE", repo_root / AIC_FPM_LICENCE)
    entries.append({"path": AIC_FPM_LICENCE, "table": "licence", **base, "original_path": "LICENSE",
                     "measures": "Apache License 2.0 of ai-dynamo/aiconfigurator", "units": None, "gpu": None,
                     "framework": None})
    for tp in AIC_FPM_TPS:
        run = f"tp{tp}_ep1_past4096"
        d = fpm / AIC_FPM_RUN / run
        cfg = _fpm_meta(d / "vllm_metadata.json")
        if int(cfg["parallel_config.tensor_parallel_size"]) != tp:
            sys.exit(f"{d}: vllm_metadata.json says tensor_parallel_size "
                     f"{cfg['parallel_config.tensor_parallel_size']}, folder says {tp}")
        ver = str(cfg["vllm_version"])
        common = {**base, "gpu": "b300", "gpu_evidence": B300_REASONING, "framework": "vllm",
                  "framework_version": ver, "model": "qwen3-32b", "model_source": "Qwen/Qwen3-32B", "tp": tp,
                  "run": f"qwen3-32b_tp{tp}"}
        out = f"raw/wallclock/aic_fpm/qwen3-32b_tp{tp}"
        files = [
            ("fpm_metrics_phase.csv", "aic_fpm_steps",
             "one row per real vLLM engine step (Dynamo forward-pass metrics): batch composition (new prefill "
             "tokens and requests, their prefix already in the KV cache, decode requests and their summed KV "
             "length), queue sizes, and latency_ms, the step's wall time with the scheduler included; phase "
             "context (isolated prefill sweep at 128/1024/4096 tokens), decode or mixed; workload_segment "
             "sweep (synthetic) or real (chat-shaped requests at concurrency 32)", dict(FPM_STEP_UNITS)),
            ("fpm_metrics_detail.csv", "aic_fpm_steps_detail",
             "the same steps as fpm_metrics_phase.csv (same counter_id), with the variance of the prefill "
             "lengths and of the decode KV lengths within each step (needed for the quadratic prefill-"
             "attention work of a step holding several prefill chunks)",
             {"latency_ms": "ms", "sum_*_tokens": "tokens", "var_prefill_length": "tokens^2",
              "var_decode_kv_tokens": "tokens^2"}),
            ("vllm_metadata.json", "aic_fpm_metadata",
             "the engine's effective configuration for the run (vLLM version, dtype, CUDA graph mode, "
             "max_num_batched_tokens, max_num_seqs, prefix caching, tensor_parallel_size) and the requested "
             "engine arguments", None),
            ("request_workload.csv", "aic_fpm_workload",
             "the requests the collector sent (workload label, target and actual prompt tokens, max output "
             "tokens); workload inputs, not latencies", {"*_isl": "tokens", "*_osl": "tokens",
                                                        "prompt_tokens": "tokens", "max_tokens": "tokens"}),
        ]
        for fname, table, measures, units in files:
            dst = f"{out}/{fname}"
            copy(d / fname, repo_root / dst)
            e = {"path": dst, "table": table, **common,
                 "original_path": f"fpm_golden_runs/{AIC_FPM_RUN}/{run}/{fname}", "measures": measures,
                 "units": units}
            if table == "aic_fpm_steps":
                e["engine_config"] = _fpm_engine_config(cfg)
            entries.append(e)
    moe_entries = vendor_fpm_moe(fpm, repo_root, base)
    entries += moe_entries
    notes.append("aic_fpm (AIConfigurator forward-pass metrics): the dense Qwen/Qwen3-32B runs "
                 f"({AIC_FPM_RUN}, TP 1/2/4/8) and the hybrid mixture-of-experts Qwen/Qwen3.6-35B-A3B runs "
                 f"({', '.join(AIC_FPM_MOE_RUNS)}; {len(moe_entries) // 2} TP/EP/DP layouts, table aic_fpm_moe_steps, "
                 "bf16) are vendored. DeepSeek-V4-Flash's runs are not: steptime cannot represent its attention "
                 "(compressed attention with a sparse indexer). In the data-parallel runs only DP rank 0's steps are "
                 "recorded (dp_rank 0 in every row). " + B300_REASONING + ".")
    notes.append("aic_fpm: 732 of the 26,819 Qwen3-32B rows (2.7%, every TP) hold more new tokens than the engine's "
                 "recorded max_num_batched_tokens of 2048 (context sweep rows of 4096 and 8192 tokens, mixed rows up "
                 "to 8191 + 1). The run's raw fpm_metrics.csv (same folder upstream, not vendored) reports the same "
                 "token counts in single rows, and the latency is linear in tokens (TP1: about 50 ms per 1k tokens "
                 "from 1k to 8k), as one step would be; whether the engine ran them as one iteration or the "
                 "forward-pass metric spans several is not stated upstream. Kept as measured; the tidy table flags "
                 "them (over_token_budget).")

    # LLMServingSim: whole real vLLM runs on a ShareGPT trace
    lss = src / "llmservingsim_vllm"
    base = {"source": "llmservingsim", "commit": LSS_COMMIT, "licence": "MIT", "licence_file": LSS_LICENCE}
    copy(lss / "LICENSE", repo_root / LSS_LICENCE)
    entries.append({"path": LSS_LICENCE, "table": "licence", **base, "original_path": "LICENSE",
                    "measures": "MIT licence of casys-kaist/LLMServingSim", "units": None, "gpu": None,
                    "framework": None})
    import json

    lss_gpu = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000"}
    for d in sorted(p for p in lss.iterdir() if p.is_dir()):
        hw, model_dir = d.name.split("_", 1)
        meta = json.loads((d / "meta.json").read_text())
        kw = meta["engine_kwargs"]
        common = {**base, "gpu": lss_gpu[hw], "lss_hardware": hw, "framework": "vllm",
                  "framework_version": str(meta["vllm_version"]), "model_source": meta["model"],
                  "tp": int(kw["tensor_parallel_size"]), "dp": int(kw["data_parallel_size"]),
                  "expert_parallel": bool(kw["enable_expert_parallel"]), "run": d.name}
        orig = f"bench/examples/{hw}/{model_dir}/vllm"
        out = f"raw/wallclock/llmservingsim/{d.name}"
        files = [
            ("requests.jsonl", "llmservingsim_requests",
             "one JSON line per request of a real vLLM run of 300 ShareGPT requests: input and output token "
             "counts, client arrival_time (Unix epoch, s) and the engine's queued, scheduled, first-token and "
             "last-token timestamps (a monotonic clock, s; a different clock from arrival_time)",
             {"arrival_time": "s (Unix epoch)", "*_ts": "s (monotonic clock)", "input_toks": "tokens",
              "output_toks": "tokens"}),
            ("timeseries.csv", "llmservingsim_timeseries",
             "the engine's 1-second series: prompt and generation throughput, running and waiting requests, "
             "KV-cache use", {"t": "s", "*_throughput": "tokens/s", "running": "requests", "waiting": "requests",
                              "kv_cache_pct": "% of KV-cache blocks"}),
            ("meta.json", "llmservingsim_meta",
             "the run's engine arguments (vLLM version, TP/DP/EP, max_num_seqs, max_num_batched_tokens, "
             "dtype), workload file and hash, start/finish times; the RTX 4090 run also the KV-cache size, "
             "the hardware (device name) and vLLM's resolved configuration", None),
            ("config.json", "llmservingsim_config",
             "LLMServingSim's simulator cluster configuration for the run (hardware name, TP, memory size and "
             "bandwidth as LLMServingSim models them); the simulator's inputs, not measurements",
             {"npu_mem.mem_size": "GB", "npu_mem.mem_bw": "GB/s"}),
        ]
        for fname, table, measures, units in files:
            dst = f"{out}/{fname}"
            copy(d / fname, repo_root / dst)
            entries.append({"path": dst, "table": table, **common, "original_path": f"{orig}/{fname}",
                            "measures": measures, "units": units})
        if lss_repo is not None:  # LLMServingSim's own simulator output for the same run (issue 19)
            sim_orig = f"bench/examples/{hw}/{model_dir}/outputs/sim.csv"
            dst = f"{out}/sim.csv"
            copy(lss_repo / sim_orig, repo_root / dst)
            entries.append({"path": dst, "table": "llmservingsim_sim", **common, "original_path": sim_orig,
                            "measures": LSS_SIM_MEASURES, "units": LSS_SIM_UNITS})
    notes.append("llmservingsim: the RTX PRO 6000 runs are recorded as steptime's rtx-pro-6000 (the Server "
                 "Edition): LLMServingSim's own config.json for these runs models the part with 96 GB at "
                 "1597 GB/s, the Server Edition's datasheet bandwidth (the Workstation and Max-Q Workstation "
                 "Editions have 1792 GB/s); the run files name no device. The RTX 4090 run's meta.json names "
                 "the device ('NVIDIA GeForce RTX 4090', capability 8.9). Qwen3-30B-A3B-Instruct-2507 is a "
                 "mixture-of-experts model (run with data parallel 2 and expert parallel), vendored for "
                 "completeness and marked moe in the tidy table.")

    # ML.ENERGY leaderboard v2 and v3
    mle = src / "mlenergy"
    out = "raw/wallclock/mlenergy"
    for lic, commit, what in ((MLE_V2_LICENCE, MLE_V2_COMMIT, "Apache License 2.0 of ml-energy/leaderboard-v2"),
                              (MLE_V3_LICENCE, MLE_V3_COMMIT,
                               "Apache License 2.0 text, the licence the ML.ENERGY Benchmark V3 dataset card "
                               "(DATASET_CARD_v3.md, '## License: Apache-2.0') states for the dataset")):
        copy(mle / Path(lic).name, repo_root / lic)
        entries.append({"path": lic, "table": "licence", "source": "mlenergy", "commit": commit,
                        "licence": "Apache-2.0", "licence_file": lic,
                        "original_path": "LICENSE" if lic == MLE_V2_LICENCE else
                        "(the standard Apache-2.0 text; the ml-energy/leaderboard repository has no licence file)",
                        "measures": what, "units": None, "gpu": None, "framework": None})
    copy(mle / "DATASET_CARD_v3.md", repo_root / f"{out}/DATASET_CARD_v3.md")
    entries.append({"path": f"{out}/DATASET_CARD_v3.md", "table": "dataset_card", "source": "mlenergy",
                    "commit": MLE_V3_COMMIT, "licence": "Apache-2.0", "licence_file": MLE_V3_LICENCE,
                    "original_path": "dataset card of the ML.ENERGY Benchmark V3 dataset (Hugging Face)",
                    "measures": "the V3 dataset's card: subsets, field meanings, citation and its licence "
                                "statement (Apache-2.0)", "units": None, "gpu": None, "framework": None})
    copy(mle / "mlenergy_leaderboard_v2_llm.csv", repo_root / f"{out}/mlenergy_leaderboard_v2_llm.csv")
    entries.append({
        "path": f"{out}/mlenergy_leaderboard_v2_llm.csv", "table": "mlenergy_v2", "source": "mlenergy",
        "repository": "ml-energy/leaderboard-v2", "commit": MLE_V2_COMMIT, "licence": "Apache-2.0",
        "licence_file": MLE_V2_LICENCE, "gpu": None, "framework": "vllm", "framework_version": "0.5.4",
        "original_path": "data/llm_text_generation/{chat,code}/<GPU>/<model>/bs*+tp*+pp*.json (flattened, one "
                         "row per file; the file column names it)",
        "measures": "ML.ENERGY leaderboard v2: per (model, GPU, TP, PP, max batch) configuration of a vLLM "
                    "0.5.4 server at infinite request rate on real chat or code prompts, the average "
                    "time per output token, the average and maximum running batch, token throughput, output "
                    "length and energy per request; averages under continuous batching, not isolated steps",
        "units": {"Avg TPOT (s)": "s", "Energy/req (J)": "J", "Token tput (tok/s)": "tokens/s",
                  "Avg Output Tokens": "tokens", "Avg BS (reqs)": "requests", "Max BS (reqs)": "requests"},
        "notes": ["GPU column 'NVIDIA A100-SXM4-40GB' -> steptime a100-sxm-40gb; 'NVIDIA H100 80GB HBM3' "
                  "(nvidia-smi's name of the SXM5 part) -> h100-sxm",
                  "Max BS is the server's max_num_seqs (the bs<N> of the file name)"]})
    copy(mle / "mlenergy_leaderboard_v3_llm.csv", repo_root / f"{out}/mlenergy_leaderboard_v3_llm.csv")
    entries.append({
        "path": f"{out}/mlenergy_leaderboard_v3_llm.csv", "table": "mlenergy_v3", "source": "mlenergy",
        "repository": "ml-energy/leaderboard", "commit": MLE_V3_COMMIT, "licence": "Apache-2.0",
        "licence_file": MLE_V3_LICENCE, "gpu": None, "framework": "vllm", "framework_version": "0.11.1",
        "original_path": "public/data/tasks/*.json (configurations flattened, one row per configuration)",
        "measures": "ML.ENERGY leaderboard v3: per (task, model, GPU, TP/EP/DP, max_num_seqs) configuration of "
                    "a vLLM 0.11.1 server, the median/p90/p95/p99 inter-token latency, the measured average "
                    "running batch, output throughput, average output length, power and energy; averages under "
                    "continuous batching, not isolated steps",
        "units": {"*_itl_ms": "ms", "avg_batch_size": "requests", "output_throughput_tokens_per_sec": "tokens/s",
                  "avg_output_len": "tokens", "avg_power_watts": "W", "energy_per_*_joules": "J",
                  "*_params_billions": "1e9 parameters"},
        "licence_situation": "the ml-energy/leaderboard repository carries no licence file; the dataset behind "
                             "it is Apache-2.0 by its dataset card (DATASET_CARD_v3.md, vendored beside it; "
                             "LICENSE_dataset_apache2 is the standard Apache-2.0 text)",
        "notes": ["gpu_model 'H100' -> steptime h100-sxm and 'B200' -> b200 (the card names the parts H100 "
                  "and B200 only; the SXM/HGX form is assumed, as ML.ENERGY's v2 H100 was the SXM5 part)",
                  "the architecture column (Dense Transformer, MoE, Mamba-Transformer Hybrid) is the "
                  "dataset's own; the tidy table keeps it and marks moe from it",
                  "the raw task JSONs (public/data/tasks/*.json) are not vendored: the CSV holds every field "
                  "of their configurations"]})

    # AIConfigurator silicon TTFT/TPOT (the Llama-3.1 rows removed upstream of this project)
    sil = src / "aic_silicon"
    out = "raw/wallclock/aic_silicon"
    copy(sil / "LICENSE", repo_root / SILICON_LICENCE)
    entries.append({"path": SILICON_LICENCE, "table": "licence", "source": "aiconfigurator-core",
                    "version": AIC_VERSION, "licence": "Apache-2.0", "licence_file": SILICON_LICENCE,
                    "original_path": "(the standard Apache-2.0 text; the wheel declares License-Expression: "
                                     "Apache-2.0)",
                    "measures": "Apache License 2.0 text for aiconfigurator-core", "units": None, "gpu": None,
                    "framework": None})
    copy(sil / "silicon_sample_no_llama31.csv", repo_root / f"{out}/silicon_sample_no_llama31.csv")
    entries.append({
        "path": f"{out}/silicon_sample_no_llama31.csv", "table": "aic_silicon", "source": "aiconfigurator-core",
        "version": AIC_VERSION, "licence": "Apache-2.0", "licence_file": SILICON_LICENCE, "gpu": None,
        "framework": None,
        "original_path": "aiconfigurator_core/systems/silicon_sample.csv (4,536 of its 5,221 rows)",
        "measures": "end-to-end TTFT and TPOT of aggregated (agg) and disaggregated (disagg) serving measured "
                    "on silicon, per backend (trtllm, vllm, sglang) and version, model, system (GPU), "
                    "precision, isl, osl, client concurrency (batch_size) and tp/pp/ep layout",
        "units": {"silicon_ttft_ms": "ms", "silicon_tpot_ms": "ms", "isl": "tokens", "osl": "tokens",
                  "batch_size": "requests (client concurrency)"},
        "filter": "every row except the Llama-3.1-8B and Llama-3.1-70B rows, which are reserved as an outside "
                  "check of this project and never vendored or read (filtered before it reached this project: "
                  "shared/datasets/wallclock/README.md)",
        "rows_original": 5221, "rows": 4536})
    return entries, notes


# --------------------------------------------------------------------------- main
NOTES = [
    "Values are never edited. AIConfigurator parquet files are row-filtered copies (see each entry's "
    "filter, rows_original, rows); every other file is a byte-for-byte copy.",
    "Vidur units check (milliseconds confirmed). A100-SXM4-80GB, Llama-2-7B, tp 1, num_tokens 1: "
    "attn_pre_proj median 0.065. Its weight is 4096 x 12288 bf16 = 100.7 MB, so at the 2039 GB/s datasheet "
    "bandwidth the GEMM needs >= 0.049 ms; 0.065 ms = 76% of peak bandwidth. As microseconds it would be "
    "1550 TB/s (760x the datasheet), as seconds 1.5 MB/s. Same check on H100 (0.038 ms vs 0.030 ms floor, "
    "79%) and A40 (0.181 ms vs 0.145 ms floor, 80%). Compute-bound end: A100, 4096 tokens, attn_pre_proj "
    "2*4096*4096*12288 = 412 GFLOP in 1.89 ms = 218 TFLOP/s = 70% of 312. Over every GEMM operator, model, "
    "tp and token count the implied efficiency stays <= 0.90 of compute peak and <= 0.92 of HBM bandwidth. "
    "The loader keeps ms (factor 1, read from this manifest's units) and rejects files whose GEMM rows imply "
    "more than 1.25x compute peak, or less than 0.5% of it on shapes of >= 100 GFLOP (a units slip).",
    "AIConfigurator latencies are ms per call; message_size in the comm tables counts elements, not bytes "
    "(H100 8-GPU NCCL all-reduce of 536870912 fp16 elements gives bus bandwidth 445 GB/s as elements, "
    "223 GB/s as bytes; NVLink4 is 450 GB/s per direction). L40S 8-GPU NCCL reaches only ~1.4 GB/s bus "
    "bandwidth at the largest message (PCIe, no NVLink): as measured.",
    "Some small AIConfigurator GEMMs run faster than HBM bandwidth allows (weights stay in L2 across CUDA "
    "graph replays); the GEMM loader flags them (above_hbm_roofline) instead of dropping them.",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="unpacked aiconfigurator_core dir (or the .whl)")
    ap.add_argument("--datasets", required=True, help="dir holding vidur/ and distserve/")
    ap.add_argument("--out", default="raw", help="raw/ dir to (re)write (default: raw)")
    ap.add_argument("--apache-license", default=None, help="Apache-2.0 text for the AIC tables")
    ap.add_argument("--llmservingsim", default=None,
                    help="a checkout of casys-kaist/LLMServingSim at LSS_COMMIT (its outputs/sim.csv per run)")
    a = ap.parse_args(argv)

    out = Path(a.out).resolve()
    repo_root = out.parent
    if out.exists():
        for child in out.iterdir():  # rewrite from scratch so dropped files do not linger
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    datasets = Path(a.datasets)
    with tempfile.TemporaryDirectory() as tmp:
        aic, wheel_sha, wheel_name = resolve_aic(a.aic, Path(tmp))
        apache = find_apache_text(a.apache_license)
        aic_entries, aic_notes = vendor_aic(aic, out, repo_root, apache)
    wc_entries, wc_notes = vendor_wallclock(datasets / "wallclock", repo_root,
                                            Path(a.llmservingsim) if a.llmservingsim else None)
    entries = (aic_entries + vendor_vidur(datasets / "vidur", repo_root)
               + vendor_distserve(datasets / "distserve", repo_root) + wc_entries)
    for e in entries:
        p = repo_root / e["path"]
        e["sha256"] = sha256(p)
        e["bytes"] = p.stat().st_size
    entries.sort(key=lambda e: e["path"])
    # stable key order inside each entry
    order = ["path", "table", "source", "version", "commit", "original_path", "licence", "licence_file",
             "sha256", "bytes", "gpu", "framework", "framework_version", "model", "model_source", "measures",
             "units"]
    entries = [{**{k: e[k] for k in order if k in e}, **{k: e[k] for k in sorted(e) if k not in order}}
               for e in entries]
    manifest = {
        "schema_version": 1,
        "generated_by": "workflow/scripts/vendor_raw.py",
        "sources": {
            "aiconfigurator-core": {
                "what": "NVIDIA AIConfigurator core wheel: per-operator latencies measured on silicon",
                "version": AIC_VERSION, "obtain": f"pip download --no-deps aiconfigurator-core=={AIC_VERSION}",
                "wheel": wheel_name, "wheel_sha256": wheel_sha, "licence": "Apache-2.0",
                "licence_file": AIC_LICENCE, "copyright": "NVIDIA CORPORATION & AFFILIATES",
                "framework_chosen": f"{FRAMEWORK} at the version systems/query_versions.yaml names per GPU",
            },
            "vidur": {"what": "Microsoft Vidur profiling tables", "repository": "microsoft/vidur",
                      "commit": VIDUR_COMMIT, "commit_cpu_overheads": VIDUR_CPU_COMMIT, "licence": "MIT",
                      "licence_file": VIDUR_LICENCE},
            "distserve": {"what": "DistServe's profiled latency model", "repository": "LLMServe/DistServe",
                          "commit": DISTSERVE_COMMIT, "licence": "Apache-2.0", "licence_file": DISTSERVE_LICENCE},
            "aiconfigurator-fpm": {
                "what": "AIConfigurator forward-pass metrics: one row per real vLLM engine step",
                "repository": "ai-dynamo/aiconfigurator", "branch": AIC_FPM_BRANCH, "commit": AIC_FPM_COMMIT,
                "folder": f"fpm_golden_runs/{AIC_FPM_RUN}", "licence": "Apache-2.0",
                "licence_file": AIC_FPM_LICENCE, "gpu": "b300 (not written in the files; see notes)"},
            "llmservingsim": {
                "what": "whole real vLLM 0.19.0 runs of 300 ShareGPT requests (the runs LLMServingSim validates "
                        "against)", "repository": "casys-kaist/LLMServingSim", "commit": LSS_COMMIT,
                "folder": "bench/examples/<GPU>/<model>/vllm/",
                "simulator_outputs": "bench/examples/<GPU>/<model>/outputs/sim.csv (LLMServingSim's own replay)",
                "licence": "MIT", "licence_file": LSS_LICENCE},
            "mlenergy": {
                "what": "ML.ENERGY leaderboard: inter-token latency at a measured running batch",
                "v2": {"repository": "ml-energy/leaderboard-v2", "commit": MLE_V2_COMMIT, "licence": "Apache-2.0",
                       "licence_file": MLE_V2_LICENCE},
                "v3": {"repository": "ml-energy/leaderboard", "commit": MLE_V3_COMMIT,
                       "licence": "Apache-2.0 (by the dataset card; the repository has no licence file)",
                       "licence_file": MLE_V3_LICENCE, "dataset_card": "raw/wallclock/mlenergy/DATASET_CARD_v3.md"}},
        },
        "notes": NOTES + aic_notes + wc_notes,
        "files": entries,
    }
    header = ("# raw/MANIFEST.yaml: every file under raw/, where it came from, what it measures, its units.\n"
              "# Written by workflow/scripts/vendor_raw.py (do not edit by hand); checked by "
              "`steptime data verify`.\n")
    (out / "MANIFEST.yaml").write_text(header + yaml.safe_dump(manifest, sort_keys=False, width=100,
                                                                allow_unicode=True))
    total = sum(e["bytes"] for e in entries)
    print(f"wrote {len(entries)} files, {total / 1e6:.1f} MB, manifest {out / 'MANIFEST.yaml'}")
    for n in aic_notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
