"""GPU and model specifications: loaded from the YAML files beside this module.

These files are the single place a GPU's datasheet numbers and a model's shapes live.
Everything else asks `get_gpu` / `get_model`.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from steptime.errors import (GPUTypeError, ModelConfigError, UnknownGPUError, UnknownModelError,
                             UnsupportedModelError)
from steptime.io import read_yaml
from steptime.readonly import read_only
from steptime.validation import MAX_CONFIG_BYTES, check_known_fields, check_regular_file
from steptime.specs.model import _JSON_KIND, _MODEL_FIELDS, Model, _cfg_bool, _cfg_int  # noqa: F401 (re-exported)
from steptime.specs.model import _cfg_context, checkpoint_dtype
from steptime.specs.moe import moe_from_config, moe_model_table, unsupported_model_table, unsupported_refusal

_HERE = Path(__file__).resolve().parent
SPEC_DIR = _HERE  # the spec files (read by the lab too)
GPU_FILE = _HERE / "gpus.yaml"
MODEL_FILE = _HERE / "models.yaml"
OPERATOR_FILE = _HERE / "operators.yaml"

# NVIDIA families, then AMD Instinct (CDNA 3: MI300X/MI325X; CDNA 4: MI350X/MI355X), which have no readings:
# their GPUs are always predicted from the datasheet and labelled `uncalibrated`
ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4")
VENDOR = MappingProxyType({"cdna3": "AMD", "cdna4": "AMD"})  # an architecture's vendor; any other: DEFAULT_VENDOR
DEFAULT_VENDOR = "NVIDIA"
# Architectures whose MLP is gated (gate_proj, up_proj, down_proj: act(gate) * up) whatever hidden_act says: Gemma's
# GeGLU runs gelu_pytorch_tanh, which other models (StarCoder2, GPT-2's gelu family) use in a plain two-matrix MLP
# (transformers' GemmaMLP / Gemma2MLP / Gemma3MLP); models.yaml's Gemma entries are gated likewise
GATED_ARCHS = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# The MLP activations a dense config.json may name (hidden_act, or GPT-2's activation_function), each with whether the
# MLP it implies is gated (act(gate) * up: Llama's SwiGLU) or plain (two matrices); the one list: another name is
# refused with these, not read as a plain MLP (a gated model with a new activation name would lose a third of its
# MLP GEMMs silently). The plain names are transformers' ACT2FN entries that dense decoders use (GPT-2's gelu_new,
# OPT's relu, StarCoder2's gelu_pytorch_tanh, ...); swish, silu's other name, is left out: steptime reads silu as
# gated, and a plain swish MLP could not be told apart. A config stating "gated_mlp" needs no known name.
MLP_ACTIVATIONS = MappingProxyType({
    **dict.fromkeys(("silu", "swiglu", "gelu_pytorch_tanh_gated"), True),
    **dict.fromkeys(("gelu", "gelu_new", "gelu_fast", "gelu_python", "gelu_accurate", "gelu_pytorch_tanh",
                     "quick_gelu", "relu", "relu2", "relu6", "leaky_relu", "tanh"), False)})
VENDORS = tuple(sorted({DEFAULT_VENDOR, *VENDOR.values()}))  # every vendor a GPU of gpus.yaml can have


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


# How well a figure is checked (gpus.yaml header): `high` a vendor document (or a verbatim copy of the
# vendor's table) read in a session states it; `medium` a secondary source read in a session states it (a spec
# database, a review, a public repository's table, a press report); `datasheet` a cited vendor document not
# re-read in a session; `low` no document read states it (DERIVED, ASSUMED or from memory).
CONFIDENCE = ("high", "medium", "datasheet", "low")


@dataclass(frozen=True)
class Figure:
    """One datasheet number with where it came from and how well that was checked (CONFIDENCE)."""

    value: Any
    source: str
    confidence: str = "datasheet"

    def __post_init__(self):
        object.__setattr__(self, "value", read_only(self.value))


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    architecture: str
    sm_version: int
    bf16_dense_tflops: float
    fp8_dense_tflops: float | None
    mem_type: str
    mem_bw_gbps: float
    mem_gb: float
    sms: int
    gpcs: int
    sms_per_gpc_max: int
    l2_mb: float
    boost_mhz: float | None
    base_mhz: float | None
    power_w: float
    nvlink_gbps: float | None
    pcie_gbps: float | None
    max_active_clusters: dict = field(default_factory=dict)
    gpus_per_node: int | None = None  # GPUs one tensor-parallel group can span on the in-node links
    aliases: tuple = ()
    vidur_name: str | None = None
    aic_name: str | None = None
    interconnect: str | None = None  # the in-node GPU-to-GPU links, in words (gpus.yaml `interconnect`)
    host_cpu: str | None = None  # the host CPU of a C2C-attached platform ("grace"); None: a PCIe x86 host
    figures: dict = field(default_factory=dict, compare=False, repr=False)
    # which figures a session re-read against a document, and on which day: ((YYYY-MM-DD, (field, ...)), ...)
    rechecked: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):  # a GPU is shared by every prediction in the process: its tables are read-only
        object.__setattr__(self, "max_active_clusters", read_only(self.max_active_clusters))
        object.__setattr__(self, "figures", read_only(self.figures))

    @property
    def vendor(self) -> str:
        return VENDOR.get(self.architecture, DEFAULT_VENDOR)

    # Derived SI quantities used by the terms -------------------------------------------
    @property
    def peak_flops(self) -> float:
        """Dense bf16 tensor peak, FLOP/s."""
        return self.bf16_dense_tflops * 1e12

    @property
    def mem_bw(self) -> float:
        """Peak DRAM bandwidth, bytes/s."""
        return self.mem_bw_gbps * 1e9

    @property
    def l2_bytes(self) -> float:
        return self.l2_mb * 1024 * 1024

    @property
    def mem_bytes(self) -> float:
        return self.mem_gb * 1e9

    @property
    def link_bw(self) -> float:
        """Per-direction bandwidth of the best GPU-to-GPU link, bytes/s."""
        bw = self.nvlink_gbps or self.pcie_gbps or 0.0
        return bw * 1e9

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.peak_flops / self.mem_bw


def _unwrap(raw: dict, key: str, default_source: str, default_confidence: str = "datasheet") -> Figure:
    v = raw.get(key)
    if isinstance(v, dict) and "value" in v:
        src = v.get("source", default_source)  # a figure citing another document does not inherit the default
        fig = Figure(v["value"], src, v.get("confidence", default_confidence if src == default_source else "datasheet"))
    else:
        fig = Figure(v, default_source, default_confidence)
    if fig.confidence not in CONFIDENCE:
        raise ValueError(f"{GPU_FILE}: {key}: confidence {fig.confidence!r} is not one of {', '.join(CONFIDENCE)}")
    return fig


_GPU_FIELDS = tuple(
    "bf16_dense_tflops fp8_dense_tflops mem_type mem_bw_gbps mem_gb sms gpcs sms_per_gpc_max "
    "l2_mb boost_mhz base_mhz power_w nvlink_gbps pcie_gbps max_active_clusters gpus_per_node".split())


def _rechecked(raw: dict, key: str) -> tuple:
    """gpus.yaml `rechecked: [{date: YYYY-MM-DD, figures: [field, ...]}, ...]`: the figures a session re-read
    against a document (found or not: the figure's comment says), checked to name real fields and a real day."""
    out = []
    for e in raw.get("rechecked") or ():
        if not (isinstance(e, dict) and set(e) == {"date", "figures"}):
            raise ValueError(f"{GPU_FILE}: {key}: rechecked entries are {{date, figures}}, got {e!r}")
        try:
            day = _dt.date.fromisoformat(str(e["date"])).isoformat()
        except ValueError:
            raise ValueError(f"{GPU_FILE}: {key}: rechecked date {e['date']!r} is not YYYY-MM-DD") from None
        figs = tuple(e["figures"] or ())
        bad = [f for f in figs if f not in _GPU_FIELDS]
        if not figs or bad:
            raise ValueError(f"{GPU_FILE}: {key}: rechecked figures must name fields of {', '.join(_GPU_FIELDS)}; "
                             f"got {list(figs)!r}")
        out.append((day, figs))
    return tuple(out)


HOST_CPUS = ("grace",)  # gpus.yaml host_cpu values (absent: a PCIe-attached x86 host)


def _host_cpu(raw: dict, key: str) -> str | None:
    v = raw.get("host_cpu")
    if v is not None and v not in HOST_CPUS:
        raise ValueError(f"{GPU_FILE}: {key}: unknown host_cpu {v!r} (known: {', '.join(HOST_CPUS)}; absent: x86)")
    return v


# gpus.yaml fields beside the datasheet figures (_GPU_FIELDS): any other field is a typo, refused
_GPU_EXTRA_FIELDS = ("name", "aliases", "architecture", "sm_version", "default_source", "default_confidence",
                     "rechecked", "host_cpu", "interconnect", "vidur_name", "aic_name")


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GPU]:
    doc = read_yaml(GPU_FILE)
    out = {}
    for key, raw in doc["gpus"].items():
        check_known_fields(raw, (*_GPU_FIELDS, *_GPU_EXTRA_FIELDS), f"{GPU_FILE.name}: {key}", ValueError)
        src = raw.get("default_source", "")
        conf = raw.get("default_confidence", "datasheet")  # of the bare figures (they cite default_source)
        figs = {f: _unwrap(raw, f, src, conf) for f in _GPU_FIELDS}
        vals = {f: figs[f].value for f in _GPU_FIELDS}
        vals["max_active_clusters"] = {int(k): int(v) for k, v in (vals["max_active_clusters"] or {}).items()}
        if not (isinstance(vals["gpus_per_node"], int) and vals["gpus_per_node"] >= 1):
            raise ValueError(f"{GPU_FILE}: {key}: gpus_per_node must be a positive integer with its source, "
                             f"got {vals['gpus_per_node']!r}")
        if raw["architecture"] not in ARCHITECTURES:
            raise ValueError(f"{GPU_FILE}: {key}: unknown architecture {raw['architecture']!r}")
        out[key] = GPU(
            key=key,
            name=raw["name"],
            architecture=raw["architecture"],
            sm_version=int(raw["sm_version"]),
            aliases=tuple(raw.get("aliases", ())),
            vidur_name=raw.get("vidur_name"),
            aic_name=raw.get("aic_name"),
            interconnect=raw.get("interconnect"),
            host_cpu=_host_cpu(raw, key),
            figures=figs,
            rechecked=_rechecked(raw, key),
            **vals,
        )
    return MappingProxyType(out)


