"""steptime: how long will the next engine step of an LLM server take on this GPU, and why.

    >>> import steptime
    >>> r = steptime.predict_step("llama-3.1-8b", "h100-sxm", decode=[(32, 1024)])
    >>> r.total_ms, r.terms_ms

Core import is light (numpy, pyyaml); pandas/matplotlib live in the pipeline extras.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["predict_step", "predict_ops", "get_gpu", "get_model", "Batch", "Request", "__version__"]


def __getattr__(name):  # lazy: keep `import steptime` fast
    if name in ("predict_step", "Batch", "Request"):
        from steptime import step

        return getattr(step, name)
    if name == "predict_ops":
        from steptime.ops import predict_ops

        return predict_ops
    if name in ("get_gpu", "get_model"):
        from steptime import specs

        return getattr(specs, name)
    raise AttributeError(f"module 'steptime' has no attribute {name!r}")
