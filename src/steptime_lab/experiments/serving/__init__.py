"""The serving family (every outcome SIMULATED: a scheduler model driven by steptime's step times, not a
measured serving run, except the measured runs E2.10 replays).

One module per computation, named by what it computes, and the claims and figures apart:

    deadlines   a QLM-style deadline queue: steptime's waiting-time estimate vs a scalar one   (E2.3)
    pools       prefill/decode pool sizing: the planner's max-rate question per placement,
                steptime vs DistServe's fitted model                                          (E2.4)
    chunks      Sarathi chunk sizing for a TBT SLO: a two-step pick vs the planner's search   (E2.9)
    replay      real vLLM runs replayed through the simulator                                 (E2.10)
    claims      each computation's metrics and claims
    figures     each computation's figure
    common      the SIMULATED label, request lengths drawn from a trace
"""

from steptime_lab.experiments.serving.chunks import chunk_sizing, chunk_sweep, pick_chunk
from steptime_lab.experiments.serving.claims import (TARGET_KEYS, chunk_sizing_claims, deadline_queue_claims,
                                                     pool_sizing_claims, replay_claims)
from steptime_lab.experiments.serving.common import SIMULATED, trace_lengths
from steptime_lab.experiments.serving.deadlines import deadline_queue_attainment
from steptime_lab.experiments.serving.figures import (chunk_sizing_figure, deadline_queue_figure, pool_sizing_figure,
                                                      replay_figure)
from steptime_lab.experiments.serving.pools import _kv_blocks, placements, pool_goodput, pool_sizing
from steptime_lab.experiments.serving.replay import METRICS, recorded_kv, replay_run, replay_runs

__all__ = ["METRICS", "SIMULATED", "TARGET_KEYS", "chunk_sizing", "chunk_sizing_claims", "chunk_sizing_figure",
           "chunk_sweep", "deadline_queue_attainment", "deadline_queue_claims", "deadline_queue_figure",
           "pick_chunk", "placements", "pool_goodput", "pool_sizing", "pool_sizing_claims", "pool_sizing_figure",
           "recorded_kv", "replay_claims", "replay_figure", "replay_run", "replay_runs", "trace_lengths", "_kv_blocks"]
