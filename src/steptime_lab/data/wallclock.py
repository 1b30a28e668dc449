"""Loaders for the real wall-clock serving sets (raw/wallclock/, see raw/MANIFEST.yaml).

- AIConfigurator forward-pass metrics (`load_fpm_steps`, `load_fpm_workload`): one row per real
  vLLM 0.20.1 engine step, Qwen3-32B at TP 1/2/4/8 on a B300 (the GPU is not written in the
  files; the manifest says why B300).
- LLMServingSim's real vLLM 0.19.0 runs (`load_servingsim_requests`, `load_servingsim_timeseries`):
  300 ShareGPT requests per run, per-request timestamps.
- ML.ENERGY leaderboard v2 and v3 (`load_mlenergy`): inter-token latency at a measured batch.
- AIConfigurator silicon TTFT/TPOT (`load_aic_silicon`), without the reserved Llama-3.1 rows.

Every tidy table carries `arch` (dense, moe or hybrid) and `moe` (bool), decided from the model's
configuration facts (`model_arch`), never from its name, so experiments can skip MoE rows with
a count; `arch_verified` is False where the class rests on the architecture family only (the
model's own config.json was not read; specs/model_arch.yaml says which). Times come back in milliseconds (`*_ms`) or seconds (`*_s`), as each column says.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from steptime.io import read_yaml
from steptime_lab.data import schemas
from steptime_lab.data.aic import _concat
from steptime_lab.data.checks import fail_rows, read_csv, run_schema, time_factor, where
from steptime_lab.data.manifest import Entry, load_manifest
from steptime.errors import DataError, UnknownModelError
from steptime.specs import SPEC_DIR
from steptime.specs import get_model, gpu_key
from steptime_lab.data.aic import _gpu_filter, read_gemm_file
from steptime_lab.data.vidur import model_key

ARCH_FILE = SPEC_DIR / "model_arch.yaml"
ARCHS = ("dense", "moe", "hybrid")

# rows whose model is reserved as an outside check of this project: never vendored, never read
RESERVED_MODELS = re.compile(r"llama[-_ ]?3\.1[-_ ]?(?:8|70)b", re.IGNORECASE)


# --------------------------------------------------------------------------- model facts
@lru_cache(maxsize=1)
def _arch_table() -> dict[str, dict]:
    doc = read_yaml(ARCH_FILE)
    out = {}
    for mid, fact in doc["models"].items():
        if fact.get("arch") not in ARCHS:
            raise ValueError(f"{ARCH_FILE}: {mid}: arch must be one of {ARCHS}, not {fact.get('arch')!r}")
        if not fact.get("evidence"):
            raise ValueError(f"{ARCH_FILE}: {mid}: no evidence given")
        out[mid.lower()] = fact
    return out


def model_arch_verified(model_id: str) -> bool:
    """True when the architecture class rests on the model's own config (or models.yaml), False when
    only on its architecture family (`verified: false` in specs/model_arch.yaml)."""
    fact = _arch_table().get(str(model_id).lower())
    return True if fact is None else bool(fact.get("verified", True))


def model_arch(model_id: str) -> str:
    """'dense', 'moe' or 'hybrid' for a Hugging Face model id, from its configuration facts.

    A model in steptime's models.yaml is dense (models.yaml holds dense decoder models only);
    every other model needs an entry with its evidence in specs/model_arch.yaml. Unknown models
    raise UnknownModelError: an unclassified model is never treated as dense by default.
    """
    fact = _arch_table().get(str(model_id).lower())
    if fact is not None:
        return fact["arch"]

    try:
        get_model(model_id)
    except UnknownModelError:
        raise UnknownModelError(f"model {model_id!r}: no architecture fact (dense, moe or hybrid) in "
                                f"{ARCH_FILE.name} and not in models.yaml; add it with its config.json evidence"
                                ) from None
    return "dense"


def _model_cols(df: pd.DataFrame, source_col: str, file, raw_col: str | None = None) -> pd.DataFrame:
    """Add model (steptime key or lower-cased HF name), arch and moe for each row's model id; a failure
    names the raw file's column `raw_col` (and the CSV line) when given."""
    ids = df[source_col].astype(str)
    uniq = ids.unique()
    arch = {}
    for mid in uniq:
        try:
            arch[mid] = model_arch(mid)
        except UnknownModelError as exc:
            rows = np.flatnonzero((ids == mid).to_numpy())
            loc = where(file, int(df.index[rows[0]]), raw_col or source_col, csv=raw_col is not None)
            raise DataError(f"{loc}: {exc}") from None
    keys = {mid: model_key(mid) for mid in uniq}
    df["model"] = ids.map(keys)
    df["arch"] = ids.map(arch)
    df["moe"] = df["arch"].eq("moe")
    df["arch_verified"] = ids.map({mid: model_arch_verified(mid) for mid in uniq}).astype(bool)
    return df


def _entry_gpu(entry: Entry) -> str:
    if not entry.gpu:
        raise DataError(f"{entry.rel}: raw/MANIFEST.yaml gives no gpu for this file")
    return gpu_key(entry.gpu)


