"""Per-step wall time of a serving engine, with each step's batch composition (E1.19, R2.3 inputs).

    python -m steptime_collect.steptrace --model llama-3.1-8b --trace splitwise_conv --requests 200 \
        --out raw/telemetry/steptrace/h100-sxm/llama-3.1-8b.csv

Written in the column layout of the forward-pass metrics (FPM) that AIConfigurator's vLLM
collector writes (one row per engine step: context and decode tokens/requests/KV tokens, queue
sizes, `latency_ms`), so one loader reads both.

Engines, in order of preference:
- `vllm` when it is installed (`--engine vllm`): a config.json written from the model's shapes,
  dummy (random) weights (`load_format="dummy"`, no download), requests from the trace added at
  their arrival times, and each `LLMEngine.step()` timed; a request whose first token appears in a step counts as a context
  request of that step with its whole prompt (chunked prefill is not visible from outside the
  engine, so use `--max-num-batched-tokens` at least the longest prompt), every other running
  request as one decode token.
- `eager` otherwise: a decoder built from the model's shapes in `specs/models.yaml` with random
  weights (nothing is downloaded), run by a small continuous-batching loop (decodes first, then
  whole prompts while the token budget lasts), timed per step with CUDA synchronisation.
The plan (which requests, when, in what order) is `plan_requests`, tested without a GPU.
No GPU setting is touched.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import sys
from pathlib import Path

from steptime_collect.cli import output_path, positive_int, run, write_csv

FPM_COLUMNS = ("phase", "workload_segment", "counter_id", "worker_id", "dp_rank", "ctx_tokens", "ctx_requests",
               "ctx_kv_tokens", "decode_tokens", "decode_requests", "decode_kv_tokens", "mean_decode_kv_tokens",
               "queued_ctx_tokens", "queued_ctx_requests", "queued_decode_requests", "queued_decode_kv_tokens",
               "latency_ms")


TRACE_COLUMNS = ("trace", "request_id", "arrived_at_s", "num_prefill_tokens", "num_decode_tokens")


def read_traces(path=None):
    """The tidy traces table, or one line: the default one outside a steptime repository, a path
    that is not a regular file, a file that is not parquet, a table without the trace columns."""
    import pandas as pd

    from steptime.errors import DataError
    from steptime.io import find_root
    from steptime.validation import MAX_TABLE_BYTES, check_regular_file

    if path is None:
        try:
            path = find_root() / "results" / "data" / "traces.parquet"
        except DataError as exc:  # outside a steptime repository: find_root names what it looked for
            raise DataError(f"no traces table: {exc}; or pass --traces-table") from None
    p = check_regular_file(path, "--traces-table", MAX_TABLE_BYTES, DataError)
    try:
        import pyarrow

        df = pd.read_parquet(p)
    except (ValueError, OSError, pyarrow.ArrowException) as exc:
        why = str(exc).strip().splitlines()[0][:100] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{p}: not a parquet traces table ({why})") from None
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{p}: not a traces table (no column {', '.join(missing)})")
    return df


def plan_requests(trace, name: str, n: int, seed: int = 0, max_prompt: int | None = None):
    """The first `n` requests of one trace (arrival order), prompts capped at `max_prompt` tokens.

    `trace` is the tidy traces table (results/data/traces.parquet: trace, request_id, arrived_at_s,
    num_prefill_tokens, num_decode_tokens). Returns (arrival_s, prompt_tokens, output_tokens) rows."""
    from steptime.errors import DataError

    t = trace[trace["trace"] == name]
    if t.empty:
        raise DataError(f"no trace named {name!r}; known: {', '.join(sorted(trace['trace'].unique()))}")
    t = t.sort_values(["arrived_at_s", "request_id"]).head(n)
    prompt = t["num_prefill_tokens"].astype(int)
    if max_prompt:
        prompt = prompt.clip(upper=max_prompt)
    return [(float(a), int(p), int(o)) for a, p, o in zip(t["arrived_at_s"] - t["arrived_at_s"].iloc[0], prompt,
                                                         t["num_decode_tokens"].astype(int))]


def step_row(step: int, ctx: list[tuple[int, int]], dec_kv: list[int], queued: list[int], latency_ms: float) -> list:
    """One FPM row: ctx = (new tokens, tokens already cached) per context request; dec_kv = KV length per decode."""
    phase = "context" if ctx and not dec_kv else ("decode" if dec_kv and not ctx else "mixed")
    return [phase, "real", step, 0, 0, sum(t for t, _ in ctx), len(ctx), sum(c for _, c in ctx), len(dec_kv),
            len(dec_kv), sum(dec_kv), (sum(dec_kv) / len(dec_kv)) if dec_kv else 0.0, sum(queued), len(queued), 0, 0,
            round(latency_ms, 4)]


def schedule(requests, budget: int = 2048, max_seqs: int = 128):
    """The continuous-batching order of the eager loop, without timing: yields (ctx, dec_kv, queued, finished)
    per step, advancing the clock by one step per iteration (arrivals are admitted once their time has come
    in steps of `tick_s`, see `run_eager`). Pure Python; tested without a GPU."""
    waiting = list(enumerate(requests))
    running: dict[int, list[int]] = {}   # id -> [kv_len, remaining output tokens]
    step = 0
    while waiting or running:
        dec = [rid for rid in running]
        dec_kv = [running[r][0] for r in dec]
        ctx, used = [], len(dec)
        while waiting and len(running) + len(ctx) < max_seqs and used + waiting[0][1][1] <= budget:
            rid, (_, p, o) = waiting.pop(0)
            ctx.append((rid, p, o))
            used += p
        if not ctx and not dec and waiting:  # a prompt longer than the budget runs alone
            rid, (_, p, o) = waiting.pop(0)
            ctx.append((rid, p, o))
        yield step, [(p, 0) for _, p, _ in ctx], dec_kv, [w[1][1] for w in waiting], [r for r in dec]
        for r in dec:
            running[r][0] += 1
            running[r][1] -= 1
            if running[r][1] <= 0:
                del running[r]
        for rid, p, o in ctx:
            if o > 1:
                running[rid] = [p + 1, o - 1]
        step += 1


def run_eager(model, requests, device: str = "cuda", budget: int = 2048, max_seqs: int = 128,
              layers: int | None = None) -> list[list]:  # pragma: no cover - runs torch (GPU in practice)
    """Eager PyTorch decoder with random weights from the model's shapes; one FPM row per step."""
    import time

    import torch

    from steptime_collect.safety import progress
    from steptime.specs import get_model

    mdl = get_model(model)
    torch.manual_seed(0)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    h, hd = mdl.hidden_size, mdl.head_dim
    nq, nkv = mdl.num_attention_heads, mdl.num_key_value_heads
    L = layers or mdl.num_hidden_layers
    W = lambda o, i: torch.randn(o, i, device=device, dtype=dt) * (i ** -0.5)  # noqa: E731
    blocks = [dict(qkv=W((nq + 2 * nkv) * hd, h), o=W(h, nq * hd), up=W(2 * mdl.intermediate_size, h),
                   down=W(h, mdl.intermediate_size)) for _ in range(L)]
    emb, head = W(mdl.vocab_size, h), W(mdl.vocab_size, h)
    cache: dict[int, list] = {}

    def norm(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(seqs):  # seqs: list of (rid, n_new)
        outs = []
        for rid, n_new in seqs:
            x = emb[torch.randint(0, mdl.vocab_size, (n_new,), device=device)]
            kvs = cache.setdefault(rid, [None] * L)
            for i, b in enumerate(blocks):
                q, k, v = (norm(x) @ b["qkv"].T).split([nq * hd, nkv * hd, nkv * hd], -1)
                k, v = k.view(n_new, nkv, hd), v.view(n_new, nkv, hd)
                if kvs[i] is not None:
                    k, v = torch.cat([kvs[i][0], k]), torch.cat([kvs[i][1], v])
                kvs[i] = (k, v)
                qh = q.view(n_new, nq, hd).transpose(0, 1)
                kh = k.repeat_interleave(nq // nkv, 1).transpose(0, 1)
                vh = v.repeat_interleave(nq // nkv, 1).transpose(0, 1)
                a = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=n_new > 1)
                x = x + a.transpose(0, 1).reshape(n_new, nq * hd) @ b["o"].T
                g, u = (norm(x) @ b["up"].T).chunk(2, -1)
                x = x + (torch.nn.functional.silu(g) * u) @ b["down"].T
            outs.append((norm(x[-1:]) @ head.T).argmax(-1))
        return outs

    rows = []
    for step, ctx, dec_kv, queued, dec_ids in progress(schedule(requests, budget, max_seqs), desc="steps"):
        seqs = [(r, 1) for r in dec_ids] + [(-(step * 100000 + i) - 1, t) for i, (t, _) in enumerate(ctx)]
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        forward(seqs)
        if device == "cuda":
            torch.cuda.synchronize()
        rows.append(step_row(step, ctx, dec_kv, queued, (time.perf_counter() - t0) * 1e3))
    return rows


def hf_config(model) -> dict:
    """A Hugging Face config.json for `model` from specs/models.yaml (Llama layout), for dummy weights."""
    from steptime.specs import get_model

    m = get_model(model)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": m.hidden_size,
            "intermediate_size": m.intermediate_size, "num_hidden_layers": m.num_hidden_layers,
            "num_attention_heads": m.num_attention_heads, "num_key_value_heads": m.num_key_value_heads,
            "head_dim": m.head_dim, "vocab_size": m.vocab_size, "max_position_embeddings": m.max_position_embeddings,
            "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def run_vllm(model, requests, budget: int, max_seqs: int) -> list[list]:  # pragma: no cover - vLLM + GPU
    """vLLM's engine with dummy (random) weights from a config written here; each step() timed."""
    import json
    import tempfile
    import time

    from vllm import LLM, SamplingParams

    from steptime_collect.safety import progress

    tmp = Path(tempfile.mkdtemp(prefix="steptrace_"))
    (tmp / "config.json").write_text(json.dumps(hf_config(model)))
    llm = LLM(model=str(tmp), load_format="dummy", skip_tokenizer_init=True, max_num_batched_tokens=budget,
              max_num_seqs=max_seqs, enable_prefix_caching=False)
    eng = llm.llm_engine
    pending = list(enumerate(requests))
    seen: dict[str, int] = {}
    prompts = {str(i): p for i, (_, p, _) in enumerate(requests)}
    rows, step, t_start = [], 0, time.perf_counter()
    bar = progress(range(10 ** 9), desc="vllm steps")
    while pending or eng.has_unfinished_requests():
        now = time.perf_counter() - t_start
        while pending and pending[0][1][0] <= now:
            i, (_, p, o) = pending.pop(0)
            eng.add_request(str(i), {"prompt_token_ids": [1] * p}, SamplingParams(max_tokens=o, ignore_eos=True))
        if not eng.has_unfinished_requests():
            time.sleep(0.001)
            continue
        t0 = time.perf_counter()
        outs = eng.step()
        dt = (time.perf_counter() - t0) * 1e3
        ctx, dec_kv = [], []
        for out in outs:
            n = len(out.outputs[0].token_ids)
            before = seen.get(out.request_id, 0)
            if before == 0 and n > 0:
                ctx.append((prompts[out.request_id], 0))
            elif n > before:
                dec_kv.append(prompts[out.request_id] + before)
            seen[out.request_id] = n
        rows.append(step_row(step, ctx, dec_kv, [p for _, (_, p, _) in pending], dt))
        step += 1
        next(iter(bar), None)
    return rows


def write_rows(out: Path, rows) -> None:
    write_csv(out, FPM_COLUMNS, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steptime_collect.steptrace", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="steptime model key (shapes from specs/models.yaml)")
    p.add_argument("--trace", default="splitwise_conv", help="trace name in the tidy traces table")
    p.add_argument("--traces-table", default=None,
                   help="the tidy traces table (default: results/data/traces.parquet of this repository)")
    p.add_argument("--requests", type=positive_int, default=200)
    p.add_argument("--max-prompt", type=positive_int, default=4096)
    p.add_argument("--engine", choices=["auto", "vllm", "eager"], default="auto")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=4096)
    p.add_argument("--max-num-seqs", type=positive_int, default=128)
    p.add_argument("--out", required=True, type=output_path)
    p.add_argument("--dry-run", action="store_true", help="print the schedule's first steps (no GPU needed)")
    a = p.parse_args(argv)
    reqs = plan_requests(read_traces(a.traces_table), a.trace, a.requests, max_prompt=a.max_prompt)
    if a.dry_run:
        for i, (step, ctx, dec_kv, queued, _) in enumerate(schedule(reqs, a.max_num_batched_tokens, a.max_num_seqs)):
            if i >= 20:
                break
            print(step_row(step, ctx, dec_kv, queued, 0.0))
        return 0
    from steptime_collect.safety import require_gpu

    require_gpu()
    if a.engine in ("auto", "vllm"):
        try:
            import vllm  # noqa: F401
        except ImportError:
            if a.engine == "vllm":
                from steptime.errors import SteptimeError

                raise SteptimeError("--engine vllm: vLLM is not installed on this node (pip install vllm)") from None
        else:  # pragma: no cover - needs vLLM and a GPU
            write_rows(Path(a.out), run_vllm(a.model, reqs, a.max_num_batched_tokens, a.max_num_seqs))
            return 0
    write_rows(Path(a.out), run_eager(a.model, reqs, "cuda", a.max_num_batched_tokens, a.max_num_seqs))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.steptrace"))
