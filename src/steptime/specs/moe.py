"""Mixture-of-experts model specs (issue 20): specs/moe_models.yaml and MoE config.json files.

An `MoEModel` is a `Model` (attention, embeddings, dense layers) plus its experts: routed experts,
top-k, shared experts, the expert width, which layers are dense, and the attention kind (GQA, or
DeepSeek's multi-head latent attention with its ranks; a sliding window on some layers).
A config.json whose structure steptime cannot represent (linear-attention hybrids, interleaved
dense/MoE layers, sparse-indexer attention, ...) is refused with one line that names what.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from steptime.errors import ModelConfigError, UnsupportedModelError
from steptime.specs.model import Model, _cfg_bool, _cfg_int

MOE_MODEL_FILE = Path(__file__).with_name("moe_models.yaml")
ATTENTION_KINDS = ("gqa", "mla")
WEIGHT_DTYPES = ("bf16", "fp8", "fp8_block", "mxfp4", "nvfp4", "int4")  # int4: as published, not a timed dtype
# architectures whose blocks are attention + (dense MLP | routed MoE with optional shared experts)
SUPPORTED_ARCHS = ("DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MixtralForCausalLM",
                   "GptOssForCausalLM", "MiniMaxM2ForCausalLM")


def _model_cls():
    return Model


def _make_moe_class():
    Model = _model_cls()

    @dataclass(frozen=True)
    class MoEModel(Model):
        """A mixture-of-experts decoder: Model's fields (intermediate_size = the dense layers' MLP)
        plus the experts and the attention kind. Sizes are config.json's."""

        num_experts: int = 0
        num_experts_per_tok: int = 0
        moe_intermediate_size: int = 0
        n_shared_experts: int = 0
        shared_expert_intermediate_size: int = 0
        first_k_dense_replace: int = 0
        attention: str = "gqa"
        q_lora_rank: int = 0            # 0: no q compression (a plain q projection)
        kv_lora_rank: int = 0
        qk_nope_head_dim: int = 0
        qk_rope_head_dim: int = 0
        v_head_dim: int = 0
        sliding_window: int = 0         # 0: full attention on every layer
        sliding_layers_every: int = 0   # 1 of every n layers has the window
        weights_dtype: str = "bf16"
        config: str = ""

        def __post_init__(self):
            super().__post_init__()
            where = f"model {self.key!r} ({self.source})"
            E, k = self.num_experts, self.num_experts_per_tok
            if not (isinstance(E, int) and isinstance(k, int) and 1 <= k <= E):
                raise ModelConfigError(f"{where}: num_experts_per_tok ({k!r}) must be between 1 and num_experts ({E!r})")
            for f in ("moe_intermediate_size",):
                if not (isinstance(getattr(self, f), int) and getattr(self, f) >= 1):
                    raise ModelConfigError(f"{where}: {f} must be a positive integer, got {getattr(self, f)!r}")
            for f in ("n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace", "q_lora_rank",
                      "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window",
                      "sliding_layers_every"):
                v = getattr(self, f)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ModelConfigError(f"{where}: {f} must be a whole number >= 0, got {v!r}")
            if self.first_k_dense_replace >= self.num_hidden_layers:
                raise ModelConfigError(f"{where}: first_k_dense_replace ({self.first_k_dense_replace}) leaves no "
                                       f"MoE layer of {self.num_hidden_layers}")
            if self.attention not in ATTENTION_KINDS:
                raise ModelConfigError(f"{where}: attention must be one of {', '.join(ATTENTION_KINDS)}, "
                                       f"got {self.attention!r}")
            if self.attention == "mla":
                if not (self.kv_lora_rank and self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
                    raise ModelConfigError(f"{where}: MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim "
                                           "and v_head_dim")
                if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                    raise ModelConfigError(f"{where}: head_dim ({self.head_dim}) must be qk_nope_head_dim + "
                                           f"qk_rope_head_dim ({self.qk_nope_head_dim + self.qk_rope_head_dim})")
            if bool(self.sliding_window) != bool(self.sliding_layers_every):
                raise ModelConfigError(f"{where}: sliding_window and sliding_layers_every go together")
            if self.weights_dtype not in WEIGHT_DTYPES:
                raise ModelConfigError(f"{where}: weights_dtype must be one of {', '.join(WEIGHT_DTYPES)}, "
                                       f"got {self.weights_dtype!r}")

        # ---- structure
        @property
        def is_moe(self) -> bool:
            return True

        @property
        def n_moe_layers(self) -> int:
            return self.num_hidden_layers - self.first_k_dense_replace

        @property
        def n_dense_layers(self) -> int:
            return self.first_k_dense_replace

        @property
        def shared_inter(self) -> int:
            """Total width of the shared experts' MLP (one branch)."""
            if self.shared_expert_intermediate_size:
                return self.shared_expert_intermediate_size
            return self.n_shared_experts * self.moe_intermediate_size

        # ---- parameters
        def attention_params(self) -> int:
            h, H = self.hidden_size, self.num_attention_heads
            if self.attention == "mla":
                qd = self.qk_nope_head_dim + self.qk_rope_head_dim
                q = (h * self.q_lora_rank + self.q_lora_rank * H * qd) if self.q_lora_rank else h * H * qd
                kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                    self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
                return q + kv + H * self.v_head_dim * h
            return h * self.qkv_out + self.q_size * h

        def expert_params(self) -> int:
            """One routed expert (gate, up, down)."""
            return 3 * self.hidden_size * self.moe_intermediate_size

        def n_params(self) -> int:
            """Total parameters steptime moves: attention, dense MLPs, router, every routed and shared
            expert, embeddings and LM head (norms and biases left out, like the dense models)."""
            return self._params(self.num_experts)

        def n_active_params(self) -> int:
            """Parameters one token uses: top-k routed experts per MoE layer instead of all of them."""
            return self._params(self.num_experts_per_tok)

        def _params(self, experts: int) -> int:
            h = self.hidden_size
            dense_mlp = 3 * h * self.intermediate_size
            moe = h * self.num_experts + experts * self.expert_params() + 3 * h * self.shared_inter
            emb = self.vocab_size * h
            head = 0 if self.tie_word_embeddings else self.vocab_size * h
            return (self.num_hidden_layers * self.attention_params() + self.n_dense_layers * dense_mlp
                    + self.n_moe_layers * moe + emb + head)

        # ---- KV cache
        def kv_elems_per_token_layer(self, tp: int = 1) -> int:
            """KV-cache elements one token stores in one layer on one GPU: MLA keeps the compressed
            latent (kv_lora_rank + rope dims, shared by all heads, replicated over TP); GQA keeps K and V."""
            if self.attention == "mla":
                return self.kv_lora_rank + self.qk_rope_head_dim
            return 2 * max(1, self.num_key_value_heads // tp) * self.head_dim

    return MoEModel


@lru_cache(maxsize=1)
def moe_class():
    return _make_moe_class()


def is_moe(model) -> bool:
    return bool(getattr(model, "is_moe", False))


_FIELDS_INT = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "intermediate_size", "vocab_size", "max_position_embeddings")


@lru_cache(maxsize=1)
def moe_model_table() -> dict:
    import yaml

    doc = yaml.safe_load(MOE_MODEL_FILE.read_text())["models"]
    cls = moe_class()
    out = {}
    for key, raw in doc.items():
        kw = {k: v for k, v in raw.items() if k not in ("aliases", "alias_note")}
        missing = [f for f in (*_FIELDS_INT, "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "source", "config") if f not in kw]
        if missing:
            raise ModelConfigError(f"{MOE_MODEL_FILE.name}: model {key!r}: missing fields {', '.join(missing)}")
        out[key] = cls(key=key, aliases=tuple(raw.get("aliases", ())), gated_mlp=True, **kw)
    return MappingProxyType(out)


# --------------------------------------------------------------------------- config.json
_UNREPRESENTABLE = (
    ("layer_types", lambda v: isinstance(v, list) and any("linear" in str(t) for t in v),
     "linear-attention layers (a hybrid of linear and full attention)"),
    ("interleave_moe_layer_step", lambda v: isinstance(v, int) and v > 1, "MoE on only every n-th layer"),
    ("decoder_sparse_step", lambda v: isinstance(v, int) and v > 1, "MoE on only every n-th layer"),
    ("mlp_only_layers", lambda v: isinstance(v, list) and len(v) > 0, "dense layers at arbitrary positions"),
    ("index_topk", lambda v: v not in (None, 0), "sparse-indexer attention (DeepSeek sparse attention)"),
    ("num_nextn_predict_layers", lambda v: False, ""),  # MTP head: not part of a normal step; ignored
)


def moe_from_config(cfg: dict, path) -> object:
    """An MoEModel from a config.json already known to be MoE; refuse what steptime cannot represent."""
    where = str(path)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    if text is not None:
        raise UnsupportedModelError(f"{where}: a multimodal config (text_config): steptime cannot represent "
                                    "its vision tower; give the text model's config.json")
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else cfg.get("model_type", "?")
    for key, bad, what in _UNREPRESENTABLE:
        if key in cfg and bad(cfg[key]):
            raise UnsupportedModelError(f"{where}: {arch} has {what} ({key}={str(cfg[key])[:40]}): steptime "
                                        "cannot represent it")
    if arch not in SUPPORTED_ARCHS:
        raise UnsupportedModelError(f"{where}: mixture-of-experts architecture {arch!r}: steptime cannot "
                                    f"represent it (known: {', '.join(SUPPORTED_ARCHS)})")
    E = next((cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)), None)
    if E is None:
        raise ModelConfigError(f"{where}: {arch} config gives no routed-expert count (n_routed_experts, "
                               "num_local_experts, num_experts)")
    hidden = _cfg_int(cfg, "hidden_size", where)
    heads = _cfg_int(cfg, "num_attention_heads", where)
    mla = cfg.get("kv_lora_rank") is not None
    if mla:
        nope, rope = _cfg_int(cfg, "qk_nope_head_dim", where), _cfg_int(cfg, "qk_rope_head_dim", where)
        head_dim = nope + rope
    else:
        head_dim = _cfg_int(cfg, "head_dim", where, None) or hidden // heads
    inter = _cfg_int(cfg, "intermediate_size", where)
    moe_inter = _cfg_int(cfg, "moe_intermediate_size", where, None) or inter
    sliding = cfg.get("sliding_window") if isinstance(cfg.get("layer_types"), list) else None
    every = 0
    if sliding:
        lt = cfg["layer_types"]
        n_slide = sum("sliding" in str(t) for t in lt)
        if not n_slide or len(lt) % n_slide or any(("sliding" in str(t)) != ("sliding" in str(lt[i % (len(lt) // n_slide)]))
                                                   for i, t in enumerate(lt)):
            raise UnsupportedModelError(f"{where}: sliding-window layers in an irregular pattern: steptime cannot "
                                        "represent it")
        every = len(lt) // n_slide
    quant = (cfg.get("quantization_config") or {}).get("quant_method")
    wd = {"fp8": "fp8_block" if (cfg.get("quantization_config") or {}).get("weight_block_size") else "fp8",
          "mxfp4": "mxfp4"}.get(quant, "bf16")
    cls = moe_class()
    p = Path(path)
    return cls(
        key=p.stem if p.name != "config.json" else p.parent.name or "custom", source=where, config=where,
        hidden_size=hidden, num_hidden_layers=_cfg_int(cfg, "num_hidden_layers", where), num_attention_heads=heads,
        num_key_value_heads=_cfg_int(cfg, "num_key_value_heads", where, heads), head_dim=head_dim,
        intermediate_size=inter, vocab_size=_cfg_int(cfg, "vocab_size", where), gated_mlp=True,
        tie_word_embeddings=_cfg_bool(cfg, "tie_word_embeddings", where, False),
        max_position_embeddings=_cfg_int(cfg, "max_position_embeddings", where, 4096),
        num_experts=int(E), num_experts_per_tok=_cfg_int(cfg, "num_experts_per_tok", where),
        moe_intermediate_size=moe_inter, n_shared_experts=int(cfg.get("n_shared_experts") or 0),
        shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size") or 0),
        first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
        attention="mla" if mla else "gqa", q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0), qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0), v_head_dim=int(cfg.get("v_head_dim") or 0),
        sliding_window=int(sliding or 0), sliding_layers_every=every, weights_dtype=wd)