def _read_json(entry: Entry):
    if not entry.path.is_file():
        raise DataError(f"{entry.rel}: file missing (listed in raw/MANIFEST.yaml)")
    try:
        return json.loads(entry.path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{entry.rel}: unreadable JSON: {exc}") from None


def _require(doc: dict, keys, file, what: str = "key") -> None:
    for k in keys:
        if k not in doc:
            raise DataError(f"{file}: row all, column {k!r}: required {what} missing")


# --------------------------------------------------------------------------- AIConfigurator FPM
FPM_STEP_COLUMNS = ["gpu", "model", "model_source", "arch", "moe", "arch_verified", "engine", "engine_version", "tp", "run",
                    "phase", "workload_segment", "counter_id", "ctx_tokens", "ctx_requests", "ctx_kv_tokens",
                    "decode_tokens", "decode_requests", "decode_kv_tokens", "mean_decode_kv_tokens",
                    "var_prefill_length", "var_decode_kv_tokens", "queued_ctx_tokens", "queued_ctx_requests",
                    "queued_decode_requests", "queued_decode_kv_tokens", "num_tokens", "latency_ms",
                    "max_num_batched_tokens", "max_num_seqs", "over_token_budget", "cudagraph_mode", "dtype",
                    "gpu_evidence"]
FPM_PHASES = ("context", "decode", "mixed")


def check_fpm_rows(raw: pd.DataFrame, rel: str) -> None:
    """The forward-pass-metrics layout's checks (schema, and a batch composition that adds up), one
    set for every source written in it: AIConfigurator's vendored vLLM runs and the step traces of
    steptime_collect.steptrace. A DataError names the file, the row and the column."""
    run_schema(raw, schemas.raw("aic_fpm_steps"), rel, csv=True)
    # the batch composition must add up: a context step has new prefill tokens and no decode
    ph = raw["phase"]
    fail_rows(raw, ph.eq("context") & ((raw["ctx_tokens"] < 1) | (raw["decode_requests"] != 0)), rel,
              "ctx_tokens", "a context step needs new prefill tokens and no decode requests", csv=True)
    fail_rows(raw, ph.eq("decode") & ((raw["decode_requests"] < 1) | (raw["ctx_tokens"] != 0)), rel,
              "decode_requests", "a decode step needs decode requests and no new prefill tokens", csv=True)
    fail_rows(raw, ph.eq("mixed") & ((raw["decode_requests"] < 1) | (raw["ctx_tokens"] < 1)), rel,
              "ctx_tokens", "a mixed step needs both prefill tokens and decode requests", csv=True)
    fail_rows(raw, raw["decode_tokens"] != raw["decode_requests"], rel, "decode_tokens",
              "a decode request adds exactly one token per step", csv=True)
    fail_rows(raw, raw["ctx_requests"] > raw["ctx_tokens"], rel, "ctx_requests",
              "more prefill requests than prefill tokens", csv=True)
    fail_rows(raw, raw["decode_kv_tokens"] < raw["decode_requests"], rel, "decode_kv_tokens",
              "decode KV length below one token per decode request", csv=True)
    fail_rows(raw, raw["counter_id"].duplicated(), rel, "counter_id", "step counter repeated", csv=True)


def read_fpm_file(entry: Entry) -> pd.DataFrame:
    """One fpm_metrics_phase.csv, checked: tidy steps without the detail columns."""
    raw = read_csv(entry.path)
    check_fpm_rows(raw, entry.rel)
    f = time_factor(entry, "latency_ms")
    if int(entry.get("tp", 0)) < 1:
        raise DataError(f"{entry.rel}: raw/MANIFEST.yaml gives no tensor-parallel degree (tp) for this run")
    cfg = entry.get("engine_config") or {}
    _require(cfg, ("max_num_batched_tokens", "max_num_seqs", "cudagraph_mode", "dtype"), entry.rel,
             "engine_config entry in raw/MANIFEST.yaml")
    # no check against max_num_batched_tokens: some rows hold more tokens than the recorded budget
    # (flagged as over_token_budget in the tidy table, see raw/MANIFEST.yaml notes)
    df = pd.DataFrame({
        "gpu": _entry_gpu(entry), "model_source": entry.get("model_source"), "engine": "vllm",
        "engine_version": str(entry.get("framework_version")), "tp": int(entry.get("tp")), "run": entry.get("run"),
        "phase": raw["phase"].astype(str), "workload_segment": raw["workload_segment"].astype(str)})
    for c in ("counter_id", "ctx_tokens", "ctx_requests", "ctx_kv_tokens", "decode_tokens", "decode_requests",
              "decode_kv_tokens", "queued_ctx_tokens", "queued_ctx_requests", "queued_decode_requests",
              "queued_decode_kv_tokens"):
        df[c] = raw[c].to_numpy("int64")
    df["mean_decode_kv_tokens"] = raw["mean_decode_kv_tokens"].to_numpy("float64")
    df["num_tokens"] = df["ctx_tokens"] + df["decode_tokens"]
    df["latency_ms"] = raw["latency_ms"].to_numpy("float64") * f
    df["max_num_batched_tokens"] = int(cfg["max_num_batched_tokens"])
    df["max_num_seqs"] = int(cfg["max_num_seqs"])
    df["over_token_budget"] = df["num_tokens"] > df["max_num_batched_tokens"]
    df["cudagraph_mode"] = str(cfg["cudagraph_mode"])
    df["dtype"] = str(cfg["dtype"]).replace("torch.", "")
    df["gpu_evidence"] = entry.get("gpu_evidence")
    return _model_cols(df, "model_source", entry.rel)


FPM_MOE_COLUMNS = [c for c in FPM_STEP_COLUMNS if c not in ("var_prefill_length", "var_decode_kv_tokens")]


def read_fpm_moe_file(entry: Entry) -> pd.DataFrame:
    """One fpm_metrics_phase.csv of an MoE run (the dense layout's checks) with its layout from the manifest:
    attention TP `tp`, expert parallelism `ep` and data-parallel ranks `dp`, and each row's dp_rank."""
    df = read_fpm_file(entry)
    for k in ("ep", "dp"):
        if int(entry.get(k, 0)) < 1:
            raise DataError(f"{entry.rel}: raw/MANIFEST.yaml gives no {k} for this MoE run")
    df["ep"], df["dp"] = int(entry.get("ep")), int(entry.get("dp"))
    df["dp_rank"] = read_csv(entry.path)["dp_rank"].to_numpy("int64")
    return df[FPM_MOE_COLUMNS[:8] + ["ep", "dp", "dp_rank"] + FPM_MOE_COLUMNS[8:]]


def load_fpm_moe_steps(*, root=None) -> pd.DataFrame:
    """Every vendored FPM MoE run's steps (read_fpm_moe_file), sorted by run and step counter."""
    ents = load_manifest(root).entries("aic_fpm_moe_steps")
    out = _concat([read_fpm_moe_file(e) for e in ents], "aic_fpm_moe_steps", None)
    return out.sort_values(["model", "run", "counter_id"], kind="stable").reset_index(drop=True)


def read_fpm_detail_file(entry: Entry) -> pd.DataFrame:
    """One fpm_metrics_detail.csv, checked: counter_id and the two variance columns (and what they share
    with the phase file, for the join check)."""
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("aic_fpm_steps_detail"), entry.rel, csv=True)
    fail_rows(raw, raw["counter_id"].duplicated(), entry.rel, "counter_id", "step counter repeated", csv=True)
    return raw


