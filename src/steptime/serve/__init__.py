"""Serving simulation: TTFT, TPOT, throughput of a workload, each iteration timed by steptime.

    from steptime.serve import simulate, synthetic
    run = simulate("llama-3.1-8b", "h100-sxm", synthetic(1000, isl=(128, 2048), osl=(16, 512), rate=8.0))
    run.summary(slo_ttft_s=0.5, slo_tpot_s=0.05)

Everything a simulation reports is simulated (a model of the scheduler driven by
predicted step times), not measured.
"""

from steptime.serve.sim import (CLOCKS, POLICIES, Policy, Run, engine_policy, on_clock, kv_capacity_blocks, kv_capacity_requests, policy, simulate, simulate_disagg,
                                simulate_replicas, summarize, weighted_quantile)
from steptime.serve.memory import KvBudget, kv_budget
from steptime.serve.queueing import ScalarEstimator, StepEstimator
from steptime.serve.timer import DirectTimer, StepTimer
from steptime.serve.workload import Workload, from_table, poisson_arrivals, static_batch, synthetic

__all__ = ["CLOCKS", "DirectTimer", "KvBudget", "POLICIES", "Policy", "Run", "ScalarEstimator", "StepEstimator", "StepTimer", "Workload", "engine_policy", "from_table", "kv_budget", "kv_capacity_blocks", "kv_capacity_requests", "on_clock", "policy",
           "poisson_arrivals", "simulate", "simulate_disagg", "simulate_replicas", "static_batch", "summarize",
           "synthetic", "weighted_quantile"]
