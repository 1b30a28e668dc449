"""Errors that steptime raises on bad input. Each carries one readable line."""

from __future__ import annotations


class SteptimeError(Exception):
    """Base class: the CLI prints the message alone (no traceback) and exits 2."""


class UnknownGPUError(SteptimeError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class UnknownModelError(SteptimeError, KeyError):
    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class BatchError(SteptimeError, ValueError):
    """A malformed batch: bad syntax, zero/negative tokens, KV beyond the model's limit."""


class MemoryFitError(SteptimeError, ValueError):
    """The weights plus KV cache of a batch do not fit in the GPU's memory."""


class CalibrationLeakError(SteptimeError, ValueError):
    """An evaluation was asked to score cells that set a constant (the calibration contract)."""


class DataError(SteptimeError, ValueError):
    """A raw or tidy data file failed its checks; the message names file, row and column."""


class UnknownEngineError(SteptimeError, KeyError):
    """An engine name not among the profiles of specs/engines.yaml (the message lists them)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class UnsupportedError(SteptimeError, ValueError):
    """A precision or engine the GPU's data cannot support (e.g. fp8 GEMMs on A100)."""