def gpu_sources() -> dict[str, str]:
    """The datasheet sources gpus.yaml cites (a fresh dict: read when asked, by the CLI and the specs rule)."""
    return dict(read_yaml(GPU_FILE)["sources"])


@lru_cache(maxsize=1)
def _gpu_alias_index() -> dict[str, str]:
    idx = {}
    for key, g in gpu_table().items():
        for name in (key, g.name, *g.aliases, g.vidur_name, g.aic_name):
            if name:
                idx[_norm(name)] = key
    return MappingProxyType(idx)


TABLE_NAMES = MappingProxyType({"aic": "aic_name", "vidur": "vidur_name"})


def gpu_keys(family: str | tuple | list | None = None, tables: str | None = None) -> list[str]:
    """GPU keys in gpus.yaml order; `family`: an architecture (or several) to keep; `tables`:
    'aic' or 'vidur' keeps the GPUs that project measured tables for (a name in gpus.yaml),
    e.g. gpu_keys(tables="aic") is the nine AIConfigurator GPUs and
    gpu_keys("hopper", tables="aic") the Hopper ones among them."""
    fams = None if family is None else ({family} if isinstance(family, str) else set(family))
    if fams is not None and not fams <= set(ARCHITECTURES):
        raise ValueError(f"unknown GPU family {sorted(fams - set(ARCHITECTURES))} (known: {', '.join(ARCHITECTURES)})")
    if tables is not None and tables not in TABLE_NAMES:
        raise ValueError(f"unknown table source {tables!r} (known: {', '.join(TABLE_NAMES)})")
    out = []
    for key, g in gpu_table().items():
        if fams is not None and g.architecture not in fams:
            continue
        if tables is not None and not getattr(g, TABLE_NAMES[tables]):
            continue
        out.append(key)
    return out


