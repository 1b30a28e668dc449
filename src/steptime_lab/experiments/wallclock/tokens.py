"""Wall-clock token times (E2.11, E1.21): TPOT as one decode step at the measured mean batch, the
token-time table from the tidy ML.ENERGY / AIConfigurator silicon tables, isolated prefills, and the
records of `steptime evaluate --family wallclock`.

Part of `steptime_lab.experiments.wallclock` (import from there).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from steptime.errors import SteptimeError
from steptime.io import read_yaml
from steptime_lab.experiments.wallclock.fpm import FpmSpec, engine_constants_doc, engine_profile, fpm_steps, run_fpm
from steptime_lab.experiments.wallclock.steps import GPU_KINDS, WallclockError, make_predictor, records
from steptime.errors import UnknownModelError
from steptime.specs import get_model
from steptime.specs.engines import SERVER_FIELDS, get_engine
from steptime_lab.experiments.wallclock.fpm import fitted_values
from steptime_lab.metrics import score


# ---------------------------------------------------------------------------------------
# E2.11: token time as one decode step at the measured mean batch (an approximation)
TPOT_COLUMNS = ("dataset", "gpu", "model", "engine", "tp", "dtype", "mode", "batch", "prompt_tokens",
                "output_tokens", "tpot_ms")
TPOT_NOTE = ("TPOT approximated as ONE decode step at the measured mean running batch (linear between the two "
             "integer batches around it), every request at the mean context prompt + output/2, plus for "
             "aggregated serving the prefill of the requests that arrive meanwhile, amortised over the decode "
             "steps (batch / output_tokens prefills of prompt_tokens per step, GPU kernel time only). This "
             "approximates a continuous-batching schedule; it is not a replay of one. Silicon rows that record "
             "no precision are predicted in bf16 (ASSUMED; counted per group in metrics.dtype_assumed).")


def mean_context(prompt_tokens, output_tokens):
    """Mean KV length a decode step reads over a request's life: the prompt plus half the output."""
    return np.asarray(prompt_tokens, dtype=float) + np.asarray(output_tokens, dtype=float) / 2.0


def _frame(tp, phase, *, ctx_tokens=0, ctx_requests=0, prefix=0, decodes=0, kv=0.0):
    """The one step-frame schema the step predictor reads (every builder below fills it): prompt tokens, prompts,
    their prefix (KV already cached), decodes and the decodes' mean KV, per row at tensor parallelism `tp`."""
    import pandas as pd

    return pd.DataFrame({"tp": tp, "phase": phase, "ctx_tokens": ctx_tokens, "ctx_requests": ctx_requests,
                         "ctx_kv_tokens": prefix, "decode_requests": decodes, "mean_decode_kv_tokens": kv})


def _tokens(x, floor: int):
    """Token counts rounded to whole tokens, at least `floor` (a step carries >= 2 prompt tokens)."""
    return np.maximum(np.asarray(x, dtype=float).round(), floor).astype(int)


def _decode_frame(n, kv, tp):
    return _frame(tp, "decode", decodes=np.asarray(n, dtype=int), kv=np.asarray(kv, float))


def _prefill_frame(tokens, tp):
    return _prefill_steps(tokens, 1, tp)


VARIANTS = ("naive", "mixed")
MIXED_NOTE = ("mixed: what the engine runs in aggregated serving. Arriving requests' prompts ride in the decode steps: "
              "on average P = batch x prompt / output prefill tokens per step. A chunking engine (mixed.chunked) "
              "carries a prompt in chunks of min(prompt, token budget - batch) tokens inside a step with the batch's "
              "decodes, so a fraction f = P / chunk of the steps is a mixed step (batch decodes + one chunk, the chunk "
              "reading half the prompt before it as prefix) and the rest pure decode steps; TPOT = (1 - f) t_decode "
              "+ f t_mixed, every step the whole engine step (host, launches, sampling). An engine that does not chunk "
              "runs each prompt as a prefill step of its own between decode steps: TPOT = t_decode + (P / prompt) "
              "t_prefill. f is capped at 1 (the engine saturated: every step full). Static batches: the decode step. "
              "An engine that runs prefill first in steps of its own (engines.yaml schedule.mixed_prefill false: "
              "SGLang's default) on a closed loop of c clients with fixed prompt and output lengths (AIConfigurator "
              "silicon, CONCURRENCY_DATASETS) keeps its requests in step: each round arrives as a wave, its c x "
              "prompt tokens run as prefill-only steps of up to the token budget before any decode, and every "
              "request decodes and finishes with the others (WAVE_NOTE). Elsewhere (spread arrivals) such an engine "
              "is priced as an engine that does not chunk.")
WAVE_NOTE = ("prefill-first wave (engines.yaml schedule.mixed_prefill false, closed-loop rows): the n = min(c, KV "
             "capacity) requests of a round prefill as one stream of n x ISL tokens in K = ceil(n ISL / budget) "
             "prefill-only steps of up to `budget` tokens (the last one the remainder; a step of s tokens holds s / "
             "ISL prompts); request i's first token comes with step k_i = ceil((i + 1) ISL / budget), and it then "
             "waits for the wave's remaining K - k_i prefill steps before the round's OSL - 1 decode steps at batch "
             "n. TPOT as the benchmark reports it, the time from the first token to the last over OSL - 1: t_decode "
             "+ mean_i(wait_i) / (OSL - 1). Prefills of other rounds never land inside a request's decode, unlike "
             "the spread-arrival amortisation (P = batch x prompt / output prefill tokens in every request's "
             "decode), which charges a request every prompt of its round.")


def _mixed_frame(n, kv, chunk, prefix, tp):
    return _frame(tp, "mixed", ctx_tokens=_tokens(chunk, 2), ctx_requests=1, prefix=_tokens(prefix, 0),
                  decodes=np.asarray(n, dtype=int), kv=np.asarray(kv, float))


def mixed_schedule(batch, prompt_tokens, output_tokens, *, chunked: bool, token_budget: float | None):
    """(prefill tokens per step P, chunk tokens, prefix tokens a chunk reads, fraction f of steps carrying
    prefill) of aggregated serving at mean batch `batch` (MIXED_NOTE)."""
    B, isl, osl = (np.asarray(a, dtype=float) for a in (batch, prompt_tokens, output_tokens))
    P = B * isl / np.maximum(osl, 1.0)
    if chunked:
        if token_budget is None or token_budget <= 0:
            raise WallclockError("a chunking engine needs a token budget > 0")
        chunk = np.maximum(np.minimum(isl, token_budget - B), 2.0)
    else:
        chunk = np.maximum(isl, 2.0)
    prefix = np.where(isl > chunk, (isl - chunk) / 2.0, 0.0)
    return P, chunk, prefix, np.minimum(P / chunk, 1.0)


KV_CAP_NOTE = ("KV capacity: the running batch of the one-step prediction is min(batch, capacity), capacity the "
               "requests of ISL + OSL/2 cached tokens (the mean context over a request's life) that the KV cache "
               "holds (steptime.serve.kv_capacity_requests: steptime.serve.memory.kv_budget, the one memory model "
               "the serving simulator's blocks and E2.11's TTFT wave also read; weights sharded by TP/EP, bf16 KV, "
               "whole blocks of 16 tokens per request, windowed layers (gpt-oss's sliding window, Llama 4's chunk) "
               "at most their window plus one block, a hybrid's per-request linear-attention state, a dense model's "
               "every layer every token (models.yaml's Gemma 2 / Phi-3 sliding_window is recorded, not read), "
               "gpu_memory_utilization 0.9: vLLM's EngineArgs default, ASSUMED for SGLang and TensorRT-LLM too). "
               "An engine cannot run more requests than its cache holds; the rest queue (their wait shows in "
               "TTFT, not TPOT). Applied only where the row's batch is the client concurrency (AIConfigurator "
               "silicon); ML.ENERGY's batch is the engine's measured mean running batch and is left as measured.")


def kv_running(batch, capacity):
    """(running batch, capped mask): `batch` capped at `capacity` requests (None: uncapped), never below 1."""
    B = np.asarray(batch, dtype=float)
    if capacity is None:
        return B, np.zeros(B.shape, dtype=bool)
    cap = np.asarray(capacity, dtype=float)
    if np.any(np.isnan(cap)) or np.any(cap < 0):
        raise WallclockError("KV capacity must be >= 0 requests (got a negative or NaN capacity)")
    cap = np.broadcast_to(np.maximum(cap, 1.0), B.shape)
    return np.minimum(B, cap), B > cap


def wave_wait_ms(running, prompt_tokens, token_budget: float, predictor: Callable, tp: int) -> np.ndarray:
    """Per row: the mean time a request of a prefill-first wave waits, after its first token, for the rest of
    its wave's prefill steps (WAVE_NOTE); `running` requests of `prompt_tokens` each, steps of up to
    `token_budget` tokens priced by `predictor` (the whole engine step)."""
    if token_budget is None or token_budget <= 0:
        raise WallclockError("a prefill-first wave needs the engine's token budget > 0")
    n = np.maximum(np.floor(np.asarray(running, dtype=float)), 1).astype(int)
    isl = np.maximum(np.asarray(prompt_tokens, dtype=float), 2.0)
    stream = n * isl
    K = np.ceil(stream / token_budget)
    full = np.minimum(token_budget, stream)
    last = stream - (K - 1) * token_budget
    t_full = predictor(_prefill_steps(full, full / isl, tp), tp, None)["total"]
    t_last = predictor(_prefill_steps(last, np.maximum(last / isl, 1.0), tp), tp, None)["total"]
    out = np.zeros(len(n))
    for r in range(len(n)):
        k = np.ceil((np.arange(n[r]) + 1) * isl[r] / token_budget)  # the step that carries request i's first token
        later = K[r] - k                                             # prefill steps after it (the last one among them)
        out[r] = float(np.mean(np.where(later > 0, (later - 1) * t_full[r] + t_last[r], 0.0)))
    return out


def schedule_args(engine: str, rows) -> dict:
    """predict_tpot's schedule arguments for `rows` of one engine: whether the engine runs prefill first
    (engines.yaml schedule.mixed_prefill false) and which rows are a closed loop (CONCURRENCY_DATASETS), where
    such an engine runs each round as a wave (WAVE_NOTE)."""
    return {"prefill_first": not get_engine(engine).mixes_prefill(),
            "closed_loop": rows["dataset"].isin(CONCURRENCY_DATASETS).to_numpy()}


def _gpu_of(r: dict):
    """The GPU-work part (GPU_KINDS) of a predictor's result; NaN where the predictor states no term kinds."""
    if all(k in r for k in GPU_KINDS):
        return sum(np.asarray(r[k], dtype=float) for k in GPU_KINDS)
    return np.full(np.shape(r["total"]), np.nan)


