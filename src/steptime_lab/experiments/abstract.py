"""E2.7: the Part-2 abstract figure: every integration and transfer claim in one panel.

Each claim of each Part-2 result is one point, coloured by its claim type (accuracy: how well
a prediction matches measurements; decision: what a scheduler or planner picks with it; cost:
what the prediction costs to make), filled when the claim's target is met, hollow when missed,
lightly shaded when the claim is informational; every point is labelled with the claim id (`E2.1:3`) that
`steptime audit E2.1:3` resolves to its result file and raw bytes. The claim type of each
experiment is a registry field (`claim_type` in config/experiments.yaml).
"""

from __future__ import annotations

from steptime.errors import SteptimeError
from steptime.plotting import CLAIM_COLORS, save, subplots

TYPES = ("accuracy", "decision", "cost")


def points(results: dict[str, dict], types: dict[str, str]) -> list[dict]:
    """One record per claim: id, result, type, verdict ('met', 'missed', 'info'), value and text."""
    out = []
    for eid in sorted(results, key=_order):
        if types.get(eid) not in TYPES:
            raise SteptimeError(f"E2.7: {eid} has no claim_type in the registry (one of {', '.join(TYPES)})")
        doc = results[eid]
        for i, c in enumerate(doc.get("claims") or [], start=1):
            met = c.get("met")
            out.append({"claim_id": f"{eid}:{i}", "result": eid, "type": types[eid],
                        "verdict": "info" if met is None else ("met" if met else "missed"),
                        "value": c.get("value"), "claim": c.get("claim", ""),
                        "simulated": "simulat" in str(c.get("claim", "")).lower() or doc.get("simulated", False)})
    return out


def _order(eid: str):
    major, _, minor = eid.partition(".")
    num = "".join(ch for ch in minor if ch.isdigit())
    return (major, int(num or 0), minor)


def summary(pts: list[dict]) -> dict:
    out = {t: {"met": 0, "missed": 0, "info": 0} for t in TYPES}
    for p in pts:
        out[p["type"]][p["verdict"]] += 1
    return out


def figure(pts: list[dict], stem, caption: str) -> None:
    from matplotlib.colors import to_rgba
    from matplotlib.ticker import MaxNLocator

    results = sorted({p["result"] for p in pts}, key=_order)
    fig, ax = subplots(figsize=(7.5, 0.45 * len(results) + 1.6))
    for row, eid in enumerate(results):
        mine = [p for p in pts if p["result"] == eid]
        for j, p in enumerate(mine):
            color = CLAIM_COLORS[p["type"]]
            face = color if p["verdict"] == "met" else ("white" if p["verdict"] == "missed" else to_rgba(color, 0.25))
            edge = color
            ax.scatter(j, row, s=46, facecolor=face, edgecolor=edge, linewidth=1.3, zorder=3,
                       marker="s" if p["simulated"] else "o")
            if p["verdict"] != "info":
                ax.annotate(p["claim_id"].split(":")[1], (j, row), xytext=(0, 6), textcoords="offset points",
                            fontsize=5.5, ha="center", color="0.25")
    ax.set_yticks(range(len(results)), results)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("claims of the result, in file order (number = claim id: steptime audit <ID>:<n>)")
    ax.invert_yaxis()
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="", color=CLAIM_COLORS[t], label=t) for t in TYPES]
    handles += [Line2D([], [], marker="o", ls="", markerfacecolor="k", markeredgecolor="k", label="target met"),
                Line2D([], [], marker="o", ls="", markerfacecolor="white", markeredgecolor="k", label="target missed"),
                Line2D([], [], marker="o", ls="", markerfacecolor=to_rgba("k", 0.25), markeredgecolor="k",
                       label="informational"),
                Line2D([], [], marker="s", ls="", markerfacecolor="white", markeredgecolor="k", label="simulated")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4, fontsize=7)
    ax.set_title("Part 2: every integration and transfer claim (colour: claim type)")
    save(fig, stem, caption=caption, tight_layout=True)
