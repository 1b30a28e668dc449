"""Errors that steptime raises on bad input. Each carries one readable line.

Every error a public entry point raises on bad input (CLI, `predict_step`, `predict_steps`,
`predict_ops`, model configs, GPU and model look-ups) is a `SteptimeError` and a `ValueError`,
so `except ValueError` works for callers who do not know the project's types. The lookup
errors stay `KeyError`s too, for callers written against earlier versions.
"""

from __future__ import annotations


class SteptimeError(Exception):
    """Base class: the CLI prints the message alone (no traceback) and exits 2."""


class InputError(SteptimeError, ValueError):
    """A bad argument value: a non-integer count, a NaN size, a clock ratio out of range,
    a missing argument, an unknown option."""


class UnknownGPUError(SteptimeError, KeyError, ValueError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class GPUTypeError(UnknownGPUError, TypeError):
    """A GPU given as something other than one name (a tuple, a set, None): a TypeError too."""


class UnknownModelError(SteptimeError, KeyError, ValueError):
    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class ModelConfigError(UnknownModelError):
    """A model's shapes (a config.json or a models.yaml entry) are unreadable or inconsistent;
    the message names the file and the field."""


class UnsupportedModelError(ModelConfigError):
    """A model steptime does not model yet (mixture-of-experts)."""


class BatchError(InputError):
    """A malformed batch: bad syntax, zero/negative tokens, KV beyond the model's limit."""


class MemoryFitError(SteptimeError, ValueError):
    """The weights plus KV cache of a batch do not fit in the GPU's memory."""


class CalibrationLeakError(SteptimeError, ValueError):
    """An evaluation was asked to score cells that set a constant (the calibration contract)."""


class DataError(SteptimeError, ValueError):
    """A raw or tidy data file failed its checks; the message names file, row and column."""


class ServeError(SteptimeError, ValueError):
    """A serving workload or scheduler configuration the simulator cannot run (one line says why)."""


class UnknownEngineError(SteptimeError, KeyError, ValueError):
    """An engine name not among the profiles of specs/engines.yaml (the message lists them)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class UnsupportedError(SteptimeError, ValueError):
    """A precision or engine the GPU's data cannot support (e.g. fp8 GEMMs on A100)."""
