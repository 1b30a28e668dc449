"""Prefill/decode pool sizing (DistServe-style disaggregation): the planner's max-rate question per placement,
with steptime's step times and with DistServe's own fitted latency model, same requests (simulated; E2.4)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from steptime import peers
from steptime.plan import plan
from steptime.serve import Workload
from steptime_lab.experiments.serving.common import trace_lengths


def placements(total_gpus: int, tp: int) -> list[tuple[int, int]]:
    """(prefill instances, decode instances) that fit in `total_gpus` GPUs at `tp` each."""
    k = total_gpus // tp
    return [(p, d) for p in range(1, k) for d in range(1, k) if p + d <= k]


def _kv_blocks(max_tokens: pd.DataFrame, model: str, tp: int, block: int) -> int:
    row = max_tokens[(max_tokens["model"] == model) & (max_tokens["tp"] == tp) & (max_tokens["pp"] == 1)]
    if row.empty:
        raise ValueError(f"no DistServe KV capacity for {model} at tp={tp}")
    return int(row["max_num_tokens"].iloc[0]) // block


def pool_goodput(timer: str, lengths, *, model: str, gpu: str, tp: int, total_gpus: int, rates, slo_ttft_s: float,
                 slo_tpot_s: float, kv_blocks: int, attainment: float = 0.9, seed: int = 0, coefficients=None,
                 constants=None) -> dict:
    """The planner's max-rate question (`steptime.plan.plan(objective="max_rate")`) over the prefill/decode
    placements of `total_gpus` GPUs at `tp`: for each, the largest per-GPU Poisson rate of `rates` at which
    `attainment` of the requests meet both SLOs (DistServe's attainment), scanning up to the first rate
    that fails. `timer` is "steptime" (its StepTimer) or "distserve" (DistServe's fitted model from
    `coefficients`, through the peer registry); KV capacity fixed to DistServe's `kv_blocks`; prefill pools
    run whole prompts within a 4,096-token budget, decode pools reserve each request's KV up front.
    Returns {placement: {goodput_per_gpu, gpus, scan}} and the PlanResult."""
    prompt, output = lengths
    factory = partial(peers.make, "distserve", coefficients) if timer == "distserve" else None
    res = plan(model, Workload(np.zeros(len(prompt)), prompt, output, name="disagg"), slo_ttft_s=slo_ttft_s,
               slo_tpot_s=slo_tpot_s, percentile=attainment * 100.0, attainment=True, objective="max_rate",
               rates=rates, seed=seed, gpus=(gpu,), tps=(tp,), seqs=(256,), budgets=(4096,), dtypes=("bf16",),
               replicas=(), pools=placements(total_gpus, tp), max_gpus=total_gpus, kv_blocks=kv_blocks,
               timer_factory=factory, exhaustive=True, jobs=1, constants=constants, prices={})
    out = {}
    for r in res.rows:
        if not r.get("simulated"):
            raise ValueError(f"{model} {r['layout']}: {r.get('dropped') or r.get('pruned')}")
        out[f"{r['prefill']}p{r['decode']}d"] = {
            "goodput_per_gpu": r["max_rate_per_gpu"], "gpus": r["gpus"],
            "scan": [{"rate_per_gpu": x["rate_per_gpu"], "attainment": x["attainment"]} for x in r["rate_scan"]]}
    return {k: out[k] for k in (f"{p}p{d}d" for p, d in placements(total_gpus, tp))}, res


def pool_sizing(traces: pd.DataFrame, coefficients: pd.DataFrame, max_tokens: pd.DataFrame, *, cases, gpu: str, trace: str,
         n: int, seed: int, attainment: float = 0.9, block_size: int = 16, targets: dict | None = None,
         constants=None) -> dict:
    out = []
    for case in cases:
        model, tp = case["model"], int(case["tp"])
        ctx_ok = traces[traces["trace"].str.startswith(trace)]
        ctx_ok = ctx_ok[ctx_ok["num_prefill_tokens"] + ctx_ok["num_decode_tokens"] <= int(case.get("max_len", 2048))]
        lengths = trace_lengths(ctx_ok.assign(trace=trace), trace, n, seed)
        kv = _kv_blocks(max_tokens, model, tp, block_size)
        res = {name: pool_goodput(name, lengths, model=model, gpu=gpu, tp=tp, total_gpus=int(case["total_gpus"]),
                                  rates=case["rates_per_gpu"], slo_ttft_s=case["slo_ttft_s"],
                                  slo_tpot_s=case["slo_tpot_s"], kv_blocks=kv, attainment=attainment, seed=seed,
                                  coefficients=coefficients, constants=constants)[0]
               for name in ("steptime", "distserve")}
        choice = {name: max(r, key=lambda k: (r[k]["goodput_per_gpu"], -r[k]["gpus"], k)) for name, r in res.items()}
        ds_best = res["distserve"][choice["distserve"]]["goodput_per_gpu"]
        st_under_ds = res["distserve"][choice["steptime"]]["goodput_per_gpu"]
        out.append({"model": model, "tp": tp, "gpu": gpu, "slo_ttft_s": case["slo_ttft_s"],
                    "slo_tpot_s": case["slo_tpot_s"], "total_gpus": case["total_gpus"], "kv_blocks": kv,
                    "choice": choice, "same_choice": choice["steptime"] == choice["distserve"],
                    "steptime_choice_under_distserve_ratio": (st_under_ds / ds_best) if ds_best > 0 else None,
                    "goodput": {name: {k: v["goodput_per_gpu"] for k, v in r.items()} for name, r in res.items()},
                    "scans": {name: {k: v["scan"] for k, v in r.items()} for name, r in res.items()},
                    "prompt_mean": float(lengths[0].mean()), "output_mean": float(lengths[1].mean())})
    return {"cases": out, "targets": targets or {}, "workload": {"trace": trace, "requests": n, "seed": seed,
                                                                   "attainment": attainment}}
