"""`steptime status`: which experiments are built, which await telemetry, and how to collect it."""

from __future__ import annotations

import json
from pathlib import Path


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
        rows.append({"id": eid, "status": state, "result_present": built, "missing_raw": missing,
                     "collect": e.get("collect"), "question": e.get("question", "")})
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
        print(line)
    return 0
