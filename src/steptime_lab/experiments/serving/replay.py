"""End-to-end replay of whole real vLLM runs (LLMServingSim's vLLM 0.19 runs): the same arrivals and lengths
through the simulator, per-request TTFT / TPOT / end-to-end compared with the measured ones (E2.10)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime.serve import Workload, on_clock, policy, simulate
from steptime.specs.engines import get_engine

from steptime_lab.data.wallclock import SERVINGSIM_LATENCY_CLOCK


METRICS = ("ttft_s", "tpot_s", "e2e_s")


def recorded_kv(r0) -> tuple[int | None, int | None]:
    """(KV blocks, block size) the run's engine logged (meta.json kv_cache), or (None, None) where not recorded."""
    n = int(r0.get("kv_blocks_recorded", -1)) if "kv_blocks_recorded" in r0 else -1
    b = int(r0.get("kv_block_size_recorded", -1)) if "kv_block_size_recorded" in r0 else -1
    return (n, b if b > 0 else None) if n > 0 else (None, None)


# vLLM 0.19's automatic prefix caching is on unless switched off: none of the runs' engine_kwargs (meta.json) sets
# enable_prefix_caching, and the run that records its resolved config (RTX4090_Llama-3.1-8B, cache_config) has it on
RUN_PREFIX_CACHING = True


# How the open-loop join and the latency clock of the LLMServingSim replays (E2.10, E3.4) were chosen
ASYNC_JOIN_DISCLOSED = (
    "Wave 28 (helper sync2), after seeing E3.4's replay of the LLMServingSim RTX PRO 6000 Qwen3-30B-A3B run miss its "
    "median TTFT (-21.5%, target 20%): an arrival joins the engine's loop as its profile's schedule.read_join_steps "
    "says (vLLM's async scheduling, on by default from 0.14: a request the engine reads at a step boundary joins the "
    "step after next; engines.yaml, read in vLLM's source after the miss was seen), and the simulated TTFT and "
    "end-to-end latency are measured on the runs' own clock, the engine's: from the step boundary at which the engine "
    "read the request, as the runs' queued_ts (the client's send time is on another clock; data.wallclock "
    "SERVINGSIM_LATENCY_CLOCK, steptime.serve.on_clock). Applied to every LLMServingSim replay alike; nothing fitted. "
    "Wave 28 (helper join), after that finding and after these replays' scores were seen: the same loop gives a "
    "finished request's slot and KV blocks back only when it processes that step's output, so a request finished in "
    "step n frees them for step n + read_join_steps (n + 2 under async scheduling; at once when nothing else runs); "
    "from the same engines.yaml fact, no new constant.")
# How the engine profiles' closed-loop joins reached the simulator's engine_policy (E2.9, E2.13's band, steptime plan)
CLOSED_JOIN_DISCLOSED = (
    "Wave 28 (helper join), after wave 28's E3.4 finding above (an open-loop arrival joins vLLM's async loop two steps "
    "after the engine reads it) and after this result's scores were seen: the simulator's engine_policy also carries "
    "the profile's closed-loop schedule.join_steps (a closed-loop client's next request joins the join_steps-th step "
    "counted from the one its predecessor finished in; absent: the next step), and engines.yaml gained vllm's "
    "join_steps 3 and SGLang's 3 and read_join_steps 2 and TensorRT-LLM's read_join_steps 2, each read in the "
    "engine's loop source (join_steps = read_join_steps + 1); nothing fitted. Before it engine_policy's closed loops "
    "joined the next step whatever the profile.")


def replay_run(rows: pd.DataFrame, *, engine: str = "vllm", gpu_memory_utilization: float = 0.9,
               block_size: int = 16, constants=None, prefix_caching: bool = RUN_PREFIX_CACHING,
               clock: str = SERVINGSIM_LATENCY_CLOCK):
    """Simulate one measured run: its arrivals, prompt and output lengths, TP and scheduler limits, and the KV
    block count (and block size) the run's engine logged where it records them (else the memory model's);
    `prefix_caching`: a preempted request resumes from its blocks still cached, as vLLM V1 does with it on. An
    arrival joins the engine's loop as the profile's schedule.read_join_steps says; TTFT and end-to-end latency are
    reported on `clock` (steptime.serve.on_clock: the table's own, the engine's)."""
    r0 = rows.iloc[0]
    rows = rows.sort_values("arrival_s", kind="stable")
    wl = Workload(rows["arrival_s"].to_numpy() - rows["arrival_s"].min(), rows["input_tokens"].to_numpy(),
                  rows["output_tokens"].to_numpy(), name=str(r0["run"]))
    kv_blocks, kv_bs = recorded_kv(r0)
    pol = policy("vllm", max_num_batched_tokens=int(r0["max_num_batched_tokens"]), max_num_seqs=int(r0["max_num_seqs"]),
                 block_size=kv_bs or block_size, gpu_memory_utilization=gpu_memory_utilization, kv_blocks=kv_blocks,
                 prefix_caching=bool(prefix_caching), read_join_steps=get_engine(engine).read_join_steps())
    run = simulate(r0["model"], r0["gpu"], wl, pol, tp=int(r0["tp"]), engine=engine, constants=constants)
    sim = on_clock(run.requests, clock)
    sim["request_id"] = rows["request_id"].to_numpy()
    return sim, run


