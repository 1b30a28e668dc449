"""A model's shapes (`Model`) and the checked reading of config.json fields: apart from the spec
tables in `steptime.specs`, so that the dense and the MoE (`steptime.specs.moe`) readers share them
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from types import MappingProxyType

from steptime.errors import ModelConfigError
from steptime.validation import MAX_DIM, as_int


_MODEL_FIELDS = tuple(
    "hidden_size num_hidden_layers num_attention_heads num_key_value_heads head_dim "
    "intermediate_size vocab_size gated_mlp tie_word_embeddings max_position_embeddings".split())
_MODEL_INT_FIELDS = tuple(f for f in _MODEL_FIELDS if f not in ("gated_mlp", "tie_word_embeddings"))


@dataclass(frozen=True)
class Model:
    key: str
    source: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool
    tie_word_embeddings: bool
    max_position_embeddings: int
    aliases: tuple = ()
    parallel_block: bool = False  # attention and MLP in parallel off one norm (phi-2); models.yaml
    qk_norm: bool = False  # an RMSNorm (with weights) on each head's q and k before RoPE (Qwen3); models.yaml
    # the weight precision of a checkpoint read from its config.json (`checkpoint_dtype`: bf16 without a
    # quantization_config, fp8 / fp8_block / mxfp4, else the quant_method steptime cannot price): the predictors'
    # default dtype and the only one they take for a quantized checkpoint (step.resolve_dtype); None for a spec-table
    # entry, priced at the dtype asked (default bf16)
    checkpoint_dtype: str | None = None

    def __post_init__(self):
        """Refuse shapes no dense decoder has, with one line naming the model and the field."""
        where = f"model {self.key!r} ({self.source})" if self.source != self.key else f"model {self.key!r}"
        for f in _MODEL_INT_FIELDS:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, Integral):
                raise ModelConfigError(f"{where}: {f} must be a positive integer, got {v!r} ({type(v).__name__})")
            if not 1 <= v <= MAX_DIM:
                raise ModelConfigError(f"{where}: {f} must be between 1 and {MAX_DIM}, got {v}")
        for f in ("gated_mlp", "tie_word_embeddings"):
            if not isinstance(getattr(self, f), bool):
                raise ModelConfigError(f"{where}: {f} must be true or false, got {getattr(self, f)!r}")
        h, kvh = self.num_attention_heads, self.num_key_value_heads
        if kvh > h or h % kvh:
            raise ModelConfigError(f"{where}: num_attention_heads ({h}) must be a multiple of "
                                   f"num_key_value_heads ({kvh})")

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def qkv_out(self) -> int:
        return self.q_size + 2 * self.kv_size

    @property
    def mlp_up_out(self) -> int:
        return (2 if self.gated_mlp else 1) * self.intermediate_size

    def n_params(self) -> int:
        """Parameter count of the weights steptime moves (projections, embeddings, LM head)."""
        h = self.hidden_size
        per_layer = h * self.qkv_out + self.q_size * h + h * self.mlp_up_out + self.intermediate_size * h
        emb = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_hidden_layers * per_layer + emb + head


# ---------------------------------------------------------------------------------------


_JSON_KIND = MappingProxyType({dict: "an object", list: "a list", str: "a string", int: "a number",
                               float: "a number", bool: "a boolean", type(None): "null"})
_REQUIRED = object()


def _cfg_int(cfg: dict, key: str, where: str, default=_REQUIRED, minimum: int = 1) -> int:
    """A whole-number field of a config.json, at least `minimum` (1: positive; 0 for a count that may be none);
    absent or null optional fields take `default`."""
    v = cfg.get(key)
    kind = "a positive integer" if minimum == 1 else f"a whole number >= {minimum}"
    if v is None:
        if default is not _REQUIRED:
            return default
        state = "is null" if key in cfg else "is missing"
        raise ModelConfigError(f"{where}: {key} {state}; expected {kind}")
    if isinstance(v, (str, list, dict)):
        raise ModelConfigError(f"{where}: {key} must be {kind}, got {_JSON_KIND[type(v)]} {v!r:.40}")
    return as_int(v, f"{where}: {key}", minimum, ModelConfigError)


# GPT-2 style configs name the context window n_positions (transformers' GPT2Config.attribute_map maps
# max_position_embeddings to n_positions): the same field under its other name
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions")


def _cfg_context(cfg: dict, where: str) -> int:
    """The context window (positions) a config.json states: max_position_embeddings (or GPT-2's n_positions).
    Required: it bounds every request's KV + new tokens, and no default fits every model (2,048 for OPT, 131,072
    for Llama 3.1), so a config without it is refused, never given a guessed window."""
    key = next((k for k in CONTEXT_FIELDS if k in cfg), None)
    if key is None:
        raise ModelConfigError(f"{where}: max_position_embeddings is missing; expected a positive integer (the "
                               f"model's context window in positions, which bounds each request's KV + new "
                               f"tokens): add the value the model was trained for to the config.json")
    return _cfg_int(cfg, key, where)


# quantization_config.quant_method -> the weight dtype steptime prices it as; a method not here is recorded by name
# and refused when priced (step.resolve_dtype)
PRICED_QUANT = MappingProxyType({"fp8": "fp8", "mxfp4": "mxfp4"})


def checkpoint_dtype(cfg: dict, where: str) -> str:
    """The weight precision a config.json's quantization_config states, the one reading of it (dense and MoE
    readers): bf16 without one; fp8 (per-tensor) or fp8_block (weight_block_size given) for quant_method fp8; mxfp4;
    otherwise the quant_method itself (awq, gptq, bitsandbytes, compressed-tensors, modelopt, ...), which the
    predictors refuse to price."""
    q = cfg.get("quantization_config")
    if q is None:
        return "bf16"
    if not isinstance(q, dict):
        raise ModelConfigError(f"{where}: quantization_config must be an object of fields, got {q!r:.40}")
    method = q.get("quant_method")
    if not isinstance(method, str) or not method.strip():
        raise ModelConfigError(f"{where}: quantization_config.quant_method must name the method (e.g. \"fp8\"), "
                               f"got {method!r:.40}")
    dt = PRICED_QUANT.get(method.strip().lower())
    if dt == "fp8" and q.get("weight_block_size"):
        return "fp8_block"
    return dt or method.strip().lower()


def _cfg_bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ModelConfigError(f"{where}: {key} must be true or false, got {v!r:.40}")
    return v
