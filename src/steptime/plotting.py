"""One house style for every figure; PNG and PDF written atomically and reproducibly."""

from __future__ import annotations

import os
from pathlib import Path

PALETTE = {
    "steptime": "#1b6ca8",
    "steptime_own_readings": "#8fb8de",
    "bare_roofline": "#9e9e9e",
    "datasheet_alpha": "#c49a00",
    "aic_empirical": "#7b3fa0",
    "calibrated_roofline": "#d95f02",
    "rf_home": "#1a9850",
    "rf_verbatim": "#d73027",
    "rf_spec_scaled": "#fc8d59",
    "rf_steptime_scaled": "#74add1",
    "measured": "#000000",
}


def setup():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
        "svg.hashsalt": "steptime",
    })
    return plt


def subplots(*args, **kwargs):
    """House style, then matplotlib's `plt.subplots(*args, **kwargs)`: (figure, axes)."""
    return setup().subplots(*args, **kwargs)


def save(fig, stem: str | os.PathLike, caption: str | None = None, tight_layout: bool = False) -> list[Path]:
    """Write `<stem>.png` and `<stem>.pdf` (no timestamps, so reruns give the same bytes); `tight_layout`
    first runs `fig.tight_layout()`."""
    from steptime.io import atomic_path

    if tight_layout:
        fig.tight_layout()
    stem = Path(stem)
    out = []
    for ext, meta in ((".png", {"Software": None}), (".pdf", {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})):
        target = stem.with_suffix(ext)
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=ext[1:], metadata=meta, bbox_inches="tight")
        out.append(target)
    if caption:
        from steptime.io import atomic_path as ap

        with ap(stem.with_suffix(".caption.txt")) as tmp:
            tmp.write_text(caption.strip() + "\n")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out