def predict_tpot(rows, predictor: Callable, kernels: Callable | None = None, tp: int = 1, *,
                 variant: str = "naive", chunked: bool = True, token_budget: float | None = None,
                 capacity=None, prefill_first: bool = False, closed_loop=None) -> dict:
    """Predicted TPOT (ms) for rows of ONE (gpu, model, engine, tp, dtype): decode step at the
    mean batch, plus for mode == 'agg' either (variant 'naive') the amortised prefill (GPU kernel
    time of a 1 x prompt prefill from `kernels`, times batch / output_tokens) or (variant 'mixed')
    the steps the engine runs with the arriving prompts inside (MIXED_NOTE; `chunked` and
    `token_budget` are the engine's). `capacity` (requests, a number or one per row; None: uncapped):
    the batch is first capped at it (KV_CAP_NOTE); `running` and `capped` are returned. `prefill_first`
    (the engine's schedule.mixed_prefill is false) with `closed_loop` (a mask: rows of a closed loop with fixed
    lengths) prices those rows' mixed variant as a prefill-first wave (WAVE_NOTE); other rows of such an
    engine as an engine that does not chunk.

    Beside the prediction, the GPU-work part (GPU_KINDS, steptime.step's split) of `predictor`'s OWN steps:
    `decode_gpu_ms` (the decode step at the mean batch) and, in the naive variant, `prefill_amortised_gpu_ms`
    and `prefill_amortised_host_ms` (the engine's 1 x prompt prefill step split the same way, times batch /
    output_tokens, on aggregated rows where `kernels` prices the amortised prefill; 0 elsewhere; NaN in the
    mixed variant, which does not split them, and where `predictor` states no term kinds)."""
    if variant not in VARIANTS:
        raise WallclockError(f"unknown TPOT variant {variant!r} (known: {', '.join(VARIANTS)})")
    B0 = rows["batch"].to_numpy(float)
    if np.any(B0 <= 0):
        raise WallclockError("TPOT rows: mean running batch must be > 0")
    B, capped = kv_running(B0, capacity)
    kv = mean_context(rows["prompt_tokens"], rows["output_tokens"])
    lo = np.maximum(np.floor(B), 1).astype(int)
    hi = np.maximum(np.ceil(B), 1).astype(int)
    r_lo = predictor(_decode_frame(lo, kv, tp), tp, None)
    r_hi = predictor(_decode_frame(hi, kv, tp), tp, None)
    t_lo, t_hi = r_lo["total"], r_hi["total"]
    w = np.where(hi > lo, B - lo, 0.0)
    dec = t_lo + w * (t_hi - t_lo)
    g_lo, g_hi = _gpu_of(r_lo), _gpu_of(r_hi)
    dec_gpu = g_lo + w * (g_hi - g_lo)
    pre = np.zeros(len(rows))
    nan = np.full(len(rows), np.nan)
    pre_gpu, pre_host = (np.zeros(len(rows)), np.zeros(len(rows))) if variant == "naive" else (nan, nan.copy())
    agg = (rows["mode"] == "agg").to_numpy()
    if variant == "mixed" and agg.any():
        wave = np.zeros(len(rows), dtype=bool)
        if prefill_first:
            wave = agg & (np.ones(len(rows), bool) if closed_loop is None else np.asarray(closed_loop, dtype=bool))
            if wave.any():
                osl = rows["output_tokens"].to_numpy(float)[wave]
                pre[wave] = wave_wait_ms(B[wave], rows["prompt_tokens"].to_numpy(float)[wave], token_budget,
                                         predictor, tp) / np.maximum(osl - 1.0, 1.0)
            agg = agg & ~wave
            chunked = False  # spread arrivals: each prompt a prefill step of its own (MIXED_NOTE)
    if variant == "mixed" and agg.any():
        isl = rows["prompt_tokens"].to_numpy(float)[agg]
        P, chunk, prefix, f = mixed_schedule(B[agg], isl, rows["output_tokens"].to_numpy(float)[agg],
                                             chunked=chunked, token_budget=token_budget)
        if chunked:
            m_lo = predictor(_mixed_frame(lo[agg], kv[agg], chunk, prefix, tp), tp, None)["total"]
            m_hi = predictor(_mixed_frame(hi[agg], kv[agg], chunk, prefix, tp), tp, None)["total"]
            t_mix = m_lo + w[agg] * (m_hi - m_lo)
            pre[agg] = f * (t_mix - dec[agg])  # (1 - f) t_decode + f t_mixed = t_decode + f (t_mixed - t_decode)
        else:
            pre[agg] = (P / chunk) * predictor(_prefill_frame(isl, tp), tp, None)["total"]
    elif kernels is not None and agg.any():
        per = B[agg] / np.maximum(rows["output_tokens"].to_numpy(float)[agg], 1.0)
        frame = _prefill_frame(rows["prompt_tokens"].to_numpy()[agg], tp)
        pre[agg] = kernels(frame, tp, None)["total"] * per
        e_pre = predictor(frame, tp, None)  # the engine's own prefill step, split into GPU work and host
        pre_gpu[agg] = _gpu_of(e_pre) * per
        pre_host[agg] = (e_pre["total"] - _gpu_of(e_pre)) * per
    return {"decode_ms": dec, "prefill_amortised_ms": pre, "pred_ms": dec + pre, "decode_gpu_ms": dec_gpu,
            "prefill_amortised_gpu_ms": pre_gpu, "prefill_amortised_host_ms": pre_host,
            "running": B, "capped": capped}


CONCURRENCY_DATASETS = ("aic-silicon",)  # rows whose `batch` is the client concurrency, not a measured running batch


def kv_capacity(rows, model, gpu, tp: int, *, ep: int = 1, dtype: str = "bf16", pol=None) -> np.ndarray:
    """Per row: the requests of mean context ISL + OSL/2 the engine's KV cache holds (KV_CAP_NOTE), for rows
    whose batch is the client concurrency (CONCURRENCY_DATASETS); inf (no cap) where the batch is the engine's
    measured mean running batch (ML.ENERGY), which the engine did hold."""
    from steptime.serve.sim import kv_capacity_requests

    conc = rows["dataset"].isin(CONCURRENCY_DATASETS).to_numpy() if "dataset" in rows else np.ones(len(rows), bool)
    out = np.full(len(rows), np.inf)
    if conc.any():
        ctx = mean_context(rows["prompt_tokens"], rows["output_tokens"])[conc]
        out[conc] = kv_capacity_requests(model, gpu, ctx, tp=tp, ep=ep, dtype=dtype, kv_dtype="bf16", pol=pol)
    return out


DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp8": "fp8", "float8": "fp8"}
# ML.ENERGY v3's token-time measure (tpot_table's v3_measure): the leaderboard's median inter-token latency, or the
# steady-state mean time between a running request's tokens by Little's law (V3_STEADY_MEAN_NOTE)
V3_MEASURES = ("median_itl_ms", "steady_mean_itl_ms")
# ML.ENERGY v2's token-time measure (tpot_table's v2_measure): the leaderboard's "Avg TPOT", or the same steady-state
# mean by Little's law as v3's (V2_STEADY_MEAN_NOTE)
V2_MEASURES = ("mean_tpot_ms", "steady_mean_itl_ms")
V2_STEADY_MEAN_NOTE = (
    "ML.ENERGY v2 steady_mean_itl_ms = avg_batch / output_tokens_per_s x 1000 (Little's law, as V3_STEADY_MEAN_NOTE; "
    "no constant). The leaderboard's columns are built by benchmark/llm_text_generation/{chat,code}/scripts/"
    "aggregate_leaderboard_data.py (ml-energy/leaderboard-v2, the vendored commit c3af7f3) from the patched vLLM "
    "0.5.4 server's per-iteration stats: 'Avg BS' is the mean of num_running_sys over the iterations up to the first "
    "one (from the third) with no request waiting (ss_end_iter: the steady state, the queue non-empty), 'Token tput' "
    "the generated tokens of those same iterations over the steady-state window's time, but 'Avg TPOT' the mean "
    "over EVERY iteration of the run that logged a decode (the drain after the queue empties included, each "
    "iteration weighted alike whatever its batch) of the mean time_per_output_tokens_iter (vLLM V0 "
    "LLMEngine._get_stats: for each decoding sequence group of the step, the time since its previous token). "
    "So Avg TPOT mixes the steady steps at avg_batch with the drain's steps at a falling batch, and sits below the "
    "steady-state step at avg_batch the more the larger the batch (the drain is up to max_tokens = 1024 steps "
    "long whatever the batch, the steady state ~ requests x output / batch steps): steady mean / Avg TPOT "
    "1.00-1.15 at <= 70 running requests, 1.07-2.98 at 200-600, 1.16-2.55 at 600-1300 (the 267 dense TP-only rows). "
    "The mixed variant predicts the steady-state step at avg_batch, so E2.11 compares it with this mean.")
V3_STEADY_MEAN_NOTE = (
    "ML.ENERGY v3 steady_mean_itl_ms = avg_batch / output_tokens_per_s x 1000: by Little's law the mean time between "
    "two tokens of a running request over the run's steady state, read from the leaderboard's own columns (no "
    "constant). Both are steady-state quantities: avg_batch is the steady-state mean of vLLM's "
    "vllm:num_requests_running (ml-energy/benchmark docs/analyzing-results.md, prometheus.json steady_state_stats), and "
    "the vendored throughput is the steady-state one (avg_power_w / (energy_per_token_j x output_tokens_per_s) = 1 to "
    "machine precision on every dense v3 row; the benchmark's steady_state window: mlenergy/benchmark/llm/benchmark.py, "
    "between the B-th and the (N - B)-th first token). The leaderboard's median_itl_ms is the median over every "
    "streamed token's client-side gap, with a 0 for each token bundled into a chunk (benchmark.py's itl list), so it "
    "sits at the typical step and below the mean wherever the slower steps (a prompt chunk inside the step, a stall) "
    "or bundled chunks are frequent: median / steady mean 0.56-1.07 on the 203 dense lm-arena-chat and gpqa rows (above 1 "
    "only on 16 gpqa rows), lowest for the large models at large batches (Llama-3.1-405B TP 8 on B200: 0.98 at 8 requests, 0.69 at 255-510, 0.56 at 3589). The mixed "
    "variant predicts the mean over the steps the engine runs ((1 - f) t_decode + f t_mixed), which is this mean, "
    "not the median.")


def tpot_table(mlenergy_v2=None, mlenergy_v3=None, silicon=None, prompt_tokens: dict | None = None,
               v3_measure: str = "median_itl_ms", v2_measure: str = "mean_tpot_ms"):
    """One TPOT frame (TPOT_COLUMNS + `measure`, `source_id`) from the tidy token-time tables, and
    the rows left out with their reason (a count per reason and dataset).

    ML.ENERGY: `avg_batch` is the measured mean running batch; the prompt length is not
    published, so the mean prompt comes from `prompt_tokens[(dataset, task)]` (an ASSUMED
    estimate, given by the caller); v2 gives the mean TPOT, v3 the MEDIAN inter-token latency
    (the measure compared is named per row; `v3_measure` 'steady_mean_itl_ms' compares v3 rows with the
    steady-state mean time per token instead, V3_STEADY_MEAN_NOTE; `v2_measure` 'steady_mean_itl_ms' the same for
    v2, V2_STEADY_MEAN_NOTE). AIConfigurator silicon: the client
    concurrency stands for the running batch, prompt and output lengths are exact (isl, osl)."""
    import pandas as pd

    if v3_measure not in V3_MEASURES:
        raise WallclockError(f"unknown ML.ENERGY v3 measure {v3_measure!r} (known: {', '.join(V3_MEASURES)})")
    if v2_measure not in V2_MEASURES:
        raise WallclockError(f"unknown ML.ENERGY v2 measure {v2_measure!r} (known: {', '.join(V2_MEASURES)})")

    rows, skipped = [], []

    def skip(dataset, reason, n):
        if n:
            skipped.append({"dataset": dataset, "reason": reason, "rows": int(n)})

    prompt_tokens = prompt_tokens or {}
    for name, df, measure in (("mlenergy-v2", mlenergy_v2, v2_measure), ("mlenergy-v3", mlenergy_v3, v3_measure)):
        if df is None:
            continue
        x = df.copy()
        if measure == "steady_mean_itl_ms":
            x[measure] = x["avg_batch"].to_numpy(float) / x["output_tokens_per_s"].to_numpy(float) * 1e3
        skip(name, "MoE: scored in E3.4 (MoE wall clock), not here", x["moe"].astype(bool).sum())
        x = x[~x["moe"].astype(bool)]
        if "arch" in x:
            skip(name, "architecture not modelled (hybrid)", (x["arch"] == "hybrid").sum())
            x = x[x["arch"] == "dense"]
        for col, why in (("pp", "pipeline parallelism > 1 not modelled"), ("dp", "data parallelism > 1 not modelled"),
                         ("ep", "expert parallelism > 1 not modelled")):
            if col in x:
                skip(name, why, (x[col] > 1).sum())
                x = x[x[col] <= 1]
        key = [(name, t) for t in x["task"]]
        known = np.array([k in prompt_tokens for k in key], dtype=bool)
        skip(name, "task without a stated prompt-length estimate (multimodal or unlisted)", (~known).sum())
        x = x[known]
        rows.append(pd.DataFrame({
            "dataset": name, "gpu": x["gpu"].to_numpy(), "model": x["model"].to_numpy(),
            "model_source": x["model_source"].astype(str).to_numpy(),
            "engine": [engine_profile(e, v) for e, v in zip(x["engine"], x["engine_version"])],
            "tp": x["tp"].to_numpy(int), "dtype": [DTYPES.get(str(d).lower(), str(d).lower()) for d in x["dtype"]],
            "mode": "agg", "batch": x["avg_batch"].to_numpy(float),
            "prompt_tokens": [float(prompt_tokens[(name, t)]) for t in x["task"]],
            "output_tokens": x["avg_output_len"].to_numpy(float), "tpot_ms": x[measure].to_numpy(float),
            "measure": measure, "task": x["task"].to_numpy(),
            "source_id": x.get("source_file", x["model"]).astype(str).to_numpy()}))
    if silicon is not None:
        name = "aic-silicon"
        x = silicon.copy()
        skip(name, "MoE: scored in E3.4 (MoE wall clock), not here", x["moe"].astype(bool).sum())
        x = x[~x["moe"].astype(bool)]
        skip(name, "disaggregated serving (per-pool layout not modelled)", (x["mode"] != "agg").sum())
        x = x[x["mode"] == "agg"]
        pp = x["pp"].fillna(1).astype(int)
        skip(name, "pipeline parallelism > 1 not modelled", (pp > 1).sum())
        x = x[pp <= 1]
        prec = x["precision"].astype("string").fillna("").str.lower()
        quant = x["gemm_quant_mode"].astype("string").fillna("").str.lower()
        dtype = np.where(quant.eq("fp8") | prec.eq("fp8"), "fp8",
                         np.where(prec.isin(["bf16", "bfloat16", "fp16", "float16"]) | (prec.eq("") & quant.eq("")),
                                  "bf16", "other:" + prec))
        other = np.char.startswith(dtype.astype(str), "other:")
        skip(name, "precision not modelled (fp4 / block-scaled fp8)", other.sum())
        x, dtype, prec, quant = x[~other], dtype[~other], prec[~other], quant[~other]
        rows.append(pd.DataFrame({
            "dataset": name, "gpu": x["gpu"].to_numpy(), "model": x["model"].to_numpy(),
            "model_source": x["model_source"].astype(str).to_numpy(),
            "engine": [engine_profile(e, v) for e, v in zip(x["engine"], x["engine_version"])],
            "tp": x["tp"].astype(int).to_numpy(), "dtype": dtype, "mode": "agg",
            "batch": x["concurrency"].astype(float).to_numpy(), "prompt_tokens": x["isl"].to_numpy(float),
            "output_tokens": x["osl"].to_numpy(float), "tpot_ms": x["tpot_ms"].to_numpy(float),
            "measure": "tpot_ms", "task": "isl/osl", "source_id": x["id"].astype(str).to_numpy(),
            "ttft_ms": x["ttft_ms"].to_numpy(float) if "ttft_ms" in x else np.nan,
            "dtype_assumed": (prec.eq("") & quant.eq("")).to_numpy()}))
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=list(TPOT_COLUMNS))
    return frame, skipped