def read_fpm_metadata(entry: Entry) -> None:
    doc = _read_json(entry)
    if not isinstance(doc, dict) or not isinstance(doc.get("effective_config"), dict):
        raise DataError(f"{entry.rel}: row all, column 'effective_config': expected a JSON object holding it")
    cfg = doc["effective_config"]
    _require(cfg, ("vllm_version", "parallel_config.tensor_parallel_size", "model_config.dtype",
                   "scheduler_config.max_num_batched_tokens", "scheduler_config.max_num_seqs"), entry.rel)
    if entry.get("tp") is not None and int(cfg["parallel_config.tensor_parallel_size"]) != int(entry.get("tp")):
        raise DataError(f"{entry.rel}: row all, column 'parallel_config.tensor_parallel_size': "
                        f"{cfg['parallel_config.tensor_parallel_size']} but raw/MANIFEST.yaml says tp {entry.get('tp')}")
    dp = int(cfg.get("parallel_config.data_parallel_size") or 1)
    if entry.get("dp") is not None and dp != int(entry.get("dp")):
        raise DataError(f"{entry.rel}: row all, column 'parallel_config.data_parallel_size': {dp} but "
                        f"raw/MANIFEST.yaml says dp {entry.get('dp')}")
    if str(cfg["vllm_version"]) != str(entry.get("framework_version")):
        raise DataError(f"{entry.rel}: row all, column 'vllm_version': {cfg['vllm_version']} but "
                        f"raw/MANIFEST.yaml says {entry.get('framework_version')}")
    return None


def read_fpm_workload_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("aic_fpm_workload"), entry.rel, csv=True)
    df = pd.DataFrame({"gpu": _entry_gpu(entry), "model_source": entry.get("model_source"),
                       "tp": int(entry.get("tp")), "run": entry.get("run")}, index=raw.index)
    for c in ("workload_label", "endpoint", "prompt_token_mode", "shape_source"):
        df[c] = raw[c].astype(str)
    for c in ("request_index", "target_isl", "target_osl", "prompt_tokens", "max_tokens"):
        df[c] = raw[c].to_numpy("int64")
    return _model_cols(df, "model_source", entry.rel)


def load_fpm_steps(tp=None, *, root=None) -> pd.DataFrame:
    """Real vLLM engine steps (AIConfigurator forward-pass metrics), one row per step: gpu (b300: not
    written in the files, see gpu_evidence), model, model_source, arch, moe, engine, engine_version, tp,
    run, phase (context / decode / mixed), workload_segment (sweep / real), counter_id, the batch
    (ctx_tokens new prefill tokens in ctx_requests requests with ctx_kv_tokens of their prefix already
    cached; decode_requests each adding one token, decode_kv_tokens their summed KV length,
    mean_decode_kv_tokens), var_prefill_length and var_decode_kv_tokens (tokens^2, within the step),
    queue sizes, num_tokens (= ctx_tokens + decode_tokens), latency_ms (the step's wall time, scheduler
    included), the engine's max_num_batched_tokens, max_num_seqs, cudagraph_mode and dtype, and
    over_token_budget: the row holds more tokens than max_num_batched_tokens (732 of 26,819 rows, up to
    8192 tokens, latency linear in tokens as one step would be; whether the engine ran them as one
    iteration is not stated upstream: report them apart or skip them with a count)."""
    man = load_manifest(root)
    ents = man.entries("aic_fpm_steps")
    if tp is not None:
        want = {int(tp)} if np.isscalar(tp) else {int(t) for t in tp}
        ents = [e for e in ents if int(e.get("tp", 0)) in want]
    details = {e.get("run"): e for e in man.entries("aic_fpm_steps_detail")}
    frames = []
    for e in ents:
        df = read_fpm_file(e)
        d = details.get(e.get("run"))
        if d is None:
            raise DataError(f"{e.rel}: raw/MANIFEST.yaml lists no fpm_metrics_detail.csv for run {e.get('run')!r}")
        det = read_fpm_detail_file(d).set_index("counter_id")
        missing = ~df["counter_id"].isin(det.index)
        fail_rows(df, missing.to_numpy(), e.rel, "counter_id", f"step missing from {d.rel}", csv=True)
        det = det.loc[df["counter_id"]]
        # the two files describe the same steps: their shared columns must agree
        for a, b in (("ctx_tokens", "sum_prefill_tokens"), ("decode_kv_tokens", "sum_decode_kv_tokens"),
                     ("latency_ms", "latency_ms")):
            bad = ~np.isclose(df[a].to_numpy("float64"), det[b].to_numpy("float64"), rtol=1e-9, atol=1e-3)
            fail_rows(df, bad, d.rel, b, f"disagrees with {a} of the same counter_id in {e.rel}",
                      values=det[b].to_numpy())
        df["var_prefill_length"] = det["var_prefill_length"].to_numpy("float64")
        df["var_decode_kv_tokens"] = det["var_decode_kv_tokens"].to_numpy("float64")
        frames.append(df[FPM_STEP_COLUMNS])
    out = _concat(frames, "aic_fpm_steps", f"tp {tp}" if tp is not None else None)
    return out.sort_values(["model", "tp", "counter_id"], kind="stable").reset_index(drop=True)