def by_family(keys) -> list[str]:
    """`keys` ordered by architecture generation (ARCHITECTURES), gpus.yaml order within one."""
    order = list(gpu_table())
    return sorted(keys, key=lambda k: (ARCHITECTURES.index(get_gpu(k).architecture), order.index(get_gpu(k).key)))


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by its key or any alias (case and punctuation do not matter)."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise GPUTypeError(f"unknown GPU {name!r:.60}: expected one GPU name (a string, see `steptime gpus`) "
                           f"or a GPU spec, got {type(name).__name__}")
    key = _gpu_alias_index().get(_norm(name))
    if key is None:
        close = difflib.get_close_matches(str(name).lower(), gpu_keys(), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UnknownGPUError(f"unknown GPU {name!r}{hint} (known: {', '.join(gpu_keys())})")
    return gpu_table()[key]


def gpu_key(name: str) -> str:
    return get_gpu(name).key


# ---------------------------------------------------------------------------------------

# Mixture-of-experts markers in a Hugging Face config.json (Mixtral, Qwen-MoE, DeepSeek-V2/V3,
# DBRX, OLMoE, Jamba, ...): any of these with a value other than null/0/false, or an
# architecture / model_type below. steptime models dense blocks only, so they are refused.
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_num_experts",
            "n_shared_experts", "moe_intermediate_size", "ffn_config", "moe")