def _err(sim, meas):
    return float((sim - meas) / meas)


def engines_by_gpu(engine_by_gpu: dict | None, requests: pd.DataFrame) -> dict:
    """A copy of a GPU key -> engine profile map, refused if it names a GPU the replayed runs do not hold."""
    out = dict(engine_by_gpu or {})
    unknown = sorted(set(out) - set(requests["gpu"].unique()))
    if unknown:
        raise ValueError(f"engine_by_gpu names GPUs not in the data: {', '.join(unknown)}")
    return out


def replay_runs(requests: pd.DataFrame, *, targets: dict, engine: str = "vllm", peer: pd.DataFrame | None = None,
          constants=None, engine_by_gpu: dict | None = None, disclosed: str | None = None) -> dict:
    """Replay each dense run through steptime.serve; `peer`: LLMServingSim's own simulated replay of the same runs
    (its outputs/sim.csv, servingsim_sim), scored the same way beside steptime's. `engine_by_gpu`: GPU key ->
    engine profile for the runs on that GPU's host where it differs from `engine`'s (e.g. vllm-no-p2p: PCIe GPUs
    without peer-to-peer); `disclosed`: how those choices were made, carried into the result."""
    engine_by_gpu = engines_by_gpu(engine_by_gpu, requests)
    runs, skipped, per_request = [], [], {}
    for run_id, rows in requests.groupby("run", sort=True):
        r0 = rows.iloc[0]
        if bool(r0["moe"]):
            skipped.append({"run": run_id, "reason": "mixture-of-experts model: steptime's step model is dense only"})
            continue
        eng = engine_by_gpu.get(r0["gpu"], engine)
        sim, srun = replay_run(rows, engine=eng, constants=constants)
        meas = rows.set_index("request_id").loc[sim["request_id"]]
        row = {"run": run_id, "gpu": r0["gpu"], "model": r0["model"], "tp": int(r0["tp"]), "engine_profile": eng,
               "engine_version": r0["engine_version"], "requests": int(len(rows)),
               "kv_blocks_simulated": int(srun.kv_blocks),
               "kv_blocks_from": "the run's log (meta.json)" if recorded_kv(r0)[0] else "steptime's memory model",
               "preemptions_simulated": int(sim["preemptions"].sum())}
        for m in METRICS:
            s = sim[m].to_numpy(dtype=float)
            x = meas[m].to_numpy(dtype=float)
            ok = np.isfinite(s) & np.isfinite(x)
            for q, name in ((50, "p50"), (90, "p90")):
                row[f"{m}_{name}_measured"] = float(np.percentile(x[ok], q))
                row[f"{m}_{name}_simulated"] = float(np.percentile(s[ok], q))
                row[f"{m}_{name}_error"] = _err(row[f"{m}_{name}_simulated"], row[f"{m}_{name}_measured"])
            row[f"{m}_per_request_mape"] = float(np.mean(np.abs(s[ok] - x[ok]) / x[ok]))
        pr = None if peer is None else peer[peer["run"] == run_id]
        if pr is not None and len(pr):  # LLMServingSim's own simulator, same percentiles of the same run
            row["llmservingsim_requests"] = int(len(pr))
            for m in METRICS:
                v, x = pr[m].to_numpy(dtype=float), meas[m].to_numpy(dtype=float)
                v, x = v[np.isfinite(v)], x[np.isfinite(x)]
                for q, name in ((50, "p50"), (90, "p90")):
                    row[f"{m}_{name}_llmservingsim"] = float(np.percentile(v, q))
                    row[f"{m}_{name}_llmservingsim_error"] = _err(row[f"{m}_{name}_llmservingsim"],
                                                                  float(np.percentile(x, q)))
        runs.append(row)
        per_request[run_id] = pd.DataFrame({"request_id": sim["request_id"].to_numpy(),
                                            **{f"{m}_simulated": sim[m].to_numpy() for m in METRICS},
                                            **{f"{m}_measured": meas[m].to_numpy() for m in METRICS}})
    return {"runs": pd.DataFrame(runs), "skipped": skipped, "per_request": per_request, "targets": targets,
            "engine": engine, "engine_by_gpu": engine_by_gpu, "latency_clock": SERVINGSIM_LATENCY_CLOCK,
            "disclosed": " ".join(x for x in (disclosed, ASYNC_JOIN_DISCLOSED) if x)}
