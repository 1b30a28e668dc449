"""Serving-engine profiles (specs/engines.yaml) and the tensor-parallel sharding table.

    >>> e = get_engine("vllm")
    >>> e.get("sched_a_ms", get_gpu("h100-sxm"))     # resolved for one GPU

A profile is data: each number is an `EngineValue` with its provenance (MEASURED, FITTED,
DERIVED, DATASHEET or ASSUMED) and source; a value may point at a constant of
calibration/defaults.yaml (`const:`), resolved per GPU with the caller's `Constants` (so
a held-out fold reaches the engine too). Per-(GPU, engine) fitted values come from a
constants file (`FITTED_FILE`, written by a pipeline rule; absent means none) or from
`Engine.with_fitted`, and win over the profile for that GPU only.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable

import numpy as np

from steptime.errors import InputError, UnknownEngineError, UnsupportedError
from steptime.readonly import read_only
from steptime.io import read_yaml
from steptime.validation import check_known_fields

ENGINE_FILE = Path(__file__).resolve().parent / "engines.yaml"
FITTED_FILE = Path(__file__).resolve().parent.parent / "calibration" / "engine_constants.yaml"
PROVENANCES = ("MEASURED", "FITTED", "DERIVED", "DATASHEET", "ASSUMED")
GRAPH_MODES = ("full", "piecewise", "none")
AR_IMPLS = ("nccl", "custom", "ring", "nccl_host")
EXECUTORS = ("uniproc", "mp", "ray", "mpi")
DTYPES = ("bf16", "fp8")
SPLITS = ("split_n", "split_k", "heads", "replicated")
# host.server_a_ms / server_b_ms: the serving front end's work in the engine's step loop, per step and per running
# request; host.server_tp_ms: per step per extra tensor-parallel rank (TP - 1), where the engine's driver hands
# each step's inputs to every other rank itself (vLLM V0). terms/host.py scheduler_floor prices
# server_a + server_b N + server_tp (TP - 1); each absent = 0, each >= 0 (a cost)
SERVER_FIELDS = ("server_a_ms", "server_b_ms", "server_tp_ms")
NUMERIC = ("sched_a_ms", "sched_b_ms", "rpc_ms", "rpc_tp_ms", "overlap", "t_launch_us", "graph_launch_us",
           "graph_node_us", "graph_max_tokens", "piecewise_eager_per_layer", "max_bytes", "t_samp_ms", "t_samp_b_ms",
           "fuse_norm_max_bytes", "gdn_eager_launch_us", "hybrid_eager_layer_us", "host_path_floor_us",
           "host_path_eta", "eager_inline_ms", "dp_idle_rank_share", *SERVER_FIELDS)
# not required host fields: fuse_norm_max_bytes absent = never fused; server_* absent = 0 (a front end in
# its own process, or none: the engine loop carries no API-server work); gdn_eager_launch_us absent = t_launch_us
# (a hybrid's Gated DeltaNet launches cost what any eager launch costs: terms/host.py engine_dispatch_floor)
OPTIONAL = ("max_bytes", "fuse_norm_max_bytes", "gdn_eager_launch_us", "hybrid_eager_layer_us", "host_path_floor_us",
            "host_path_eta", "eager_inline_ms", "dp_idle_rank_share", *SERVER_FIELDS)
# launch.dp_idle_rank_share: the share of the idle attention-DP ranks' dummy-batch launch that a hybrid MoE step
# with a prefill waits for serially at dp > 1; absent = 0 (terms/host.py dp_idle_rank_time)
# host.eager_inline_ms: serial host time of a step run eagerly (above graph_max_tokens) where the engine launches
# steps inline on its own thread (world size <= schedule.inline_launch_world); absent = 0 (terms/host.py
# eager_inline_time)
# allreduce.host_path_floor_us / host_path_eta: the law of impl nccl_host (NCCL between PCIe GPUs without
# peer-to-peer, staged through host memory): t = floor + bus bytes / (eta x the GPU's PCIe datasheet bandwidth)
HOST_FIELDS = tuple(f for f in NUMERIC if f not in OPTIONAL)
# precision.<field>: the engine's own kernels' constant (a `const:` pointer into defaults.yaml);
# fp8_gemm names the relative fp8 GEMM factors (terms/precision.py) fitted on the engine's own
# fp8 tables (E1.27). An engine without one uses vLLM's (FP8_GEMM_DEFAULT).
PRECISION = ("fp8_gemm", "fp8_act_quant_passes", "fp8_act_quant_passes_served", "fp8_act_quant_row_cost",
             "fp8_act_quant_row_cost_served")
PRECISION_CONST = ("fp8_gemm",)  # precision fields that point at a fitted constant (the others carry a value)
# moe.exchange: how the engine moves tokens between attention data-parallel ranks and the expert-parallel
# MoE by default (moe_step.block_terms prices it; absent: deepep, steptime's pricing before the field existed)
MOE_EXCHANGES = ("allgather_reducescatter", "deepep")
MOE_EXCHANGE_DEFAULT = "deepep"
# moe.kernels: whose fused-MoE kernels the engine runs, i.e. which framework's fused-MoE laws (calibration/moe.yaml:
# vLLM's at the top level, another framework's under constants.frameworks.<name>) its routed-expert term reads
# (moe_step.block_terms through MoEConstants.for_kernels; terms.moe.MOE_FRAMEWORKS names the tables E3.1 fits).
# Absent: vllm (steptime's pricing before the field existed). Wave 39 (trtstep).
MOE_KERNELS = ("vllm", "trtllm")
MOE_KERNELS_DEFAULT = "vllm"
# light.floor_law: which launch-floor law prices the engine's light kernels (terms/light.py): flat
# (E1.1c's per-kernel floors, fitted on Vidur's Sarathi-Serve-era tables) or row (one CTA per token row, fitted
# on AIConfigurator's vLLM quantize kernel). Absent: flat (steptime's pricing before the field existed).
LIGHT_FLOOR_LAWS = ("flat", "row")
LIGHT_FLOOR_DEFAULT = "flat"
# schedule.<field>: how the engine's scheduler builds a step, as data (read by the lab's schedule models and the
# serving replays). mixed_prefill: whether a step that admits prompt tokens also carries the running requests'
# decodes (vLLM V1, TensorRT-LLM: yes; SGLang by default: no, a prefill batch runs as a step of its own, prefill
# first). Absent: true (steptime's schedule before the field existed). join_steps: the engine steps a closed-loop
# client's next request waits for its first token, counted from the step in flight when the request before it
# returned (its own step included): 2 for a synchronous loop (the next step is scheduled as soon as a step's outputs
# are processed, before the client's next request can arrive), 3 for an overlap loop (step n + 1 is already launched
# when step n's outputs go out; with read_join_steps below, join_steps = read_join_steps + 1 in every profile that
# has both). Absent: none (a schedule model that needs it refuses the engine; the simulator's engine_policy and the
# replays' policy_for take the next step, 1). chunked_prefill:
# whether the engine splits a prompt over steps under its token budget by default (vLLM V0: no, a prompt runs whole
# in one step). Absent: true. prefix_caching: whether the engine keeps freed KV blocks cached by default, so a
# preempted request resumes from its longest surviving cached prefix (serve.sim Policy.prefix_caching). Absent: false.
# inline_launch_world: the largest world size (ranks: TP x PP x DP) at which the engine runs the model on the thread
# that also collects each step's output and, with async scheduling, launches step n + 1's host work there before it
# reads step n's output (vLLM V1: the in-process UniProcExecutor, world size 1): a per-step wall time recorded between
# two output collections then holds the NEXT step's host launch, not its own step's. Absent: none (every step's
# recorded wall time is its own). read_join_steps: the engine steps an arriving (open-loop) request waits for its first
# token counted from the step boundary at which the engine loop reads it from its input queue, its own step included:
# 1 for a synchronous loop (the step scheduled right after the read is its own), 2 for an async / batch-queue loop
# (step n + 1 is already scheduled and launched when the loop reads the requests that came during step n, so they
# join step n + 2). Absent: 1 (steptime's open-loop replay before the field existed).
SCHEDULE = ("mixed_prefill", "join_steps", "chunked_prefill", "prefix_caching", "inline_launch_world",
            "read_join_steps")
SCHEDULE_TYPES = MappingProxyType({"mixed_prefill": bool, "join_steps": int, "chunked_prefill": bool,
                                   "prefix_caching": bool, "inline_launch_world": int, "read_join_steps": int})
# fusion.<field>: kernels the engine runs fused by default, true/false. qk_norm_rope: a qk_norm model's (Qwen3's)
# per-head q/k RMSNorms run inside the one kernel that applies RoPE (step.py: no qk_norm term, no extra launches;
# the rope term prices that kernel). Absent: false (two RMSNorm launches per layer, light.qk_norm_time).
# add_rmsnorm: each residual add runs inside the RMSNorm kernel that follows it (one launch that reads the
# sublayer output and the residual and writes both the updated residual and the normed activations,
# light.add_rmsnorm_bytes; step.py: no add launches, the rmsnorm term prices the fused kernel). Absent: false (an
# add kernel and an RMSNorm kernel, as the per-operator tables time them). An all-reduce fused with the add and the
# norm (allreduce.fuse_norm_max_bytes) takes both first.
FUSION = ("qk_norm_rope", "add_rmsnorm")
FUSION_TYPES = MappingProxyType({name: bool for name in FUSION})
# backend: the serving framework a profile models (several profiles model releases of one framework). Read where a
# fact belongs to the framework rather than to a release (how a deployment tool configures it). none: no framework
# (the per-operator tables' bare kernels).
BACKENDS = ("vllm", "sglang", "trtllm", "none")
AR_LIMIT_TABLES = ("custom_max_bytes", "symm_mem_max_bytes", "fuse_norm_max_bytes", "fuse_one_shot_max_bytes")
FP8_GEMM_DEFAULT = "gemm_fp8_rel"


@dataclass(frozen=True)
class EngineValue:
    name: str
    value: Any
    provenance: str
    source: str
    const: str | None = None
    experiment: str | None = None
    cells: tuple = ()

    def __post_init__(self):
        if self.provenance not in PROVENANCES:
            raise ValueError(f"engine value {self.name}: provenance {self.provenance!r} not in {PROVENANCES}")
        if self.const is None and self.value is None:
            raise ValueError(f"engine value {self.name}: needs a value or a const")


def _value(name: str, e, where: str) -> EngineValue:
    if not isinstance(e, dict) or "provenance" not in e or not e.get("source"):
        raise ValueError(f"{where}: {name} needs {{value|const, provenance, source}}")
    return EngineValue(name=name, value=e.get("value"), provenance=e["provenance"], source=str(e["source"]),
                       const=e.get("const"), experiment=e.get("experiment"),
                       cells=tuple(tuple(c) if isinstance(c, list) else c for c in e.get("cells", ())))


@dataclass(frozen=True)
class Engine:
    key: str
    name: str
    host_terms: bool
    graphs: dict
    allreduce_impl: str
    allreduce_fallback: str
    values: dict = field(default_factory=dict)        # field -> EngineValue
    fitted: dict = field(default_factory=dict)        # gpu key -> {field -> EngineValue}
    default: bool = False
    ar_limits: dict = field(default_factory=dict)     # allreduce.by_tp: the per-(architecture, TP) dispatch table
    backend: str = "none"                             # the serving framework (BACKENDS)
    vendors: EngineValue | None = None                # GPU vendors the engine runs on (engines.yaml vendors)
    kv_block_sizes: EngineValue | None = None         # KV-cache block sizes it takes (engines.yaml kv_block_sizes)

    def __post_init__(self):  # a profile is shared by every prediction in the process: its tables are read-only
        for f in fields(self):
            if f.type in (dict, "dict"):  # every table field (annotations are strings here: `from __future__`)
                object.__setattr__(self, f.name, read_only(getattr(self, f.name)))

    def lookup(self, name: str, gpu=None) -> EngineValue:
        if gpu is not None:
            v = self.fitted.get(getattr(gpu, "key", gpu), {}).get(name)
            if v is not None:
                return v
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"engine {self.key} has no value {name!r}") from None

    def get(self, name: str, gpu=None, constants=None) -> float:
        v = self.lookup(name, gpu)
        if v.const is not None:
            if constants is None:
                raise ValueError(f"engine {self.key}: {name} is constant {v.const!r}; pass the Constants to resolve "
                                 f"it with (e.g. steptime.calibration.Constants.default())")
            return float(constants.get(v.const, gpu))
        return float(v.value)

    def get_or(self, name: str, gpu=None, constants=None, default: float = 0.0) -> float:
        """`get`, or `default` where the profile has no such (optional) field."""
        if name not in self.values:
            return float(default)
        return self.get(name, gpu, constants)

    def with_fitted(self, gpu_key: str, values: dict, *, source: str, cells: Iterable = (),
                    experiment: str | None = None, provenance: str = "FITTED") -> "Engine":
        """A copy whose `values` (field -> number) apply to `gpu_key` only."""
        unknown = sorted(set(values) - set(self.values))
        if unknown:
            raise ValueError(f"engine {self.key}: no field(s) {', '.join(unknown)} to fit "
                             f"(known: {', '.join(sorted(self.values))})")
        fitted = copy.deepcopy(self.fitted)
        table = fitted.setdefault(gpu_key, {})
        for name, val in values.items():
            table[name] = EngineValue(name=name, value=float(val), provenance=provenance, source=source,
                                      experiment=experiment, cells=tuple(cells))
        return Engine(self.key, self.name, self.host_terms, dict(self.graphs), self.allreduce_impl,
                      self.allreduce_fallback, dict(self.values), fitted, self.default, self.ar_limits, self.backend,
                      self.vendors, self.kv_block_sizes)

    def fp8_gemm_const(self) -> str:
        """The constant holding this engine's relative fp8 GEMM factors (engines.yaml precision.fp8_gemm)."""
        v = self.values.get("fp8_gemm")
        return v.const if v is not None else FP8_GEMM_DEFAULT

    def fp8_act_quant_passes(self, served: bool = False) -> int:
        """Passes over the bf16 activations that quantise them to fp8 before each fp8 GEMM: as the
        per-operator tables time the engine's linear (engines.yaml precision.fp8_act_quant_passes;
        absent: 0, no separate quantise kernel), or, with `served`, as the engine serves an fp8
        checkpoint (precision.fp8_act_quant_passes_served; absent: the tables' count)."""
        if served:
            v = self.values.get("fp8_act_quant_passes_served")
            if v is not None:
                return int(v.value)
        v = self.values.get("fp8_act_quant_passes")
        return int(v.value) if v is not None else 0

    def fp8_act_quant_row_cost(self, served: bool = False) -> bool:
        """Whether the activation quantise's reduction pays a cost per token row (the fitted `amax_row_ns`,
        terms/precision.py amax_row_time): as the per-operator tables time the engine's linear (engines.yaml
        precision.fp8_act_quant_row_cost; absent: no), or, with `served`, as the engine serves an fp8
        checkpoint (precision.fp8_act_quant_row_cost_served; absent: the tables' value). Read here only."""
        if served:
            v = self.values.get("fp8_act_quant_row_cost_served")
            if v is not None:
                return bool(float(v.value))
        v = self.values.get("fp8_act_quant_row_cost")
        return bool(float(v.value)) if v is not None else False

    def fuses_qk_norm_rope(self) -> bool:
        """Whether a qk_norm model's per-head q/k RMSNorms run fused into the kernel that applies RoPE
        (engines.yaml fusion.qk_norm_rope; absent: False, two RMSNorm launches per layer)."""
        return self._flag("fuse_qk_norm_rope")

    def fuses_add_rmsnorm(self) -> bool:
        """Whether each residual add runs inside the RMSNorm kernel that follows it (engines.yaml
        fusion.add_rmsnorm; absent: False, an add launch and an RMSNorm launch)."""
        return self._flag("fuse_add_rmsnorm")

    def _flag(self, name: str) -> bool:
        v = self.values.get(name)
        return bool(v.value) if v is not None else False

    def moe_kernels(self) -> str:
        """Whose fused-MoE kernels the engine runs: the framework whose fused-MoE laws its routed-expert term reads
        (engines.yaml moe.kernels, one of MOE_KERNELS; absent: vllm)."""
        v = self.values.get("moe_kernels")
        return str(v.value) if v is not None else MOE_KERNELS_DEFAULT

    def with_moe_kernels(self, kernels: str, *, source: str = "selected by the caller (Engine.with_moe_kernels)",
                         provenance: str = "ASSUMED") -> "Engine":
        """A copy whose routed-expert term reads framework `kernels`' fused-MoE laws (one of MOE_KERNELS), e.g.
        `get_engine("trtllm").with_moe_kernels("trtllm")`: TensorRT-LLM priced with its own shipped laws
        (calibration/moe.yaml constants.frameworks.trtllm), not its profile's default. Everything else (per-GPU
        fitted values included) is this profile's; pass the copy as `engine=` (predict_step / predict_steps take an
        Engine as it is: build it from `Constants.engine(name)` to keep a constants set's fitted values)."""
        if kernels not in MOE_KERNELS:
            raise InputError(f"engine {self.key}: moe.kernels {kernels!r} not in {MOE_KERNELS}")
        values = dict(self.values)
        values["moe_kernels"] = EngineValue(name="moe_kernels", value=kernels, provenance=provenance, source=source)
        return dataclasses.replace(self, values=values)

    def moe_exchange(self) -> str:
        """The expert exchange the engine runs by default between attention data-parallel ranks and
        expert-parallel MoE layers (engines.yaml moe.exchange, one of MOE_EXCHANGES; absent: deepep)."""
        v = self.values.get("moe_exchange")
        return str(v.value) if v is not None else MOE_EXCHANGE_DEFAULT

    def light_floor_law(self) -> str:
        """The launch-floor law of the engine's light kernels (engines.yaml light.floor_law, one of
        LIGHT_FLOOR_LAWS; absent: flat)."""
        v = self.values.get("light_floor_law")
        return str(v.value) if v is not None else LIGHT_FLOOR_DEFAULT

    def mixes_prefill(self) -> bool:
        """Whether a step that admits prompt tokens also carries the running requests' decodes
        (engines.yaml schedule.mixed_prefill; absent: True). False: prefill first, in steps of their own."""
        v = self.values.get("mixed_prefill")
        return bool(v.value) if v is not None else True

    def chunks_prefill(self) -> bool:
        """Whether the engine splits a prompt over steps under its token budget by default (engines.yaml
        schedule.chunked_prefill; absent: True). False: a prompt runs whole in one step."""
        v = self.values.get("chunked_prefill")
        return bool(v.value) if v is not None else True

    def caches_prefixes(self) -> bool:
        """Whether the engine keeps freed KV blocks cached by default (engines.yaml schedule.prefix_caching; absent:
        False): a preempted request resumes from its longest surviving cached prefix."""
        return self._flag("prefix_caching")

    def join_steps(self, absent: int | None = None) -> int:
        """The engine steps a closed-loop client's next request waits for its first token, counted from the step in
        flight when the request before it returned, its own step included (engines.yaml schedule.join_steps: 2 for
        a synchronous engine loop, 3 for an overlap loop). Absent: `absent` where given (a simulator's 'the next
        step', 1), else refused with the engine named."""
        v = self.values.get("join_steps")
        if v is None:
            if absent is not None:
                return int(absent)
            raise InputError(f"engine {self.key!r} has no schedule.join_steps in engines.yaml (the steps a closed-loop "
                             f"request waits to join); no schedule model can use it")
        return int(v.value)

    def read_join_steps(self) -> int:
        """The engine steps an arriving (open-loop) request waits for its first token, counted from the step boundary
        at which the engine loop reads it, its own step included (engines.yaml schedule.read_join_steps: 1 for a
        synchronous loop, 2 for an async / batch-queue loop). Absent: 1."""
        v = self.values.get("read_join_steps")  # a whole number >= 1, checked where the profile is parsed
        return 1 if v is None else int(v.value)

    def step_time_is_own(self, tp: int, dp: int = 1, pp: int = 1) -> bool:
        """Whether a per-step wall time recorded at the engine core is the step's own at this layout: False where the
        world size tp x pp x dp is at most engines.yaml schedule.inline_launch_world (the engine launches the next
        step's host work before it collects this step's output); absent: True."""
        for name, n in (("tp", tp), ("dp", dp), ("pp", pp)):
            if isinstance(n, bool) or int(n) != n or n < 1:
                raise InputError(f"step_time_is_own: {name} must be a whole number >= 1 (got {n!r})")
        v = self.values.get("inline_launch_world")
        return v is None or int(tp) * int(dp) * int(pp) > int(v.value)

    def graph_mode(self, phase: str) -> str:
        return self.graphs.get(phase, "none") if self.host_terms else "none"

    def allreduce_for(self, nbytes: float) -> str:
        """The implementation that carries a message of `nbytes` (custom below max_bytes, the fallback from it:
        vLLM's and SGLang's should_custom_ar take the custom kernel only where the size is below max_size)."""
        if self.allreduce_impl == "custom" and nbytes >= self.get("max_bytes"):
            return self.allreduce_fallback
        return self.allreduce_impl

    def allreduce_limits(self, gpu, tp: int) -> dict:
        """The sizes (bytes) that decide the all-reduce implementation at TP `tp` on `gpu`'s architecture
        (allreduce.by_tp; {} where the profile has no table or none for this architecture / TP):
        one_shot_max_bytes, custom_max_bytes, symm_mem_max_bytes, fuse_norm_max_bytes, fuse_one_shot_max_bytes.
        A TP degree between listed ones takes the next larger listed one's limits (vLLM lists 2, 4, 6, 8)."""
        t = self.ar_limits
        sm = getattr(gpu, "sm_version", None)
        if not t or tp <= 1 or sm is None or int(sm) not in t["custom_max_bytes"]:
            return {}
        sizes = sorted(t["one_shot_max_bytes"])
        n = next((s for s in sizes if s >= tp), None)
        if n is None:
            return {}
        out = {"one_shot_max_bytes": t["one_shot_max_bytes"][n]}  # None: no switch (custom_law's soft minimum)
        for k in AR_LIMIT_TABLES:
            out[k] = float(t[k][int(sm)][n])
        return out

    def fuses_norm(self, nbytes, tp: int, gpu=None, constants=None):
        """True where an all-reduce of `nbytes` at TP `tp` runs fused with the residual add and RMSNorm
        that follow it (allreduce.fuse_norm_max_bytes; absent: never). Where the per-TP table
        (allreduce.by_tp) covers the GPU's architecture, its limit at that TP decides."""
        nbytes = np.asarray(nbytes, dtype=float)
        if tp <= 1 or "fuse_norm_max_bytes" not in self.values:
            return np.zeros(nbytes.shape, dtype=bool)
        lim = self.allreduce_limits(gpu, tp) if gpu is not None else {}
        if lim:
            return nbytes <= lim["fuse_norm_max_bytes"]
        return nbytes <= self.get("fuse_norm_max_bytes", gpu, constants)

    def rows(self) -> list[dict]:
        out = []
        for scope, table in [(f"engine.{self.key}", self.values)] + [
                (f"engine.{self.key}.gpu.{g}", t) for g, t in sorted(self.fitted.items())]:
            for v in table.values():
                val = f"= {v.const}" if v.const is not None else v.value
                out.append({"scope": scope, "name": v.name, "value": val, "provenance": v.provenance,
                            "source": v.source, "experiment": v.experiment, "cells": len(v.cells)})
        return out


