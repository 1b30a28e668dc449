"""One house style for every figure; PNG and PDF (vector) written atomically and reproducibly.

The style is seaborn's `whitegrid` theme (`THEME`, its settings written out) with its colour-blind-safe
palette (the 10 colours of `seaborn.color_palette("colorblind")`); every predictor keeps one colour across
figures (`PALETTE`), and `CLAIM_COLORS` colours claim types (accuracy, decision, cost) the same way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import MappingProxyType

from steptime.io import atomic_path, atomic_path as ap

# matplotlib's PDF backend subsets fonts through fontTools, which logs every glyph at INFO: a rule's
# log (logging.basicConfig at INFO) keeps its own lines, not those
logging.getLogger("fontTools").setLevel(logging.WARNING)

# seaborn "colorblind" (Okabe-Ito-like), fixed here so figures do not depend on seaborn's version
_CB = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
       "#56b4e9")
PALETTE = MappingProxyType({
    "steptime": _CB[0],
    "steptime_own_readings": _CB[9],
    "steptime_home_only": _CB[9],
    "bare_roofline": _CB[7],
    "datasheet_alpha": _CB[8],
    "aic_empirical": _CB[4],
    "calibrated_roofline": _CB[3],
    "rf_home": _CB[2],
    "rf_verbatim": _CB[5],
    "rf_spec_scaled": _CB[1],
    "rf_steptime_scaled": _CB[6],
    "ml_loo": _CB[5],
    "measured": "#000000",
})
CLAIM_COLORS = MappingProxyType({"accuracy": _CB[0], "decision": _CB[1], "cost": _CB[2]})

# seaborn 0.13's `set_theme(style="whitegrid", palette=_CB)` (context "notebook", font "sans-serif") as the
# rcParams it sets, written out so a figure job neither imports seaborn (with the scipy.stats it pulls in: about
# 1 s of CPU in each of the pipeline's ~60 figure jobs) nor depends on its version. tests/test_figures.py holds it
# equal to seaborn's own theme. Left out: seaborn's default colormap "rocket" (registered by importing
# seaborn); every figure names its colormap.
THEME = MappingProxyType({
    "axes.axisbelow": True, "axes.edgecolor": ".8", "axes.facecolor": "white", "axes.grid": True,
    "axes.labelcolor": ".15", "axes.labelsize": 12, "axes.linewidth": 1.25, "axes.spines.bottom": True,
    "axes.spines.left": True, "axes.spines.right": True, "axes.spines.top": True, "axes.titlesize": 12,
    "figure.facecolor": "white", "font.family": "sans-serif",
    "font.sans-serif": ("Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"),
    "font.size": 12, "grid.color": ".8", "grid.linestyle": "-", "grid.linewidth": 1, "legend.fontsize": 11,
    "legend.title_fontsize": 12, "lines.linewidth": 1.5, "lines.markersize": 6, "lines.solid_capstyle": "round",
    "patch.edgecolor": "w", "patch.force_edgecolor": True, "patch.linewidth": 1, "text.color": ".15",
    "xtick.bottom": False, "xtick.color": ".15", "xtick.direction": "out", "xtick.labelsize": 11,
    "xtick.major.size": 6, "xtick.major.width": 1.25, "xtick.minor.size": 4, "xtick.minor.width": 1,
    "xtick.top": False, "ytick.color": ".15", "ytick.direction": "out", "ytick.labelsize": 11, "ytick.left": False,
    "ytick.major.size": 6, "ytick.major.width": 1.25, "ytick.minor.size": 4, "ytick.minor.width": 1,
    "ytick.right": False,
})
# the house's own settings over the theme
HOUSE = MappingProxyType({
    "axes.edgecolor": "0.3",
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
    "pdf.fonttype": 42,
})


def setup():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(THEME)
    plt.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=[matplotlib.colors.to_rgb(c) for c in _CB])
    plt.rcParams.update(HOUSE)
    return plt


def subplots(*args, **kwargs):
    """House style, then matplotlib's `plt.subplots(*args, **kwargs)`: (figure, axes)."""
    return setup().subplots(*args, **kwargs)


def save(fig, stem: str | os.PathLike, caption: str | None = None, tight_layout: bool = False) -> list[Path]:
    """Write `<stem>.png` and `<stem>.pdf` (no timestamps, so reruns give the same bytes); `tight_layout`
    first runs `fig.tight_layout()`."""
    if tight_layout:
        fig.tight_layout()
    import matplotlib.pyplot as plt

    stem = Path(stem)
    png, pdf = stem.with_suffix(".png"), stem.with_suffix(".pdf")
    boxes = []  # the tight box savefig computes for the PNG (Agg's text extents), before its padding

    def tight_box(*args, _figure_box=fig.get_tightbbox, **kwargs):
        box = _figure_box(*args, **kwargs)
        boxes.append(box)
        return box

    fig.get_tightbbox = tight_box  # this figure only, for the PNG's save
    try:
        with atomic_path(png) as tmp:
            fig.savefig(tmp, format="png", metadata={"Software": None}, bbox_inches="tight")
    finally:
        del fig.get_tightbbox
    # the PDF on the PNG's padded box: one layout pass and one tight box for both formats (build time, wave 37);
    # "tight" again should a matplotlib compute its box another way
    box = boxes[-1].padded(plt.rcParams["savefig.pad_inches"]) if len(boxes) == 1 else "tight"
    with atomic_path(pdf) as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
                    bbox_inches=box)
    out = [png, pdf]
    if caption:
        with ap(stem.with_suffix(".caption.txt")) as tmp:
            tmp.write_text(caption.strip() + "\n")
    plt.close(fig)
    return out