_MOE_ARCH = re.compile(r"moe|mixtral|deepseekv[23]|dbrx|jamba|arctic|grok|gptoss|llama4", re.I)
# Names of well-known MoE checkpoints, so `--model mixtral-8x7b` says why it is refused.
_MOE_NAME = re.compile(r"mixtral|moe|deepseek-?(v2|v3|r1)|dbrx|jamba|arctic|grok|gpt-?oss|"
                       r"qwen[\d.]*-\d+b-a\d+b|llama-?4|kimi-?k2", re.I)
MOE_REFUSAL = "an unlisted mixture-of-experts model: pass its config.json, or use one of moe_models.yaml"


def _moe_reason(cfg: dict) -> str | None:
    """Why a config (or its nested text_config) is mixture-of-experts, or None if dense."""
    for key in MOE_KEYS:
        if key in cfg and cfg[key] not in (None, 0, False, {}, []):
            return f"{key}={json.dumps(cfg[key])[:40]}"
    for name in [*(cfg.get("architectures") or []), cfg.get("model_type")]:
        if isinstance(name, str) and _MOE_ARCH.search(name.replace("_", "")):
            return f"architecture {name}"
    sub = cfg.get("text_config")
    return _moe_reason(sub) if isinstance(sub, dict) else None


# Markers of a dense config.json whose blocks are not attention + MLP, which the dense loader would
# otherwise read as a plain transformer from its hidden_size, heads and layers (a silent wrong answer):
# state-space or recurrent layers (Mamba, and hybrids such as Falcon-H1, Nemotron-H, Zamba, Bamba),
# linear-attention layers, and encoder-only or encoder-decoder models (no decode step to time).
_NOT_DECODER_KEYS = ("ssm_cfg", "mamba_d_ssm", "mamba_d_state", "mamba_n_heads", "mamba_expand", "ssm_state_size",
                     "hybrid_override_pattern", "layers_block_type", "attn_layer_indices", "linear_num_key_heads",
                     "is_encoder_decoder")
_NOT_DECODER_ARCH = re.compile(r"mamba|rwkv|zamba|falconh1|nemotronh|bamba|recurrentgemma|griffin|xlstm|retnet|hymba|"
                               r"lfm2|hybrid|formaskedlm|forsequenceclassification|fortokenclassification|"
                               r"forquestionanswering|formultiplechoice|forpretraining|^(bert|roberta|xlmroberta|"
                               r"distilbert|electra|deberta|debertav2|modernbert|t5|mt5|bart|mbart|whisper)(model)?$",
                               re.I)
