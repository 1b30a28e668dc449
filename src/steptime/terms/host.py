"""Host-side terms: the kernel-dispatch floor, the scheduler floor S(N), sampling.

    dispatch floor  what the launches alone cost: eager kernels x T_launch, CUDA-graph replays
                    x T_graph plus a GPU-side gap per kernel inside a graph (the GPU body
                    cannot finish faster)
    S(N) = a + b (N - 1) + rpc + s_a + s_b N + s_tp (TP - 1)
                                         scheduler/prepare/output work per step, N requests, plus
                                         the hand-off to the workers (rpc; rpc_tp once TP > 1), plus
                                         the serving front end where it runs in the engine's loop
                                         (s_a, s_b: engines.yaml host.server_*; absent = 0), plus a
                                         per-step part per extra TP rank (s_tp: host.server_tp_ms,
                                         absent = 0; vLLM V0's driver hands each step's inputs to
                                         every other rank)
    exposed host    (1 - ov) S + ov max(0, S - t_gpu)
                                         ov = the engine's overlapped fraction (async/overlap
                                         scheduling runs step n+1's host work under step n);
                                         ov = 0 in a synchronous engine (alpha = 1)
    sampling        t_samp + t_samp_b (N - 1)

Every number comes from the engine profile (specs/engines.yaml); the functions without an
`engine` argument keep the constants of calibration/defaults.yaml (the vllm-v0 values).
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime.specs.engines import SERVER_FIELDS, allreduces_per_layer
from steptime.terms import gdn

KERNELS_PER_LAYER = 12  # qkv, rope, kv_write, attn, o, 2 norms, 2 adds, gate_up, act, down
KERNELS_PER_STEP = 10   # embedding, final norm, lm head, sampling and bookkeeping kernels


def n_kernels(n_layers: int, tp: int = 1) -> int:
    return KERNELS_PER_LAYER * n_layers + KERNELS_PER_STEP + (allreduces_per_layer() * n_layers if tp > 1 else 0)


def dispatch_floor(n_layers: int, gpu, constants: Constants | None = None, tp: int = 1) -> float:
    """Eager dispatch floor with defaults.yaml's t_launch_us (no engine, no graphs)."""
    constants = constants or Constants.default()
    return n_kernels(n_layers, tp) * float(constants.get("t_launch_us", gpu)) * 1e-6