def load_fpm_workload(*, root=None) -> pd.DataFrame:
    """The requests AIConfigurator's FPM collector sent, per run: gpu, model, model_source, arch, moe, tp,
    run, workload_label, request_index, endpoint, target_isl, target_osl, prompt_tokens, max_tokens,
    prompt_token_mode, shape_source."""
    ents = load_manifest(root).entries("aic_fpm_workload")
    cols = ["gpu", "model", "model_source", "arch", "moe", "arch_verified", "tp", "run", "workload_label", "request_index",
            "endpoint", "target_isl", "target_osl", "prompt_tokens", "max_tokens", "prompt_token_mode",
            "shape_source"]
    return _concat([read_fpm_workload_file(e)[cols] for e in ents], "aic_fpm_workload", None)


# --------------------------------------------------------------------------- LLMServingSim runs
SERVINGSIM_REQUEST_COLUMNS = [
    "gpu", "model", "model_source", "arch", "moe", "arch_verified", "engine", "engine_version", "tp", "dp", "expert_parallel",
    "max_num_seqs", "max_num_batched_tokens", "kv_blocks_recorded", "kv_block_size_recorded", "run", "request_id",
    "request_index", "input_tokens",
    "output_tokens", "arrival_s", "queued_s", "scheduled_s", "first_token_s", "last_token_s", "ttft_s",
    "tpot_s", "e2e_s", "queue_wait_s"]
# The clock the table's TTFT and end-to-end latency run on: the engine's. LLMServingSim's recorder
# (bench/core/recorder.py write_requests, casys-kaist/LLMServingSim as stored) writes arrival_time in absolute epoch
# seconds (the client's clock) and queued_ts / scheduled_ts / first_token_ts / last_token_ts from vLLM's per-request
# engine stamps (a monotonic clock); the two clocks are never subtracted (read_servingsim_requests_file), so ttft_s is
# first token - queued_ts: from the step boundary at which the engine core read the request (vLLM stamps QUEUED in
# Scheduler.add_request, called from the engine loop's input-queue read), not from the client's send.
SERVINGSIM_LATENCY_CLOCK = "engine"
_REQ_KEYS = ("request_id", "input_toks", "output_toks", "arrival_time", "queued_ts", "scheduled_ts",
             "first_token_ts", "last_token_ts")


def _servingsim_meta(man, run: str, file) -> dict:
    ms = [e for e in man.entries("llmservingsim_meta") if e.get("run") == run]
    if not ms:
        raise DataError(f"{file}: raw/MANIFEST.yaml lists no meta.json for run {run!r}")
    return read_servingsim_meta(ms[0])


