"""How much KV cache one engine instance holds: the one memory model behind the serving simulator's block
count (`kv_capacity_blocks`), the requests of a given context an instance holds (`kv_capacity_requests`), the
KV a disaggregated prefill instance hands to the decode pool (`simulate_disagg`) and the lab's capacity caps
(E2.11's TPOT and TTFT, E3.4's TPOT).

`kv_budget(model, gpu, tp, ep, dtype, kv_dtype, gpu_memory_utilization, block_size, max_num_seqs)` returns a
`KvBudget`: the weight bytes per GPU (steptime.step.memory_bytes for a dense model; steptime.moe_step.memory_bytes
for a mixture-of-experts one: experts sharded by EP or sliced by TP, MLA's latent KV replicated over TP), the
bytes `gpu_memory_utilization` of the GPU leaves for KV after them, and what a request costs in that space:

  token_bytes         per cached token, over the layers that keep every token (full attention);
  window_token_bytes  per cached token, over the windowed layers (gpt-oss's sliding window, Llama 4's chunked
                      attention: `n_window_layers` layers over `attention_window` keys), which keep at most
                      `window_cap` = window + one block per request (vLLM's hybrid KV-cache manager frees the
                      blocks that leave the window);
  state_bytes         per request, a hybrid's linear-attention (Gated DeltaNet) layers' fixed state.

A request of `context` tokens holds whole blocks: ceil(context / block_size) * block_size tokens `t`, and
costs t * token_bytes + min(t, window_cap) * window_token_bytes + state_bytes. `requests(context)` is how many
such requests fit; `blocks()` is the simulator's pool: the window cap and the state of `max_num_seqs` running
requests set aside first, the rest in blocks of the full-attention layers' bytes.

Dense models: `steptime.specs.Model` carries no window and no linear-attention layers (models.yaml records
Gemma 2's and Phi-3's `sliding_window` but steptime does not read it, and the dense step prices full attention
on every layer), so a dense model's every layer keeps every token, as `steptime.step.memory_bytes` charges it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from steptime.errors import ServeError
from steptime.validation import as_int, check_choice, check_tp_heads


@dataclass(frozen=True)
class KvBudget:
    """One engine instance's KV memory (bytes per GPU; see the module's docstring)."""

    model: str                     # the model's key
    gpu: str                       # the GPU's key
    layout: str                    # "tp=2" (dense) or "tp=2, ep=4" (mixture of experts)
    gpu_gb: float                  # the GPU's memory (GB, its spec)
    gpu_bytes: float               # the GPU's memory (bytes)
    gpu_memory_utilization: float  # the fraction of it the engine takes
    weight_bytes: float            # weights per GPU
    token_bytes: float             # per cached token, layers that keep every token
    window_token_bytes: float      # per cached token, windowed layers together (0: none)
    window: int                    # the windowed layers' attention window (tokens; 0: none)
    window_kind: str               # "sliding-window" (gpt-oss), "chunked-attention" (Llama 4) or "" (none)
    state_bytes: float             # per request, linear-attention layers' fixed state (0: none)
    block_size: int
    max_num_seqs: int
    hint: str = ""                 # appended to a refusal (specs.moe.lighter_weights_hint: a lighter published dtype)

    @property
    def free_bytes(self) -> float:
        """KV bytes left after the weights in `gpu_memory_utilization` of the GPU."""
        return self.gpu_bytes * self.gpu_memory_utilization - self.weight_bytes

    @property
    def window_cap(self) -> int:
        """The most tokens a windowed layer keeps per request: the window plus the block it ends in."""
        return self.window + self.block_size if self.window else 0

    @property
    def reserve_bytes(self) -> float:
        """The windowed layers' cap and the linear-attention state of `max_num_seqs` running requests."""
        return self.max_num_seqs * (self.window_cap * self.window_token_bytes + self.state_bytes)

    def held_tokens(self, context_tokens) -> np.ndarray:
        """The tokens a request of `context_tokens` holds in the cache: whole blocks."""
        ctx = check_context(context_tokens)
        return np.ceil(ctx / self.block_size) * self.block_size

    def request_bytes(self, context_tokens) -> np.ndarray:
        """KV bytes (per GPU) one request of `context_tokens` cached tokens holds."""
        t = self.held_tokens(context_tokens)
        win = np.minimum(t, self.window_cap) * self.window_token_bytes if self.window_token_bytes else 0.0
        return t * self.token_bytes + win + self.state_bytes

    def requests(self, context_tokens) -> np.ndarray:
        """How many requests of `context_tokens` cached tokens each (a number or an array) fit at once
        (`max_num_seqs` not applied: an engine limit, not memory)."""
        self._check(0.0)
        return np.floor(self.free_bytes / self.request_bytes(context_tokens))

    def blocks(self) -> int:
        """The serving simulator's pool: blocks of `block_size` tokens of the layers that keep every token,
        after the reserve (`reserve_bytes`) of `max_num_seqs` running requests."""
        reserve = self.reserve_bytes
        self._check(reserve)
        return int((self.free_bytes - reserve) // (self.token_bytes * self.block_size))

    def _check(self, reserve: float) -> None:
        if self.free_bytes - reserve > 0:
            return
        parts = []
        if self.window_token_bytes:
            parts.append(f"{self.window_kind} layers' KV")
        if self.state_bytes:
            parts.append("linear-attention state")
        also = (f" and the {' and '.join(parts)} of {self.max_num_seqs} requests ({reserve / 1e9:.1f} GB)"
                if reserve and self.free_bytes > 0 else "")
        raise ServeError(f"{self.model} weights ({self.weight_bytes / 1e9:.1f} GB per GPU at {self.layout}){also} "
                         f"leave no KV cache in {self.gpu_memory_utilization:g} of {self.gpu}'s {self.gpu_gb:g} GB"
                         f"{self.hint}")


def check_context(context_tokens) -> np.ndarray:
    """Context lengths (tokens) as a float array: finite and > 0, else one ServeError naming the value."""
    try:
        ctx = np.asarray(context_tokens, dtype=float)
    except (TypeError, ValueError):
        raise ServeError(f"context_tokens must be a number of tokens or an array of them, got "
                         f"{context_tokens!r:.60}") from None
    bad = ~np.isfinite(ctx) | ~(ctx > 0)
    if np.any(bad):
        raise ServeError(f"context_tokens must be finite and > 0 (got {ctx[bad].flat[0]!r})")
    return ctx


def kv_budget(model, gpu, *, tp: int = 1, ep: int = 1, dtype: str | None = None, kv_dtype: str = "bf16",
              gpu_memory_utilization: float = 0.9, block_size: int = 16, max_num_seqs: int = 256) -> KvBudget:
    """The KV memory of one engine instance of `model` on `gpu` at TP `tp` (and EP `ep` for a mixture-of-experts
    model), weights in `dtype` (None: the checkpoint's own precision, step.resolve_dtype, as the timers), KV in
    `kv_dtype` (module docstring). Raises ServeError when the weights leave no KV cache in `gpu_memory_utilization`
    of the GPU, naming the model, the GPU and the layout."""
    from steptime import moe_step
    from steptime.specs import get_gpu, get_model
    from steptime.specs.moe import is_moe, lighter_weights_hint
    from steptime.step import check_dense_layout, check_tp, memory_bytes, resolve_dtype
    from steptime.terms.attention import KV_BYTES

    m, g = get_model(model), get_gpu(gpu)
    dtype = resolve_dtype(m, dtype, ServeError)  # a quantized config.json holds its own precision's weights
    # the layout checks every predictor makes (whole tp within the node, tp dividing the heads): one place each
    tp = check_tp_heads(m, check_tp(tp, g, ServeError), ServeError)
    ep = as_int(ep, "expert-parallel degree ep", 1, error=ServeError)
    check_choice(kv_dtype, "KV-cache dtype kv_dtype", tuple(KV_BYTES))  # the predictors' check (step._check_steps)
    block_size = as_int(block_size, "block_size", 1, error=ServeError)
    max_num_seqs = as_int(max_num_seqs, "max_num_seqs", 1, error=ServeError)
    u = gpu_memory_utilization
    if isinstance(u, bool) or not isinstance(u, Real) or not (math.isfinite(u) and 0 < u <= 1):
        raise ServeError(f"gpu_memory_utilization must be in (0, 1] (got {u!r})")
    if is_moe(m):
        moe_step.check_layout(m, g, tp, ep, dtype)  # the predictors' MoE check: dtype on the GPU, ep's fit
        weights = moe_step.memory_bytes(m, 0, tp, ep, dtype=dtype, kv_dtype=kv_dtype)
        layer = moe_step.kv_layer_bytes(m, tp, kv_dtype)
        n_win, n_lin = moe_step.sliding_layers(m), m.n_linear_layers
        token = (m.n_full_layers - n_win) * layer
        window_token = n_win * layer
        window = int(m.attention_window) if n_win else 0
        kind = ("sliding-window" if m.sliding_window else "chunked-attention") if n_win else ""
        state = n_lin * m.gdn_state_bytes(tp) if n_lin else 0.0
        layout = f"tp={tp}, ep={ep}"
    else:  # every layer keeps every token (a dense Model carries no window: see the module's docstring)
        check_dense_layout(m, g, ep, dtype)  # the predictors' dense check: no experts to spread, dtype on the GPU
        kw = dict(weight_dtype=dtype, kv_dtype=kv_dtype)
        weights = memory_bytes(m, 0, tp, **kw)
        token = memory_bytes(m, 1, tp, **kw) - weights
        window_token, window, kind, state = 0.0, 0, "", 0.0
        layout = f"tp={tp}"
    b = KvBudget(model=m.key, gpu=g.key, layout=layout, gpu_gb=float(g.mem_gb), gpu_bytes=float(g.mem_bytes),
                 gpu_memory_utilization=float(u), weight_bytes=float(weights), token_bytes=float(token),
                 window_token_bytes=float(window_token), window=window, window_kind=kind, state_bytes=float(state),
                 block_size=block_size, max_num_seqs=max_num_seqs, hint=lighter_weights_hint(m, dtype))
    b._check(0.0)
    return b
