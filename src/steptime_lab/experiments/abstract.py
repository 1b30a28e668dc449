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


# ---------------------------------------------------------------------------------------
# The reports' form of E2.7: one row per integrated system, its outcome as numbers from the results.
#
# The registry (config/experiments.yaml, E2.7 `settings.systems`) says, per system, what steptime replaces,
# the claim type, and which claims of which result carry the outcome (`match`: a regular expression on the
# claim text; `show`: how the matched claims become a number); every number here is read from the result
# files, never typed. Kinds of `show`:
#   range   the matched claims' numbers (a mapping's entries each): median and range, with the count
#   each    each matched claim's value, labelled by the claim text before its first ':'
#   vs      each matched claim's value against its target (e.g. steptime's error vs the scalar's)
#   met     how many of the matched claims meet their target
#   wins    mapping values {a: x, b: y}: how many claims have x < y (`a`, `b` name the entries)
# `name` (optional, `each`/`vs`): a regular expression whose first group labels each value (else the claim
# text before its first ':'); `unit` (optional) names the unit a number is shown in where the claim states none; `abs` shows |value|.

SHOW = ("range", "each", "vs", "met", "wins")


def _nums(v, absolute=False) -> list[float]:
    vals = list(v.values()) if isinstance(v, dict) else (v if isinstance(v, list) else [v])
    out = []
    for x in vals:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(abs(float(x)) if absolute else float(x))
    return out


def _fmt(x, unit) -> str:
    from steptime_lab.reporting import _num

    return _num(x, "fraction" if unit in ("fraction", "MAPE", "fraction of cases") else unit)