def measure_scores(prompt_tokens: dict, *, note: str, fitted=None, constants=None, mixed: dict | None = None,
                   n_boot: int = 1000, seed: int = 0, **table) -> dict:
    """The rows of `tpot_table(**table)` (a leaderboard table and the measure it is compared by) scored with the
    same predictions as the claims (fitted laws, variants): {note, naive, mixed}, each the run_tpot scores (per
    group and per TP). Reported beside the claims where E2.11 compares another measure, so the change shows."""
    rows, _ = tpot_table(prompt_tokens=prompt_tokens, **table)
    out = {"note": note}
    for v in VARIANTS:
        out[v] = run_tpot(rows, n_boot=n_boot, seed=seed, fitted=fitted, variant=v, mixed=mixed,
                          constants=constants)["scores"]
    return out


def v3_median_scores(mlenergy_v3, prompt_tokens: dict, **kw) -> dict:
    """ML.ENERGY v3's rows scored against the leaderboard's median inter-token latency (the measure E2.11 compared
    before V3_STEADY_MEAN_NOTE), measure_scores' form."""
    return measure_scores(prompt_tokens, mlenergy_v3=mlenergy_v3, v3_measure="median_itl_ms",
                          note=("ML.ENERGY v3 scored against its median inter-token latency (the leaderboard's "
                                "median_itl_ms), the same predictions as the claims, which compare the steady-state "
                                "mean (V3_STEADY_MEAN_NOTE)"), **kw)


def v2_mean_tpot_scores(mlenergy_v2, prompt_tokens: dict, **kw) -> dict:
    """ML.ENERGY v2's rows scored against the leaderboard's Avg TPOT (the measure E2.11 compared before
    V2_STEADY_MEAN_NOTE), measure_scores' form."""
    return measure_scores(prompt_tokens, mlenergy_v2=mlenergy_v2, v2_measure="mean_tpot_ms",
                          note=("ML.ENERGY v2 scored against the leaderboard's Avg TPOT (a per-iteration mean over "
                                "the whole run, drain included), the same predictions as the claims, which compare "
                                "the steady-state mean (V2_STEADY_MEAN_NOTE)"), **kw)


def _known_model(model: str, rows) -> str:
    """The table's model key, or its Hugging Face repository id when the key is not in models.yaml."""
    try:
        return get_model(model).key
    except UnknownModelError:
        if "model_source" in rows:
            return get_model(str(rows["model_source"].iloc[0])).key
        raise


def run_tpot(rows, model_of=None, n_boot: int = 1000, seed: int = 0, fitted=None, variant: str = "naive",
             mixed: dict | None = None, constants=None, kv_cap: bool = True) -> dict:
    """Predict every TPOT row (grouped by dataset, gpu, model, engine, tp, dtype) with the engine
    profile, and score per dataset x GPU x engine (and per TP). A group the predictor refuses
    (unknown model, memory, precision a GPU cannot run) is left out with its reason. `variant`:
    'naive' or 'mixed' (predict_tpot); `mixed`: {chunked: [engines], token_budget: tokens}."""
    import pandas as pd

    preds, skipped = [], []
    keys = ["dataset", "gpu", "model", "engine", "tp", "dtype"]
    for k, d in rows.groupby(keys, sort=True):
        ds, gpu, model, eng, tp, dt = k
        try:
            model = _known_model(model, d)
            f = make_predictor(eng, model if model_of is None else model_of(model), gpu, engine=eng, dtype=dt,
                               fitted=fitted, constants=constants)
            kern = make_predictor("kernels", model if model_of is None else model_of(model), gpu, dtype=dt,
                                  constants=constants)
            mx = mixed or {}
            cap = kv_capacity(d, model if model_of is None else model_of(model), gpu, int(tp), dtype=dt) \
                if kv_cap else None
            r = predict_tpot(d, f, kern, tp=int(tp), variant=variant, chunked=eng in mx.get("chunked", ()),
                             token_budget=mx.get("token_budget"), capacity=cap, **schedule_args(eng, d))
        except SteptimeError as exc:
            skipped.append({"dataset": ds, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
                            "rows": int(len(d)), "group": [str(v) for v in k]})
            continue
        preds.append(d.assign(pred_ms=r["pred_ms"], decode_ms=r["decode_ms"],
                              prefill_amortised_ms=r["prefill_amortised_ms"], decode_gpu_ms=r["decode_gpu_ms"],
                              prefill_amortised_gpu_ms=r["prefill_amortised_gpu_ms"],
                              prefill_amortised_host_ms=r["prefill_amortised_host_ms"],
                              running=r["running"], kv_capped=r["capped"]))
    if skipped:  # one line per (dataset, reason), rows summed
        sk = pd.DataFrame(skipped).groupby(["dataset", "reason"], as_index=False)["rows"].sum()
        skipped = sk.to_dict("records")
    p = pd.concat(preds) if preds else rows.iloc[:0].assign(pred_ms=[], decode_ms=[], prefill_amortised_ms=[],
                                                            decode_gpu_ms=[], prefill_amortised_gpu_ms=[],
                                                            prefill_amortised_host_ms=[], running=[], kv_capped=[])
    scores = []
    for by, sub in ((["dataset", "gpu", "engine"], "tpot"), (["dataset", "gpu", "engine", "tp"], "tpot_by_tp")):
        for k, d in p.groupby(by, sort=True):
            s = score(d["pred_ms"].to_numpy(), d["tpot_ms"].to_numpy(), n_boot=n_boot, seed=seed)
            s["signed_mean"] = float(np.mean((d["pred_ms"] - d["tpot_ms"]) / d["tpot_ms"]))
            s["models"] = sorted(d["model"].unique().tolist())
            s["kv_capped_rows"] = int(np.sum(d["kv_capped"].to_numpy(bool)))
            scores.append({**dict(zip(by, [v.item() if hasattr(v, "item") else v for v in k])),
                           "tp": int(k[3]) if len(k) > 3 else "all", "subset": sub, "variant": variant,
                           "tps": sorted(int(t) for t in d["tp"].unique()), **s})
    return {"pred": p, "scores": scores, "skipped": skipped, "variant": variant}


SILICON_CONSISTENCY_NOTE = (
    "A data check on the closed-loop rows (CONCURRENCY_DATASETS), per dataset x GPU x engine, computed from the rows "
    "and the naive predictions, moving no claim. Added after issue 19's look at the GB200 TRT-LLM rows. "
    "ratio: measured / predicted TPOT (min, median, max); gap_ms: measured - predicted (min, median, max), so a constant "
    "offset would show as a narrow gap range. twins: configurations recorded more than once with the same model, "
    "dtype, TP, ISL, OSL and per-worker concurrency (the row's batch); twin_spread: the largest max / min of their "
    "measured TPOT (1 where none), twin_ttft_spread the same of their TTFT where the rows measure it. falls: in each "
    "sweep (model, dtype, TP, ISL, OSL), the adjacent pairs of distinct concurrencies, and how many of them measure a LOWER mean TPOT at the higher concurrency (deepest_fall: the "
    "smallest higher / lower ratio, 1 where none). A closed loop's token time cannot fall when more requests share "
    "each step, and twins should agree; rows failing either measure something beyond one step at the recorded batch "
    "(the harness, the deployment), which no step model can predict. serial: a bound from the rows alone (issue 19, "
    "wave 42). In each sweep with a row at batch 1 (the reference: the one of lowest TPOT, t1, with its TTFT f1), a row "
    "at batch B > 1, or a second batch-1 row, is over the bound when its TPOT exceeds B x (t1 + f1 / (OSL - 1)): a "
    "decode step of B requests costs at most B one-request steps, and the B prompts that arrive while a request "
    "decodes (B per OSL - 1 of its token gaps) cost at most one isolated first token each. serial_checked: the rows "
    "compared (sweeps without a batch-1 row or without TTFT are not); serial_over: how many exceed the bound; "
    "serial_worst: the largest measured / bound (0 where none was checked).")
_CONSISTENCY_COLUMNS = ("dataset", "gpu", "engine", "model", "dtype", "tp", "prompt_tokens", "output_tokens", "batch",
                        "tpot_ms", "pred_ms")


def _min_median_max(a) -> list[float]:
    return [round(float(np.min(a)), 3), round(float(np.median(a)), 3), round(float(np.max(a)), 3)]


def _serial_bound(d, sweep) -> dict:
    """SILICON_CONSISTENCY_NOTE's serial bound over one group's rows: serial_checked, serial_over, serial_worst."""
    checked, over, worst = 0, 0, 0.0
    if "ttft_ms" not in d:
        return {"serial_checked": 0, "serial_over": 0, "serial_worst": 0.0}
    for _, s in d.groupby(sweep, sort=True):
        s = s.reset_index(drop=True)
        ones = s[s["batch"].eq(1) & (s["ttft_ms"] > 0)]
        if ones.empty:
            continue
        ref = ones["tpot_ms"].idxmin()
        t1, f1, osl = (float(ones.at[ref, c]) for c in ("tpot_ms", "ttft_ms", "output_tokens"))
        rest = s.drop(index=ref)
        bound = rest["batch"].to_numpy(float) * (t1 + f1 / max(osl - 1.0, 1.0))
        r = rest["tpot_ms"].to_numpy(float) / bound
        checked, over = checked + len(r), over + int(np.sum(r > 1.0))
        worst = max(worst, float(r.max())) if len(r) else worst
    return {"serial_checked": checked, "serial_over": over, "serial_worst": round(worst, 3)}


