"""`steptime audit <ID>[:n] --rerun`: recompute a committed result from scratch and compare.

The repository's tracked working tree is copied into a scratch folder (raw/ hard-linked: nothing
writes there), every committed output that verifies is marked current there (`snakemake --touch`,
as `steptime audit --mark-current` does), the selected experiment's outputs are deleted, and
Snakemake rebuilds them with the rule, its upstream as needed, and the params in config/ (the
params a result records in `provenance.config` are compared with the fresh ones). The fresh values
are then compared with the committed ones, claim by claim (and the metrics block): identical, or
within the relative tolerance the experiment declares in the registry (`rerun_tolerance`, for known
nondeterminism) or the one given on the command line. The time the rebuild took is printed.

The code that runs is the installed steptime (an editable install resolves to this checkout's src/,
whose hash the result records), so a rerun from a clean clone recomputes from that clone's code.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from steptime.errors import SteptimeError
from steptime_lab.audit import AuditError, audit, experiment_id, primary_result
from steptime_lab.data.manifest import find_root
from steptime_lab.status import _registry

SKIP = {".git", ".venv", ".snakemake", "logs", "__pycache__", ".pytest_cache", "cache"}


class RerunError(SteptimeError, ValueError):
    """A rerun that could not be set up (unknown ID, no committed result)."""


def _copy_tree(root: Path, dst: Path) -> None:
    def ignore(d, names):
        return [n for n in names if n in SKIP or n.endswith(".egg-info")]

    for item in root.iterdir():
        if item.name in SKIP or item.name.endswith(".egg-info"):
            continue
        if item.is_dir():
            copy = os.link if item.name == "raw" else shutil.copy2
            try:
                shutil.copytree(item, dst / item.name, ignore=ignore, copy_function=copy, symlinks=True)
            except OSError:  # hard links across devices: copy instead
                shutil.copytree(item, dst / item.name, ignore=ignore, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dst / item.name)


def diff_values(old, new, tol: float, path: str = "") -> list[str]:
    """Where two JSON values differ beyond a relative tolerance (numbers) or at all (anything else)."""
    if isinstance(old, bool) or isinstance(new, bool) or not (
            isinstance(old, (int, float)) and isinstance(new, (int, float))):
        if isinstance(old, dict) and isinstance(new, dict):
            out = []
            for k in sorted(set(old) | set(new), key=str):
                if k not in old or k not in new:
                    out.append(f"{path}.{k}: only in the {'fresh' if k in new else 'committed'} result")
                else:
                    out += diff_values(old[k], new[k], tol, f"{path}.{k}")
            return out
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            return [d for i, (a, b) in enumerate(zip(old, new)) for d in diff_values(a, b, tol, f"{path}[{i}]")]
        same = old == new and (isinstance(old, bool) == isinstance(new, bool))
        return [] if same else [f"{path}: committed {old!r}, fresh {new!r}"]
    if old == new or math.isclose(float(old), float(new), rel_tol=tol, abs_tol=0.0 if tol == 0 else 1e-12):
        return []
    return [f"{path}: committed {old!r}, fresh {new!r}"]


def rerun(select: str | None, tolerance: float | None = None, root: str | Path | None = None,
          keep: bool = False, jobs: int = 2) -> int:
    """Rerun one experiment (E1.1) or claim (E1.1:1); with no selection, every built (or optional)
    experiment that has a committed result, one after the other (what CI runs on the .test/ subset and a
    reviewer runs overnight on the whole repository): exit 1 when any differs or fails to rebuild."""
    root = Path(find_root(root))
    if select:
        return _rerun_one(select, tolerance, root, keep, jobs)
    reg = _registry(root)
    todo = [eid for eid, e in reg.items() if e.get("status") in ("built", "optional")
            and (res := primary_result(eid, e.get("outputs") or [f"results/{eid.replace('.', '_')}.json"]))
            and (root / res).is_file()]
    if not todo:
        raise RerunError(f"{root}: no committed result of a built experiment to rerun")
    t0, failed = time.monotonic(), []
    for eid in todo:
        print(f"== rerun {eid}", flush=True)
        if _rerun_one(eid, tolerance, root, keep, jobs):
            failed.append(eid)
    took = time.monotonic() - t0
    if failed:
        print(f"rerun: {len(failed)} of {len(todo)} experiments not reproduced ({', '.join(failed)}); {took:.1f} s")
        return 1
    print(f"rerun: all {len(todo)} experiments reproduced from scratch ({', '.join(todo)}); {took:.1f} s")
    return 0


def _rerun_one(select: str, tolerance: float | None, root: Path, keep: bool, jobs: int) -> int:
    eid, claim_n = (select.split(":", 1) + [None])[:2]
    reg = _registry(root)
    eid = experiment_id(eid, reg)  # e2.11 / E2_11 read as E2.11
    select = eid if claim_n is None else f"{eid}:{claim_n}"
    outputs = reg[eid].get("outputs") or [f"results/{eid.replace('.', '_')}.json"]
    res = primary_result(eid, outputs)
    if not res or not (root / res).is_file():
        raise RerunError(f"{eid} has no committed result to compare ({res})")
    committed = json.loads((root / res).read_text())
    n = len(committed.get("claims") or [])
    if claim_n is not None and not (claim_n.isdigit() and 1 <= int(claim_n) <= n):
        raise AuditError(f"{eid} has no claim {select!r} (claims are numbered {eid}:1..{eid}:{n})")
    tol = float(tolerance if tolerance is not None else reg[eid].get("rerun_tolerance", 0.0))
    if not (tol >= 0 and math.isfinite(tol)):
        raise RerunError(f"tolerance {tol!r} must be a finite number >= 0")

    (a,) = audit(root, eid)
    if a.state != "ok":
        print(f"note: {eid} is {a.state} here ({(a.stale + a.errors or ['?'])[0]}); the fresh value may differ "
              "for that reason")
    scratch = Path(tempfile.mkdtemp(prefix=f"steptime-rerun-{eid}-"))
    t0 = time.monotonic()
    try:
        _copy_tree(root, scratch)
        env = {**os.environ, "STEPTIME_ROOT": str(scratch), "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0",
               "PYTHONPATH": os.pathsep.join([str(scratch / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        # every committed output current there (as on a fresh clone after --mark-current), then this one gone
        subprocess.run([sys.executable, "-m", "snakemake", *outputs, "--touch", "-j1", "--quiet", "all"], cwd=scratch,
                       env=env, check=False, capture_output=True)
        for o in outputs:
            (scratch / o).unlink(missing_ok=True)
        log = scratch / "rerun.log"
        with open(log, "w") as fh:
            r = subprocess.run([sys.executable, "-m", "snakemake", f"-j{jobs}", *outputs], cwd=scratch, env=env,
                               stdout=fh, stderr=subprocess.STDOUT)
        took = time.monotonic() - t0
        if r.returncode or not (scratch / res).is_file():
            tail = log.read_text().splitlines()[-15:]
            print("\n".join(tail))
            print(f"rerun {eid}: the rebuild failed (snakemake exit {r.returncode}) after {took:.0f} s")
            return 1
        fresh = json.loads((scratch / res).read_text())
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    old_c, new_c = committed.get("claims") or [], fresh.get("claims") or []
    diffs = []
    if claim_n is None and len(old_c) != len(new_c):
        diffs.append(f"claims: committed {len(old_c)}, fresh {len(new_c)}")
    picks = [int(claim_n)] if claim_n else range(1, min(len(old_c), len(new_c)) + 1)
    for i in picks:
        if i > len(new_c):
            diffs.append(f"{eid}:{i}: missing from the fresh result")
            continue
        for k in ("value", "met", "target", "op"):
            diffs += [f"{eid}:{i} {k}{d}" for d in diff_values(old_c[i - 1].get(k), new_c[i - 1].get(k), tol)]
    if claim_n is None:
        diffs += [f"metrics{d}" for d in diff_values(committed.get("metrics"), fresh.get("metrics"), tol)]
    rec_cfg = (committed.get("provenance") or {}).get("config")
    new_cfg = (fresh.get("provenance") or {}).get("config")
    if rec_cfg != new_cfg:
        print(f"note: the params differ from the recorded ones: {diff_values(rec_cfg, new_cfg, 0.0)[:3]}")
    what = f"claim {select}" if claim_n else f"{eid} ({len(old_c)} claims and its metrics)"
    shown = f"value {json.dumps(new_c[int(claim_n) - 1].get('value'))}" if claim_n and int(claim_n) <= len(new_c) else ""
    if diffs:
        for d in diffs[:20]:
            print(f"  DIFFERS {d}")
        print(f"rerun {what}: {len(diffs)} difference(s) beyond tolerance {tol:g}; rebuilt in {took:.1f} s")
        return 1
    same = "identical" if tol == 0 else f"within relative tolerance {tol:g}"
    print(f"rerun {what}: reproduced, {same} {shown}; rebuilt from scratch in {took:.1f} s")
    return 0
