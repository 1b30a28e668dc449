"""AIConfigurator's aggregated-serving estimate as a peer of steptime's simulator (optional).

AIConfigurator (NVIDIA, `aiconfigurator-core` on PyPI, the `peers` extra of steptime) times
each operator of a model by interpolating tables it measured on the target GPU with the
target engine (a profiled peer), then turns a step time into TTFT/TPOT of aggregated
(continuous-batching) serving with a mean-field schedule: `BaseBackend.run_agg` for one
(batch size = concurrency, context tokens per step) point. steptime uses datasheet numbers and
at most nine readings per GPU (three per family: GEMM, NCCL, wall clock), and simulates the schedule request by request.

    est = AICEstimator("Qwen/Qwen3-32B", "h100-sxm", "vllm", tp=2)
    est.estimate(isl=2048, osl=256, concurrency=32)   # {"ttft_s": ..., "tpot_s": ...}

The Llama-3.1-8B/70B models are refused: their silicon rows are an outside check of this
project, and asking AIC's estimator about them would come too close to it.
"""

from __future__ import annotations

import importlib.util
import logging
from types import MappingProxyType

from steptime.errors import ServeError

# steptime GPU key -> AIConfigurator system name (the folders of aiconfigurator_core/systems/)
AIC_SYSTEMS = MappingProxyType({
    "a100-sxm": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h200-sxm": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
})
RESERVED = ("llama-3.1-8b", "llama-3.1-70b", "meta-llama/llama-3.1-8b", "meta-llama/llama-3.1-70b",
            "meta-llama/meta-llama-3.1-8b", "meta-llama/meta-llama-3.1-70b")
BACKENDS = ("vllm", "trtllm", "sglang")
PACKAGE = "aiconfigurator-core==0.12.0"


def available() -> bool:
    """True when aiconfigurator-core is importable (pip install 'steptime[peers]')."""
    return importlib.util.find_spec("aiconfigurator_core") is not None


def _require():
    if not available():
        raise ServeError(f"AIConfigurator's estimator needs {PACKAGE}: pip install -e '.[peers]'")


def _is_reserved(model: str) -> bool:
    m = model.lower().replace("_", "-")
    return any(m == r or m.endswith("/" + r) for r in RESERVED)


class AICEstimator:
    """TTFT/TPOT (seconds) of aggregated serving from AIConfigurator, for one model/GPU/engine/TP.

    `model`: a Hugging Face id AIConfigurator ships a config for (e.g. "Qwen/Qwen3-32B").
    `version`: the engine version of AIC's tables; None takes the newest it ships for that GPU.
    `quant`: AIC's GEMM quant mode name ("bfloat16", "fp8", "fp8_block", ...); None keeps the
    checkpoint's own.
    """

    name = "aiconfigurator"  # its key in steptime.peers.PRODUCT

    def __init__(self, model: str, gpu: str, backend: str = "vllm", *, tp: int = 1, version: str | None = None,
                 quant: str | None = None):
        _require()
        if _is_reserved(model):
            raise ServeError(f"{model} is reserved as an outside check of this project: not asked of AIConfigurator")
        if backend not in BACKENDS:
            raise ServeError(f"unknown AIConfigurator backend {backend!r}; known: {', '.join(BACKENDS)}")
        if gpu not in AIC_SYSTEMS:
            raise ServeError(f"AIConfigurator has no system for GPU {gpu!r}; known: {', '.join(sorted(AIC_SYSTEMS))}")
        if int(tp) < 1:
            raise ServeError(f"tp must be >= 1 (got {tp})")
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        from aiconfigurator_core.sdk import common, config
        from aiconfigurator_core.sdk.backends.factory import get_backend
        from aiconfigurator_core.sdk.models import get_model
        from aiconfigurator_core.sdk.perf_database import get_database, get_supported_databases

        self.system = AIC_SYSTEMS[gpu]
        versions = get_supported_databases().get(self.system, {}).get(backend, [])
        if not versions:
            raise ServeError(f"AIConfigurator ships no {backend} tables for {self.system}")
        self.version = version or versions[-1]
        if self.version not in versions:
            raise ServeError(f"AIConfigurator has {backend} {self.version} tables for {self.system}? no; "
                             f"it ships: {', '.join(versions)}")
        kw = {}
        if quant is not None:
            try:
                kw["gemm_quant_mode"] = common.GEMMQuantMode[quant]
            except KeyError:
                raise ServeError(f"unknown AIConfigurator quant mode {quant!r}; known: "
                                 f"{', '.join(m.name for m in common.GEMMQuantMode)}") from None
        self.model, self.gpu, self.backend_name, self.tp, self.quant = model, gpu, backend, int(tp), quant
        self._config = config
        self._db = get_database(self.system, backend, self.version)
        try:
            self._model = get_model(model, config.ModelConfig(tp_size=self.tp, **kw), backend)
        except Exception as e:  # AIC raises plain exceptions for unknown models
            raise ServeError(f"AIConfigurator cannot build {model}: {e}") from None
        self._backend = get_backend(backend)

    def estimate(self, isl: int, osl: int, concurrency: int, *, ctx_tokens: int = 8192) -> dict:
        """AIC's aggregated-serving TTFT and TPOT (seconds) at a closed-loop `concurrency`.

        `ctx_tokens`: prompt tokens per engine step (the engine's token budget, AIC's ctx_tokens).
        """
        if min(isl, osl, concurrency, ctx_tokens) < 1:
            raise ServeError(f"isl, osl, concurrency and ctx_tokens must be >= 1 (got {isl}, {osl}, "
                             f"{concurrency}, {ctx_tokens})")
        rc = self._config.RuntimeConfig(batch_size=int(concurrency), isl=int(isl), osl=int(osl))
        s = self._backend.run_agg(self._model, self._db, rc, ctx_tokens=int(ctx_tokens))
        row = s.get_summary_df().iloc[0]
        return {"ttft_s": float(row["ttft"]) * 1e-3, "tpot_s": float(row["tpot"]) * 1e-3}


def require() -> None:
    """Raise one clear line when aiconfigurator-core is not installed."""
    _require()


def version() -> str | None:
    """The installed aiconfigurator-core version (None when absent)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _v

    try:
        return _v("aiconfigurator-core")
    except PackageNotFoundError:
        return None
