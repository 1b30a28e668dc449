"""`steptime status`: every registered experiment with its state, and what to run next.

States (one per experiment, from the registry and the files on disk):

    ok            the result exists and nothing it was built from has changed since
    stale         the result exists but an input's sha256, or the library code, changed
                  since it was built (the reasons are listed)
    missing       the data is present but the result has not been built
    awaiting      GPU telemetry the experiment needs is not in raw/ (the command that
                  collects it is printed)
    optional      needs an optional extra that is not installed (the install line is printed);
                  once installed, the states above apply (it is never part of rule all)
    planned       registered by an open issue, no rule yet

`stale_reasons(result_path)` is the one staleness check; `steptime audit` uses it too.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from steptime.io import file_sha256, read_yaml  # the one cached digest (audit imports it from here too)
from steptime_lab.data.manifest import find_root
from steptime_lab.results import code_sha256


# Inputs under these folders are git-ignored intermediates (absent from a clean clone); when
# present they are checked like any input, when absent they are not counted as stale.
INTERMEDIATE = ("results/cache/",)



@lru_cache(maxsize=1)
def _current_code_sha() -> str:
    return code_sha256()


def stale_reasons(result: str | Path | dict, root: str | Path | None = None) -> list[str]:
    """Why a built result no longer matches what it was built from ([] when it does).

    A result records, in its provenance block, the sha256 of every declared input and the
    hash of the library source (`code_sha256`). It is stale when an input is gone or its
    bytes changed, or when the library changed since.
    """
    root = Path(find_root(root))
    if isinstance(result, dict):
        doc = result
    else:
        path = Path(result)
        path = path if path.is_absolute() else root / path
        if not path.is_file():
            return [f"result {path.relative_to(root) if path.is_relative_to(root) else path} does not exist"]
        doc, why = read_result(path)
        if why:
            return [why]
    if not isinstance(doc, dict):
        return ["the result is not a JSON object"]
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    reasons = []
    inputs = prov.get("inputs") or {}
    if not inputs:
        reasons.append("the result records no inputs in its provenance")
    for rel, meta in sorted(inputs.items()):
        want = (meta or {}).get("sha256")
        if want is None:  # a directory input: nothing to compare
            continue
        have = file_sha256(root / rel)
        if have is None and rel.startswith(INTERMEDIATE):
            continue  # a git-ignored intermediate: absent from a clean clone, rebuilt by its rule
        if have is None:
            reasons.append(f"input {rel} is missing")
        elif have != want:
            reasons.append(f"input {rel} changed since the result was built (sha256 {want[:12]} -> {have[:12]})")
    want_code = prov.get("code_sha256")
    if want_code is None:
        reasons.append("the result records no code hash")
    elif want_code != _current_code_sha():
        reasons.append(f"the steptime library changed since the result was built "
                       f"(code_sha256 {want_code[:12]} -> {_current_code_sha()[:12]})")
    return reasons


def read_result(path: str | Path) -> tuple[dict | None, str | None]:
    """(document, None), or (None, one line saying why the file is not a usable result): missing,
    unreadable, empty, not JSON, not an object, or `claims` / `provenance` of the wrong type."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, f"result {path.name} does not exist"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"result {path.name} cannot be read ({exc.__class__.__name__})"
    if not text.strip():
        return None, f"result {path.name} is empty"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"result {path.name} is not valid JSON ({exc.msg}, line {exc.lineno})"
    if not isinstance(doc, dict):
        return None, f"result {path.name} is a JSON {type(doc).__name__}, not an object"
    claims = doc.get("claims")
    if claims is not None and not (isinstance(claims, list) and all(isinstance(c, dict) for c in claims)):
        return None, f"result {path.name}: 'claims' must be a list of objects, not {type(claims).__name__}"
    if doc.get("provenance") is not None and not isinstance(doc.get("provenance"), dict):
        return None, f"result {path.name}: 'provenance' must be an object"
    return doc, None


def _absent_modules(names) -> list[str]:
    """The importable module names of an optional experiment that are not installed."""
    import importlib.util

    return [n for n in names if importlib.util.find_spec(n) is None]


def _registry(root: Path) -> dict:
    return read_yaml(root / "config" / "experiments.yaml")["experiments"]


def manifest_listing(root: Path) -> dict:
    """raw/MANIFEST.yaml's file entries by path, as written (status and audit compare bytes against them).
    Parsed once per (file, mtime, size) in a process: `steptime status` / `audit` ask for it per experiment."""
    p = Path(root) / "raw" / "MANIFEST.yaml"
    try:
        st = p.stat()
    except OSError:
        st = None
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size) if st is not None else None
    return dict(_manifest_listing(key) if key is not None else _parse_listing(p))


@lru_cache(maxsize=4)
def _manifest_listing(key: tuple) -> dict:
    return _parse_listing(Path(key[0]))