# an engine profile's sections and fields (_parse_engine reads each); any other is a typo, refused
PROFILE_FIELDS = ("name", "default", "backend", "vendors", "kv_block_sizes", "host_terms", "host", "launch",
                  "sampling", "allreduce", "moe", "light", "schedule", "fusion", "precision")


def _parse_engine(key: str, doc: dict) -> Engine:
    where = f"{ENGINE_FILE.name}: engine {key}"
    check_known_fields(doc, PROFILE_FIELDS, where, ValueError)
    host_terms = bool(doc.get("host_terms", True))
    values: dict[str, EngineValue] = {}
    for section in ("host", "launch", "sampling", "allreduce"):
        for name, e in (doc.get(section) or {}).items():
            if name in ("graphs", "impl", "fallback", "by_tp"):
                continue
            if name == "executor":  # descriptive (not a number): kept with its provenance, read by no term
                v = _value(name, e, where)
                if v.value not in EXECUTORS:
                    raise ValueError(f"{where}: host.executor {v.value!r} not in {EXECUTORS}")
                values[name] = v
                continue
            if name not in NUMERIC:
                raise ValueError(f"{where}: unknown field {section}.{name} (known: {', '.join(NUMERIC)})")
            values[name] = _value(name, e, where)
            if (name in SERVER_FIELDS or name == "eager_inline_ms") and values[name].value is not None \
                    and float(values[name].value) < 0:
                raise ValueError(f"{where}: host.{name} is a host cost in ms and must be >= 0, "
                                 f"got {values[name].value!r}")
    values.update(_choice_section(doc, "moe", {"exchange": MOE_EXCHANGES, "kernels": MOE_KERNELS}, where))
    values.update(_choice_section(doc, "light", {"floor_law": LIGHT_FLOOR_LAWS}, where))
    values.update(_typed_section(doc, "schedule", SCHEDULE_TYPES, where))
    values.update(_typed_section(doc, "fusion", FUSION_TYPES, where, prefix="fuse_"))
    for name, e in (doc.get("precision") or {}).items():
        if name not in PRECISION:
            raise ValueError(f"{where}: unknown field precision.{name} (known: {', '.join(PRECISION)})")
        values[name] = _value(name, e, where)
        if name in PRECISION_CONST and values[name].const is None:
            raise ValueError(f"{where}: precision.{name} must name its fitted constant (const: NAME)")
        if name not in PRECISION_CONST and (values[name].value is None or float(values[name].value) < 0):
            raise ValueError(f"{where}: precision.{name} needs a value >= 0")
        if name.startswith("fp8_act_quant_row_cost") and float(values[name].value) not in (0.0, 1.0):
            raise ValueError(f"{where}: precision.{name} is a flag: 0 or 1, got {values[name].value!r}")
    if host_terms:
        missing = [f for f in HOST_FIELDS if f not in values]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
    ar = doc.get("allreduce") or {}
    impl, fallback = ar.get("impl"), ar.get("fallback", "nccl")
    if impl not in AR_IMPLS or fallback not in AR_IMPLS:
        raise ValueError(f"{where}: allreduce impl/fallback must be one of {AR_IMPLS}")
    if "max_bytes" not in values:
        raise ValueError(f"{where}: allreduce.max_bytes missing")
    if "nccl_host" in (impl, fallback) and not {"host_path_floor_us", "host_path_eta"} <= set(values):
        raise ValueError(f"{where}: allreduce impl nccl_host needs allreduce.host_path_floor_us and host_path_eta")
    limits = _parse_limits(ar.get("by_tp"), where)
    graphs = dict((doc.get("launch") or {}).get("graphs") or {"decode": "none", "prefill": "none"})
    for phase, mode in graphs.items():
        if phase not in ("decode", "prefill") or mode not in GRAPH_MODES:
            raise ValueError(f"{where}: launch.graphs.{phase}={mode!r} (phases decode/prefill, modes {GRAPH_MODES})")
    backend = doc.get("backend")
    if backend not in BACKENDS:
        raise ValueError(f"{where}: backend {backend!r} must be one of {BACKENDS} (the serving framework the profile "
                         f"models; none for bare kernels)")
    return Engine(key=key, name=str(doc.get("name", key)), host_terms=host_terms, graphs=graphs,
                  allreduce_impl=impl, allreduce_fallback=fallback, values=values, default=bool(doc.get("default")),
                  ar_limits=limits, backend=backend, vendors=_parse_vendors(doc, where),
                  kv_block_sizes=_parse_block_sizes(doc, where))