def engine_dispatch_floor(n_layers: int, tokens, decode_only, gpu, engine, constants: Constants | None = None,
                          tp: int = 1, fused_kernels=0, gdn_layers: int = 0, extra_kernels: int = 0):
    """Per-step launch floor (seconds) under `engine`'s CUDA-graph policy.

    tokens: new tokens per step; decode_only: True where the step holds decodes only.
    full graph: one replay + a GPU-side gap per kernel; piecewise: the attention op of each
    layer eager, the rest in n_layers + 1 graph pieces; none (or above graph_max_tokens): eager.
    fused_kernels: kernels per step the engine fuses into its all-reduces (not launched on their own).
    extra_kernels: launches per step beyond KERNELS_PER_LAYER's count (a qk_norm model's two per-head q/k
    RMSNorms per layer, terms/light.py); 0 leaves every other model's floor as it was.
    gdn_layers: a hybrid's Gated DeltaNet layers (of the n_layers). Their op is a splitting op of the piecewise
    graphs (vLLM: vllm::gdn_attention_core): in a step with a prefill it runs eagerly, gdn.eager_launches() launches
    per layer in place of the attention op's piecewise_eager_per_layer, each at gdn_eager_launch_us (absent:
    t_launch_us); in a step run eagerly (graphs none, or above graph_max_tokens) they add to the eager count.
    A hybrid's step run eagerly also adds hybrid_eager_layer_us (absent: 0) per layer: host time outside CUDA
    graphs beyond the counted launches (the mixture-of-experts and GDN layers' Python dispatch), FITTED on the
    hybrid's own engine steps (E3.4); dense models and graph-captured steps never read it.
    """
    T = np.asarray(tokens, dtype=float)
    dec = np.asarray(decode_only, dtype=bool)
    if not engine.host_terms:
        return np.zeros_like(T)
    n_gdn = int(gdn_layers)
    if not 0 <= n_gdn <= int(n_layers):
        raise ValueError(f"gdn_layers must be in [0, n_layers={n_layers}], not {gdn_layers}")
    constants = constants or Constants.default()
    n = float(n_kernels(n_layers, tp)) - np.asarray(fused_kernels, dtype=float)
    if extra_kernels:
        n = n + float(extra_kernels)
    t_l = engine.get("t_launch_us", gpu, constants) * 1e-6
    t_g = engine.get("graph_launch_us", gpu, constants) * 1e-6
    t_n = engine.get("graph_node_us", gpu, constants) * 1e-6
    cap = engine.get("graph_max_tokens", gpu, constants)
    pe = engine.get("piecewise_eager_per_layer", gpu, constants)
    t_gdn = engine.get_or("gdn_eager_launch_us", gpu, constants, default=t_l * 1e6) * 1e-6
    gdn_pre = n_gdn * gdn.eager_launches(prefill=True) * t_gdn     # the GDN op, eager, a step with a prefill
    gdn_dec = n_gdn * gdn.eager_launches(prefill=False) * t_gdn    # the GDN op, eager, a decode-only step
    # a hybrid's step outside the graphs: host time per layer beyond the counted launches (0 without the field)
    hybrid_eager = (n_layers * engine.get_or("hybrid_eager_layer_us", gpu, constants, default=0.0) * 1e-6
                    if n_gdn else 0.0)
    n_eager_pw = pe * (n_layers - n_gdn)                           # attention ops left out of the pieces
    piecewise = n_eager_pw * t_l + (n_layers + 1) * t_g + (n - n_eager_pw - pe * n_gdn) * t_n
    cost = {"none": n * t_l + np.where(dec, gdn_dec, gdn_pre) + hybrid_eager, "full": t_g + n * t_n,
            "piecewise": piecewise + np.where(dec, gdn_dec, gdn_pre)}
    mode_dec = engine.graph_mode("decode")
    mode_pre = engine.graph_mode("prefill")
    out = np.where(dec, cost[mode_dec], cost[mode_pre])
    return np.where(T > cap, cost["none"], out)


def scheduler_floor(n_requests, gpu, constants: Constants | None = None, tp: int = 1, engine=None):
    """S(N) in seconds (zero for an empty step)."""
    constants = constants or Constants.default()
    n = np.asarray(n_requests, dtype=float)
    if engine is None:
        a = float(constants.get("host_a_ms", gpu))
        b = float(constants.get("host_b_ms", gpu))
        ray = float(constants.get("host_ray_tp_ms" if tp > 1 else "host_ray_ms", gpu))
    elif not engine.host_terms:
        return np.zeros_like(n)
    else:
        a = engine.get("sched_a_ms", gpu, constants)
        b = engine.get("sched_b_ms", gpu, constants)
        ray = engine.get("rpc_tp_ms" if tp > 1 else "rpc_ms", gpu, constants)
        s_a, s_b, s_tp = (engine.get_or(f, gpu, constants) for f in SERVER_FIELDS)
        server = s_a + s_b * n + s_tp * max(int(tp) - 1, 0)
        return np.where(n > 0, (a + ray + b * np.maximum(n - 1.0, 0.0) + server) * 1e-3, 0.0)
    return np.where(n > 0, (a + ray + b * np.maximum(n - 1.0, 0.0)) * 1e-3, 0.0)