def _parse_listing(p: Path) -> dict:
    man = read_yaml(p) or {}
    return {f["path"]: f for f in man.get("files") or [] if isinstance(f, dict) and "path" in f}


def expand_raw(root: Path, raw: list[str], listed: dict | None = None) -> list[tuple[str, str | None]]:
    """A registry's raw inputs as (file, why-not-checkable or None): a directory expands to every file
    under it (on disk and in raw/MANIFEST.yaml), so each of its bytes is checked by its own entry."""
    listed = manifest_listing(root) if listed is None else listed
    out = []
    for r in raw:
        d = root / r
        if d.is_dir():
            prefix = r.rstrip("/") + "/"
            on_disk = {str(p.relative_to(root)) for p in d.rglob("*") if p.is_file() and p.name != ".gitkeep"}
            in_manifest = {p for p in listed if p.startswith(prefix)}
            if not on_disk and not in_manifest:
                out.append((r, f"raw directory {r} is empty and has no raw/MANIFEST.yaml entry"))
            out += [(p, None) for p in sorted(on_disk | in_manifest)]
        else:
            out.append((r, None))
    return out


def _manifest_mismatch(root: Path, raw: list[str]) -> list[str]:
    """Registry raw inputs whose bytes differ from raw/MANIFEST.yaml (corrupted or edited); a directory
    input is checked file by file, and a file under it without a manifest entry (or an entry without
    its file) is a mismatch too."""
    listed = manifest_listing(root)
    out = []
    dirs = {r for r in raw if (root / r).is_dir()}
    for r, why in expand_raw(root, raw, listed):
        if why:
            out.append(why)
            continue
        if r == "raw/MANIFEST.yaml":
            continue
        in_dir = any(r.startswith(d.rstrip("/") + "/") for d in dirs)
        want = (listed.get(r) or {}).get("sha256")
        have = file_sha256(root / r)
        if have is None:
            if in_dir:
                out.append(f"raw file {r} is listed in raw/MANIFEST.yaml but missing")
            continue
        if want is None and (in_dir or r.startswith("raw/") and not r.startswith("raw/telemetry/")):
            out.append(f"raw file {r} is not listed in raw/MANIFEST.yaml (or its entry has no sha256)")
        elif want is not None and have != want:
            out.append(f"raw file {r} does not match its sha256 in raw/MANIFEST.yaml")
    return out


def experiment_status(root: str | Path | None = None) -> list[dict]:
    """One record per registered experiment: id, state, reasons, missing raw files, command."""
    root = Path(find_root(root))
    rows = []
    for eid, e in _registry(root).items():
        raw = list(e.get("raw") or [])
        missing = [r for r in raw if not (root / r).exists()]
        outputs = e.get("outputs") or [f"results/{eid.replace('.', '_')}.json"]
        want = f"results/{eid.replace('.', '_')}.json"
        results = [want] if want in outputs else [o for o in outputs if o.startswith("results/") and o.endswith(".json")][:1]
        declared = e.get("status", "planned")
        reasons: list[str] = []
        absent = _absent_modules(e.get("needs") or []) if declared == "optional" else []
        if declared == "planned":
            state = "planned"
        elif absent:
            state = "optional"
            reasons = [f"optional packages not installed ({', '.join(absent)}); install with: {e.get('install')}"]
        elif missing:
            state = "awaiting" if declared == "awaiting" else "missing-data"
            reasons = [f"raw file {m} is missing" for m in missing]
        elif not all((root / o).exists() for o in outputs):
            state = "missing"
            reasons = [f"output {o} has not been built" for o in outputs if not (root / o).exists()]
            if declared == "optional":
                reasons.append(f"optional, not in rule all; build with: {e.get('build')}")
        else:
            reasons = _manifest_mismatch(root, raw)
            for r in results:
                reasons += stale_reasons(root / r, root)
            state = "stale" if reasons else "ok"
        rows.append({
            "id": eid,
            "state": state,
            "declared": declared,
            "reasons": reasons,
            "outputs": outputs,
            "missing_raw": missing,
            "collect": e.get("collect") if (state == "awaiting" or declared == "awaiting") else None,
            "question": e.get("question", ""),
        })
    return rows


def status(as_json: bool = False, root: str | Path | None = None) -> int:
    """Print every experiment's state (informational: exit 0; `steptime audit` is the gate)."""
    rows = experiment_status(root)
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            line = f"{r['id']:<7} {r['state']:<12}"
            if r["state"] == "awaiting":
                line += f" awaiting telemetry ({len(r['missing_raw'])} file(s)); collect with: {r['collect']}"
            elif r["reasons"]:
                line += " " + r["reasons"][0] + (f" (+{len(r['reasons']) - 1} more)" if len(r["reasons"]) > 1 else "")
            print(line)
    return 0