def _parse_vendors(doc: dict, where: str) -> EngineValue | None:
    """vendors: {value: [vendor, ...], provenance, source}: the GPU vendors (steptime.specs.VENDORS) the engine
    runs on (check_engine_gpu reads it). Absent: None, every vendor (steptime's pricing before the field existed);
    every shipped profile states it (tests/test_bad_input_w35.py)."""
    from steptime.specs import VENDORS

    if "vendors" not in doc:
        return None
    v = _value("vendors", doc["vendors"], where)
    if (not isinstance(v.value, list) or not v.value or len(set(v.value)) != len(v.value)
            or any(x not in VENDORS for x in v.value)):
        raise ValueError(f"{where}: vendors must be a list of distinct GPU vendors of {', '.join(VENDORS)}, "
                         f"got {v.value!r}")
    return EngineValue(name="vendors", value=tuple(v.value), provenance=v.provenance, source=v.source)


BLOCK_SIZE_RULES = ("powers_of_two", "any")  # kv_block_sizes given as a rule instead of a list of sizes


def _parse_block_sizes(doc: dict, where: str) -> EngineValue | None:
    """kv_block_sizes: {value, provenance, source}: the KV-cache block sizes (tokens) the engine takes, a list of
    sizes or a rule of BLOCK_SIZE_RULES (check_block_size reads it). Absent: None, any size (steptime's simulator
    before the field existed); every shipped profile states it (tests/test_bad_input_w36.py)."""
    if "kv_block_sizes" not in doc:
        return None
    v = _value("kv_block_sizes", doc["kv_block_sizes"], where)
    ok = v.value in BLOCK_SIZE_RULES or (
        isinstance(v.value, list) and v.value and len(set(v.value)) == len(v.value)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v.value))
    if not ok:
        raise ValueError(f"{where}: kv_block_sizes must be a list of distinct positive block sizes (tokens) or one "
                         f"of {', '.join(BLOCK_SIZE_RULES)}, got {v.value!r}")
    value = tuple(sorted(v.value)) if isinstance(v.value, list) else v.value
    return EngineValue(name="kv_block_sizes", value=value, provenance=v.provenance, source=v.source)


