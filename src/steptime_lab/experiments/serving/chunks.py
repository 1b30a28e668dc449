"""Sarathi chunk sizing for a time-between-tokens (TBT) SLO: steptime picks the chunk budget from two
predicted steps and a fluid throughput model (`pick_chunk`, no simulation); the oracle is the planner's
exhaustive search over the chunk grid; static 512 and 2048 are the common fixed settings. Every choice is
scored in the simulator (E2.9)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.plan import error_band, plan
from steptime.serve import StepTimer, Workload
from steptime.specs import get_gpu
from steptime_lab.experiments.serving.common import trace_lengths


def pick_chunk(timer: StepTimer, concurrency: int, prompt_mean: float, output_mean: float, slo_s: float,
               grid, headroom=0.0) -> dict:
    """Steptime's chunk pick without simulating: for each chunk c, two predicted steps,

        t_mix(c)  (C - 1) decodes at the mean context + one chunk of c tokens at mid-prompt
        t_dec     C decodes at the mean context

    and a fluid model of a closed loop at concurrency C: a fraction f = C P / (O c) of
    iterations must carry a chunk for prefill to keep pace with decode (f <= 1), so the
    output rate is C / (f t_mix + (1 - f) t_dec); when f > 1, prefill limits it to
    (c O / P) / t_mix. Picks the c of highest rate with t_mix(c) x (1 + headroom(c)) <= SLO (the
    smallest c if none qualifies). `headroom`: one fraction for every chunk, or one per chunk of `grid`
    (chunk_band: the family's held-out error of this two-step model at that chunk)."""
    grid = list(grid)
    h = np.broadcast_to(np.asarray(headroom, dtype=float), (len(grid),)) if np.ndim(headroom) == 0 else \
        np.asarray(headroom, dtype=float)
    if h.shape != (len(grid),) or not np.isfinite(h).all() or (h < 0).any():
        raise ValueError(f"pick_chunk: headroom must be one fraction >= 0 or one per chunk of the grid "
                         f"({len(grid)}), got {headroom!r}")
    C, P, O = int(concurrency), float(prompt_mean), float(output_mean)
    ctx = int(P + O / 2)
    t_dec = timer.step_arrays(np.ones(C, dtype=np.int64), np.full(C, ctx))
    rows = []
    for c, hc in zip(grid, h):
        new = np.concatenate([np.ones(C - 1, dtype=np.int64), [int(c)]])
        kv = np.concatenate([np.full(C - 1, ctx), [int(max(0, P / 2 - c / 2))]])
        t_mix = timer.step_arrays(new, kv)
        f = C * P / (O * c)
        rate = C / (f * t_mix + (1 - f) * t_dec) if f <= 1 else (c * O / P) / t_mix
        rows.append({"chunk": int(c), "t_mix_s": t_mix, "rate_tok_s": rate, "headroom": float(hc),
                     "meets": t_mix * (1.0 + hc) <= slo_s})
    df = pd.DataFrame(rows)
    ok = df[df["meets"]]
    best = ok.loc[ok["rate_tok_s"].idxmax()] if len(ok) else df.iloc[0]
    return {"chunk": int(best["chunk"]), "t_dec_s": float(t_dec), "table": df}


def chunk_sweep(model, gpu, prompt, output, concurrency: int, grid, slo_tbt_s: float, engine=None,
                constants=None):
    """The planner's search (`steptime.plan.plan`) over Sarathi chunk budgets for one instance (tp 1,
    bf16, `concurrency` sequences, a closed loop at `concurrency`): every chunk simulated
    (exhaustive), judged on the p99 time between tokens. Returns (sweep table, the PlanResult)."""
    wl = Workload(np.zeros(len(prompt)), prompt, output, concurrency=concurrency, name="closed loop")
    res = plan(model, wl, slo_itl_s=slo_tbt_s, percentile=99.0, gpus=(gpu,), engines=(engine or "vllm",),
               max_gpus=1, tps=(1,), seqs=(int(concurrency),), budgets=tuple(int(c) for c in grid), dtypes=("bf16",),
               disagg=False, exhaustive=True, jobs=1, constants=constants)
    rows = sorted(res.simulated(), key=lambda r: r["max_num_batched_tokens"])
    sweep = pd.DataFrame([{"chunk": int(r["max_num_batched_tokens"]), "tbt_p99_s": r["itl_pct_s"],
                           "tbt_p50_s": r["itl_p50_s"], "tpot_p50_s": r["tpot_p50_s"], "ttft_p50_s": r["ttft_p50_s"],
                           "throughput_tok_s": r["throughput_tok_s"], "steps": r["steps"]} for r in rows])
    return sweep, res


def chunk_errors(table: pd.DataFrame, sweep: pd.DataFrame, grid) -> np.ndarray:
    """The two-step model's error per chunk of `grid` on one GPU: simulated p99 time between tokens
    (`sweep`, chunk_sweep's table) / predicted t_mix - 1 (positive: t_mix ran fast); t_mix from `table`,
    pick_chunk's table of the same GPU and workload (the caller's, not computed again)."""
    t = table.set_index("chunk")["t_mix_s"]
    by = sweep.set_index("chunk")["tbt_p99_s"]
    for name, index in (("sweep", by.index), ("pick table", t.index)):
        missing = [c for c in grid if c not in index]
        if missing:
            raise ValueError(f"chunk_errors: the {name} has no chunk {missing[0]} of the grid")
    return np.array([by[c] / t[c] - 1.0 for c in grid])


def chunk_band(errors_by_gpu: dict, gpu: str, family_of) -> tuple[np.ndarray | None, list]:
    """The headroom per chunk for `gpu`'s pick: the worst held-out error (steptime.plan.error_band at quantile 1)
    of the two-step model at that chunk over the OTHER GPUs of its family (`family_of(key)`) in `errors_by_gpu`
    ({gpu: array per chunk}); never `gpu`'s own. Returns (band or None where no sibling is there, siblings)."""
    sib = sorted(g for g in errors_by_gpu if g != gpu and family_of(g) == family_of(gpu))
    if not sib:
        return None, []
    e = np.vstack([errors_by_gpu[g] for g in sib])
    return np.array([error_band(e[:, j], 1.0) for j in range(e.shape[1])]), sib


def chunk_sizing(traces: pd.DataFrame, *, models, gpus, trace: str, n: int, concurrency: int, grid, slo_multiples,
         statics=(512, 2048), seed: int = 0, targets: dict | None = None, constants=None, band_gpus=()) -> dict:
    """Run E2.9 for every (model, GPU, SLO): steptime's pick (two predicted steps, no simulation), the
    oracle (the planner's best chunk under the SLO: one exhaustive `steptime plan` search over the chunk
    grid per model and GPU, judged against each SLO), and the statics, each scored on the planner's
    simulations. The pick keeps headroom per chunk (chunk_band) read from the OTHER GPUs of the GPU's family
    among `gpus` and `band_gpus` (GPUs swept for the band only, not scored); none where no sibling is there."""
    targets = targets or {}
    grid = sorted({int(c) for c in grid} | {int(s) for s in statics})
    prompt, output = trace_lengths(traces, trace, n, seed)
    band_only = [g for g in band_gpus if g not in gpus]
    family = lambda g: get_gpu(g).architecture  # noqa: E731
    cases, sweeps, band_sweeps, bands = [], {}, {}, {}
    for model in models:
        timers, runs, errs = {}, {}, {}
        for gpu in list(gpus) + band_only:
            timers[gpu] = StepTimer(model, gpu, max_tokens=max(grid) + concurrency, max_requests=concurrency,
                                    constants=constants)
            pk0 = pick_chunk(timers[gpu], concurrency, prompt.mean(), output.mean(), 0.0, grid)  # t_dec, t_mix
            t_dec = pk0["t_dec_s"]
            slos = {float(m): float(m) * t_dec for m in slo_multiples}
            sweep, res = chunk_sweep(model, gpu, prompt, output, concurrency, grid, max(slos.values()),
                                     constants=constants)
            runs[gpu] = (slos, sweep, res)
            errs[gpu] = chunk_errors(pk0["table"], sweep, grid)
            if gpu in band_only:
                band_sweeps[f"{model}|{gpu}"] = sweep
        for gpu in gpus:
            timer = timers[gpu]
            slos, sweep, res = runs[gpu]
            band, sib = chunk_band(errs, gpu, family)
            bands[f"{model}|{gpu}"] = {"from": sib, "family": family(gpu), "chunk": grid,
                                       "headroom": None if band is None else band.tolist(),
                                       "own_error": errs[gpu].tolist()}
            sweeps[f"{model}|{gpu}"] = sweep
            by = sweep.set_index("chunk")
            for mult, slo in slos.items():
                pk = pick_chunk(timer, concurrency, prompt.mean(), output.mean(), slo, grid,
                                headroom=0.0 if band is None else band)
                best = res.with_slo(slo_itl_s=slo).ranked()
                oracle = int(best[0]["max_num_batched_tokens"]) if best else None
                # E2.9's rule before the planner: the highest-throughput chunk of the sweep within the SLO
                ok = sweep[sweep["tbt_p99_s"] <= slo]
                sweep_rule = int(ok.loc[ok["throughput_tok_s"].idxmax(), "chunk"]) if len(ok) else None
                row = {"model": model, "gpu": gpu, "slo_multiple": mult, "slo_tbt_s": slo,
                       "pick": pk["chunk"], "oracle": oracle, "oracle_sweep_rule": sweep_rule,
                       "pick_headroom": float(pk["table"].set_index("chunk").loc[pk["chunk"], "headroom"]),
                       "pick_no_headroom": pick_chunk(timer, concurrency, prompt.mean(), output.mean(), slo,
                                                      grid)["chunk"]}
                row["pick_no_headroom_meets"] = bool(by.loc[row["pick_no_headroom"], "tbt_p99_s"] <= slo)
                for name, c in [("pick", pk["chunk"]), ("oracle", oracle)] + [(f"static_{s}", s) for s in statics]:
                    if c is None:
                        row[f"{name}_tok_s"] = None
                        row[f"{name}_meets"] = False
                        continue
                    row[f"{name}_tok_s"] = float(by.loc[c, "throughput_tok_s"])
                    row[f"{name}_tbt_p99_s"] = float(by.loc[c, "tbt_p99_s"])
                    row[f"{name}_meets"] = bool(by.loc[c, "tbt_p99_s"] <= slo)
                cases.append(row)
    df = pd.DataFrame(cases)
    return {"cases": df, "sweeps": sweeps, "band_sweeps": band_sweeps, "bands": bands, "targets": targets,
            "workload": {
        "trace": trace, "requests": n, "concurrency": concurrency, "prompt_mean": float(prompt.mean()),
        "output_mean": float(output.mean()), "seed": seed}, "grid": grid, "statics": list(statics),
        "oracle_by": "steptime plan (exhaustive search over the chunk grid; ranked by cost per output token at one "
                     "GPU, i.e. by throughput, among chunks whose simulated p99 time between tokens meets the SLO)"}