_NOT_DECODER_LAYER = re.compile(r"mamba|ssm|linear|recurrent|conv|rwkv", re.I)


def _not_decoder_reason(cfg: dict) -> str | None:
    """Why a (dense) config is not a decoder-only attention + MLP transformer steptime can time, or None."""
    for key in _NOT_DECODER_KEYS:
        if key in cfg and cfg[key] not in (None, 0, False, {}, [], ""):
            return f"{key}={json.dumps(cfg[key])[:40]}"
    for name in [*(cfg.get("architectures") or []), cfg.get("model_type")]:
        if isinstance(name, str) and _NOT_DECODER_ARCH.search(name.replace("_", "").replace("-", "")):
            return f"architecture {name}"
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        odd = sorted({k for k in kinds if isinstance(k, str) and _NOT_DECODER_LAYER.search(k)})
        if odd:
            return f"layer_types with {', '.join(odd)[:40]} layers"
    return None


# models.yaml fields beside the Model's sizes: what the reader takes (source, aliases, parallel_block, qk_norm) and what
# an entry records from its config.json without the step reading it (Gemma 2's softcaps, query scale and sliding
# window; Gemma 3's layer_types: the module note of serve/memory.py). Any other field is a typo, refused.
_MODEL_EXTRA_FIELDS = ("source", "aliases", "parallel_block", "qk_norm", "sliding_window", "layer_types",
                       "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar")


def _model_from_raw(key: str, raw: dict) -> Model:
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{MODEL_FILE.name}: model {key!r}: expected a mapping of fields, got {raw!r:.60}")
    check_known_fields(raw, (*_MODEL_FIELDS, *_MODEL_EXTRA_FIELDS), f"{MODEL_FILE.name}: model {key!r}",
                       ModelConfigError)
    missing = [f for f in _MODEL_FIELDS if f not in raw]
    if missing:
        raise ModelConfigError(f"{MODEL_FILE.name}: model {key!r}: missing fields {', '.join(missing)}")
    return Model(key=key, source=raw.get("source", key), aliases=tuple(raw.get("aliases", ())),
                 parallel_block=bool(raw.get("parallel_block", False)), qk_norm=bool(raw.get("qk_norm", False)),
                 **{f: raw[f] for f in _MODEL_FIELDS})


@lru_cache(maxsize=1)
def _model_doc() -> dict:
    return read_yaml(MODEL_FILE)["models"]


@lru_cache(maxsize=1)
def model_table() -> dict[str, Model]:
    """Dense models (MoE entries, if models.yaml lists any, are kept apart and refused by name)."""
    return MappingProxyType({k: _model_from_raw(k, v) for k, v in _model_doc().items() if not _moe_reason(v)})


@lru_cache(maxsize=1)
def _moe_index() -> dict[str, tuple[str, str]]:
    """Normalised name -> (key, reason) of models.yaml's MoE entries."""
    idx = {}
    for key, raw in _model_doc().items():
        reason = _moe_reason(raw)
        if reason:
            for name in (key, raw.get("source", key), *raw.get("aliases", ())):
                idx[_norm(name)] = (key, reason)
                idx[_norm(str(name).split("/")[-1])] = (key, reason)
    return MappingProxyType(idx)


@lru_cache(maxsize=1)
def _model_alias_index() -> dict[str, str]:
    idx = {}
    for key, m in model_table().items():
        for name in (key, m.source, *m.aliases):
            idx[_norm(name)] = key
            idx[_norm(str(name).split("/")[-1])] = key
    return MappingProxyType(idx)


def model_keys() -> list[str]:
    """The dense models' keys (models.yaml); moe_model_keys() lists the mixture-of-experts ones."""
    return list(model_table())


def moe_model_keys() -> list[str]:
    """The mixture-of-experts models' keys (moe_models.yaml)."""
    return list(moe_model_table())