def outcome_part(part: dict, results: dict[str, dict]) -> dict:
    """One part of a system's outcome: {'text', 'numbers', 'claims', 'result'} from the claims it selects."""
    import re

    from steptime.errors import SteptimeError

    eid, show = part["result"], part["show"]
    if show not in SHOW:
        raise SteptimeError(f"E2.7: show {show!r} is not one of {', '.join(SHOW)}")
    label = part.get("label", "")
    doc = results.get(eid)
    if doc is None:
        return {"result": eid, "claims": [], "numbers": {}, "text": f"{label.rstrip(':')}: {eid} not built".strip(": ")}
    pat = re.compile(part["match"])
    picked = [(i, c) for i, c in enumerate(doc.get("claims") or [], start=1) if pat.search(str(c.get("claim", "")))]
    if not picked:
        raise SteptimeError(f"E2.7: no claim of {eid} matches {part['match']!r} (the registry's E2.7 settings)")
    ids = [f"{eid}:{i}" for i, _ in picked]
    unit = part.get("unit", picked[0][1].get("unit"))
    if show == "range":
        nums = [x for _, c in picked for x in _nums(c.get("value"), part.get("abs", False))]
        if not nums:
            raise SteptimeError(f"E2.7: the claims {', '.join(ids)} hold no number")
        nums.sort()
        med = nums[len(nums) // 2] if len(nums) % 2 else (nums[len(nums) // 2 - 1] + nums[len(nums) // 2]) / 2
        numbers = {"median": med, "min": nums[0], "max": nums[-1], "n": len(nums)}
        text = f"{label} {_fmt(med, unit)} ({_fmt(nums[0], unit)} to {_fmt(nums[-1], unit)}, n={len(nums)})"
    elif show in ("each", "vs"):
        numbers, bits = {}, []
        for (i, c) in picked:
            m = re.search(part["name"], str(c.get("claim", ""))) if part.get("name") else None
            name = m.group(1) if m else str(c.get("claim", "")).split(":")[0].strip()
            v = c.get("value")
            numbers[name] = v if show == "each" else {"value": v, "target": c.get("target")}
            u = part.get("unit", c.get("unit"))
            s = _fmt(v, u) if isinstance(v, (int, float)) else str(v)
            if show == "vs":
                s += f" vs {_fmt(c.get('target'), u)}"
            bits.append(f"{name} {s}" if len(picked) > 1 else s)
        text = f"{label} " + "; ".join(bits)
    elif show == "met":
        judged = [c for _, c in picked if c.get("met") is not None]
        k = sum(c["met"] is True for c in judged)
        numbers = {"met": k, "of": len(judged)}
        text = f"{label} {k}/{len(judged)}"
    else:  # wins
        a, b = part["a"], part["b"]
        pairs = [c.get("value") for _, c in picked if isinstance(c.get("value"), dict)
                 and a in c["value"] and b in c["value"]]
        k = sum(float(v[a]) < float(v[b]) for v in pairs)
        numbers = {"wins": k, "of": len(pairs)}
        text = f"{label} {k}/{len(pairs)}"
    return {"result": eid, "claims": ids, "numbers": numbers, "text": text.strip()}


def systems(results: dict[str, dict], spec: list[dict]) -> list[dict]:
    """One row per integrated system (the registry's E2.7 `settings.systems`): system, what steptime replaces,
    claim type, the outcome text and numbers, and the result files and claim ids they come from."""
    from steptime.errors import SteptimeError

    rows = []
    for s in spec:
        if s.get("type") not in TYPES:
            raise SteptimeError(f"E2.7: system {s.get('system')!r}: type must be one of {', '.join(TYPES)}")
        parts = [outcome_part(p, results) for p in s.get("outcome") or []]
        text = "; ".join(p["text"] for p in parts)
        if s.get("note"):
            text = f"{text} ({s['note']})" if parts else s["note"]
        text = text or "no result here"
        rows.append({"system": s["system"], "replaces": s["replaces"], "claim": s.get("claim", s["type"]),
                     "type": s["type"], "outcome": text, "parts": parts,
                     "files": sorted({f"results/{p['result'].replace('.', '_')}.json" for p in parts
                                      if p["claims"]}),
                     "claims": [i for p in parts for i in p["claims"]]})
    return rows


def table_figure(rows: list[dict], stem, caption: str) -> None:
    """The reports' E2.7 table as a figure: one row per system (what it replaces, claim type as a coloured
    marker and word, the outcome with its result files)."""
    import textwrap

    from steptime.plotting import CLAIM_COLORS, save, subplots

    wrapped = [(textwrap.fill(r["replaces"], 30), textwrap.fill(r["outcome"] + ("  [" + ", ".join(
        f.removeprefix("results/") for f in r["files"]) + "]" if r["files"] else ""), 70),
        textwrap.fill(r["claim"], 16)) for r in rows]
    heights = [max(a.count("\n"), b.count("\n"), c.count("\n")) + 1.6 for a, b, c in wrapped]
    total = sum(heights)
    fig, ax = subplots(figsize=(11, 0.17 * total + 0.9))
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(total + 1.4, 0)
    cols = (0.0, 0.15, 0.40, 0.53)
    for x, h in zip(cols, ("system", "what steptime replaces", "claim type", "outcome (from the result file)")):
        ax.text(x, 0.6, h, fontsize=8, fontweight="bold", va="center")
    y = 1.4
    for r, (rep, out, kind), h in zip(rows, wrapped, heights):
        ax.axhline(y, color="0.85", lw=0.6)
        yc = y + 0.8
        ax.text(cols[0], yc, r["system"], fontsize=7.5, va="top")
        ax.text(cols[1], yc, rep, fontsize=7, va="top")
        ax.scatter([cols[2] + 0.006], [yc + 0.45], s=30, color=CLAIM_COLORS[r["type"]], clip_on=False)
        ax.text(cols[2] + 0.018, yc, kind, fontsize=7, va="top")
        ax.text(cols[3], yc, out, fontsize=6.5, va="top", family="monospace")
        y += h
    ax.set_title("Part 2: what swapping in steptime does, system by system (every number from its result file)",
                 fontsize=9, loc="left")
    save(fig, stem, caption=caption, tight_layout=True)
