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


def test_the_house_theme_is_seaborns_whitegrid_theme_written_out():
    """`setup` sets what seaborn's `set_theme(style="whitegrid", palette=colorblind)` then the house settings set,
    every rcParam but seaborn's own default colormap, without importing seaborn."""
    import matplotlib
    import matplotlib.pyplot as plt

    sns = pytest.importorskip("seaborn")
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        plotting.setup()
        ours = dict(plt.rcParams)
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        sns.set_theme(style="whitegrid", palette=list(plotting._CB))
        plt.rcParams.update(plotting.HOUSE)
        theirs = dict(plt.rcParams)
    assert {k for k in theirs if ours[k] != theirs[k]} == {"image.cmap"}
    # the theme alone, before the house settings, is seaborn's too (a key the house overrides is still checked)
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        plt.rcParams.update(plotting.THEME)
        ours = dict(plt.rcParams)
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        sns.set_theme(style="whitegrid")
        theirs = dict(plt.rcParams)
    assert {k for k in theirs if ours[k] != theirs[k]} == {"image.cmap", "axes.prop_cycle"}


def test_setup_imports_neither_seaborn_nor_scipy_stats():
    import subprocess
    import sys

    code = ("import sys; from steptime import plotting; plotting.setup(); "
            "print('seaborn' in sys.modules, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
