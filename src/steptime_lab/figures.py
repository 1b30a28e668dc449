"""Figure pieces the lab's experiments share (the house style, colours and `save` are the
product's `steptime.plotting`).

    fig, axes = plotting.subplots(1, 2)
    parity(axes[0], [("H100 vllm", measured_ms, predicted_ms, {})], xlabel="measured (ms)",
           ylabel="predicted (ms)", band=0.12)
"""

from __future__ import annotations

import numpy as np


def parity(ax, series, *, xlabel: str, ylabel: str, title: str | None = None, marker: str = "o", ms: float = 3,
           pad=(0.8, 1.25), band: float | None = None, legend: dict | None = None):
    """Predicted against measured on log axes: one marker series per (label, measured, predicted,
    style) of `series`, the y = x line over the measured range (padded by `pad`), and, with
    `band`, dotted lines at y = x (1 +- band). `legend`: keyword arguments of `ax.legend`
    (fontsize 6 by default). Returns the y = x line's limits (None when nothing is measured)."""
    xs = []
    for label, meas, pred, style in series:
        meas = np.asarray(meas, dtype=float)
        ax.loglog(meas, np.asarray(pred, dtype=float), marker, ms=ms, label=label, **(style or {}))
        xs.append(meas)
    lim = None
    x = np.concatenate(xs) if xs else np.array([])
    if len(x):
        lim = [np.nanmin(x) * pad[0], np.nanmax(x) * pad[1]]
        ax.plot(lim, lim, "k--", lw=0.8)
        if band is not None:
            for f in (1 + band, 1 - band):
                ax.plot(lim, [v * f for v in lim], "k:", lw=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if xs:
        ax.legend(**{"fontsize": 6, **(legend or {})})
    return lim
