"""GPU and model specifications: loaded from the YAML files beside this module.

These files are the single place a GPU's datasheet numbers and a model's shapes live.
Everything else asks `get_gpu` / `get_model`.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from steptime.errors import UnknownGPUError, UnknownModelError

_HERE = Path(__file__).resolve().parent
GPU_FILE = _HERE / "gpus.yaml"
MODEL_FILE = _HERE / "models.yaml"
OPERATOR_FILE = _HERE / "operators.yaml"

ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell")


def _load_yaml(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as fh:
        return yaml.load(fh, Loader=loader)


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


@dataclass(frozen=True)
class Figure:
    """One datasheet number with where it came from."""

    value: Any
    source: str
    confidence: str = "datasheet"


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
    aliases: tuple = ()
    vidur_name: str | None = None
    aic_name: str | None = None
    figures: dict = field(default_factory=dict, compare=False, repr=False)

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
def _unwrap(raw: dict, key: str, default_source: str) -> Figure:
    v = raw.get(key)
    if isinstance(v, dict) and "value" in v:
        return Figure(v["value"], v.get("source", default_source), v.get("confidence", "datasheet"))
    return Figure(v, default_source)


_GPU_FIELDS = (
    "bf16_dense_tflops fp8_dense_tflops mem_type mem_bw_gbps mem_gb sms gpcs sms_per_gpc_max "
    "l2_mb boost_mhz base_mhz power_w nvlink_gbps pcie_gbps max_active_clusters"
).split()


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GPU]:
    doc = _load_yaml(GPU_FILE)
    out = {}
    for key, raw in doc["gpus"].items():
        src = raw.get("default_source", "")
        figs = {f: _unwrap(raw, f, src) for f in _GPU_FIELDS}
        vals = {f: figs[f].value for f in _GPU_FIELDS}
        vals["max_active_clusters"] = {int(k): int(v) for k, v in (vals["max_active_clusters"] or {}).items()}
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
            figures=figs,
            **vals,
        )
    return out


@lru_cache(maxsize=1)
def gpu_sources() -> dict[str, str]:
    return dict(_load_yaml(GPU_FILE)["sources"])


@lru_cache(maxsize=1)
def _gpu_alias_index() -> dict[str, str]:
    idx = {}
    for key, g in gpu_table().items():
        for name in (key, g.name, *g.aliases, g.vidur_name, g.aic_name):
            if name:
                idx[_norm(name)] = key
    return idx


TABLE_NAMES = {"aic": "aic_name", "vidur": "vidur_name"}


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
    key = _gpu_alias_index().get(_norm(name))
    if key is None:
        close = difflib.get_close_matches(str(name).lower(), gpu_keys(), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UnknownGPUError(f"unknown GPU {name!r}{hint} (known: {', '.join(gpu_keys())})")
    return gpu_table()[key]


def gpu_key(name: str) -> str:
    return get_gpu(name).key


# ---------------------------------------------------------------------------------------
_MODEL_FIELDS = (
    "hidden_size num_hidden_layers num_attention_heads num_key_value_heads head_dim "
    "intermediate_size vocab_size gated_mlp tie_word_embeddings max_position_embeddings"
).split()


def _model_from_raw(key: str, raw: dict) -> Model:
    missing = [f for f in _MODEL_FIELDS if f not in raw]
    if missing:
        raise UnknownModelError(f"model {key!r}: missing fields {', '.join(missing)}")
    return Model(key=key, source=raw.get("source", key), aliases=tuple(raw.get("aliases", ())),
                 parallel_block=bool(raw.get("parallel_block", False)), **{f: raw[f] for f in _MODEL_FIELDS})


@lru_cache(maxsize=1)
def model_table() -> dict[str, Model]:
    doc = _load_yaml(MODEL_FILE)
    return {k: _model_from_raw(k, v) for k, v in doc["models"].items()}


@lru_cache(maxsize=1)
def _model_alias_index() -> dict[str, str]:
    idx = {}
    for key, m in model_table().items():
        for name in (key, m.source, *m.aliases):
            idx[_norm(name)] = key
            idx[_norm(str(name).split("/")[-1])] = key
    return idx


def model_keys() -> list[str]:
    return list(model_table())


def model_from_config(path: str | os.PathLike) -> Model:
    """Build a Model from a Hugging Face style config.json."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UnknownModelError(f"cannot read model config {str(p)!r}: {exc}") from None
    need = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
    missing = [k for k in need if k not in cfg]
    if missing:
        raise UnknownModelError(f"{p}: config.json lacks {', '.join(missing)}")
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    inter = cfg.get("intermediate_size", cfg.get("ffn_dim", 4 * hidden))
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu"))).lower()
    gated = bool(cfg.get("gated_mlp", act in ("silu", "swiglu", "gelu_pytorch_tanh_gated")))
    return Model(
        key=p.stem if p.name != "config.json" else p.parent.name or "custom",
        source=str(p),
        hidden_size=hidden,
        num_hidden_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads", heads)),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(inter),
        vocab_size=int(cfg["vocab_size"]),
        gated_mlp=gated,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        parallel_block="PhiForCausalLM" in (cfg.get("architectures") or ()),
    )


def get_model(name: str | Model) -> Model:
    """Look a model up by key, alias, HF repository id, or a path to a config.json."""
    if isinstance(name, Model):
        return name
    s = str(name)
    if s.endswith(".json") or os.path.sep in s and Path(s).exists():
        p = Path(s)
        if p.is_dir():
            p = p / "config.json"
        return model_from_config(p)
    key = _model_alias_index().get(_norm(s)) or _model_alias_index().get(_norm(s.split("/")[-1]))
    if key is None:
        close = difflib.get_close_matches(s.lower(), model_keys(), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UnknownModelError(f"unknown model {s!r}{hint} (or pass a path to a config.json)")
    return model_table()[key]


# ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _operators() -> dict:
    return _load_yaml(OPERATOR_FILE)


def vidur_operators(kind: str | None = None, per: str | None = None) -> dict[str, str]:
    """{Vidur operator: steptime term} from operators.yaml, in the order the operators run;
    `kind` ('gemm' or 'light') and `per` ('layer' or 'step') filter."""
    out = {}
    for op, v in _operators()["vidur"].items():
        if (kind is None or v["kind"] == kind) and (per is None or v["per"] == per):
            out[op] = v["term"]
    return out