def read_servingsim_meta(entry: Entry) -> dict:
    doc = _read_json(entry)
    if not isinstance(doc, dict):
        raise DataError(f"{entry.rel}: row all, column all: expected a JSON object")
    _require(doc, ("model", "vllm_version", "engine_kwargs", "num_requests"), entry.rel)
    kw = doc["engine_kwargs"]
    _require(kw, ("tensor_parallel_size", "data_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                  "dtype"), entry.rel)
    for k, want in (("tensor_parallel_size", entry.get("tp")), ("data_parallel_size", entry.get("dp"))):
        if want is not None and int(kw[k]) != int(want):
            raise DataError(f"{entry.rel}: row all, column 'engine_kwargs.{k}': {kw[k]} but raw/MANIFEST.yaml "
                            f"says {want}")
    if doc["model"] != entry.get("model_source"):
        raise DataError(f"{entry.rel}: row all, column 'model': {doc['model']!r} but raw/MANIFEST.yaml says "
                        f"{entry.get('model_source')!r}")
    return doc


def read_servingsim_config(entry: Entry) -> None:
    doc = _read_json(entry)
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise DataError(f"{entry.rel}: row all, column 'nodes': expected a non-empty list")
    return None


def _kv(meta: dict | None, key: str) -> int:
    v = ((meta or {}).get("kv_cache") or {}).get(key)
    return int(v) if v is not None else -1


def read_servingsim_requests_file(entry: Entry, meta: dict | None = None) -> pd.DataFrame:
    if not entry.path.is_file():
        raise DataError(f"{entry.rel}: file missing (listed in raw/MANIFEST.yaml)")
    rows = []
    for i, line in enumerate(entry.path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{entry.rel}: row {i} (line {i + 1}): unreadable JSON line: {exc}") from None
        if not isinstance(rec, dict):
            raise DataError(f"{entry.rel}: row {i} (line {i + 1}): expected a JSON object")
        rows.append(rec)
    raw = pd.DataFrame(rows)
    run_schema(raw, schemas.raw("llmservingsim_requests"), entry.rel)
    # each request's engine timestamps come in order: queued <= scheduled <= first token <= last token
    for a, b in (("queued_ts", "scheduled_ts"), ("scheduled_ts", "first_token_ts"),
                 ("first_token_ts", "last_token_ts")):
        fail_rows(raw, (raw[b] < raw[a]).to_numpy(), entry.rel, b, f"earlier than {a} of the same request")
    fail_rows(raw, raw["request_id"].duplicated().to_numpy(), entry.rel, "request_id", "request id repeated")
    kw = (meta or {}).get("engine_kwargs", {})
    t0_arr = raw["arrival_time"].min()
    t0_eng = raw["queued_ts"].min()
    out = pd.DataFrame({
        "gpu": _entry_gpu(entry), "model_source": entry.get("model_source"), "engine": "vllm",
        "engine_version": str(entry.get("framework_version")), "tp": int(entry.get("tp")),
        "dp": int(entry.get("dp", 1)), "expert_parallel": bool(entry.get("expert_parallel", False)),
        "max_num_seqs": int(kw["max_num_seqs"]) if "max_num_seqs" in kw else -1,
        "max_num_batched_tokens": int(kw["max_num_batched_tokens"]) if "max_num_batched_tokens" in kw else -1,
        # the KV-cache size the engine logged (meta.json kv_cache, where the run records it; -1: not recorded)
        "kv_blocks_recorded": _kv(meta, "num_gpu_blocks"), "kv_block_size_recorded": _kv(meta, "block_size"),
        "run": entry.get("run"), "request_id": raw["request_id"].astype(str),
        "request_index": np.arange(len(raw), dtype="int64"),
        "input_tokens": raw["input_toks"].to_numpy("int64"), "output_tokens": raw["output_toks"].to_numpy("int64"),
        # client arrival (Unix epoch clock) and the engine's timestamps (monotonic clock) are two clocks:
        # each is taken relative to its own first value, never subtracted from the other
        "arrival_s": raw["arrival_time"].to_numpy("float64") - t0_arr,
        "queued_s": raw["queued_ts"].to_numpy("float64") - t0_eng,
        "scheduled_s": raw["scheduled_ts"].to_numpy("float64") - t0_eng,
        "first_token_s": raw["first_token_ts"].to_numpy("float64") - t0_eng,
        "last_token_s": raw["last_token_ts"].to_numpy("float64") - t0_eng})
    out["ttft_s"] = out["first_token_s"] - out["queued_s"]
    out["e2e_s"] = out["last_token_s"] - out["queued_s"]
    out["queue_wait_s"] = out["scheduled_s"] - out["queued_s"]
    n_dec = out["output_tokens"] - 1
    out["tpot_s"] = np.where(n_dec > 0, (out["last_token_s"] - out["first_token_s"]) / n_dec.clip(lower=1), np.nan)
    return _model_cols(out, "model_source", entry.rel)


def load_servingsim_requests(run=None, *, root=None) -> pd.DataFrame:
    """Per-request outcome of LLMServingSim's real vLLM runs: gpu, model, model_source, arch, moe, engine,
    engine_version, tp, dp, expert_parallel, max_num_seqs, max_num_batched_tokens, run, request_id,
    request_index (order in the file), input_tokens, output_tokens, arrival_s (client clock, from the
    run's first arrival), queued_s / scheduled_s / first_token_s / last_token_s (engine clock, from the
    run's first queued request), ttft_s (first token - queued), tpot_s ((last - first token) / (output
    tokens - 1); NaN for one-token outputs), e2e_s (last token - queued), queue_wait_s."""
    man = load_manifest(root)
    ents = man.entries("llmservingsim_requests")
    if run is not None:
        ents = [e for e in ents if e.get("run") == run]
    frames = [read_servingsim_requests_file(e, _servingsim_meta(man, e.get("run"), e.rel))[SERVINGSIM_REQUEST_COLUMNS]
              for e in ents]
    return _concat(frames, "llmservingsim_requests", None)


def read_servingsim_timeseries_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("llmservingsim_timeseries"), entry.rel, csv=True)
    fail_rows(raw, (raw["t"].diff() <= 0).to_numpy(), entry.rel, "t", "time does not increase", csv=True)
    out = pd.DataFrame({"gpu": _entry_gpu(entry), "model_source": entry.get("model_source"),
                        "tp": int(entry.get("tp")), "run": entry.get("run"),
                        "t_s": raw["t"].to_numpy("float64"),
                        "prompt_tokens_per_s": raw["prompt_throughput"].to_numpy("float64"),
                        "gen_tokens_per_s": raw["gen_throughput"].to_numpy("float64"),
                        "running": raw["running"].to_numpy("int64"), "waiting": raw["waiting"].to_numpy("int64"),
                        "kv_cache_pct": raw["kv_cache_pct"].to_numpy("float64")})
    return _model_cols(out, "model_source", entry.rel)


def load_servingsim_timeseries(run=None, *, root=None) -> pd.DataFrame:
    """The engine's 1-second series per LLMServingSim run: gpu, model, model_source, arch, moe, tp, run, t_s,
    prompt_tokens_per_s, gen_tokens_per_s, running, waiting (requests), kv_cache_pct."""
    ents = load_manifest(root).entries("llmservingsim_timeseries")
    if run is not None:
        ents = [e for e in ents if e.get("run") == run]
    cols = ["gpu", "model", "model_source", "arch", "moe", "arch_verified", "tp", "run", "t_s", "prompt_tokens_per_s",
            "gen_tokens_per_s", "running", "waiting", "kv_cache_pct"]
    return _concat([read_servingsim_timeseries_file(e)[cols] for e in ents], "llmservingsim_timeseries", None)


def read_servingsim_sim_file(entry: Entry) -> pd.DataFrame:
    """LLMServingSim's own simulator output for one run (SIMULATED by LLMServingSim, not measured): per request
    input/output tokens and TTFT, TPOT, end-to-end latency in seconds (the file's ns / 1e9)."""
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("llmservingsim_sim"), entry.rel, csv=True)
    fail_rows(raw, raw["request id"].duplicated().to_numpy(), entry.rel, "request id", "request id repeated", csv=True)
    fail_rows(raw, (raw["TTFT"] > raw["latency"]).to_numpy(), entry.rel, "TTFT", "longer than the request's latency",
              csv=True)
    out = pd.DataFrame({"gpu": _entry_gpu(entry), "model_source": entry.get("model_source"),
                        "tp": int(entry.get("tp")), "run": entry.get("run"),
                        "request_id": raw["request id"].astype(str),
                        "input_tokens": raw["input"].to_numpy("int64"), "output_tokens": raw["output"].to_numpy("int64"),
                        "ttft_s": raw["TTFT"].to_numpy("float64") * 1e-9,
                        "tpot_s": raw["TPOT"].to_numpy("float64") * 1e-9,
                        "e2e_s": raw["latency"].to_numpy("float64") * 1e-9,
                        "queue_wait_s": raw["queuing_delay"].to_numpy("float64") * 1e-9})
    return _model_cols(out, "model_source", entry.rel)


def load_servingsim_sim(run=None, *, root=None) -> pd.DataFrame:
    """LLMServingSim's own simulated replay of each run (its outputs/sim.csv; SIMULATED, in its authors' setup):
    gpu, model, model_source, arch, moe, tp, run, request_id, input_tokens, output_tokens, ttft_s, tpot_s, e2e_s,
    queue_wait_s."""
    ents = load_manifest(root).entries("llmservingsim_sim")
    if run is not None:
        ents = [e for e in ents if e.get("run") == run]
    cols = ["gpu", "model", "model_source", "arch", "moe", "arch_verified", "tp", "run", "request_id", "input_tokens",
            "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_wait_s"]
    return _concat([read_servingsim_sim_file(e)[cols] for e in ents], "llmservingsim_sim", None)


# --------------------------------------------------------------------------- ML.ENERGY
# the sets' GPU names -> steptime keys (v3 names the parts by family only; see raw/MANIFEST.yaml notes)
MLENERGY_GPUS = {"NVIDIA A100-SXM4-40GB": "a100-sxm-40gb", "NVIDIA H100 80GB HBM3": "h100-sxm",
                 "H100": "h100-sxm", "B200": "b200"}
V3_ARCH = {"Dense Transformer": "dense", "MoE": "moe", "Mamba-Transformer Hybrid": "hybrid"}


def _map_gpus(raw: pd.DataFrame, col: str, file) -> pd.Series:
    g = raw[col].map(MLENERGY_GPUS)
    fail_rows(raw, g.isna().to_numpy(), file, col, f"GPU name not known (known: {', '.join(MLENERGY_GPUS)})",
              csv=True)
    return g


MLENERGY_V2_COLUMNS = ["dataset", "task", "gpu", "model", "model_source", "arch", "moe", "arch_verified", "engine", "engine_version",
                       "dtype", "tp", "pp", "num_gpus", "max_num_seqs", "max_batch", "avg_batch", "mean_tpot_ms",
                       "output_tokens_per_s", "avg_output_len", "energy_per_request_j", "source_file"]


def read_mlenergy_v2_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("mlenergy_v2"), entry.rel, csv=True)
    f = time_factor(entry, "Avg TPOT (s)")
    fail_rows(raw, (raw["Avg BS (reqs)"] > raw["Max BS (reqs)"] * 1.0001).to_numpy(), entry.rel, "Avg BS (reqs)",
              "average running batch above the maximum", csv=True)
    bs = raw["file"].str.extract(r"bs(\d+)\+tp(\d+)\+pp(\d+)\.json$")
    fail_rows(raw, bs.isna().any(axis=1).to_numpy(), entry.rel, "file", "not a bs<N>+tp<N>+pp<N>.json path",
              csv=True)
    bs = bs.astype("int64")
    fail_rows(raw, (bs[1] != raw["TP"]).to_numpy() | (bs[2] != raw["PP"]).to_numpy(), entry.rel, "TP",
              "disagrees with the tp/pp of its file name", csv=True)
    # with pipeline parallelism the running batch spans the stages: Max BS = bs<N> x pp
    fail_rows(raw, (bs[0] * raw["PP"] != raw["Max BS (reqs)"]).to_numpy(), entry.rel, "Max BS (reqs)",
              "disagrees with bs<N> x pp of its file name", csv=True)
    df = pd.DataFrame({"dataset": "mlenergy-v2", "task": raw["task"].astype(str),
                       "gpu": _map_gpus(raw, "GPU", entry.rel), "model_source": raw["Model"].astype(str),
                       "engine": "vllm", "engine_version": str(entry.get("framework_version")), "dtype": "bfloat16",
                       "tp": raw["TP"].to_numpy("int64"), "pp": raw["PP"].to_numpy("int64")})
    df["num_gpus"] = df["tp"] * df["pp"]
    df["max_num_seqs"] = bs[0].to_numpy("int64")
    df["max_batch"] = raw["Max BS (reqs)"].to_numpy("int64")
    df["avg_batch"] = raw["Avg BS (reqs)"].to_numpy("float64")
    df["mean_tpot_ms"] = raw["Avg TPOT (s)"].to_numpy("float64") * f
    df["output_tokens_per_s"] = raw["Token tput (tok/s)"].to_numpy("float64")
    df["avg_output_len"] = raw["Avg Output Tokens"].to_numpy("float64")
    df["energy_per_request_j"] = raw["Energy/req (J)"].to_numpy("float64")
    df["source_file"] = raw["file"].astype(str)
    return _model_cols(df, "model_source", entry.rel, "Model")[MLENERGY_V2_COLUMNS]