def check_block_size(engine: Engine, block_size: int, error=InputError) -> None:
    """Refuse a KV-cache block size (tokens, a whole number >= 1 already) that the engine does not take
    (engines.yaml kv_block_sizes: vLLM's --block-size choices, TensorRT-LLM's power-of-two tokens_per_block),
    naming the sizes it does."""
    rule = None if engine.kv_block_sizes is None else engine.kv_block_sizes.value
    b = int(block_size)
    if rule is None or rule == "any":
        return
    if rule == "powers_of_two":
        if b & (b - 1) == 0:
            return
        lo, hi = 1 << (b.bit_length() - 1), 1 << b.bit_length()
        takes = f"a power of two (the nearest: {lo}, {hi})"
    elif b in rule:
        return
    else:
        takes = ", ".join(map(str, rule))
    raise error(f"block_size (--block-size) {b}: engine {engine.key} takes KV-cache blocks of {takes} tokens "
                f"(specs/engines.yaml kv_block_sizes)")


def _choice_section(doc: dict, section: str, choices: dict, where: str) -> dict[str, EngineValue]:
    """A profile section whose fields each hold one of their `choices` ({field: choices}: moe.exchange and
    moe.kernels, light.floor_law), as {<section>_<field>: entry}; any other field, or a value not among its
    field's choices, is refused with one line naming the profile, the field and the value."""
    out: dict[str, EngineValue] = {}
    for name, e in (doc.get(section) or {}).items():
        if name not in choices:
            raise ValueError(f"{where}: unknown field {section}.{name} (known: {', '.join(choices)})")
        key = f"{section}_{name}"
        v = _value(key, e, where)
        if v.value not in choices[name]:
            raise ValueError(f"{where}: {section}.{name} {v.value!r} not in {choices[name]}")
        out[key] = v
    return out