def eager_inline_time(tokens, gpu, engine, constants: Constants | None = None, tp: int = 1, gdn_layers: int = 0):
    """Serial host time (seconds) per step run eagerly (tokens above graph_max_tokens) where the engine launches its
    steps inline on its own thread (world size tp <= schedule.inline_launch_world: Engine.step_time_is_own False):
    engines.yaml host.eager_inline_ms (absent: 0), not overlapped with GPU work. Zero for a graph-captured step, at
    a multi-rank layout and for an engine without host terms.

    Also zero for a hybrid (gdn_layers > 0) whose eager step already carries the fitted per-layer host time
    launch.hybrid_eager_layer_us (> 0; engine_dispatch_floor): that field is fitted on the hybrid's own eager steps at
    world size > 1, whose rows hold the step's whole per-step host time, serial part included, so pricing this wait
    on top counts it twice (at world size 1 the row reading moves that floor into the row before an early launch).
    The B300 Qwen3.6-35B-A3B rows show no extra wait at world size 1 (DESIGN, wave 34 e34w)."""
    T = np.asarray(tokens, dtype=float)
    if not engine.host_terms or engine.step_time_is_own(int(tp)):
        return np.zeros_like(T)
    constants = constants or Constants.default()
    if int(gdn_layers) > 0 and engine.get_or("hybrid_eager_layer_us", gpu, constants, default=0.0) > 0:
        return np.zeros_like(T)  # the hybrid's fitted eager host time holds it (docstring)
    w = engine.get_or("eager_inline_ms", gpu, constants, default=0.0)
    return np.where(T > engine.get("graph_max_tokens", gpu, constants), w * 1e-3, 0.0)


def dp_idle_rank_time(dispatch, decode_only, dp: int, gpu, engine, constants: Constants | None = None,
                      gdn_layers: int = 0):
    """Serial host time (seconds) a hybrid MoE step with a prefill waits for the idle attention-DP ranks at dp > 1:
    launch.dp_idle_rank_share (absent: 0) x the step's own launch floor `dispatch` (engine_dispatch_floor, seconds).

    vLLM's DP ranks agree every step on the minimum CUDA-graph mode (v1/worker/dp_utils.py): a rank with no request
    runs the engine's dummy batch at that mode (eager when rank 0's prefill is above graph_max_tokens, padded to rank
    0's tokens in the piecewise graphs otherwise), so its host launch floor is rank 0's, and every MoE layer's
    all-gather / reduce-scatter joins the ranks' GPU streams layer by layer. Rank 0's eager step is not max(host, GPU)
    (part of its host time is serial with its GPU), so it also waits for the idle rank's launch; the share of that
    launch it waits for is not read from source: FITTED on the attention-DP layouts' own steps, held out by layout
    (E3.4). Zero for decode-only steps (full graphs: both ranks replay one graph), at dp 1, for dense models and for
    an engine without host terms."""
    d = np.asarray(dispatch, dtype=float)
    if int(dp) < 1:
        raise ValueError(f"dp must be >= 1, not {dp}")
    if not engine.host_terms or int(dp) == 1 or int(gdn_layers) <= 0:
        return np.zeros_like(d)
    share = engine.get_or("dp_idle_rank_share", gpu, constants or Constants.default(), default=0.0)
    if share < 0:
        raise ValueError(f"launch.dp_idle_rank_share must be >= 0, not {share}")
    return np.where(np.asarray(decode_only, dtype=bool), 0.0, share * d)


def exposed_host(S, t_gpu, overlap: float):
    """(exposed, hidden) seconds of host work S next to a GPU step of t_gpu seconds."""
    S = np.asarray(S, dtype=float)
    ov = float(overlap)
    if not 0.0 <= ov <= 1.0:
        raise ValueError(f"host overlap must be in [0, 1], not {ov}")
    exposed = (1.0 - ov) * S + ov * np.maximum(0.0, S - np.asarray(t_gpu, dtype=float))
    return exposed, S - exposed


def sampling_time(n_requests, gpu, constants: Constants | None = None, engine=None):
    constants = constants or Constants.default()
    n = np.asarray(n_requests, dtype=float)
    if engine is None:
        a = float(constants.get("t_samp_ms", gpu))
        b = float(constants.get("t_samp_b_ms", gpu))
    elif not engine.host_terms:
        return np.zeros_like(n)
    else:
        a = engine.get("t_samp_ms", gpu, constants)
        b = engine.get("t_samp_b_ms", gpu, constants)
    return np.where(n > 0, (a + b * np.maximum(n - 1.0, 0.0)) * 1e-3, 0.0)
