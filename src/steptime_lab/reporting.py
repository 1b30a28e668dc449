"""Documents generated from the result files: the README's numbers block, figures/README.md,
and the captions of the Snakemake HTML report. Nothing here is typed by hand: every number
comes from `results/<ID>.json`, every caption from the figure's own caption file and the
registry.

    README.md   <!-- results:begin --> ... <!-- results:end -->  is results/README_numbers.md,
                written by `snakemake results/README_numbers.md` and spliced by `steptime readme`
                (a test fails when the two differ, so the README cannot carry a typed number).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from steptime.errors import SteptimeError
from steptime.io import atomic_path, atomic_path as _ap, read_yaml
from steptime_lab.data.manifest import find_root

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
# The part an experiment belongs to, by its ID's prefix (the letters and digit before the dot): every
# registered experiment reaches the README block by its prefix, in this order; a prefix not named here
# (a new family) gets its own group after these, titled by the prefix, never left out.
PARTS = {"E1": "Part 1: the predictor", "L0": "Part 1: literature", "E2": "Part 2: utility",
         "E3": "Part 3: mixture of experts", "R2": "Round 2"}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):  # as stored: errors are fractions, ratios are ratios (no guessing which)
        return f"{v:.3g}"
    if isinstance(v, dict):
        items = list(v.items())[:4]
        s = ", ".join(f"{k} {_fmt(x)}" for k, x in items if not isinstance(x, (dict, list)))
        return s + (", ..." if len(v) > 4 else "")
    s = str(v)
    return s if len(s) <= 40 else s[:37] + "..."


def prefix(eid: str) -> str:
    """An experiment ID's family prefix: E1.16 -> E1, R2.3 -> R2."""
    return str(eid).split(".")[0]


def part(eid: str) -> str:
    p = prefix(eid)
    return PARTS.get(p, f"Experiments {p}.x")


def _part_order(title: str):
    titles = list(dict.fromkeys(PARTS.values()))
    return (titles.index(title), "") if title in titles else (len(titles), title)


SOURCES = "<!-- sources:"


def _num(v, unit: str | None) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if unit == "fraction":
        return f"{100 * v:.1f}%"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _numbers(c: dict) -> list:
    """The numbers a claim's verdict compares (its value, the keyed entry, or every entry of a mapping)."""
    v = c.get("value")
    if c.get("key") is not None and isinstance(v, (dict, list)):
        try:
            v = v[c["key"]]
        except (KeyError, IndexError, TypeError):
            return []
    vals = list(v.values()) if isinstance(v, dict) else (v if isinstance(v, list) else [v])
    out = []
    for x in vals:
        if x is None:
            continue
        out.append(abs(x) if c.get("abs") and isinstance(x, (int, float)) else x)
    return out