def _typed_section(doc: dict, section: str, types, where: str, prefix: str = "") -> dict[str, EngineValue]:
    """The {value, provenance, source} entries of a profile section whose fields are flags or counts: each name
    must be one of `types` (name -> bool | int; an int must be a whole number >= 1). Keys get `prefix`."""
    out: dict[str, EngineValue] = {}
    for name, e in (doc.get(section) or {}).items():
        if name not in types:
            raise ValueError(f"{where}: unknown field {section}.{name} (known: {', '.join(types)})")
        v = _value(prefix + name, e, where)
        if types[name] is bool and not isinstance(v.value, bool):
            raise ValueError(f"{where}: {section}.{name} must be true or false (got {v.value!r})")
        if types[name] is int and (isinstance(v.value, bool) or not isinstance(v.value, int) or v.value < 1):
            raise ValueError(f"{where}: {section}.{name} must be a whole number >= 1 (got {v.value!r})")
        out[prefix + name] = v
    return out


def _parse_limits(doc, where: str) -> dict:
    """allreduce.by_tp: {provenance, source, one_shot_max_bytes: {tp: bytes}, <table>: {sm_version: {tp: bytes}}}."""
    if doc is None:
        return {}
    if not isinstance(doc, dict) or doc.get("provenance") not in PROVENANCES or not doc.get("source"):
        raise ValueError(f"{where}: allreduce.by_tp needs provenance and source")
    need = ("one_shot_max_bytes",) + AR_LIMIT_TABLES
    missing = [k for k in need if k not in doc]
    unknown = sorted(set(doc) - set(need) - {"provenance", "source"})
    if missing or unknown:
        raise ValueError(f"{where}: allreduce.by_tp missing {missing} / unknown {unknown}")
    tps = sorted(int(n) for n in doc["one_shot_max_bytes"])
    out = {"provenance": doc["provenance"], "source": str(doc["source"]),
           "one_shot_max_bytes": {int(n): (None if v is None else float(v)) for n, v in doc["one_shot_max_bytes"].items()}}
    archs = None
    for k in AR_LIMIT_TABLES:
        tab = {int(sm): {int(n): float(v) for n, v in per.items()} for sm, per in doc[k].items()}
        if archs is None:
            archs = sorted(tab)
        if sorted(tab) != archs or any(sorted(per) != tps for per in tab.values()):
            raise ValueError(f"{where}: allreduce.by_tp.{k} must list architectures {archs} and TP {tps}")
        if any(v <= 0 for per in tab.values() for v in per.values()):
            raise ValueError(f"{where}: allreduce.by_tp.{k}: sizes must be positive")
        out[k] = tab
    return out


