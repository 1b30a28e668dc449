"""`steptime status`: which experiments are built, which await telemetry, and how to collect it."""

from __future__ import annotations

import json
from pathlib import Path


def _absent_modules(names) -> list[str]:
    """The importable module names of an optional experiment that are not installed."""
    import importlib.util

    return [n for n in names if importlib.util.find_spec(n) is None]


def experiment_status(root: Path | None = None) -> list[dict]:
    import yaml

    from steptime.data.manifest import find_root

    root = find_root(root)
    reg = yaml.safe_load((root / "config" / "experiments.yaml").read_text())["experiments"]
    rows = []
    for eid, e in reg.items():
        raw = e.get("raw", []) or []
        missing = [r for r in raw if not (root / r).exists()]
        outputs = e.get("outputs") or [f"results/{eid.replace('.', '_')}.json"]
        built = all((root / o).exists() for o in outputs)
        state = e.get("status", "planned")
        if state == "awaiting" and not missing:
            state = "data-present"
        absent = _absent_modules(e.get("needs", []) or [])
        rows.append({"id": eid, "status": state, "result_present": built, "missing_raw": missing,
                     "collect": e.get("collect"), "question": e.get("question", ""), "missing_packages": absent,
                     "install": e.get("install"), "build": e.get("build")})
    return rows


def status(as_json: bool = False) -> int:
    rows = experiment_status()
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        mark = "ok" if r["result_present"] else "--"
        line = f"{r['id']:<7} {r['status']:<12} result:{mark}"
        if r["status"] == "awaiting":
            line += f"  awaiting telemetry: {', '.join(r['missing_raw'])}; collect with: {r['collect']}"
        elif r["status"] == "optional" and r["missing_packages"]:
            line += f"  optional peers not installed ({', '.join(r['missing_packages'])}); install with: {r['install']}"
        elif r["status"] == "optional" and not r["result_present"]:
            line += f"  optional, not in rule all; build with: {r['build']}"
        print(line)
    return 0