def _span(vals: list, unit: str | None) -> str:
    nums = [x for x in vals if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if nums and len(nums) == len(vals):
        lo, hi = min(nums), max(nums)
        return _num(lo, unit) if lo == hi else f"{_num(lo, unit)} to {_num(hi, unit)}"
    return ", ".join(dict.fromkeys(str(x) for x in vals))


def headline(claims: list[dict]) -> tuple[str, str, str]:
    """(headline value, target, verdict count) of an experiment: its headline claims are the largest
    group of verdict claims sharing a comparison (op, unit, comparison text); the value is the range
    of their values, the target their operator and target(s)."""
    judged = [c for c in claims if c.get("met") is not None]
    met = sum(c["met"] is True for c in judged)
    count = f"{met}/{len(judged)} met" if judged else "descriptive"
    if not judged:
        first = next((c for c in claims if isinstance(c.get("value"), (int, float)) and not isinstance(c.get("value"), bool)), None)
        return ((f"{_num(first['value'], first.get('unit'))} ({_short(first.get('comparison', ''), 40)})" if first else "-"),
                "-", count)
    groups: dict = {}
    for c in judged:
        groups.setdefault((c.get("op"), c.get("unit"), str(c.get("comparison", ""))), []).append(c)
    (op, unit, _), group = max(groups.items(), key=lambda kv: len(kv[1]))  # first largest group (dict order)
    vals = [x for c in group for x in _numbers(c)]
    targets = list(dict.fromkeys(json.dumps(c.get("target"), sort_keys=True) for c in group))
    tvals = [json.loads(t) for t in targets]
    if len(tvals) <= 3:
        tgt = " / ".join(_num(t, unit) if not isinstance(t, list) else str(t) for t in tvals)
    else:  # a measured reference per claim (e.g. the same MAPE without the factor)
        tgt = f"a reference per claim ({_span(tvals, unit)})"
    rule = group[0].get("rule")
    tgt = f"{op} {tgt}" + (f" ({rule} entries)" if rule in ("all", "any") else f" ({rule})" if rule else "")
    shown = f"{len(group)} of {len(judged)}: " if len(group) < len(judged) else ""
    return f"{shown}{_span(vals, unit) if vals else '-'}", tgt, count


def _what(eid: str, registry: dict, n: int = 90) -> str:
    e = registry.get(eid) or {}
    return _short(e.get("what") or e.get("question") or "", n)


def readme_block(results: dict[str, dict], registry: dict, sources: list[str] | None = None) -> str:
    """Markdown: one line per experiment (ID | what | headline value | target | verdicts), grouped by part;
    `sources` (the result files read, in order) is recorded so `steptime readme` can regenerate and check."""
    lines = [BEGIN, "", "_Generated from results/*.json by `snakemake results/README_numbers.md`; `steptime readme` "
             "(run by CI) fails when this block differs from what the result files give. Headline: the largest "
             "group of an experiment's verdict claims sharing one comparison (range of their values); every claim, "
             "its comparison and its chain to the raw bytes: `steptime audit <ID>`._", ""]
    for title in sorted(dict.fromkeys(part(e) for e in results), key=_part_order):
        lines += [f"**{title}**", "", "| ID | what | headline value | target | verdicts |", "|---|---|---|---|---|"]
        for eid in [e for e in results if part(e) == title]:
            value, tgt, count = headline(results[eid].get("claims") or [])
            lines.append(f"| {eid} | {_what(eid, registry)} | {value.replace('|', '/')} | "
                         f"{tgt.replace('|', '/')} | {count} |")
        lines.append("")
    if sources is not None:
        lines.append(f"{SOURCES} {' '.join(str(p) for p in sources)} -->")
    lines.append(END)
    return "\n".join(lines) + "\n"


def _short(text: str, n: int = 70) -> str:
    t = re.sub(r"\s+", " ", str(text)).replace("|", "/")
    return t if len(t) <= n else t[: n - 3] + "..."


def splice(readme: str, block: str) -> str:
    """README text with its marked block replaced by `block` (which carries the markers)."""
    if BEGIN not in readme or END not in readme:
        raise SteptimeError(f"README.md has no {BEGIN} ... {END} block")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + block.rstrip("\n") + tail


def figures_index(results: dict[str, dict], registry: dict, fig_dir: str | Path = "figures") -> str:
    """figures/README.md: every figure with its experiment, script, inputs and caption."""
    fig_dir = Path(fig_dir)
    lines = ["# Figures", "", "Generated by `snakemake figures/README.md` from the registry and the result files; "
             "do not edit by hand. Each figure has a PNG, a vector PDF and its caption file.", "",
             "| figure | experiment | script | inputs | caption |", "|---|---|---|---|---|"]
    for eid, doc in results.items():
        prov = doc.get("provenance") or {}
        inputs = ", ".join(f"`{p}`" for p in sorted(prov.get("inputs") or {}))
        for out in (registry.get(eid) or {}).get("outputs") or []:
            if not out.startswith("figures/"):
                continue
            cap = fig_dir / (Path(out).stem + ".caption.txt")
            text = cap.read_text().strip() if cap.exists() else ""
            lines.append(f"| `{out}` | {eid} | `{prov.get('script')}` | {inputs} | {_short(text, 160)} |")
    return "\n".join(lines) + "\n"


def load_results(paths) -> dict[str, dict]:
    out = {}
    for p in paths:
        d = json.loads(Path(p).read_text())
        out[d.get("id", Path(p).stem)] = d
    return out


def readme_cli(write: bool = False, root=None) -> int:
    """`steptime readme [--write]`: check (or write) README.md's block against results/README_numbers.md."""
    root = Path(find_root(root))
    block_path = root / "results" / "README_numbers.md"
    if not block_path.exists():
        raise SteptimeError(f"{block_path} missing: build it with `snakemake results/README_numbers.md`")
    block = block_path.read_text()
    m = re.search(re.escape(SOURCES) + r" (.*?) -->", block)
    if not m:
        raise SteptimeError(f"{block_path} records no result files ({SOURCES} ...): rebuild it with "
                            "`snakemake results/README_numbers.md`")
    sources = m.group(1).split()
    missing = [p for p in sources if not (root / p).is_file()]
    if missing:
        print(f"results/README_numbers.md: result file {missing[0]} is gone (+{len(missing) - 1} more)")
        return 1

    registry = read_yaml(root / "config" / "experiments.yaml")["experiments"]
    left_out = [f for eid, e in registry.items() if e.get("status") == "built"
                for f in [f"results/{eid.replace('.', '_')}.json"] if (root / f).is_file() and f not in sources]
    if left_out:
        print(f"results/README_numbers.md leaves out the built result {left_out[0]} (+{len(left_out) - 1} more); "
              "rebuild it with `snakemake -j1 results/README_numbers.md`")
        return 1
    fresh = readme_block(load_results([root / p for p in sources]), registry, sources)
    if fresh != block:
        diff = [ln for ln in fresh.splitlines() if ln not in block.splitlines()]
        print(f"results/README_numbers.md differs from what the result files give (first: {diff[0] if diff else '?'}); "
              "rebuild it with `snakemake -j1 results/README_numbers.md`")
        if not write:
            return 1

        with _ap(block_path) as tmp:
            tmp.write_text(fresh)
        block = fresh
    readme = (root / "README.md").read_text()
    new = splice(readme, block)
    if new == readme:
        print("README.md: results block matches results/README_numbers.md")
        return 0
    if write:
        with atomic_path(root / "README.md") as tmp:
            tmp.write_text(new)
        print("README.md: results block rewritten from results/README_numbers.md")
        return 0
    shown = readme.split(BEGIN, 1)[1].split(END, 1)[0].splitlines() if BEGIN in readme else []
    edited = [ln for ln in shown if ln not in block.splitlines()]
    print("README.md: results block differs from results/README_numbers.md (first: "
          f"{edited[0] if edited else 'a line is missing'}); run `steptime readme --write`")
    return 1


def pair_notebook(src, dst) -> None:
    """notebooks/<name>.ipynb from its jupytext percent script, byte-identical on every build: each cell's
    id is a hash of its position and source (jupytext's own ids are random on every pairing)."""
    import hashlib

    import jupytext

    nb = jupytext.read(src)
    for i, cell in enumerate(nb.cells):
        cell["id"] = hashlib.sha256(f"{i}\0{cell.source}".encode()).hexdigest()[:8]
    with atomic_path(dst) as tmp:
        jupytext.write(nb, str(tmp), fmt="ipynb")


def paper_index(mapping: dict, registry: dict, results: dict[str, dict], root: str | Path = ".") -> str:
    """figures/PAPER.md: every figure ID the round-1 reports name, with its file, the experiment, result and
    claims it supports (`claims:` in the mapping, else every claim of the result; their verdicts), or why it
    cannot be drawn (an awaiting experiment: the command that collects its telemetry)."""
    root = Path(root)
    lines = ["# The paper's figures", "", "Generated by `snakemake figures/PAPER.md` from config/paper_figures.yaml, "
             "the registry and the result files; do not edit by hand. `snakemake -j2 paper` builds every figure "
             "listed with a file (and this page).", "",
             "| figure (reports) | file | experiment | result, the claims it supports (verdicts) | note / why not drawn |",
             "|---|---|---|---|---|"]
    drawn = 0
    for fid, m in (mapping.get("figures") or {}).items():
        eid = m.get("experiment")
        e = registry.get(eid) or {}
        f = m.get("file")
        res = f"results/{eid.replace('.', '_')}.json" if eid else None
        doc = results.get(eid) if eid else None
        verdicts = ""
        if doc:
            allc = doc.get("claims") or []
            picks = [n for n in (m.get("claims") or range(1, len(allc) + 1)) if 1 <= n <= len(allc)]
            if m.get("claims") and len(picks) != len(m["claims"]):
                why_claims = f"MISSING CLAIM {eid}:{max(m['claims'])} (the result has {len(allc)}); "
            else:
                why_claims = ""
            judged = [allc[n - 1] for n in picks if allc[n - 1].get("met") is not None]
            ids = ", ".join(f"{eid}:{n}" for n in picks) if m.get("claims") else (
                f"{eid}:1..{len(allc)}" if allc else "no claims")
            verdicts = f" {ids} ({sum(c['met'] for c in judged)}/{len(judged)} met)" if judged else f" {ids} (descriptive)"
            verdicts += f"; {why_claims}" if why_claims else ""
        why = m.get("reason") or m.get("note") or ""
        if not f and not why and e.get("status") == "awaiting":
            why = f"awaiting GPU telemetry; collect with: `{e.get('collect')}`"
        if f and not (root / f).is_file():
            why = f"MISSING FILE {f}; " + why
        drawn += bool(f and (root / f).is_file())
        lines.append(f"| {fid} | {f'`{f}`' if f else '-'} | {eid or '-'} | "
                     f"{(f'`{res}`' + verdicts) if doc else '-'} | {_short(why, 220)} |")
    n = len(mapping.get("figures") or {})
    lines += ["", f"{drawn} of {n} figures drawn from our data; the rest say why."]
    return "\n".join(lines) + "\n"