@lru_cache(maxsize=1)
def _doc() -> dict:
    return read_yaml(ENGINE_FILE)


FITTED_WHAT = "fitted engine-constants file"


@lru_cache(maxsize=16)
def _sealed_fitted_doc(shown: str, path: str, mtime_ns: int, size: int) -> Any:
    """The document of a fitted engine-constants file, read once per (path, modification time, size): its bytes
    UTF-8, its closing seal line present and matching them (io.check_seal, as `steptime calibration ship` requires:
    wave 42, a hand-edited or cut file was used without a word), then parsed. One line naming `shown` otherwise."""
    import yaml

    from steptime.io import check_seal, yaml_load, yaml_problem

    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: not a {FITTED_WHAT} (not UTF-8 text: byte at offset {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read the {FITTED_WHAT} ({exc.strerror or exc})") from None
    check_seal(text, shown, required=True)  # before parsing: the seal vouches for exactly these bytes
    try:
        return yaml_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{shown}: not a {FITTED_WHAT} ({yaml_problem(exc)})") from None


def fitted_engines(fitted) -> dict:
    """{engine: {gpu: {field: entry}}} from a sealed fitted engine-constants file (the shipped FITTED_FILE absent: {}),
    a fitted document or that dict itself ({} or None: none). A file that is not one (missing, a folder, not UTF-8, no
    or a broken seal line, not YAML, not a mapping) or any other type is refused in one line (wave 40: a traceback,
    or {} for a number; wave 42: a missing, hand-edited or unsealed file was read as it came)."""
    from collections.abc import Mapping

    if isinstance(fitted, (str, Path)):
        from steptime.validation import MAX_SETTLED_BYTES, check_regular_file

        p = Path(fitted)
        if not p.exists() and p == FITTED_FILE:  # the shipped file absent: no fits (a path the caller names must be)
            return {}
        check_regular_file(p, FITTED_WHAT, MAX_SETTLED_BYTES)
        st = p.stat()
        doc = copy.deepcopy(_sealed_fitted_doc(str(p), str(p.resolve()), st.st_mtime_ns, st.st_size))
        if doc is not None and not isinstance(doc, Mapping):
            raise InputError(f"{p}: not a {FITTED_WHAT} (a YAML {type(doc).__name__}, expected a mapping with "
                             "`engines:`)")
        fitted = doc or {}
    elif fitted is not None and not isinstance(fitted, Mapping):
        raise InputError(f"fitted engine constants must be a path, a fitted document or {{engine: {{gpu: ...}}}}, "
                         f"got {type(fitted).__name__}")
    out = ((fitted or {}).get("engines", fitted) or {})
    if not isinstance(out, Mapping):
        raise InputError(f"fitted engine constants: `engines` must be a mapping of engine -> GPU -> fields, got "
                         f"{type(out).__name__}")
    return out


@lru_cache(maxsize=1)
def _profiles() -> dict[str, Engine]:
    engines = {k: _parse_engine(k, v) for k, v in _doc()["engines"].items()}
    defaults = [k for k, e in engines.items() if e.default]
    if len(defaults) != 1:
        raise ValueError(f"{ENGINE_FILE.name}: exactly one engine must be the default (found {defaults})")
    return MappingProxyType(engines)


def engine_names() -> list[str]:
    return list(_profiles())


def default_engine() -> str:
    return next(k for k, e in _profiles().items() if e.default)


def get_engine(name=None, fitted=None) -> Engine:
    """The profile `name` (default: the default engine) with the per-GPU fitted values of `fitted`
    (a constants-file path, a dict {engine: {gpu: {field: {value, provenance, source, cells}}}},
    or None for the shipped FITTED_FILE) laid over it. An Engine passes through unchanged.
    Predictions take the fits from their `Constants` (`constants.engine(name)`)."""
    if isinstance(name, Engine):
        return name
    key = default_engine() if name is None else str(name).strip().lower()
    profiles = _profiles()
    if key not in profiles:
        close = difflib.get_close_matches(key, list(profiles), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UnknownEngineError(f"unknown engine {name!r}{hint} (known engines: {', '.join(profiles)})")
    eng = profiles[key]
    over = fitted_engines(FITTED_FILE if fitted is None else fitted).get(key) or {}
    if not over:
        return eng
    fitted_tables = {g: {f: _value(f, e, f"fitted {key}/{g}") for f, e in tbl.items()} for g, tbl in over.items()}
    for g, tbl in fitted_tables.items():
        bad = sorted(set(tbl) - set(eng.values))
        if bad:
            raise ValueError(f"fitted constants for engine {key} on {g}: unknown field(s) {', '.join(bad)}")
    return Engine(eng.key, eng.name, eng.host_terms, dict(eng.graphs), eng.allreduce_impl, eng.allreduce_fallback,
                  dict(eng.values), fitted_tables, eng.default, eng.ar_limits, eng.backend, eng.vendors,
                  eng.kv_block_sizes)


def engine_table() -> dict[str, Engine]:
    return {k: get_engine(k) for k in engine_names()}


def engine_rows() -> list[dict]:
    """Every engine value as a row of `steptime constants` (ASSUMED ones included)."""
    return [r for e in engine_table().values() for r in e.rows()]


# ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def tp_sharding() -> dict[str, dict]:
    """term -> {split, allreduce_after, note}: how tensor parallelism shares each term."""
    out = {}
    for term, e in _doc()["tensor_parallel"].items():
        if e.get("split") not in SPLITS:
            raise ValueError(f"{ENGINE_FILE.name}: tensor_parallel.{term}.split must be one of {SPLITS}")
        out[term] = MappingProxyType({"split": e["split"], "allreduce_after": bool(e.get("allreduce_after", False)),
                                      "note": e.get("note", "")})
    return MappingProxyType(out)


def allreduces_per_layer() -> int:
    return sum(1 for e in tp_sharding().values() if e["allreduce_after"])


def check_engine_gpu(engine: Engine, gpu) -> None:
    """Refuse an engine that does not run on the GPU's vendor (engines.yaml `vendors`, e.g. TensorRT-LLM on an
    AMD part), naming the engines that do."""
    if engine.vendors is None or gpu.vendor in engine.vendors.value:
        return
    ok = [k for k, e in _profiles().items() if e.vendors is None or gpu.vendor in e.vendors.value]
    raise UnsupportedError(f"engine {engine.key} runs on {' and '.join(engine.vendors.value)} GPUs only "
                           f"(specs/engines.yaml vendors); {gpu.key} is an {gpu.vendor} GPU: engines that run on "
                           f"{gpu.vendor} GPUs: {', '.join(ok)}")


def check_precision(gpu, dtype: str = "bf16") -> None:
    """Refuse a precision the GPU's tensor cores (by its datasheet) do not have."""
    if dtype not in DTYPES:
        raise UnsupportedError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    if dtype == "fp8" and not gpu.fp8_dense_tflops:
        raise UnsupportedError(f"{gpu.key} ({gpu.architecture}) has no fp8 tensor cores: --dtype fp8 needs "
                               f"Hopper, Ada or Blackwell")


def engine_summary() -> list[dict]:
    """One row per engine for `steptime engines`."""
    out = []
    for k, e in engine_table().items():
        ar = e.allreduce_impl
        if ar == "custom":
            ar += f" up to {e.get('max_bytes') / 2**20:g} MiB, then {e.allreduce_fallback}"
        out.append({"engine": k, "name": e.name, "default": e.default, "host_terms": e.host_terms,
                    "vendors": list(e.vendors.value) if e.vendors is not None else None,
                    "kv_block_sizes": (None if e.kv_block_sizes is None else list(e.kv_block_sizes.value)
                                       if isinstance(e.kv_block_sizes.value, tuple) else e.kv_block_sizes.value),
                    "graphs": {p: e.graph_mode(p) for p in ("decode", "prefill")}, "allreduce": ar,
                    "assumed": sum(v.provenance == "ASSUMED" for v in e.values.values()),
                    "values": {n: (f"= {v.const}" if v.const else v.value) for n, v in e.values.items()}})
    return out