def silicon_consistency(pred) -> dict:
    """SILICON_CONSISTENCY_NOTE's data check of run_tpot's `pred` frame: {note, groups: [one dict per closed-loop
    dataset x GPU x engine]}. A frame without the needed columns, or with a non-positive measured or predicted TPOT,
    is refused (WallclockError)."""
    missing = [c for c in _CONSISTENCY_COLUMNS if c not in pred]
    if missing:
        raise WallclockError(f"silicon_consistency: prediction frame lacks column(s) {', '.join(missing)}")
    x = pred[pred["dataset"].isin(CONCURRENCY_DATASETS)]
    meas, est = x["tpot_ms"].to_numpy(float), x["pred_ms"].to_numpy(float)
    if np.any(~(meas > 0)) or np.any(~(est > 0)):
        raise WallclockError("silicon_consistency: measured and predicted TPOT must be > 0 (and not NaN)")
    sweep = ["model", "dtype", "tp", "prompt_tokens", "output_tokens"]
    groups = []
    for (ds, gpu, eng), d in x.groupby(["dataset", "gpu", "engine"], sort=True):
        ratio = d["tpot_ms"].to_numpy(float) / d["pred_ms"].to_numpy(float)
        gap = d["tpot_ms"].to_numpy(float) - d["pred_ms"].to_numpy(float)
        twins, spread, ttft_spread, pairs, falls, deepest = 0, 1.0, 1.0, 0, 0, 1.0
        for _, t in d.groupby(sweep + ["batch"], sort=True):
            if len(t) > 1:
                twins += 1
                spread = max(spread, float(t["tpot_ms"].max() / t["tpot_ms"].min()))
                ttft = t["ttft_ms"].to_numpy(float) if "ttft_ms" in t else np.array([np.nan])
                if np.all(ttft > 0):
                    ttft_spread = max(ttft_spread, float(ttft.max() / ttft.min()))
        for _, s in d.groupby(sweep, sort=True):
            m = s.groupby("batch")["tpot_ms"].mean().sort_index().to_numpy(float)
            if len(m) > 1:
                step = m[1:] / m[:-1]
                pairs += len(step)
                falls += int(np.sum(step < 1.0))
                deepest = min(deepest, float(step.min()))
        groups.append({"dataset": ds, "gpu": gpu, "engine": eng, "rows": int(len(d)), "ratio": _min_median_max(ratio),
                       "gap_ms": _min_median_max(gap), "twins": twins, "twin_spread": round(spread, 3),
                       "twin_ttft_spread": round(ttft_spread, 3), "pairs": pairs,
                       "falls": falls, "deepest_fall": round(deepest, 3), **_serial_bound(d, sweep)})
    return {"note": SILICON_CONSISTENCY_NOTE, "groups": groups}


LEADERBOARD_CONSISTENCY_NOTE = (
    "A data check of the ML.ENERGY v3 rows (measured-batch leaderboard rows), per GPU x engine, from the rows, the "
    "leaderboard's own inter-token-latency percentiles and the mixed variant's predictions; it moves no claim. Added "
    "after E2.11's B200 v3 scores were seen (issue 19), to tell a GPU-kernel miss from a miss of the serving run. "
    "falls: in each sweep (model, task, TP), the adjacent pairs of distinct measured batches, and how many of them "
    "measure a LOWER time per token at the larger batch (a step does not get cheaper with more requests in it). "
    "dispersion: the leaderboard's p90 / median inter-token latency (min, median, max), and the mixed variant's MAPE "
    "and signed mean error per dispersion bin (DISPERSION_BINS, edges chosen after seeing the rows): a kernel term "
    "that is off moves every step of a run alike, so its error does not depend on the tail, while intermittent "
    "stalls of the serving process (host work, a step waiting on the CPU) widen the tail and slow the mean. by_task: "
    "MAPE and signed mean per task. cross_gpu: the runs measured on two GPUs of the same engine with the same model, "
    "task, TP and max_num_seqs: the measured and the predicted time ratio of the first GPU to the second "
    "(min, median, max), and `contrary`, the pairs where the first GPU measures slower although the step model "
    "predicts it faster (or the reverse): a GPU with more bandwidth and compute running the same engine and model "
    "slower points at the run, not at the kernels.")
DISPERSION_BINS = (1.0, 1.15, 1.3, 1.6)  # p90 / median ITL bin edges, the last bin open (chosen after seeing the rows)
_LEADERBOARD_PRED_COLUMNS = ("dataset", "gpu", "engine", "model", "task", "tp", "batch", "tpot_ms", "pred_ms")
_LEADERBOARD_RAW_COLUMNS = ("gpu", "model", "task", "tp", "avg_batch", "max_num_seqs", "median_itl_ms", "p90_itl_ms")


def _err(d) -> dict:
    e = (d["pred_ms"].to_numpy(float) - d["tpot_ms"].to_numpy(float)) / d["tpot_ms"].to_numpy(float)
    return {"rows": int(len(e)), "mape": round(float(np.mean(np.abs(e))), 4), "signed": round(float(np.mean(e)), 4)}


def _ratios(t) -> dict:
    """Cross-GPU pairs of one task: count, median measured and predicted ratio, contrary pairs."""
    meas = t["tpot_ms_1"].to_numpy(float) / t["tpot_ms_2"].to_numpy(float)
    est = t["pred_ms_1"].to_numpy(float) / t["pred_ms_2"].to_numpy(float)
    return {"pairs": int(len(t)), "measured_ratio_median": round(float(np.median(meas)), 3),
            "predicted_ratio_median": round(float(np.median(est)), 3),
            "contrary": int(np.sum((meas > 1.0) != (est > 1.0)))}


def leaderboard_consistency(pred, mlenergy_v3, bins=DISPERSION_BINS) -> dict:
    """LEADERBOARD_CONSISTENCY_NOTE's data check of run_tpot's `pred` frame (its mlenergy-v3 rows) against the tidy
    ML.ENERGY v3 table they came from: {note, bins, groups: [one dict per GPU x engine], cross_gpu: [one dict per
    engine and pair of GPUs]}. Each row is found in `mlenergy_v3` by (gpu, model, task, tp, avg_batch = batch); a
    frame or table without the needed columns, a row not found (or found twice), non-positive times or ITL
    percentiles, or bin edges not increasing from 1, are refused (WallclockError)."""
    for name, frame, need in (("prediction frame", pred, _LEADERBOARD_PRED_COLUMNS),
                              ("ML.ENERGY v3 table", mlenergy_v3, _LEADERBOARD_RAW_COLUMNS)):
        missing = [c for c in need if c not in frame]
        if missing:
            raise WallclockError(f"leaderboard_consistency: {name} lacks column(s) {', '.join(missing)}")
    edges = np.asarray(bins, dtype=float)
    if len(edges) < 1 or edges[0] > 1.0 or np.any(np.diff(edges) <= 0):
        raise WallclockError(f"leaderboard_consistency: dispersion bin edges must increase from <= 1 (got {list(bins)})")
    x = pred[pred["dataset"] == "mlenergy-v3"]
    key = ["gpu", "model", "task", "tp", "batch"]
    raw = mlenergy_v3.rename(columns={"avg_batch": "batch"})[key + ["max_num_seqs", "median_itl_ms", "p90_itl_ms"]]
    raw = raw.merge(x[key].drop_duplicates(), on=key)  # the runs the rows came from
    if raw.duplicated(key).any():
        raise WallclockError("leaderboard_consistency: the ML.ENERGY v3 table holds two runs with the same "
                             "(gpu, model, task, tp, avg_batch)")
    x = x.drop(columns=[c for c in ("max_num_seqs", "median_itl_ms", "p90_itl_ms") if c in x])
    x = x.merge(raw, on=key, how="left", validate="many_to_one")
    if x["median_itl_ms"].isna().any():
        r = x[x["median_itl_ms"].isna()].iloc[0]
        raise WallclockError(f"leaderboard_consistency: row {r['gpu']} {r['model']} {r['task']} TP {r['tp']} batch "
                             f"{r['batch']} is not in the ML.ENERGY v3 table")
    vals = x[["tpot_ms", "pred_ms", "median_itl_ms", "p90_itl_ms"]].to_numpy(float)
    if np.any(~(vals > 0)):
        raise WallclockError("leaderboard_consistency: times and ITL percentiles must be > 0 (and not NaN)")
    x = x.assign(dispersion=x["p90_itl_ms"].to_numpy(float) / x["median_itl_ms"].to_numpy(float))
    hi = list(edges[1:]) + [np.inf]
    groups = []
    for (gpu, eng), d in x.groupby(["gpu", "engine"], sort=True):
        pairs = falls = 0
        for _, s in d.groupby(["model", "task", "tp"], sort=True):
            m = s.groupby("batch")["tpot_ms"].mean().sort_index().to_numpy(float)
            pairs += max(len(m) - 1, 0)
            falls += int(np.sum(m[1:] < m[:-1]))
        disp = d["dispersion"].to_numpy(float)
        by_bin = []
        for lo, up in zip(edges, hi):
            s = d[(disp >= lo) & (disp < up)]
            if len(s):
                by_bin.append({"p90_over_median": [float(lo), None if np.isinf(up) else float(up)], **_err(s)})
        groups.append({"gpu": gpu, "engine": eng, **_err(d), "pairs": pairs, "falls": falls,
                       "dispersion": _min_median_max(disp), "by_dispersion": by_bin,
                       "by_task": {t: _err(s) for t, s in d.groupby("task", sort=True)}})
    cross = []
    run = ["engine", "model", "task", "tp", "max_num_seqs"]
    gpus = sorted(x["gpu"].unique())
    for i, g1 in enumerate(gpus):
        for g2 in gpus[i + 1:]:
            a = x[x["gpu"] == g1][run + ["tpot_ms", "pred_ms"]]
            b = x[x["gpu"] == g2][run + ["tpot_ms", "pred_ms"]]
            j = a.merge(b, on=run, suffixes=("_1", "_2"))
            for eng, t in j.groupby("engine", sort=True):
                meas = t["tpot_ms_1"].to_numpy(float) / t["tpot_ms_2"].to_numpy(float)
                est = t["pred_ms_1"].to_numpy(float) / t["pred_ms_2"].to_numpy(float)
                cross.append({"engine": eng, "gpus": [g1, g2], "pairs": int(len(t)),
                              "measured_ratio": _min_median_max(meas), "predicted_ratio": _min_median_max(est),
                              "contrary": int(np.sum((meas > 1.0) != (est > 1.0))),
                              "by_task": {k: _ratios(s) for k, s in t.groupby("task", sort=True)}})
    return {"note": LEADERBOARD_CONSISTENCY_NOTE, "bins": [float(e) for e in edges], "groups": groups,
            "cross_gpu": cross}


