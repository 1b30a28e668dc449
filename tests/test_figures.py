"""The lab's one parity-plot helper (predicted vs measured, log axes, y = x, +- band)."""
from __future__ import annotations

import numpy as np
import pytest

from steptime import plotting
from steptime_lab.figures import parity


def test_parity_draws_each_series_the_diagonal_and_the_band():
    fig, ax = plotting.subplots()
    lim = parity(ax, [("a", [1.0, 10.0], [1.1, 9.0], None), ("b", [100.0], [120.0], {"color": "red"})],
                 xlabel="measured (ms)", ylabel="predicted (ms)", title="t", band=0.1)
    assert lim == pytest.approx([0.8, 125.0])
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines[:2]] == ["a", "b"]
    np.testing.assert_allclose(lines[1].get_ydata(), [120.0])
    diag, hi, lo = lines[2:5]
    np.testing.assert_allclose(diag.get_ydata(), diag.get_xdata())
    np.testing.assert_allclose(hi.get_ydata(), np.asarray(lim) * 1.1)
    np.testing.assert_allclose(lo.get_ydata(), np.asarray(lim) * 0.9)
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_xlabel() == "measured (ms)"


def test_parity_without_data_draws_no_diagonal():
    fig, ax = plotting.subplots()
    assert parity(ax, [], xlabel="x", ylabel="y") is None
    assert ax.get_lines() == []
