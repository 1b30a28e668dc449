"""The run's constants, required: a lab function never falls back to the shipped file.

Every lab function that predicts takes the `steptime.calibration.Constants` its rule settled
(read from the rule's declared calibration inputs, e.g. `Constants.from_settled(...)` in the
script) and passes it down; `None` is refused with one line naming the function.
"""
from __future__ import annotations

from steptime.calibration import Constants


def require_constants(constants, where: str) -> Constants:
    """`constants` itself when it is a Constants; else a TypeError naming `where`."""
    if not isinstance(constants, Constants):
        raise TypeError(f"{where}: constants must be the run's steptime.calibration.Constants (the rule's settled "
                        f"inputs), got {type(constants).__name__}")
    return constants