# ---------------------------------------------------------------------------------------
# E2.11: time to first token where the rows measure it (AIConfigurator silicon, aggregated serving)
TTFT_VARIANTS = ("wave", "steady", "harness")
TTFT_NOTE = (
    "TTFT of aggregated serving at client concurrency c with fixed prompt (ISL) and output (OSL) lengths, from "
    "the steps the engine runs (the engine profile; no TTFT reading enters), three schedules, each scored and "
    "claimed against the same target (none is picked per engine; harness is HARNESS_TTFT_NOTE's). wave: the c clients start together and, every request having the "
    "same lengths, stay in step, so each wave's prompts arrive at once. The engine prefills them as one stream "
    "of c x ISL tokens in steps of the token budget (mixed.token_budget); request i's first token comes with the "
    "step that finishes its prompt, ceil(i ISL / budget) prefill steps of `budget` tokens; the mean over i is the "
    "TTFT. Where the KV cache (ttft.mem_util of the GPU memory minus the weights, bf16 KV) holds fewer than c "
    "requests of ISL + OSL tokens, the requests beyond it wait for the earlier wave to finish (its prefill plus "
    "OSL decode steps at its batch). That capacity is steptime.serve.kv_capacity_requests at ISL + OSL (the memory "
    "model KV_CAP_NOTE and the serving simulator read): each request holds whole blocks of 16 tokens, and weights "
    "that leave no KV cache refuse the group. Before the one memory model (until the kvunify change) it was the "
    "unrounded KV tokens over ISL + OSL and such a group ran waves of one request; no scored row changed by it "
    "(DESIGN.md, 'One KV memory model'). steady (reported beside it): arrivals spread out, a request waits half a "
    "decode step and then rides ceil(ISL / chunk) mixed steps (chunk = min(ISL, budget - c)) with the c - 1 "
    "decodes. Neither is the benchmark's load. The rows do not record their benchmark client; AIConfigurator's own "
    "harness (genai-perf, later aiperf, in concurrency mode; ASSUMED to be the rows') drains its 2c warm-up requests "
    "before it measures, so its measured phase starts on an empty engine with the c clients sending at once (the "
    "wave) and runs 10c requests in a closed loop, the mean TTFT over all of them: that schedule (harness) is "
    "driven through the serving simulator with the engines as the harness deploys them and claimed in E2.11b "
    "(replay.HARNESS_NOTE); the harness variant here prices it analytically (HARNESS_TTFT_NOTE); wave and steady "
    "are its two bounds. Diagnostic (metrics.ttft_over_isolated_prefill, "
    "no claim): measured TTFT over steptime's isolated prefill of the same prompt, per group and concurrency, "
    "and how it moves with the prompt length; a wave schedule makes that ratio fall as ISL grows (more of the "
    "wave's prompts share each budget-sized step), a spread steady state keeps it near 1. harness (HARNESS_TTFT_NOTE): "
    "the harness's 10c requests from a drained engine, each round's schedule as the engine runs it.")
# AIConfigurator's benchmark harness (read in its code; replay.py's HARNESS comment cites it): warm-up requests per
# slot (drained before the measured phase), measured requests per slot, and the engines its generator deploys with a
# token budget (`deploy`, keyed by the engine profile's engines.yaml backend, vllm-v1-sync -> vllm). Its agg rule is the
# same for both: max_num_tokens = max_batch_size + ISL + 1500 (max_batch_size ASSUMED = c): TensorRT-LLM with chunked
# prefill off (generator/backends/trtllm.py at a7c507ed, rule_plugin/trtllm.rule later), vLLM with the engine's default
# (V1 chunks; generator/rule_plugin/vllm.rule `agg max_num_tokens`, line 11 at 11324a64f, emitted as
# --max-num-batched-tokens through config/backend_config_mapping.yaml from 2cecd6596, 2026-01-08). chunked_prefill
# None: the engine profile's schedule.chunked_prefill. SGLang is deployed with its defaults (no entry).
HARNESS = {"warmup_per_slot": 2, "measured_per_slot": 10,
           "deploy": {"trtllm": {"extra_tokens": 1500, "chunked_prefill": False},
                      "vllm": {"extra_tokens": 1500, "chunked_prefill": None}}}
HARNESS_TTFT_NOTE = (
    "harness: the mean TTFT over the harness's measured phase (replay.HARNESS_NOTE: c clients start together on a "
    "drained engine, 10c requests of fixed ISL/OSL, each finished request releasing the next), priced from the steps "
    "the engine runs. An engine that runs prefill first (engines.yaml schedule.mixed_prefill false) keeps every round a "
    "wave (WAVE_NOTE): the wave schedule. An engine that mixes prompts into decode steps admits at most `per` prompt "
    "tokens a step (harness_step_budget: the generator's max_num_tokens = c + ISL + 1500 less the c decodes, "
    "TensorRT-LLM in whole prompts, i.e. floor((ISL + 1500) / ISL) prompts, vLLM chunked, i.e. ISL + 1500 prompt "
    "tokens; an engine the generator leaves at its defaults the token budget), so round 1 runs as a burst of K = "
    "ceil(n ISL / per) prefill-carrying steps (n = min(c, KV capacity); step j carries the next `per` prompt tokens and "
    "the decodes of the requests already started; request i's first token ends step ceil((i + 1) ISL / per)). Every "
    "request of a round lives the same number of steps, so in step count the next round is the same burst shifted: "
    "request i finishes in step s and its client's next request joins step s + J (engines.yaml schedule.join_steps, "
    "J = 2 for a synchronous loop, 3 for an overlap loop, its own step included), and the J - 1 steps it waits are the "
    "burst's: the burst step b_i = ceil((i + 1) ISL / per) - 1 of its predecessor is preceded by min(b_i, J - 1) burst "
    "steps S (per prompt tokens and n - per / ISL decodes) and J - 1 - min(b_i, J - 1) decode steps D (n decodes); its "
    "TTFT in a later round is (J - 1 - m_i) D + (m_i + 1) S with m_i = min(b_i, J - 1). The reported mean is (round 1 + "
    "9 later rounds) / 10 (HARNESS measured_per_slot); requests beyond the KV capacity add, every round, the wait for "
    "the earlier wave (as the wave schedule). The step in flight is charged whole (the client's round trip is short "
    "against a step). Not modelled: a client's next request reaching an idle engine after the others (an engine with "
    "nothing running starts a step on the first arrival), which splits a round that one step prefilled whole.")


def harness_schedule(engine: str, concurrency, prompt_tokens):
    """(max_num_tokens, chunked) of `engine` as AIConfigurator's generator deploys it (HARNESS deploy, keyed by the
    profile's backend): max_batch_size + ISL + the backend's extra tokens, max_batch_size ASSUMED = the client
    concurrency; chunked as deployed (None there: the profile's schedule.chunked_prefill). None for an engine the
    generator leaves at its defaults (SGLang). Scalars or arrays per row."""
    eng = get_engine(engine)
    d = HARNESS["deploy"].get(eng.backend)  # engines.yaml backend: the framework the generator configures
    if d is None:
        return None
    chunked = d["chunked_prefill"]
    if chunked is None:
        chunked = eng.chunks_prefill()
    return np.asarray(concurrency) + np.asarray(prompt_tokens) + d["extra_tokens"], bool(chunked)


def harness_step_budget(engine: str, concurrency, prompt_tokens, token_budget: float):
    """(prompt tokens one step may carry, whether prompts are chunked) of `engine` as AIConfigurator's harness deploys
    it (harness_schedule): the generator's max_num_tokens less the c decodes (ISL + extra tokens), in whole prompts
    (floor of it over ISL, at least one) where it deploys without chunking (TensorRT-LLM), chunked where the engine
    chunks (vLLM V1); an engine it leaves at its defaults chunked under `token_budget`. Arrays per row."""
    c = np.asarray(concurrency, dtype=float)
    isl = np.asarray(prompt_tokens, dtype=float)
    if np.any(c < 1) or np.any(isl < 1):
        raise WallclockError("harness step budget: concurrency and prompt length must be >= 1")
    deployed = harness_schedule(engine, c, isl)
    if deployed is not None:
        max_num_tokens, chunked = deployed
        per = np.asarray(max_num_tokens - c, dtype=float)  # the decodes take c of it
        return (per, True) if chunked else (np.maximum(np.floor(per / isl), 1.0) * isl, False)
    if token_budget is None or token_budget <= 0:
        raise WallclockError("harness step budget: a chunking engine needs a token budget > 0")
    return np.broadcast_to(np.asarray(float(token_budget)), isl.shape).astype(float), True


def _step_rows(ctx_tokens, ctx_requests, decodes, kv, tp):
    """A step frame of prompt tokens (`ctx_requests` prompts, no prefix) beside `decodes` decodes at mean KV `kv`."""
    dec = np.asarray(decodes, dtype=int)
    ctx = np.asarray(ctx_tokens, dtype=float)
    return _frame(tp, np.where(ctx > 0, np.where(dec > 0, "mixed", "prefill"), "decode"),
                  ctx_tokens=np.where(ctx > 0, _tokens(ctx, 2), 0),
                  ctx_requests=np.where(ctx > 0, _tokens(ctx_requests, 1), 0),
                  decodes=dec, kv=np.where(dec > 0, np.asarray(kv, float), 0.0))


def harness_burst_ttft(n, prompt_tokens, output_tokens, per, join_steps: int, predictor: Callable, tp: int,
                       rounds: int = HARNESS["measured_per_slot"]) -> np.ndarray:
    """Per row: the mean TTFT (ms) over `rounds` rounds of `n` requests on an engine that mixes prompts into decode
    steps, admitting at most `per` prompt tokens a step (HARNESS_TTFT_NOTE): round 1 a burst from an empty engine,
    later rounds the same burst in step count, each request joining `join_steps` steps after its predecessor's last."""
    n = np.maximum(np.floor(np.asarray(n, dtype=float)), 1).astype(int)
    isl = np.maximum(np.asarray(prompt_tokens, dtype=float), 2.0)
    osl = np.asarray(output_tokens, dtype=float)
    per = np.broadcast_to(np.asarray(per, dtype=float), isl.shape)
    J = int(join_steps)
    if J < 1 or rounds < 1:
        raise WallclockError(f"harness burst: join_steps and rounds must be >= 1 (got {join_steps}, {rounds})")
    if np.any(per <= 0):
        raise WallclockError("harness burst: a step must carry > 0 prompt tokens")
    stream = n * isl
    K = np.ceil(stream / per).astype(int)
    # round 1: step j carries min(per, stream - j per) prompt tokens beside the decodes of the requests already started
    idx = np.repeat(np.arange(len(n)), K)
    j = np.concatenate([np.arange(k) for k in K]) if len(K) else np.zeros(0, int)
    tok = np.minimum(per[idx], stream[idx] - j * per[idx])
    started = np.minimum(n[idx], np.floor(j * per[idx] / isl[idx])).astype(int)
    t_wave = predictor(_step_rows(tok, tok / isl[idx], started, isl[idx], tp), tp, None)["total"]
    full = np.minimum(per, stream)
    kv = mean_context(isl, osl)
    t_S = predictor(_step_rows(full, full / isl, np.maximum(n - np.floor(full / isl), 0), kv, tp), tp, None)["total"]
    t_D = predictor(_step_rows(np.zeros(len(n)), np.zeros(len(n)), n, kv, tp), tp, None)["total"]
    out = np.zeros(len(n))
    start = np.concatenate([[0], np.cumsum(K)[:-1]]) if len(K) else np.zeros(0, int)
    for r in range(len(n)):
        ends = np.cumsum(np.asarray(t_wave[start[r]:start[r] + K[r]], dtype=float))
        b = (np.ceil((np.arange(n[r]) + 1) * isl[r] / per[r]) - 1).astype(int)  # the burst step of request i
        first = float(np.mean(ends[b]))
        m = np.minimum(b, J - 1)
        later = float(np.mean((J - 1 - m) * t_D[r] + (m + 1) * t_S[r]))
        out[r] = (first + (rounds - 1) * later) / rounds
    return out


def _prefill_steps(tokens, requests, tp):
    """Prefill-only steps of `tokens` prompt tokens over `requests` prompts (no prefix)."""
    return _frame(tp, "prefill", ctx_tokens=_tokens(tokens, 2), ctx_requests=_tokens(requests, 1))