MLENERGY_V3_COLUMNS = ["dataset", "task", "gpu", "model", "model_source", "arch", "moe", "arch_verified", "engine", "engine_version",
                       "dtype", "tp", "ep", "dp", "num_gpus", "max_num_seqs", "avg_batch", "median_itl_ms",
                       "p90_itl_ms", "p95_itl_ms", "p99_itl_ms", "output_tokens_per_s", "avg_output_len",
                       "avg_power_w", "energy_per_token_j", "energy_per_request_j", "total_params_b",
                       "activated_params_b", "nickname"]


def read_mlenergy_v3_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("mlenergy_v3"), entry.rel, csv=True)
    f = time_factor(entry, "*_itl_ms")
    itl = raw[["median_itl_ms", "p90_itl_ms", "p95_itl_ms", "p99_itl_ms"]].to_numpy("float64")
    fail_rows(raw, (np.diff(itl, axis=1) < -1e-9).any(axis=1), entry.rel, "p90_itl_ms",
              "inter-token latency percentiles not increasing (median <= p90 <= p95 <= p99)", csv=True)
    fail_rows(raw, (raw["avg_batch_size"] > raw["max_num_seqs"] * 1.0001).to_numpy(), entry.rel, "avg_batch_size",
              "average running batch above max_num_seqs", csv=True)
    fail_rows(raw, (raw["activated_params_billions"] > raw["total_params_billions"] + 1e-9).to_numpy(), entry.rel,
              "activated_params_billions", "more activated than total parameters", csv=True)
    fail_rows(raw, ~raw["architecture"].isin(list(V3_ARCH)).to_numpy(), entry.rel, "architecture",
              f"unknown architecture (known: {', '.join(V3_ARCH)})", csv=True)
    df = pd.DataFrame({"dataset": "mlenergy-v3", "task": raw["task"].astype(str),
                       "gpu": _map_gpus(raw, "gpu_model", entry.rel), "model_source": raw["model_id"].astype(str),
                       "engine": "vllm", "engine_version": str(entry.get("framework_version")),
                       "dtype": raw["weight_precision"].astype(str)})
    for a, b in (("tp", "tensor_parallel"), ("ep", "expert_parallel"), ("dp", "data_parallel"),
                 ("num_gpus", "num_gpus"), ("max_num_seqs", "max_num_seqs")):
        df[a] = raw[b].to_numpy("int64")
    df["avg_batch"] = raw["avg_batch_size"].to_numpy("float64")
    for c in ("median_itl_ms", "p90_itl_ms", "p95_itl_ms", "p99_itl_ms"):
        df[c] = raw[c].to_numpy("float64") * f
    df["output_tokens_per_s"] = raw["output_throughput_tokens_per_sec"].to_numpy("float64")
    df["avg_output_len"] = raw["avg_output_len"].to_numpy("float64")
    df["avg_power_w"] = raw["avg_power_watts"].to_numpy("float64")
    df["energy_per_token_j"] = raw["energy_per_token_joules"].to_numpy("float64")
    df["energy_per_request_j"] = raw["energy_per_request_joules"].to_numpy("float64")
    df["total_params_b"] = raw["total_params_billions"].to_numpy("float64")
    df["activated_params_b"] = raw["activated_params_billions"].to_numpy("float64")
    df["nickname"] = raw["nickname"].astype(str)
    df = _model_cols(df, "model_source", entry.rel, "model_id")
    # the dataset's own architecture column must agree with the configuration facts
    theirs = raw["architecture"].map(V3_ARCH)
    fail_rows(raw, (theirs != df["arch"]).to_numpy(), entry.rel, "architecture",
              f"disagrees with the model's configuration facts in {ARCH_FILE.name}", csv=True)
    return df[MLENERGY_V3_COLUMNS]


