"""Mixture-of-experts model specs (issue 20): specs/moe_models.yaml and MoE config.json files.

An `MoEModel` is a `Model` (attention, embeddings, dense layers) plus its experts: routed experts,
top-k, shared experts, the expert width, which layers are dense, and the attention kind (GQA, or
DeepSeek's multi-head latent attention with its ranks; a sliding window on some layers; Llama 4's chunked
local attention on all layers but 1 of every few; Qwen3.5/3.6's hybrid of Gated DeltaNet linear-attention
layers and gated full-attention layers, 1 of every `full_attention_interval`; MoE on 1 of every
`moe_layer_step` layers, dense MLPs between). A config.json whose structure steptime cannot represent (other
linear-attention hybrids, dense layers at arbitrary positions, sparse-indexer attention, ...) is refused with
one line that names what.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from steptime.errors import ModelConfigError, UnsupportedModelError
from steptime.io import read_yaml
from steptime.specs.model import Model, _cfg_bool, _cfg_context, _cfg_int, checkpoint_dtype
from steptime.validation import check_known_fields

MOE_MODEL_FILE = Path(__file__).with_name("moe_models.yaml")
ATTENTION_KINDS = ("gqa", "mla")
WEIGHT_DTYPES = ("bf16", "fp8", "fp8_block", "mxfp4", "nvfp4", "int4")  # int4: as published, not a timed dtype
# architectures whose blocks are attention + (dense MLP | routed MoE with optional shared experts)
SUPPORTED_ARCHS = ("DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MixtralForCausalLM",
                   "GptOssForCausalLM", "MiniMaxM2ForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                   "Qwen3_5MoeForCausalLM", "Llama4ForConditionalGeneration", "Llama4ForCausalLM")
# a text_config read on its own names no architecture: its model_type does
MODEL_TYPE_ARCH = MappingProxyType({"qwen3_5_moe_text": "Qwen3_5MoeForCausalLM", "llama4_text": "Llama4ForCausalLM"})
# multimodal architectures whose text model steptime reads from `text_config` (a text-only step: the vision
# tower runs only on image/video inputs, which the timed requests do not carry)
TEXT_CONFIG_ARCHS = ("Qwen3_5MoeForConditionalGeneration", "Llama4ForConditionalGeneration")
# Llama 4 (transformers' Llama4TextConfig and vLLM's llama4.py): `intermediate_size` is the width of a routed
# expert AND of the one shared expert every MoE layer has; the dense layers between MoE layers
# (interleave_moe_layer_step > 1) use `intermediate_size_mlp`; every layer but 1 of every
# `no_rope_layer_interval` (default 4; those are NoPE global-attention layers) runs chunked local attention over
# `attention_chunk_size` tokens
LLAMA4_ARCHS = ("Llama4ForConditionalGeneration", "Llama4ForCausalLM")
# architectures whose config names the routed expert's width moe_intermediate_size, apart from the dense layers'
# intermediate_size (transformers' DeepseekV3Config, Qwen2MoeConfig, Qwen3MoeConfig, Qwen3_5MoeTextConfig): a config
# of these without it is refused (Mixtral, gpt-oss and MiniMax-M2 have no such field: intermediate_size is the
# expert's width)
MOE_INTER_ARCHS = ("DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                   "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM")
LLAMA4_NOPE_INTERVAL_DEFAULT = 4
# the Gated DeltaNet fields of a hybrid (full_attention_interval > 0); config.json's names
GDN_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")
SSM_DTYPES = ("float32", "bfloat16")
# The router's skew in a serving step: AIConfigurator prices a model's routed experts at its power-law router with the
# exponent its model family sets (aiconfigurator_core/sdk/models: moe.py MOEModel 1.2 (Qwen2/3-MoE, Mixtral, gpt-oss,
# MiniMax-M2), qwen35.py 1.2 (Qwen3.5/3.6), deepseek.py 1.01 (DeepSeek-V3 and Kimi K2 / K2.5), hybrid_moe.py 1.01
# (Llama 4)); steptime takes the same exponent per architecture (ROUTER_ALPHA, DERIVED from AIConfigurator's choice,
# not fitted), the default for an architecture AIConfigurator files under MOEModel
ROUTER_ALPHA_DEFAULT = 1.2
ROUTER_ALPHA = MappingProxyType({"DeepseekV3ForCausalLM": 1.01, "Llama4ForConditionalGeneration": 1.01,
                                 "Llama4ForCausalLM": 1.01})


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
        # Llama 4: chunked local attention (a query attends to the keys of its own chunk of attention_chunk_size
        # tokens) on every layer but 1 of every `global_layers_every` (0: none)
        attention_chunk_size: int = 0
        global_layers_every: int = 0
        # MoE on 1 of every `moe_layer_step` layers (layer i is MoE when (i + 1) % step == 0; Llama 4's
        # interleave_moe_layer_step, Qwen-MoE's decoder_sparse_step), a dense MLP of intermediate_size between
        moe_layer_step: int = 1
        weights_dtype: str = "bf16"
        config: str = ""
        # Qwen3.5/3.6 hybrid: 1 of every `full_attention_interval` layers is full (gated) attention, the others
        # Gated DeltaNet linear attention (0: every layer full attention)
        full_attention_interval: int = 0
        linear_num_key_heads: int = 0
        linear_num_value_heads: int = 0
        linear_key_head_dim: int = 0
        linear_value_head_dim: int = 0
        linear_conv_kernel_dim: int = 0
        attn_output_gate: bool = False     # q_proj also produces a sigmoid gate of the attention output (2x q)
        mamba_ssm_dtype: str = "float32"   # the recurrent state's dtype (config.json's; vLLM keeps the state in it)
        # the power-law exponent of the router's skew a serving step's routed experts are priced at (ROUTER_ALPHA)
        router_alpha: float = ROUTER_ALPHA_DEFAULT
        # group-limited routing (config.json's n_group / topk_group, DeepSeek-V3): the experts split into n_group
        # equal groups and a token's top-k is taken among the experts of its topk_group best groups (1, 1: none)
        n_group: int = 1
        topk_group: int = 1

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
                      "sliding_layers_every", "attention_chunk_size", "global_layers_every"):
                v = getattr(self, f)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ModelConfigError(f"{where}: {f} must be a whole number >= 0, got {v!r}")
            step = self.moe_layer_step
            if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= self.num_hidden_layers:
                raise ModelConfigError(f"{where}: moe_layer_step must be a whole number from 1 to num_hidden_layers "
                                       f"({self.num_hidden_layers}), got {step!r}")
            if step > 1 and self.first_k_dense_replace:
                raise ModelConfigError(f"{where}: first_k_dense_replace and moe_layer_step > 1 together (dense "
                                       "layers first AND interleaved) cannot be represented")
            if self.first_k_dense_replace >= self.num_hidden_layers:
                raise ModelConfigError(f"{where}: first_k_dense_replace ({self.first_k_dense_replace}) leaves no "
                                       f"MoE layer of {self.num_hidden_layers}")
            g, tg = self.n_group, self.topk_group
            if (isinstance(g, bool) or isinstance(tg, bool) or not isinstance(g, int) or not isinstance(tg, int)
                    or not 1 <= tg <= g or E % g or tg * (E // g) < k):
                raise ModelConfigError(f"{where}: n_group ({g!r}) must divide num_experts ({E}) and topk_group "
                                       f"({tg!r}) be between 1 and n_group, its groups holding at least top-k ({k}) "
                                       "experts")
            a = self.router_alpha
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 1.0 < float(a) <= 3.0:
                raise ModelConfigError(f"{where}: router_alpha (the router's power-law exponent) must be in (1, 3], "
                                       f"got {a!r}")
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
            if bool(self.attention_chunk_size) != bool(self.global_layers_every):
                raise ModelConfigError(f"{where}: attention_chunk_size and global_layers_every go together")
            if self.attention_chunk_size and (self.sliding_window or self.attention != "gqa"):
                raise ModelConfigError(f"{where}: chunked local attention is represented on GQA models without a "
                                       "sliding window only")
            if self.full_attention_interval:
                bad = [f for f in GDN_FIELDS if isinstance(getattr(self, f), bool) or not isinstance(getattr(self, f), int)
                       or getattr(self, f) < 1]
                if bad or self.full_attention_interval < 1:
                    raise ModelConfigError(f"{where}: a linear-attention hybrid (full_attention_interval "
                                           f"{self.full_attention_interval!r}) needs positive {', '.join(bad or GDN_FIELDS)}")
                if self.num_hidden_layers % self.full_attention_interval:
                    raise ModelConfigError(f"{where}: full_attention_interval ({self.full_attention_interval}) must "
                                           f"divide num_hidden_layers ({self.num_hidden_layers})")
                if self.linear_num_value_heads % self.linear_num_key_heads:
                    raise ModelConfigError(f"{where}: linear_num_value_heads must be a multiple of linear_num_key_heads")
                if self.attention != "gqa" or self.sliding_window or self.attention_chunk_size:
                    raise ModelConfigError(f"{where}: a linear-attention hybrid has GQA full-attention layers only")
                if self.mamba_ssm_dtype not in SSM_DTYPES:
                    raise ModelConfigError(f"{where}: mamba_ssm_dtype must be one of {', '.join(SSM_DTYPES)}")
            if self.weights_dtype not in WEIGHT_DTYPES:
                raise ModelConfigError(f"{where}: weights_dtype must be one of {', '.join(WEIGHT_DTYPES)}, "
                                       f"got {self.weights_dtype!r}")

        # ---- structure
        @property
        def is_moe(self) -> bool:
            return True

        @property
        def n_linear_layers(self) -> int:
            """Gated DeltaNet (linear-attention) layers; 0 unless a hybrid."""
            if not self.full_attention_interval:
                return 0
            return self.num_hidden_layers - self.num_hidden_layers // self.full_attention_interval

        @property
        def n_full_layers(self) -> int:
            """Layers with (full or sliding-window) softmax attention and a KV cache."""
            return self.num_hidden_layers - self.n_linear_layers

        @property
        def gdn_key_dim(self) -> int:
            return self.linear_num_key_heads * self.linear_key_head_dim

        @property
        def gdn_value_dim(self) -> int:
            return self.linear_num_value_heads * self.linear_value_head_dim

        def gdn_params(self) -> int:
            """One Gated DeltaNet layer: in_proj_qkvz (q, k, v, z), in_proj_ba (beta, a), out_proj, conv1d."""
            h, kd, vd = self.hidden_size, self.gdn_key_dim, self.gdn_value_dim
            conv = (2 * kd + vd) * self.linear_conv_kernel_dim
            return h * (2 * kd + 2 * vd) + h * 2 * self.linear_num_value_heads + vd * h + conv

        def gdn_state_bytes(self, tp: int = 1, conv_bytes: int = 2) -> float:
            """One request's state in ONE Gated DeltaNet layer on one GPU (heads split tp ways): the recurrent
            state (value heads x key dim x value dim, in mamba_ssm_dtype) and the conv1d's last kernel - 1 inputs
            (in the model dtype)."""
            sb = 4 if self.mamba_ssm_dtype == "float32" else 2
            rec = self.linear_num_value_heads / tp * self.linear_key_head_dim * self.linear_value_head_dim * sb
            conv = (2 * self.gdn_key_dim + self.gdn_value_dim) / tp * (self.linear_conv_kernel_dim - 1) * conv_bytes
            return rec + conv

        @property
        def n_moe_layers(self) -> int:
            if self.moe_layer_step > 1:  # layers i with (i + 1) % step == 0
                return self.num_hidden_layers // self.moe_layer_step
            return self.num_hidden_layers - self.first_k_dense_replace

        @property
        def n_dense_layers(self) -> int:
            return self.num_hidden_layers - self.n_moe_layers

        @property
        def attention_window(self) -> int:
            """The most keys a windowed layer's query attends to: the sliding window, or Llama 4's attention
            chunk (a query attends to the keys of its own chunk so far: min(KV, chunk) is exact up to one
            chunk and an upper bound beyond); 0 without windowed layers."""
            return self.sliding_window or self.attention_chunk_size

        @property
        def n_window_layers(self) -> int:
            """Layers that attend over `attention_window` keys at most: 1 of every `sliding_layers_every`
            (gpt-oss), or all but 1 of every `global_layers_every` (Llama 4's chunked layers); 0 without."""
            L = self.num_hidden_layers
            if self.sliding_layers_every:
                return L // self.sliding_layers_every
            if self.global_layers_every:
                return L - L // self.global_layers_every
            return 0

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
            q_gate = self.q_size * h if self.attn_output_gate else 0  # the gate half of q_proj
            return h * self.qkv_out + q_gate + self.q_size * h

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
            gdn = self.n_linear_layers * self.gdn_params() if self.n_linear_layers else 0
            return (self.n_full_layers * self.attention_params() + gdn + self.n_dense_layers * dense_mlp
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
    doc = read_yaml(MOE_MODEL_FILE)["models"]
    cls = moe_class()
    known = (*(f.name for f in dataclasses.fields(cls) if f.name not in ("key", "aliases", "gated_mlp")), "aliases",
             "alias_note")  # the MoEModel's fields (gated_mlp: every MoE expert is gated) and the alias note
    out = {}
    for key, raw in doc.items():
        check_known_fields(raw, known, f"{MOE_MODEL_FILE.name}: model {key!r}", ModelConfigError)
        kw = {k: v for k, v in raw.items() if k not in ("aliases", "alias_note")}
        missing = [f for f in (*_FIELDS_INT, "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "source", "config") if f not in kw]
        if missing:
            raise ModelConfigError(f"{MOE_MODEL_FILE.name}: model {key!r}: missing fields {', '.join(missing)}")
        out[key] = cls(key=key, aliases=tuple(raw.get("aliases", ())), gated_mlp=True, **kw)
    return MappingProxyType(out)


UNSUPPORTED_FIELDS = ("source", "aliases", "architecture", "config", "why", "read")


@lru_cache(maxsize=1)
def unsupported_model_table() -> dict:
    """moe_models.yaml `unsupported`: key -> {source, aliases, architecture, config, why, read} of the known models
    whose structure steptime cannot represent (wave 41); `get_model` refuses them by name with `why`."""
    doc = read_yaml(MOE_MODEL_FILE).get("unsupported") or {}
    if not isinstance(doc, dict):
        raise ModelConfigError(f"{MOE_MODEL_FILE.name}: `unsupported` must map model keys to their entries")
    out = {}
    for key, raw in doc.items():
        where = f"{MOE_MODEL_FILE.name}: unsupported model {key!r}"
        if not isinstance(raw, dict):
            raise ModelConfigError(f"{where}: expected a mapping of {', '.join(UNSUPPORTED_FIELDS)}")
        check_known_fields(raw, UNSUPPORTED_FIELDS, where, ModelConfigError)
        missing = [f for f in UNSUPPORTED_FIELDS if f != "aliases" and not str(raw.get(f) or "").strip()]
        if missing:
            raise ModelConfigError(f"{where}: missing fields {', '.join(missing)}")
        out[key] = MappingProxyType({**raw, "aliases": tuple(raw.get("aliases") or ())})
    return MappingProxyType(out)


def unsupported_refusal(key: str, asked: str) -> UnsupportedModelError:
    """The one-line refusal of a known model steptime cannot represent (unsupported_model_table)."""
    e = unsupported_model_table()[key]
    why = " ".join(str(e["why"]).split())
    return UnsupportedModelError(f"model {asked!r} ({e['source']}, {e['architecture']}) is known but steptime cannot "
                                 f"represent it: {why} (specs/moe_models.yaml unsupported.{key})")


# --------------------------------------------------------------------------- config.json
_UNREPRESENTABLE = (
    ("layer_types", lambda v: isinstance(v, list) and any("linear" in str(t) for t in v),
     "linear-attention layers (a hybrid of linear and full attention)"),
    ("mlp_only_layers", lambda v: isinstance(v, list) and len(v) > 0, "dense layers at arbitrary positions"),
    ("index_topk", lambda v: v not in (None, 0), "sparse-indexer attention (DeepSeek sparse attention)"),
    ("num_nextn_predict_layers", lambda v: False, ""),  # MTP head: not part of a normal step; ignored
)


def moe_from_config(cfg: dict, path) -> object:
    """An MoEModel from a config.json already known to be MoE; refuse what steptime cannot represent."""
    where = str(path)
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else MODEL_TYPE_ARCH.get(str(cfg.get("model_type")), cfg.get("model_type", "?"))
    for key in ("text_config", "quantization_config"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise ModelConfigError(f"{where}: {key} must be an object of fields, got {cfg[key]!r:.40}")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    if text is not None:
        if arch not in TEXT_CONFIG_ARCHS:
            raise UnsupportedModelError(f"{where}: a multimodal config (text_config) of {arch}: steptime cannot "
                                        "represent its vision tower; give the text model's config.json")
        # a text-only step: the text model's structure; the vision tower is not represented
        quant_cfg = {"quantization_config": _multimodal_quantization(cfg, text, where)}
        cfg = {**text, "architectures": [arch], "tie_word_embeddings": cfg.get("tie_word_embeddings",
                                                                               text.get("tie_word_embeddings"))}
    else:
        quant_cfg = cfg
    hybrid = hybrid_fields(cfg, where, arch)
    for key, bad, what in _UNREPRESENTABLE:
        if hybrid and key == "layer_types":
            continue
        if key in cfg and bad(cfg[key]):
            raise UnsupportedModelError(f"{where}: {arch} has {what} ({key}={str(cfg[key])[:40]}): steptime "
                                        "cannot represent it")
    if arch not in SUPPORTED_ARCHS:
        raise UnsupportedModelError(f"{where}: mixture-of-experts architecture {arch!r}: steptime cannot "
                                    f"represent it (known: {', '.join(SUPPORTED_ARCHS)})")
    lt = _layer_types(cfg, where)  # after the refusals that name a structure: they say more than a length
    e_key = next((k for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)), None)
    if e_key is None:
        raise ModelConfigError(f"{where}: {arch} config gives no routed-expert count (n_routed_experts, "
                               "num_local_experts, num_experts)")
    E = _cfg_int(cfg, e_key, where)
    hidden = _cfg_int(cfg, "hidden_size", where)
    heads = _cfg_int(cfg, "num_attention_heads", where)
    mla = cfg.get("kv_lora_rank") is not None
    if mla:
        nope, rope = _cfg_int(cfg, "qk_nope_head_dim", where), _cfg_int(cfg, "qk_rope_head_dim", where)
        for key in ("q_lora_rank", "kv_lora_rank", "v_head_dim"):
            _cfg_int(cfg, key, where, 0, minimum=0)
        head_dim = nope + rope
    else:
        head_dim = _cfg_int(cfg, "head_dim", where, None) or hidden // heads
    llama4 = arch in LLAMA4_ARCHS
    if arch in MOE_INTER_ARCHS and cfg.get("moe_intermediate_size") is None:
        raise ModelConfigError(f"{where}: moe_intermediate_size is missing; expected a positive integer ({arch}'s "
                               f"routed-expert MLP width; intermediate_size is its dense layers')")
    for key in ("n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace", "n_group",
                "topk_group"):
        _cfg_int(cfg, key, where, 0, minimum=0)  # optional counts: whole numbers, 0 or absent when none
    inter = _cfg_int(cfg, "intermediate_size_mlp" if llama4 else "intermediate_size", where, None)
    moe_inter = _cfg_int(cfg, "intermediate_size" if llama4 else "moe_intermediate_size", where, None) or inter
    if inter is None and moe_inter is not None and not cfg.get("first_k_dense_replace"):
        inter = moe_inter  # no dense layer (Qwen3.5/3.6 give no intermediate_size): the expert width stands in
    if inter is None or moe_inter is None:
        raise ModelConfigError(f"{where}: config.json gives no intermediate_size")
    sliding = _cfg_int(cfg, "sliding_window", where, 0, minimum=0) if lt is not None else None
    every = 0
    n_slide = sum("sliding" in t for t in lt) if lt is not None else 0
    if n_slide and not sliding:  # read as full attention before wave 38: the window dropped without a word
        raise ModelConfigError(f"{where}: layer_types names {n_slide} sliding-attention layers but sliding_window is "
                               f"{'missing' if 'sliding_window' not in cfg else cfg['sliding_window']!r}; expected the "
                               "window in tokens (a positive integer)")
    if sliding:
        if not n_slide or len(lt) % n_slide or any(("sliding" in str(t)) != ("sliding" in str(lt[i % (len(lt) // n_slide)]))
                                                   for i, t in enumerate(lt)):
            raise UnsupportedModelError(f"{where}: sliding-window layers in an irregular pattern: steptime cannot "
                                        "represent it")
        every = len(lt) // n_slide
    # 0 is no step (transformers divides by it); absent or null: every layer MoE
    step = next((cfg[k] for k in ("interleave_moe_layer_step", "decoder_sparse_step") if cfg.get(k) is not None), 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ModelConfigError(f"{where}: the MoE layer step (interleave_moe_layer_step / decoder_sparse_step) must "
                               f"be a positive whole number, got {step!r}")
    chunk, global_every = _chunked_attention(cfg, where, arch) if llama4 else (0, 0)
    ck = checkpoint_dtype(quant_cfg, where)  # the one reading of quantization_config (the dense reader's too)
    wd = ck if ck in ("fp8", "fp8_block", "mxfp4") else "bf16"  # as published; another method: its structure only
    cls = moe_class()
    p = Path(path)
    return cls(
        key=p.stem if p.name != "config.json" else p.parent.name or "custom", source=where, config=where,
        hidden_size=hidden, num_hidden_layers=_cfg_int(cfg, "num_hidden_layers", where), num_attention_heads=heads,
        num_key_value_heads=_cfg_int(cfg, "num_key_value_heads", where, heads), head_dim=head_dim,
        intermediate_size=inter, vocab_size=_cfg_int(cfg, "vocab_size", where), gated_mlp=True,
        tie_word_embeddings=_cfg_bool(cfg, "tie_word_embeddings", where, False),
        max_position_embeddings=_cfg_context(cfg, where),
        num_experts=int(E), num_experts_per_tok=_cfg_int(cfg, "num_experts_per_tok", where),
        moe_intermediate_size=moe_inter, n_shared_experts=1 if llama4 else int(cfg.get("n_shared_experts") or 0),
        shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size") or 0),
        first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
        attention="mla" if mla else "gqa", q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0), qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0), v_head_dim=int(cfg.get("v_head_dim") or 0),
        sliding_window=int(sliding or 0), sliding_layers_every=every, weights_dtype=wd, moe_layer_step=step,
        attention_chunk_size=chunk, global_layers_every=global_every,
        router_alpha=ROUTER_ALPHA.get(arch, ROUTER_ALPHA_DEFAULT), n_group=int(cfg.get("n_group") or 1),
        topk_group=int(cfg.get("topk_group") or 1), checkpoint_dtype=ck, **hybrid)


def lighter_weights_hint(model, dtype: str) -> str:
    """For a memory refusal at bf16: where the model's published weights are a lighter format steptime prices
    (moe_models.yaml's weights_dtype fp8 / fp8_block / mxfp4: a spec-table entry is priced at bf16 unless asked, as
    `serve --model deepseek-v3 --ep 8` is), the dtype that names them; else "" (wave 38)."""
    wd = getattr(model, "weights_dtype", "bf16")
    if dtype != "bf16" or wd not in ("fp8", "fp8_block", "mxfp4"):
        return ""
    return f"; its published weights are {wd}: --dtype {wd} (dtype={wd!r}) prices those"


def _layer_types(cfg: dict, where: str) -> list | None:
    """A config.json's layer_types: None when absent, else one layer kind (a string) for each of the
    num_hidden_layers layers, as transformers' own check of it asks. A string, a list of another length or a
    non-string entry is refused (wave 38: a string was read as no list, a short list as the whole pattern, so a
    sliding window could be dropped or misplaced without a word)."""
    lt = cfg.get("layer_types")
    if lt is None:
        return None
    if not isinstance(lt, list) or not all(isinstance(t, str) for t in lt):
        raise ModelConfigError(f"{where}: layer_types must be a list of layer kinds (e.g. [\"sliding_attention\", "
                               f"\"full_attention\", ...]), got {lt!r:.40}")
    layers = _cfg_int(cfg, "num_hidden_layers", where)
    if len(lt) != layers:
        raise ModelConfigError(f"{where}: layer_types lists {len(lt)} layers but num_hidden_layers is {layers}; "
                               "expected one layer kind a layer")
    return lt


def _multimodal_quantization(cfg: dict, text: dict, where: str):
    """The quantization_config of a multimodal config.json (one with a text_config): the top-level one, where
    transformers and vLLM read a checkpoint's quantization (the composite config's own field), else the text
    model's (some exports keep it there). Both given and read differently (specs.model.checkpoint_dtype: bf16, fp8,
    fp8_block, mxfp4 or the method's name) is ambiguous: which weights the checkpoint holds cannot be told, so it is
    refused, naming both readings (wave 38; before, the top-level one set the priced dtype and the text model's the
    published weights_dtype, two answers to one question)."""
    top, inner = cfg.get("quantization_config"), text.get("quantization_config")
    if top is None or inner is None or top == inner:
        return inner if top is None else top
    a = checkpoint_dtype({"quantization_config": top}, f"{where}: quantization_config")
    b = checkpoint_dtype({"quantization_config": inner}, f"{where}: text_config.quantization_config")
    if a != b:
        raise ModelConfigError(f"{where}: quantization_config reads {a} but text_config.quantization_config reads {b}: "
                               "which weights the checkpoint holds is ambiguous; keep the one that describes them")
    return top


def _chunked_attention(cfg: dict, where: str, arch: str) -> tuple[int, int]:
    """(attention_chunk_size, global_layers_every) of a Llama 4 text config: chunked local attention on the RoPE
    layers, global attention on the NoPE layers, 1 of every `no_rope_layer_interval` (transformers'
    Llama4TextConfig default 4 when the config does not say); (0, 0) without a chunk size. An explicit
    `no_rope_layers` list in another pattern is refused."""
    chunk = cfg.get("attention_chunk_size")
    if not chunk:
        return 0, 0
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ModelConfigError(f"{where}: attention_chunk_size must be a positive whole number, got {chunk!r}")
    n = cfg.get("no_rope_layer_interval", LLAMA4_NOPE_INTERVAL_DEFAULT)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ModelConfigError(f"{where}: no_rope_layer_interval must be a positive whole number, got {n!r}")
    given = cfg.get("no_rope_layers")
    if given:  # 1 = a RoPE (chunked) layer, 0 = a NoPE (global) layer
        want = [int((i + 1) % n != 0) for i in range(len(given))]
        if [int(v) for v in given] != want:
            raise UnsupportedModelError(f"{where}: {arch} has global-attention (NoPE) layers in a pattern other than "
                                        "1 of every no_rope_layer_interval: steptime cannot represent it")
    return int(chunk), int(n)


def hybrid_fields(cfg: dict, where: str, arch: str) -> dict:
    """The Gated DeltaNet hybrid's fields of a config (Qwen3.5/3.6: layer_types of linear_attention and
    full_attention, one full layer of every full_attention_interval), {} for a model without linear layers.
    Refuses a hybrid steptime cannot represent: linear layers without the Gated DeltaNet dims, or an
    irregular layer pattern."""
    lt = cfg.get("layer_types")
    if not (isinstance(lt, list) and any("linear" in str(t) for t in lt)):
        return {}
    missing = [f for f in GDN_FIELDS if not isinstance(cfg.get(f), int)]
    if missing:
        raise UnsupportedModelError(f"{where}: {arch} has linear-attention layers (layer_types) without the Gated "
                                    f"DeltaNet dims ({', '.join(missing)}): steptime cannot represent them")
    n = _cfg_int(cfg, "full_attention_interval", where, 0, minimum=0)
    want = ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(len(lt))] if n else None
    if want is None or [str(t) for t in lt] != want:
        raise UnsupportedModelError(f"{where}: {arch} has linear- and full-attention layers in a pattern other "
                                    "than one full layer of every full_attention_interval: steptime cannot "
                                    "represent it")
    ssm = str(cfg.get("mamba_ssm_dtype") or cfg.get("dtype") or "bfloat16")
    return {"full_attention_interval": n, **{f: int(cfg[f]) for f in GDN_FIELDS},
            "attn_output_gate": bool(cfg.get("attn_output_gate", False)), "mamba_ssm_dtype": ssm}