@lru_cache(maxsize=1)
def _unsupported_index() -> dict[str, str]:
    """Normalised name (key, source, alias, and each one's last path part) -> key of moe_models.yaml `unsupported`;
    a name that is also a represented model's is refused (the registry would contradict itself)."""
    known = {**_model_alias_index(), **_moe_alias_index()}
    idx = {}
    for key, e in unsupported_model_table().items():
        for name in (key, e["source"], *e["aliases"]):
            for n in (_norm(name), _norm(str(name).split("/")[-1])):
                if n in known:
                    raise ModelConfigError(f"moe_models.yaml: unsupported model {key!r}: name {name!r} is also "
                                           f"represented model {known[n]!r}")
                idx[n] = key
    return MappingProxyType(idx)


@lru_cache(maxsize=1)
def _moe_alias_index() -> dict[str, str]:
    idx = {}
    for key, m in moe_model_table().items():
        for name in (key, m.source, *m.aliases):
            idx[_norm(name)] = key
            idx[_norm(str(name).split("/")[-1])] = key
    return MappingProxyType(idx)


def model_from_config(path: str | os.PathLike) -> Model:
    """Build a Model from a Hugging Face style config.json.

    Every failure is one `ModelConfigError` line naming the file and the field: unreadable or
    non-UTF-8 bytes, invalid JSON, not a JSON object, a missing/null/non-integer/non-positive
    size, more KV heads than heads, a hidden size the heads do not divide (when no head_dim is
    given). A mixture-of-experts config is read by `steptime.specs.moe.moe_from_config` (an MoE structure it
    cannot represent raises `UnsupportedModelError` naming what).
    """
    p = check_regular_file(path, "cannot read model config", MAX_CONFIG_BYTES, ModelConfigError)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ModelConfigError(f"cannot read model config {str(p)!r}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    def unique(pairs):  # a key given twice: JSON readers (transformers' too) keep the last without a word
        out = {}
        for k, v in pairs:
            if k in out:
                raise ModelConfigError(f"{p}: key {k!r} is given twice in one object: JSON readers keep the last "
                                       "without a word; remove one")
            out[k] = v
        return out

    try:
        cfg = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ModelConfigError(f"{p}: not a model config (JSON nested too deeply)") from None
    if not isinstance(cfg, dict):
        kind = _JSON_KIND.get(type(cfg), "a value")
        raise ModelConfigError(f"{p}: expected a JSON object of model fields, got {kind}")
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ModelConfigError(f"{p}: architectures must be a list of class names (e.g. [\"LlamaForCausalLM\"]), "
                               f"got {archs!r:.60}")
    reason = _moe_reason(cfg)
    if reason:
        return moe_from_config(cfg, p)
    where = str(p)
    odd = _not_decoder_reason(cfg)
    if odd:
        raise UnsupportedModelError(f"{where}: {odd}: steptime times decoder-only attention + MLP transformers; "
                                    "it cannot represent this model's layers")
    need = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
    missing = [k for k in need if k not in cfg]
    if missing:
        raise ModelConfigError(f"{where}: config.json lacks {', '.join(missing)}")
    hidden = _cfg_int(cfg, "hidden_size", where)
    layers = _cfg_int(cfg, "num_hidden_layers", where)
    heads = _cfg_int(cfg, "num_attention_heads", where)
    vocab = _cfg_int(cfg, "vocab_size", where)
    kv_heads = _cfg_int(cfg, "num_key_value_heads", where, heads)
    head_dim = _cfg_int(cfg, "head_dim", where, None)
    if head_dim is None:
        if hidden % heads:
            raise ModelConfigError(f"{where}: hidden_size ({hidden}) is not a multiple of num_attention_heads "
                                   f"({heads}) and no head_dim is given")
        head_dim = hidden // heads
    # the MLP width: intermediate_size (or OPT's ffn_dim) is required when present, null is refused; GPT-2
    # style configs give n_inner, whose null means 4 x hidden (Hugging Face's documented default)
    inter_key = next((k for k in ("intermediate_size", "ffn_dim") if k in cfg), None)
    if inter_key is not None:
        inter = _cfg_int(cfg, inter_key, where)
    elif "n_inner" in cfg:
        inter = 4 * hidden if cfg["n_inner"] is None else _cfg_int(cfg, "n_inner", where)
    else:
        raise ModelConfigError(f"{where}: intermediate_size is missing; expected a positive integer (the MLP width)")
    act_key = "hidden_act" if "hidden_act" in cfg or "activation_function" not in cfg else "activation_function"
    act = cfg.get(act_key, "silu")
    if act is None:
        act = "silu"
    if not isinstance(act, str):
        raise ModelConfigError(f"{where}: {act_key} must be a string, got {act!r:.40}")
    gated_arch = any(a in GATED_ARCHS for a in (cfg.get("architectures") or ()))
    if act.lower() not in MLP_ACTIVATIONS and cfg.get("gated_mlp") is None and not gated_arch:
        raise ModelConfigError(f"{where}: {act_key} {act!r:.40} is not an activation steptime knows (known: "
                               f"{', '.join(MLP_ACTIVATIONS)}); it decides whether the MLP is gated: state "
                               f'"gated_mlp": true or false in the config.json to read the model anyway')
    gated = _cfg_bool(cfg, "gated_mlp", where, gated_arch or MLP_ACTIVATIONS.get(act.lower(), False))
    return Model(
        key=p.stem if p.name != "config.json" else p.parent.name or "custom",
        source=str(p),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        gated_mlp=gated,
        tie_word_embeddings=_cfg_bool(cfg, "tie_word_embeddings", where, False),
        max_position_embeddings=_cfg_context(cfg, where),
        parallel_block="PhiForCausalLM" in (cfg.get("architectures") or ()),
        qk_norm="Qwen3ForCausalLM" in (cfg.get("architectures") or ()),  # the architecture has it, no field says so
        checkpoint_dtype=checkpoint_dtype(cfg, where),  # wave 37: a quantized checkpoint was priced as bf16
    )


def get_model(name: str | Model) -> Model:
    """Look a model up by key, alias, HF repository id, or a path to a config.json."""
    if isinstance(name, Model):
        return name
    if not isinstance(name, (str, os.PathLike)):
        raise UnknownModelError(f"model must be a name or a path to a config.json, got {name!r:.60}")
    s = os.fspath(name)
    if s.endswith(".json") or os.path.sep in s and Path(s).exists():
        p = Path(s)
        if p.is_dir():
            p = p / "config.json"
        return model_from_config(p)
    key = _model_alias_index().get(_norm(s)) or _model_alias_index().get(_norm(s.split("/")[-1]))
    if key is None:
        moe_key = _moe_alias_index().get(_norm(s)) or _moe_alias_index().get(_norm(s.split("/")[-1]))
        if moe_key is not None:
            return moe_model_table()[moe_key]
        gone = _unsupported_index().get(_norm(s)) or _unsupported_index().get(_norm(s.split("/")[-1]))
        if gone is not None:  # known, and refused with what steptime cannot represent (wave 41)
            raise unsupported_refusal(gone, s)
        moe = _moe_index().get(_norm(s)) or _moe_index().get(_norm(s.split("/")[-1]))
        if moe:
            raise UnsupportedModelError(f"model {s!r} is mixture-of-experts ({moe[1]}): {MOE_REFUSAL}")
        if _MOE_NAME.search(s):
            raise UnsupportedModelError(f"model {s!r} looks like a mixture-of-experts model: {MOE_REFUSAL} "
                                        f"(known MoE models: {', '.join(moe_model_keys())})")
        close = difflib.get_close_matches(s.lower(), model_keys(), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UnknownModelError(f"unknown model {s!r}{hint} (or pass a path to a config.json)")
    return model_table()[key]


# ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _operators() -> dict:
    return read_yaml(OPERATOR_FILE)


def vidur_operators(kind: str | None = None, per: str | None = None) -> dict[str, str]:
    """{Vidur operator: steptime term} from operators.yaml, in the order the operators run;
    `kind` ('gemm' or 'light') and `per` ('layer' or 'step') filter."""
    out = {}
    for op, v in _operators()["vidur"].items():
        if (kind is None or v["kind"] == kind) and (per is None or v["per"] == per):
            out[op] = v["term"]
    return out