def load_mlenergy(version: str = "v3", *, root=None) -> pd.DataFrame:
    """ML.ENERGY leaderboard rows, one per served configuration (averages under continuous batching,
    not isolated steps).

    v2 (vLLM 0.5.4, A100-SXM4-40GB and H100): dataset, task, gpu, model, model_source, arch, moe, engine,
    engine_version, dtype, tp, pp, num_gpus, max_num_seqs (the bs<N> of the source file), max_batch (the
    most requests running at once: max_num_seqs x pp), avg_batch (measured mean running batch),
    mean_tpot_ms, output_tokens_per_s, avg_output_len, energy_per_request_j, source_file.
    v3 (vLLM 0.11.1, H100 and B200): the same keys with ep, dp instead of pp, and median_itl_ms, p90/p95/
    p99_itl_ms, avg_power_w, energy_per_token_j, total_params_b, activated_params_b, nickname.
    """
    if version not in ("v2", "v3"):
        raise ValueError(f"version must be 'v2' or 'v3', not {version!r}")
    table = f"mlenergy_{version}"
    reader = read_mlenergy_v2_file if version == "v2" else read_mlenergy_v3_file
    return _concat([reader(e) for e in load_manifest(root).entries(table)], table, None)


# --------------------------------------------------------------------------- AIConfigurator silicon
SILICON_COLUMNS = ["id", "gpu", "model", "model_source", "arch", "moe", "arch_verified", "engine", "engine_version", "precision",
                   "gemm_quant_mode", "moe_quant_mode", "mode", "isl", "osl", "concurrency", "tp", "pp",
                   "attention_dp", "moe_tp", "moe_ep", "ttft_ms", "tpot_ms", "silicon_data_source"]


