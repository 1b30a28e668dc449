#!/usr/bin/env python
"""Vendor the public measured tables the project uses into raw/ and write raw/MANIFEST.yaml.

    python workflow/scripts/vendor_raw.py \
        --aic /tmp/aic/x/aiconfigurator_core          # unpacked wheel dir, or the .whl itself
        --datasets /work/shared/datasets              # holds vidur/ and distserve/
        --out raw

Rows are filtered (never edited): AIConfigurator GEMM tables keep bf16 rows, the NCCL
tables keep all_reduce rows; every other file is copied byte for byte. The committed
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

AIC_VERSION = "0.12.0"
AIC_GPUS = ["a100_sxm", "h100_sxm", "h200_sxm", "l40s", "b200_sxm", "gb200", "b300_sxm", "gb300",
            "rtx_pro_6000_server"]
FRAMEWORK = "vllm"
KV_DTYPES = ("bfloat16", "fp8")

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_CPU_COMMIT = "6d98aa8f71696520acc603d87439e77cc78160a7"
DISTSERVE_COMMIT = "82831f1604cc6b10bebd360f6c437a07790dde9f"

AIC_LICENCE = "raw/aiconfigurator/LICENSE"
VIDUR_LICENCE = "raw/vidur/LICENSE"
DISTSERVE_LICENCE = "raw/distserve/LICENSE"

VIDUR_OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]


# --------------------------------------------------------------------------- helpers
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


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
    qv = yaml.safe_load((systems / "query_versions.yaml").read_text())
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

    for g in AIC_GPUS:
        key = canonical_gpu(g)
        want = qv.get("overrides", {}).get(g, {}).get(FRAMEWORK, qv["defaults"][FRAMEWORK])["current"]
        data = systems / "data" / g
        sys_yaml = yaml.safe_load((systems / f"{g}.yaml").read_text())
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
        ]
        for family, fw, fname, table, col, keep, out_name, measures, units in specs:
            target = nccl_ver if fw == "nccl" else want
            ver, note = pick(family, fw, target, fname)
            if note:
                notes.append(note)
            if ver is None:
                continue
            src = data / family / fw / ver / fname
            dst = f"raw/aiconfigurator/{g}/{family}/{fw}/{ver}/{out_name}"
            n0, n1 = filter_parquet(src, repo_root / dst, col, keep)
            e = {"path": dst, "table": table, **gbase,
                 "original_path": f"aiconfigurator_core/systems/data/{g}/{family}/{fw}/{ver}/{fname}",
                 "original_sha256": sha256(src), "original_bytes": src.stat().st_size,
                 "measures": measures, "units": units,
                 "framework": FRAMEWORK if fw != "nccl" else "nccl",
                 "framework_version": ver,
                 "filter": (f"{col} in {list(keep)}" if col else "none (all rows)"),
                 "rows_original": n0, "rows": n1}
            if fw == "nccl":
                e["why_this_version"] = f"systems/{g}.yaml misc.nccl_version = {nccl_ver!r}"
            else:
                e["why_this_version"] = f"query_versions.yaml: {FRAMEWORK} current for {g} = {want}"
            entry_notes = [note] if note else []
            if "kernel_source" in _columns(repo_root / dst):
                e["kernel_sources"] = value_counts(repo_root / dst, "kernel_source")
                if len(e["kernel_sources"]) > 1:
                    entry_notes.append("mixed kernel sources: vLLM's backend choice differs by kv_cache_dtype, "
                                       "head_dim, window and (for context tables) isl=1 rows going to the decode "
                                       "kernel; keep kernel_source in any key"
                                       if family == "attention" else "several kernel sources in one table")
            if family in ("attention", "comm"):
                n_dup = _duplicate_configs(repo_root / dst)
                if n_dup:
                    entry_notes.append(f"{n_dup} configurations appear more than once (same shape, dtype, "
                                       "kernel_source); the loader aggregates exact duplicates by median "
                                       "and reports n_dup")
            if g == "a100_sxm" and family == "attention":
                entry_notes.append("no window_size column in vLLM 0.14.0 tables: full attention (window 0) "
                                   "is implied; the loader adds window_size = 0")
            if family == "gemm" and g == "a100_sxm":
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
    entries = aic_entries + vendor_vidur(datasets / "vidur", repo_root) + vendor_distserve(datasets / "distserve", repo_root)
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
        },
        "notes": NOTES + aic_notes,
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