def predict_ttft(rows, predictor: Callable, model, gpu, tp: int, *, token_budget: float, dtype: str = "bf16",
                 mem_util: float = 0.9, variant: str = "wave", ep: int = 1, engine: str | None = None) -> np.ndarray:
    """Predicted mean TTFT (ms) of rows of ONE (gpu, model, engine, tp, dtype) (TTFT_NOTE); the harness variant
    (HARNESS_TTFT_NOTE) needs the `engine` (its schedule in engines.yaml)."""
    from steptime.specs import get_gpu, get_model

    if variant not in TTFT_VARIANTS:
        raise WallclockError(f"unknown TTFT variant {variant!r} (known: {', '.join(TTFT_VARIANTS)})")
    if token_budget is None or token_budget <= 0:
        raise WallclockError("TTFT needs the engine's token budget > 0")
    m, g = get_model(model), get_gpu(gpu)
    c = np.maximum(np.round(rows["batch"].to_numpy(float)), 1).astype(int)
    isl = rows["prompt_tokens"].to_numpy(float)
    osl = rows["output_tokens"].to_numpy(float)
    if variant == "steady":
        kv = mean_context(isl, osl)
        dec = predictor(_decode_frame(c, kv, tp), tp, None)["total"]
        _, chunk, prefix, _ = mixed_schedule(c, isl, osl, chunked=True, token_budget=token_budget)
        mix = predictor(_mixed_frame(np.maximum(c - 1, 1), kv, chunk, prefix, tp), tp, None)["total"]
        return 0.5 * dec + np.ceil(isl / chunk) * mix
    from steptime.serve import Policy, kv_capacity_requests
    from steptime.specs.engines import get_engine

    # requests of ISL + OSL tokens the KV cache holds (the serving simulator's memory model, KV_CAP_NOTE)
    cap = kv_capacity_requests(m, g, isl + osl, tp=tp, ep=ep, dtype=dtype, kv_dtype="bf16",
                               pol=Policy(gpu_memory_utilization=mem_util))
    fit = np.clip(cap, 1, c).astype(int)  # requests of one wave
    stream = fit * isl
    step_tok = np.minimum(token_budget, stream)
    t_pf = predictor(_prefill_steps(step_tok, step_tok / isl, tp), tp, None)["total"]
    t_dec = predictor(_decode_frame(fit, isl + osl / 2.0, tp), tp, None)["total"]
    mixes = False
    if variant == "harness":
        if engine is None:
            raise WallclockError("the harness TTFT schedule needs the engine (its schedule in engines.yaml)")
        mixes = get_engine(engine).mixes_prefill()  # a prefill-first engine keeps every round a wave (WAVE_NOTE)
    queue = np.zeros(len(rows))  # requests beyond the KV capacity wait for the earlier wave, every round
    first = np.zeros(len(rows))  # the mean wait for one's own prompt inside a wave (the wave schedule)
    for r in range(len(rows)):
        i = np.arange(c[r])
        wave = np.ceil(stream[r] / token_budget) * t_pf[r] + osl[r] * t_dec[r]
        queue[r] = float(np.mean((i // fit[r]) * wave))
        if not mixes:  # a mixing engine's own-prompt wait is the burst's (below)
            first[r] = float(np.mean(np.ceil(((i % fit[r]) + 1) * isl[r] / token_budget) * t_pf[r]))
    if mixes:
        per, _ = harness_step_budget(engine, c, isl, token_budget)
        return queue + harness_burst_ttft(fit, isl, osl, per, get_engine(engine).join_steps(), predictor, tp)
    return queue + first


def run_ttft(rows, *, token_budget: float, mem_util: float = 0.9, fitted=None, constants=None, n_boot: int = 1000,
             seed: int = 0) -> dict:
    """Every row with a measured TTFT (ttft_ms) predicted by each of TTFT_VARIANTS and scored per (dataset,
    gpu, engine) and per TP; groups the predictor refuses are left out with their reason."""
    import pandas as pd

    from steptime_lab.metrics import score

    if "ttft_ms" not in rows:
        return {"pred": rows.iloc[:0], "scores": [], "skipped": []}
    x = rows[np.isfinite(rows["ttft_ms"].to_numpy(float)) & (rows["ttft_ms"].to_numpy(float) > 0)]
    preds, skipped = [], []
    for k, d in x.groupby(["dataset", "gpu", "model", "engine", "tp", "dtype"], sort=True):
        ds, gpu, model, eng, tp, dt = k
        try:
            key = _known_model(model, d)
            f = make_predictor(eng, key, gpu, engine=eng, dtype=dt, fitted=fitted, constants=constants)
            p = {v: predict_ttft(d, f, key, gpu, int(tp), token_budget=token_budget, dtype=dt, mem_util=mem_util,
                                 variant=v, engine=eng) for v in TTFT_VARIANTS}
            isl = d["prompt_tokens"].to_numpy(float)  # the diagnostic's reference: one isolated prefill
            p["isolated_prefill"] = predictor_total(f, _prefill_steps(isl, np.ones(len(d)), int(tp)), int(tp))
        except SteptimeError as exc:
            skipped.append({"dataset": ds, "group": [str(v) for v in k], "rows": int(len(d)),
                            "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
            continue
        preds.append(d.assign(**{f"ttft_{v}_ms": p[v] for v in (*TTFT_VARIANTS, "isolated_prefill")}))
    p = pd.concat(preds) if preds else x.iloc[:0]
    scores = []
    for by, sub in ((["dataset", "gpu", "engine"], "ttft"), (["dataset", "gpu", "engine", "tp"], "ttft_by_tp")):
        for k, d in p.groupby(by, sort=True):
            for v in TTFT_VARIANTS:
                s = score(d[f"ttft_{v}_ms"].to_numpy(), d["ttft_ms"].to_numpy(), n_boot=n_boot, seed=seed)
                s["signed_mean"] = float(np.mean(d[f"ttft_{v}_ms"] / d["ttft_ms"] - 1.0))
                scores.append({**dict(zip(by, [x.item() if hasattr(x, "item") else x for x in k])),
                               "tp": int(k[3]) if len(k) > 3 else "all", "subset": sub, "variant": v,
                               "tps": sorted(int(t) for t in d["tp"].unique()),
                               "models": sorted(d["model"].unique().tolist()), **s})
    return {"pred": p, "scores": scores, "skipped": skipped, "over_prefill": ttft_over_prefill(p)}


def predictor_total(f: Callable, frame, tp: int) -> np.ndarray:
    """The engine step total (ms) of each row of a step frame."""
    return np.asarray(f(frame, tp, None)["total"], dtype=float)


def ttft_over_prefill(p) -> list[dict]:
    """Per (dataset, gpu, engine, concurrency): the median of measured TTFT over the predicted isolated
    prefill of the same prompt, overall and per prompt length (TTFT_NOTE's diagnostic)."""
    out = []
    if not len(p) or "ttft_isolated_prefill_ms" not in p:
        return out
    r = p.assign(ratio=p["ttft_ms"].astype(float) / p["ttft_isolated_prefill_ms"].astype(float))
    for k, d in r.groupby(["dataset", "gpu", "engine", "batch"], sort=True):
        out.append({"dataset": k[0], "gpu": k[1], "engine": k[2], "concurrency": float(k[3]), "rows": int(len(d)),
                    "median_ratio": round(float(d["ratio"].median()), 3),
                    "by_prompt_tokens": {str(int(i)): round(float(v), 3)
                                         for i, v in d.groupby("prompt_tokens")["ratio"].median().items()}})
    return out


# ---------------------------------------------------------------------------------------
# E1.21: prefill on wall clock across GPUs, where a set holds isolated prefills
def isolated_prefills(silicon):
    """AIConfigurator silicon rows whose TTFT is one isolated prefill: aggregated serving at client
    concurrency 1 (no queue, no batching with other prefills), dense models."""
    x = silicon[(~silicon["moe"].astype(bool)) & (silicon["mode"] == "agg")]
    return x[x["concurrency"].astype(float) == 1.0]


def prefill_coverage(mlenergy_v2=None, mlenergy_v3=None, silicon=None) -> list[dict]:
    """Per (dataset, GPU): dense configurations, and how many carry an isolated prefill time."""
    out = []
    for name, df in (("mlenergy-v2", mlenergy_v2), ("mlenergy-v3", mlenergy_v3)):
        if df is None:
            continue
        for g, d in df[~df["moe"].astype(bool)].groupby("gpu"):
            out.append({"dataset": name, "gpu": g, "dense_configurations": int(len(d)), "isolated_prefills": 0,
                        "why": "the leaderboard publishes token times (TPOT / inter-token latency), energy and "
                               "throughput only: no time-to-first-token or prefill time"})
    if silicon is not None:
        iso = isolated_prefills(silicon)
        for g, d in silicon[~silicon["moe"].astype(bool)].groupby("gpu"):
            n = int((iso["gpu"] == g).sum())
            cmin = d["concurrency"].astype(float).min()
            out.append({"dataset": "aic-silicon", "gpu": g, "dense_configurations": int(len(d)), "isolated_prefills": n,
                        "why": "" if n else f"TTFT only at client concurrency >= {cmin:g}: queueing and batched "
                                            f"prefills are inside it, not one prefill step"})
    return out


def score_isolated_prefills(iso, n_boot: int = 1000, seed: int = 0, fitted=None,
                            constants=None) -> tuple[list[dict], list[dict]]:
    """TTFT at concurrency 1 predicted as one prefill step of `isl` tokens (engine profile)."""
    scores, skipped = [], []
    if iso is None or not len(iso):
        return scores, skipped
    for (g, model, eng_raw, ver, tp), d in iso.groupby(["gpu", "model", "engine", "engine_version", "tp"],
                                                        dropna=False, sort=True):
        eng = engine_profile(eng_raw, ver)
        prec = str(d["precision"].iloc[0]).lower()
        dt = "fp8" if prec == "fp8" else ("bf16" if prec in ("bf16", "bfloat16", "<na>", "nan", "none", "") else None)
        if dt is None:
            skipped.append({"dataset": "aic-silicon", "reason": f"precision {prec} not modelled", "rows": int(len(d))})
            continue
        try:
            f = make_predictor(eng, model, g, engine=eng, dtype=dt, fitted=fitted, constants=constants)
            pred = f(_prefill_frame(d["isl"].to_numpy(), int(tp)), int(tp), None)["total"]
        except SteptimeError as exc:
            skipped.append({"dataset": "aic-silicon", "reason": f"{type(exc).__name__}: {str(exc)[:160]}",
                            "rows": int(len(d))})
            continue
        s = score(pred, d["ttft_ms"].to_numpy(float), n_boot=n_boot, seed=seed)
        scores.append({"dataset": "aic-silicon", "gpu": g, "engine": eng, "tp": int(tp), "model": model,
                       "dtype": dt, "subset": "prefill", **s})
    return scores, skipped


def prompt_sensitivity(rows, prompt_tokens: dict, scales, fitted=None, constants=None) -> list[dict]:
    """TPOT MAPE per dataset x GPU x engine of the rows whose prompt length is an estimate (ML.ENERGY),
    with every estimate multiplied by each of `scales`: how much the stated guess matters."""
    est = rows[rows["dataset"].str.startswith("mlenergy")]
    out = []
    for sc in scales:
        x = est.assign(prompt_tokens=est["prompt_tokens"] * float(sc))
        res = run_tpot(x, n_boot=10, seed=0, fitted=fitted, constants=constants)
        for s in res["scores"]:
            if s["subset"] == "tpot":
                out.append({"scale": float(sc), "dataset": s["dataset"], "gpu": s["gpu"], "engine": s["engine"],
                            "cells": s["cells"], "mape": s["mape"]})
    return out


# ---------------------------------------------------------------------------------------
# `steptime evaluate --family wallclock`
def tpot_fitted_on(doc, engine: str, gpu: str, server: dict | None = None) -> str:
    """What a TPOT prediction of (engine, GPU) rests on: the shipped calibration, and the engine profile
    with or without wall-clock readings of that (GPU, engine); `server` (fit_server_hosts's result) adds
    where the engine's server law was fitted, held out by GPU."""
    base = "datasheet + shipped calibration (per-GPU GEMM/NCCL readings, shared fits on other GPUs)"
    try:
        _, cells = fitted_values(doc, engine, gpu) if doc else (None, None)
    except WallclockError:
        cells = None
    if cells:
        out = f"{base}; engine profile {engine} with {len(cells)} wall-clock readings of {engine}@{gpu} (R2.3 rule)"
    else:
        out = f"{base}; engine profile {engine} as shipped (no wall-clock reading of {engine}@{gpu})"
    for x in ((server or {}).get("engines") or {}).get(engine, {}).get("per_gpu", []):
        if x["gpu"] == gpu and x["fitted_on"]:
            out += (f"; its server law (host.server_*) fitted on {', '.join(x['fitted_on'])}'s {x['rows']} TPOT "
                    f"rows, not on {gpu}'s (held out by GPU)")
    return out


def server_fitted(e2_11_metrics: dict, fitted=None) -> dict:
    """The fitted-constants doc `fitted` with E2.11's held-out-by-GPU server laws (metrics.server_host)
    laid over it: what E2.11b replays with, so both experiments use the same held-out values."""
    srv = (e2_11_metrics.get("server_host") or {}).get("engines") or {}
    for engine, r in srv.items():
        vals = {x["gpu"]: (*(x[f] for f in SERVER_FIELDS if f in x),
                           f"E2.11 held out by GPU (fitted on {', '.join(x['fitted_on'])})")
                for x in r["per_gpu"] if x["fitted_on"]}
        fitted = _with_server(fitted, engine, vals)
    return fitted


def evaluate_records(fpm_tidy=None, mlenergy_v2=None, mlenergy_v3=None, silicon=None, *, fit: dict,
                     prompt_tokens: dict, n_boot: int = 1000, seed: int = 0, mixed: dict | None = None,
                     constants=None, ttft: dict | None = None) -> list[dict]:
    """Evaluate records from the tidy tables: FPM steps per (GPU, engine, TP, phase) for the kernel
    sum, the shipped profile, the profile with its three wall-clock readings (refitted here by the
    same rule as R2.3) and the bare roofline; TPOT per (dataset, GPU, engine, TP) and pooled over TP
    (tp None) for the engine profile. Errors as fractions."""
    out, fits = [], []
    if fpm_tidy is not None:
        steps = fpm_steps(fpm_tidy)
        for (_gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
            r = run_fpm(s, FpmSpec(model=model, engine=engine, **fit), n_boot=n_boot, seed=seed, constants=constants)
            fits.append((r, FpmSpec(model=model, engine=engine, **fit)))
            on = {"kernels": "datasheet + shipped calibration; GPU kernels only",
                  "roofline": "datasheet only (speed of light)",
                  engine: f"datasheet + shipped calibration; engine profile {engine} as shipped",
                  r["names"]["fit"]: f"datasheet + shipped calibration; engine profile {engine} with the "
                                     f"{len(r['readings'].cells)} wall-clock readings of the R2.3 rule (refitted here)"}
            for name in ("kernels", "roofline", engine, r["names"]["fit"]):
                out += [{**x, "variant": "step", "fitted_on": on[name]}
                        for x in records(r["scores"][name], dataset="aic-fpm", predictor=name)]
    if any(t is not None for t in (mlenergy_v2, mlenergy_v3, silicon)):
        doc = engine_constants_doc([r for r, _ in fits], fits[0][1]) if fits else None
        rows, _ = tpot_table(mlenergy_v2, mlenergy_v3, silicon, prompt_tokens=prompt_tokens)
        server = fit_server_hosts(rows, fitted=doc, constants=constants, mixed=mixed)  # held out by GPU (SERVER_NOTE)
        doc = server["fitted"]
        for variant in VARIANTS:
            if variant == "mixed" and mixed is None:
                continue
            res = run_tpot(rows, n_boot=n_boot, seed=seed, fitted=doc, variant=variant, mixed=mixed,
                           constants=constants)
            for sc in res["scores"]:
                out.append({"family": "wallclock", "dataset": sc["dataset"], "gpu": sc["gpu"], "engine": sc["engine"],
                            "tp": sc["tp"] if sc["subset"] == "tpot_by_tp" else None, "tps": sc["tps"],
                            "predictor": "steptime", "variant": variant,
                            "fitted_on": tpot_fitted_on(doc, sc["engine"], sc["gpu"], server),
                            "subset": "tpot", "cells": sc["cells"], "mape": sc["mape"],
                            "median_ape": sc["median_ape"], "mape_ci": sc["mape_ci"]})
        if ttft is not None and mixed is not None:  # TTFT where rows measure it (TTFT_NOTE), every schedule
            res = run_ttft(rows, token_budget=mixed["token_budget"], mem_util=ttft.get("mem_util", 0.9), fitted=doc,
                           constants=constants, n_boot=n_boot, seed=seed)
            for sc in res["scores"]:
                out.append({"family": "wallclock", "dataset": sc["dataset"], "gpu": sc["gpu"], "engine": sc["engine"],
                            "tp": sc["tp"] if sc["subset"] == "ttft_by_tp" else None, "tps": sc["tps"],
                            "predictor": "steptime", "variant": sc["variant"],
                            "fitted_on": tpot_fitted_on(doc, sc["engine"], sc["gpu"], server),
                            "subset": "ttft", "cells": sc["cells"], "mape": sc["mape"],
                            "median_ape": sc["median_ape"], "mape_ci": sc["mape_ci"]})
    return out


def smallest_batch_rows(rows, max_batch: float):
    """Per (dataset, gpu, model, engine, tp, dtype): the rows at the group's smallest mean batch,
    where that batch is at most `max_batch` (the token-time rows where the host weighs most)."""
    keys = ["dataset", "gpu", "model", "engine", "tp", "dtype"]
    if not len(rows):
        return rows
    bmin = rows.groupby(keys)["batch"].transform("min")
    return rows[(rows["batch"] == bmin) & (bmin <= max_batch)]


# ---------------------------------------------------------------------------------------
# The serving front end's host work inside a synchronous engine's loop (engines.yaml host.server_*)
SERVER_NOTE = (
    "vLLM V0 (0.4-0.6, ML.ENERGY v2's 0.5.4) runs its OpenAI API server and the per-request output work "
    "(detokenisation, the streamed response) in the engine's own process, in the same loop as the scheduler; "
    "the synchronous engine hides none of it. Vidur's cpu_overheads (E1.4, the profile's sched_*) timed the "
    "engine loop without a server, so the profile carries host.server_a_ms + server_b_ms x N per step (N "
    "running requests). Held out by GPU: each GPU's server law is fitted on the OTHER GPUs' rows of the same "
    "engine (least squares on the relative error of the mixed variant's TPOT, a, b >= 0, linear in a and b "
    "because the engine overlaps none of its host time) and only then applied to this GPU's rows; the "
    "profile's shipped value is the fit on every GPU's rows (metrics.server_host.all_rows). The form (a per-step "
    "and a per-request part) was chosen after seeing E2.11's residuals of these rows (metrics.residual_per_request: "
    "0.25-0.5 ms per running request beyond the profile at every TP on both GPUs); vLLM's own account of 0.5.3 "
    "(the v0.6.0 performance blog, Sept 2024: the API server 33% and scheduling 29% of the wall time of Llama-3-8B "
    "on one H100, the GPU busy 38%) names the same cost. vLLM V1 before 0.14 (profile vllm-v1-sync: ML.ENERGY v3's "
    "0.11.1, the silicon rows' 0.12.0) schedules synchronously, so the engine core's per-request work between two "
    "steps (update_from_output, building and serialising each request's output for the API-server process; the "
    "profile's sched_b_ms 0.004 ms was an assumption) is exposed too: wave 12 fits the same two-part law for it, "
    "held out by GPU in the same way (the form reused from V0's, not searched; chosen after seeing E2.11's V1 "
    "groups predicted too fast at large batches: ML.ENERGY v3 H100 -13.6%, B200 -24% signed).")


SERVER_TP_NOTE = (
    "host.server_tp_ms (vllm-v0 only): a per-step host cost per extra tensor-parallel rank, server_tp (TP - 1) beside "
    "server_a + server_b N, fitted as a third column of the same held-out-by-GPU least squares (>= 0). vLLM V0's "
    "driver (rank 0, in the engine's own process) hands each step's inputs to every other TP rank itself (the profile "
    "already prices one hand-off at TP > 1 as the constant rpc_tp_ms, E1.4's Ray reading on Vidur's A100 TP 4); "
    "the ML.ENERGY v2 rows, on both GPUs, miss by a per-step time that grows with TP (wave 31, helper e211: A100 "
    "31-40 ms at TP 4, 50-65 ms at TP 8). Only the profiles that declare the field carry it (absent = 0): vLLM V1 "
    "(vllm-v1-sync) broadcasts the scheduler output to its workers through a shared-memory queue and its rows show "
    "no TP trend (the column fits to 0 there, wave 31). Chosen after seeing E2.11's scores (the form read off the "
    "residuals by TP, DESIGN.md wave 31 helpers e211 and v0tp); the mechanism (which executor ML.ENERGY v2 ran, "
    "how its hand-off scales with the ranks) is not read from a source.")


SERVER_OWN_ROWS_NOTE = (
    "per_gpu[].mape_mixed: the mixed variant's TPOT MAPE on this GPU's rows of the engine (every dataset pooled) under "
    "its held-out law; own_rows_fit: the same least-squares fit on this GPU's OWN rows and the MAPE it gives there. A "
    "diagnostic, in-sample, never used to predict or score: it says how far any law of this form (s_a + s_b N, s_a, "
    "s_b >= 0) could take this GPU's rows, so a held-out score far above it blames the transfer of the law between "
    "GPUs, and one close to it blames the form (or rows no server law describes). Added after E2.11's B200 v3 scores "
    "were seen (issue 19); it moves no claim. per_gpu[].law_parts: the same GPU's rows by dataset under the held-out "
    "law, its per-request part alone (s_a = 0), its per-step part alone (s_b = 0) and no law (MAPE and signed mean of "
    "the mixed variant; the prediction is linear in the law, so the parts separate exactly; per_tp_rank_only where the "
    "law has a server_tp part). A diagnostic added in "
    "wave 28 after E2.11's scores were seen (DESIGN.md, helper e211): it says which part of a law transfers between "
    "GPUs and harnesses; it moves no claim and nothing is fitted on it.")


def _with_server(fitted, engine: str, values: dict) -> dict:
    """The fitted-constants doc `fitted` (path, dict or None) with engines[engine][gpu] = server_* values
    for each gpu of `values` ({gpu: (a_ms, b_ms, source)} or {gpu: (a_ms, b_ms, tp_ms, source)}: the values in
    SERVER_FIELDS' order; a field left out keeps the profile's value)."""
    import copy

    from pathlib import Path

    doc = read_yaml(fitted) if isinstance(fitted, (str, Path)) else copy.deepcopy(fitted or {})
    doc = doc or {}
    eng = doc.setdefault("engines", {}).setdefault(engine, {})
    for gpu, (*nums, source) in values.items():
        tbl = eng.setdefault(gpu, {})
        for name, v in zip(SERVER_FIELDS, nums):
            tbl[name] = {"value": float(v), "provenance": "FITTED", "source": source, "experiment": "E2.11"}
    return doc


def fit_server_host(rows, *, engine: str = "vllm-v0", fitted=None, constants=None, mixed: dict | None = None) -> dict:
    """Held-out-by-GPU fits of `engine`'s server law (SERVER_NOTE) on the TPOT `rows` of that engine.

    Returns {'fitted': the fitted-constants doc with each GPU's held-out values laid over `fitted`,
    'per_gpu': [{gpu, fitted_on, rows, server_a_ms, server_b_ms[, server_tp_ms], mape_mixed, law_parts,
    own_rows_fit}] (the last three SERVER_OWN_ROWS_NOTE's diagnostic), 'all_rows': the fit on every GPU's rows}.
    The basis is server_a, server_b N and, where the engine's profile declares host.server_tp_ms (SERVER_TP_NOTE),
    server_tp (TP - 1); a basis column that is zero on the rows of a fit (no TP > 1 row) is left out of it (value 0).
    A GPU whose engine has no other GPU in `rows` gets no held-out value (listed with fitted_on = [])."""
    from scipy.optimize import lsq_linear

    mine = rows[rows["engine"] == engine]
    gpus = sorted(mine["gpu"].unique())
    if not gpus:
        return {"fitted": fitted, "per_gpu": [], "all_rows": None, "note": SERVER_NOTE}
    fitted = _with_server(fitted, engine, {})  # read once (a path), copied by each _with_server below
    fields = [f for f in SERVER_FIELDS if f != SERVER_FIELDS[2] or f in get_engine(engine).values]
    k = len(fields)
    basis, frame = [], None
    for unit in [np.zeros(k)] + list(np.eye(k)):  # no law, then one unit of each basis field
        doc = _with_server(fitted, engine, {g: (*map(float, unit), "basis") for g in gpus})
        pred = run_tpot(mine, n_boot=1, fitted=doc, variant="mixed", mixed=mixed, constants=constants)["pred"]
        pred = pred.sort_index()
        frame = pred if frame is None else frame
        basis.append(pred["pred_ms"].to_numpy(float))
    y = frame["tpot_ms"].to_numpy(float)
    A = np.column_stack([p - basis[0] for p in basis[1:]]) / y[:, None]
    rhs = (y - basis[0]) / y
    g_of = frame["gpu"].to_numpy()

    def solve(mask):  # bounds >= 0; a column that is zero on `mask` (no TP > 1 row) is left out, its value 0
        live = np.abs(A[mask]).max(axis=0) > 0.0
        x = np.zeros(k)
        if live.any():
            x[live] = lsq_linear(A[mask][:, live], rhs[mask], bounds=(0.0, np.inf)).x
        return x

    def law(x):  # {field: value} of a solution, rounded as reported (a per-request value to 5 digits)
        return {f: round(float(v), 5 if f == "server_b_ms" else 4) for f, v in zip(fields, x)}

    def mape(ab, mask):  # the mixed variant's MAPE on `mask` under the law ab (the prediction is linear in it)
        return round(float(np.mean(np.abs(A[mask] @ np.asarray(ab, float) - rhs[mask]))), 4)

    def signed(ab, mask):  # the mean of pred / measured - 1 on `mask` under the law ab
        return round(float(np.mean(A[mask] @ np.asarray(ab, float) - rhs[mask])), 4)

    ds_of = frame["dataset"].to_numpy()

    def parts(x, mask):  # SERVER_OWN_ROWS_NOTE's law_parts: the held-out law split into its parts, by dataset
        only = {"per_request_only": 1, "per_step_only": 0, "per_tp_rank_only": 2}  # name -> the one column kept
        laws = {"law": x, **{name: np.where(np.arange(k) == i, x, 0.0) for name, i in only.items() if i < k},
                "none": np.zeros(k)}
        return [{"dataset": str(ds), "rows": int((mask & (ds_of == ds)).sum()),
                 **{k: {"mape": mape(ab, mask & (ds_of == ds)), "signed": signed(ab, mask & (ds_of == ds))}
                    for k, ab in laws.items()}}
                for ds in sorted(set(ds_of[mask]))]

    per_gpu, values = [], {}
    for g in gpus:
        others = [o for o in gpus if o != g]
        if not others:
            per_gpu.append({"gpu": g, "fitted_on": [], "rows": 0})
            continue
        x = solve(np.isin(g_of, others))
        src = (f"E2.11 held out by GPU: the server law of {engine} fitted on {', '.join(others)}'s "
               f"{int(np.isin(g_of, others).sum())} TPOT rows (mixed variant), not on {g}'s")
        values[g] = (*law(x).values(), src)
        mine_ = g_of == g
        own = solve(mine_)  # SERVER_OWN_ROWS_NOTE: a diagnostic, never laid over `fitted`
        per_gpu.append({"gpu": g, "fitted_on": others, "rows": int(np.isin(g_of, others).sum()), **law(x),
                        "mape_mixed": mape(x, mine_), "law_parts": parts(x, mine_),
                        "own_rows_fit": {"rows": int(mine_.sum()), **law(own), "mape_mixed": mape(own, mine_)}})
    x = solve(np.ones(len(y), dtype=bool))
    return {"fitted": _with_server(fitted, engine, values), "per_gpu": per_gpu, "note": SERVER_NOTE,
            "all_rows": {"engine": engine, "gpus": gpus, "rows": int(len(y)), **law(x)}}


def server_engines() -> list[str]:
    """The engine profiles that carry a serving front-end law (host.server_* in engines.yaml): one place
    (the profile) says which engines E2.11 fits it for."""
    from steptime.specs.engines import engine_names, get_engine

    return [e for e in engine_names() if any(f in get_engine(e).values for f in SERVER_FIELDS)]


def fit_server_hosts(rows, *, engines=None, fitted=None, constants=None, mixed: dict | None = None) -> dict:
    """fit_server_host for each engine of `engines` (default: server_engines()), each laid over the last:
    {'fitted': the doc with every engine's held-out values, 'note': SERVER_NOTE and SERVER_OWN_ROWS_NOTE,
     'engines': {engine: {'per_gpu': [...], 'all_rows': {...}}}} (engines without rows left out)."""
    out = {}
    for e in (server_engines() if engines is None else engines):
        r = fit_server_host(rows, engine=e, fitted=fitted, constants=constants, mixed=mixed)
        if r["all_rows"] is None:
            continue
        fitted = r["fitted"]
        out[e] = {"per_gpu": r["per_gpu"], "all_rows": r["all_rows"]}
    return {"fitted": fitted, "note": f"{SERVER_NOTE} {SERVER_TP_NOTE} {SERVER_OWN_ROWS_NOTE}", "engines": out}


# ---------------------------------------------------------------------------------------
# The token rows' physical read bound (E3.4's token_row_checks.kv_read_bound, E2.11's kv_read_bound): one implementation
KV_BOUND_NOTE = (
    "Diagnostic: per token row, the time to read once the KV cache of the batch steptime prices (its running requests "
    "per attention-DP rank, min(concurrency, KV capacity) for the silicon rows, the measured mean batch for ML.ENERGY) "
    "at the mean context ISL + OSL/2, at the GPU's datasheet HBM bandwidth: running x the full-attention layers' KV "
    "bytes per token on one GPU (serve.memory.kv_budget token_bytes, the KV dtype steptime prices, bf16) x context / "
    "bandwidth. Windowed and linear-attention layers, every weight and every other kernel are left out, so a decode "
    "step of that batch cannot be faster and the token time (a mean over decode and mixed steps) neither: a row "
    "measured below it is not the token time of the batch steptime prices (the engine held fewer requests, or the row "
    "is not a per-token time). Such rows stay in every claim (annotated); mape_within_bound scores the rest.")
KV_WEIGHT_BOUND_NOTE = (
    "Context, not a claim (no row dropped, no claim value changed): per token row, the time to read once, at the GPU's "
    "datasheet HBM bandwidth, the KV cache of the batch steptime prices plus the projection weights every decode step "
    "of a dense model multiplies by. KV: running requests (min(concurrency, KV capacity) for the AIConfigurator "
    "silicon rows, the measured mean batch for ML.ENERGY) x the KV bytes per token on one GPU "
    "(serve.memory.kv_budget token_bytes in bf16, the KV dtype steptime prices, the rows record none; a dense model's "
    "every layer every token, as KV_CAP_NOTE) x the mean context ISL + OSL/2. Weights: the qkv, o, gate/up and down projections of every layer at the row's TP "
    "(steptime.step.layer_shapes) in the row's weight dtype; embeddings, lm_head, norms, activations and every other "
    "kernel are left out (a mixture-of-experts model's weights too: its bound is the KV read alone). A decode step of "
    "that batch cannot be faster, nor the token time (a mean over decode and mixed steps): a row measured below it is "
    "not the token time of a bf16 KV cache at that batch (an fp8 KV cache the row does not record, fewer requests "
    "held, or not a per-token time). Per (dataset, GPU, engine) group holding such rows: its MAPE on every row (what "
    "the claims score) and mape_within_bound without them, as context. Added in wave 30 (issue 19 item 4) after "
    "helper e211t found two silicon H100 vLLM rows below this bound with the scores known; it moves no claim.")
KV_BOUND_DTYPE = "bf16"  # the KV dtype the token rows are priced with (kv_capacity)


def _step_weight_bytes(model, tp: int, dtype: str) -> float:
    """Bytes per GPU of the projection weights a dense model's decode step reads (KV_WEIGHT_BOUND_NOTE); 0 for MoE."""
    from steptime.specs.moe import is_moe
    from steptime.step import layer_shapes
    from steptime.terms.gemm import BYTES

    m = get_model(model)
    if is_moe(m):
        return 0.0
    per_layer = sum(n * k for n, k in layer_shapes(m, int(tp)).values())
    return float(per_layer * m.num_hidden_layers * BYTES[DTYPES.get(dtype, dtype)])


def kv_read_bound_ms(pred, *, weights: bool = False) -> np.ndarray:
    """Per predicted token row (columns model, gpu, tp, ep, dtype, running, prompt / output tokens): KV_BOUND_NOTE's
    bound in ms (with `weights`, KV_WEIGHT_BOUND_NOTE's: plus a dense model's projection weights); NaN where
    steptime's memory model has no KV cache for the layout."""
    import pandas as pd
    from steptime.serve.memory import kv_budget
    from steptime.specs import get_gpu

    need = {"model", "gpu", "tp", "ep", "dtype", "running", "prompt_tokens", "output_tokens"}
    if missing := sorted(need - set(pred.columns)):
        raise SteptimeError(f"kv_read_bound_ms: the rows lack {', '.join(missing)}")
    pos = pd.Series(np.arange(len(pred)), index=pred.index)
    out = np.full(len(pred), np.nan)
    for (model, gpu, tp, ep, dt), d in pred.groupby(["model", "gpu", "tp", "ep", "dtype"], sort=False):
        try:
            tok_bytes = kv_budget(model, gpu, tp=int(tp), ep=int(ep), dtype=dt, kv_dtype=KV_BOUND_DTYPE).token_bytes
        except SteptimeError:
            continue
        w = _step_weight_bytes(model, int(tp), dt) if weights else 0.0
        ctx = mean_context(d["prompt_tokens"], d["output_tokens"])
        out[pos[d.index].to_numpy()] = ((d["running"].to_numpy(float) * tok_bytes * ctx + w)
                                        / get_gpu(gpu).mem_bw * 1e3)
    return out


KV_BOUND_COLUMNS = ("dataset", "gpu", "engine", "engine_version", "model", "tp", "ep", "dp", "batch", "running",
                    "prompt_tokens", "output_tokens", "tpot_ms", "pred_ms")


def kv_bound_check(pred, note: str = KV_BOUND_NOTE) -> dict:
    """{note, groups, rows}: the rows of a predicted token-row frame (with kv_read_bound_ms) measured below their
    bound, and per (dataset, GPU, engine) group holding any, its MAPE on every row and within the bound (context:
    nothing is dropped from any score)."""
    if not len(pred):
        return {"note": note, "groups": [], "rows": []}
    need = {"dataset", "gpu", "engine", "tpot_ms", "pred_ms", "kv_read_bound_ms"}
    if missing := sorted(need - set(pred.columns)):
        raise SteptimeError(f"kv_bound_check: the rows lack {', '.join(missing)}")
    below = pred["tpot_ms"] < pred["kv_read_bound_ms"]
    groups = []
    for (ds, gpu, eng), d in pred.assign(below=below).groupby(["dataset", "gpu", "engine"], sort=True):
        if not d["below"].any():
            continue
        ok = d[~d["below"]]
        groups.append({"dataset": ds, "gpu": gpu, "engine": eng, "rows": int(len(d)), "below": int(d["below"].sum()),
                       "mape_all": round(float(((d["pred_ms"] - d["tpot_ms"]).abs() / d["tpot_ms"]).mean()), 4),
                       "mape_within_bound": (round(float(((ok["pred_ms"] - ok["tpot_ms"]).abs() / ok["tpot_ms"]).mean()), 4)
                                             if len(ok) else None)})
    cols = [c for c in KV_BOUND_COLUMNS + ("kv_read_bound_ms", "source_id") if c in pred]
    return {"note": note, "groups": groups, "rows": pred.loc[below, cols].round(3).to_dict("records")}


def token_kv_bound(preds: dict) -> dict:
    """E2.11's metrics.kv_read_bound: KV_WEIGHT_BOUND_NOTE's check on each variant's predicted token rows
    ({variant: run_tpot(...)['pred']}; E2.11's rows are TP only, so EP 1)."""
    out = {"note": KV_WEIGHT_BOUND_NOTE}
    for variant, p in preds.items():
        p = p if "ep" in p else p.assign(ep=1)
        p = p.assign(kv_read_bound_ms=kv_read_bound_ms(p, weights=True)) if len(p) else p
        chk = kv_bound_check(p, KV_WEIGHT_BOUND_NOTE)
        out[variant] = {"groups": chk["groups"], "rows": chk["rows"]}
    return out