def read_silicon_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.path)
    run_schema(raw, schemas.raw("aic_silicon"), entry.rel, csv=True)
    reserved = raw["model_path"].astype(str).str.contains(RESERVED_MODELS)
    fail_rows(raw, reserved.to_numpy(), entry.rel, "model_path",
              "a reserved Llama-3.1-8B/70B row (an outside check of this project: never vendored or read)",
              csv=True)

    sysname = raw["system"].astype(str)
    keys = {}
    for s in sysname.unique():
        try:
            keys[s] = gpu_key(s)
        except KeyError as exc:
            row = int(np.flatnonzero((sysname == s).to_numpy())[0])
            raise DataError(f"{entry.rel}: row {row} (line {row + 2}), column 'system': {exc}") from None
    agg = raw["mode"].eq("agg")
    for c in ("batch_size", "tp_size"):
        fail_rows(raw, (agg & raw[c].isna()).to_numpy(), entry.rel, c, "missing on an aggregated-serving row",
                  csv=True)
    f_ttft, f_tpot = time_factor(entry, "silicon_ttft_ms"), time_factor(entry, "silicon_tpot_ms")

    def opt_int(c):
        return raw[c].astype("Int64")

    df = pd.DataFrame({"id": raw["id"].astype(str), "gpu": sysname.map(keys),
                       "model_source": raw["model_path"].astype(str), "engine": raw["backend"].astype(str),
                       "engine_version": raw["backend_version"].astype("string"),
                       "precision": raw["precision"].astype("string"),
                       "gemm_quant_mode": raw["gemm_quant_mode"].astype("string"),
                       "moe_quant_mode": raw["moe_quant_mode"].astype("string"),
                       "mode": raw["mode"].astype(str), "isl": raw["isl"].to_numpy("int64"),
                       "osl": raw["osl"].to_numpy("int64"), "concurrency": opt_int("batch_size"),
                       "tp": opt_int("tp_size"), "pp": opt_int("pp_size"), "attention_dp": opt_int("attention_dp_size"),
                       "moe_tp": opt_int("moe_tp_size"), "moe_ep": opt_int("moe_ep_size"),
                       "ttft_ms": raw["silicon_ttft_ms"].to_numpy("float64") * f_ttft,
                       "tpot_ms": raw["silicon_tpot_ms"].to_numpy("float64") * f_tpot,
                       "silicon_data_source": raw["silicon_data_source"].astype(str)})
    return _model_cols(df, "model_source", entry.rel, "model_path")[SILICON_COLUMNS]


def load_aic_silicon(*, root=None) -> pd.DataFrame:
    """AIConfigurator's end-to-end serving measurements on silicon (the Llama-3.1 rows are not here and are
    refused if they appear): id, gpu, model, model_source, arch, moe, engine (trtllm / vllm / sglang),
    engine_version (<NA> where not recorded), precision, gemm_quant_mode, moe_quant_mode, mode (agg /
    disagg), isl, osl, concurrency (client concurrency), tp, pp, attention_dp, moe_tp, moe_ep (<NA> on
    disaggregated rows, whose layout is per pool), ttft_ms, tpot_ms, silicon_data_source."""
    return _concat([read_silicon_file(e) for e in load_manifest(root).entries("aic_silicon")], "aic_silicon", None)


# --------------------------------------------------------------------------- fp8 GEMM
def load_aic_gemm_fp8(gpu=None, *, root=None) -> pd.DataFrame:
    """fp8 W8A8 GEMM latencies (per-tensor scaled, vLLM's CutlassFP8ScaledMMLinearKernel), the same columns
    as load_aic_gemm: min_bytes and hbm_floor_ms count 1-byte operands, the compute check uses the
    datasheet fp8 peak. No fp8 rows exist for Ampere GPUs."""
    ents = load_manifest(root).entries("aic_gemm_fp8", _gpu_filter(gpu))
    return _concat([read_gemm_file(e) for e in ents], "aic_gemm_fp8", gpu)
