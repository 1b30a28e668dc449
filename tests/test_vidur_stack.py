"""Vidur's measurement-stack factor: the one helper E1.1, E1.29 and E2.1's Vidur step call."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab import vidur_stack as VS
from steptime_lab.regimes import VIDUR_STACK_MIN_M


def _rows(gpu, m, measured, predicted):
    return pd.DataFrame({"gpu": gpu, "m": m, "measured": measured, "predicted": predicted})


def test_the_factor_is_the_other_gpus_large_m_median_and_reads_nothing_of_the_scored_gpu():
    big = VIDUR_STACK_MIN_M
    rows = pd.concat([_rows("a100-sxm", [big, big, big, 16], [1.1, 1.2, 1.3, 50.0], 1.0),
                      _rows("h100-sxm", [big, 2 * big, big], [2.0, 3.0, np.nan], 1.0),
                      _rows("a40", [big], [0.0], 1.0)], ignore_index=True)
    f = VS.fit_stack_factor(rows, "a40")
    # the small-m row, the NaN and the scored GPU's zero are out: median of 1.1, 1.2, 1.3, 2.0, 3.0
    assert f == {"factor": 1.3, "fitted_on": ["a100-sxm", "h100-sxm"], "cells": 5, "min_m": big}
    bad = rows.copy()
    bad.loc[bad["gpu"] == "a40", "measured"] = 100.0
    assert VS.fit_stack_factor(bad, "a40") == f  # the scored GPU's rows set nothing
    assert VS.fit_stack_factor(rows, "a40", min_m=2 * big)["factor"] == 3.0
    assert VS.fit_stack_factor(rows[rows["gpu"] == "a40"], "a40") == {"factor": 1.0, "fitted_on": [], "cells": 0,
                                                                       "min_m": big}
    with pytest.raises(ValueError, match="needs the columns"):
        VS.fit_stack_factor(rows.drop(columns="predicted"), "a40")


def test_the_factor_divides_eta_and_a_bad_factor_is_a_clear_error():
    assert VS.stacked_eta(0.9, 1.125, "h100-sxm") == pytest.approx(0.8)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number"):
            VS.stacked_eta(0.9, bad, "h100-sxm")
