"""Figures of simulated runs (house style)."""

from __future__ import annotations

import numpy as np

from steptime.plotting import save, subplots


def _ecdf(ax, x, label, **kw):
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    if x.size:
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label, **kw)


def plot_run(run, stem, title: str = "") -> list:
    """TTFT, TPOT and end-to-end CDFs of one simulated run (PNG + PDF at `stem`)."""
    fig, axes = subplots(1, 3, figsize=(10, 3))
    d = run.requests
    for ax, col, name in zip(axes, ("ttft_s", "tpot_s", "e2e_s"), ("TTFT", "TPOT", "end-to-end")):
        _ecdf(ax, d[col] * 1e3, "simulated")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
    axes[0].set_title(title, loc="left")
    return save(fig, stem, tight_layout=True)
