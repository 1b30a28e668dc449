"""L0.1 literature matrix: prior predictors' efficiency source, GPU coverage, reported accuracy.

The data file (config/literature.yaml) is literature metadata with a citation per row; this
module checks it and draws the matrix. Nothing here invents a number: a missing figure is
the string 'not reported'.
"""

from __future__ import annotations

from steptime import plotting
from steptime.io import read_yaml
from steptime.validation import check_known_fields
from steptime_lab.results import claim

ETA_CLASSES = ("peak", "fixed_scalar", "profiled_scalar", "user_supplied", "learned", "table", "simulated", "factored")
REQUIRED = ("name", "citation", "efficiency_source", "eta_class", "gpus", "reported_accuracy", "cited_in")


def load(path) -> list[dict]:
    rows = read_yaml(path)["systems"]
    for i, r in enumerate(rows):
        # a misspelt field (eta_clas) was reported as a missing one; now named, with the closest (wave 39)
        check_known_fields(r, REQUIRED, f"{path}: system #{i} ({r.get('name', '?')})", ValueError)
        miss = [k for k in REQUIRED if k not in r]
        if miss:
            raise ValueError(f"{path}: system #{i} ({r.get('name', '?')}) lacks {miss}")
        if r["eta_class"] not in ETA_CLASSES:
            raise ValueError(f"{path}: {r['name']}: eta_class {r['eta_class']!r} not in {ETA_CLASSES}")
        if not isinstance(r["gpus"], list) and r["gpus"] != "not reported" and not str(r["gpus"]).startswith("not reported"):
            raise ValueError(f"{path}: {r['name']}: gpus must be a list or 'not reported'")
    return rows


def document(rows: list[dict]) -> dict:
    n_acc = sum(1 for r in rows if not str(r["reported_accuracy"]).startswith("not reported"))
    cls = {c: [r["name"] for r in rows if r["eta_class"] == c] for c in ETA_CLASSES}
    claims = [
        claim("systems whose efficiency is the raw peak (eta = 1)", len(cls["peak"]), "count", None),
        claim("systems with an efficiency learned by a regressor or read from a table", len(cls["learned"]) + len(cls["table"]),
              "count"),
        claim("systems for which a cited accuracy figure exists in our sources", f"{n_acc}/{len(rows)}", "count"),
    ]
    return {"metrics": {"systems": rows, "by_eta_class": cls}, "claims": claims}


def plot(rows: list[dict], stem, caption: str | None = None):
    import numpy as np

    plt = plotting.setup()
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        j = ETA_CLASSES.index(r["eta_class"])
        n = len(r["gpus"]) if isinstance(r["gpus"], list) else 0
        ax.scatter([j], [i], s=60 + 25 * n, color=plt.cm.tab10(j % 10), zorder=3)
        ax.text(len(ETA_CLASSES) - 0.4, i, f"{n or '?'} GPUs | {str(r['reported_accuracy'])[:70]}", va="center",
                fontsize=6)
    ax.set_yticks(np.arange(len(rows)))
    ax.set_yticklabels([r["name"] for r in rows], fontsize=7)
    ax.set_xticks(np.arange(len(ETA_CLASSES)))
    ax.set_xticklabels(ETA_CLASSES, rotation=30, ha="right", fontsize=7)
    ax.set_xlim(-0.5, len(ETA_CLASSES) + 4.5)
    ax.invert_yaxis()
    ax.set_xlabel("where the efficiency factor comes from (marker size: GPUs covered)")
    plotting.save(fig, stem, caption)
