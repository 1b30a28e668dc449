"""raw/MANIFEST.yaml: the one place that says which file holds which table.

The repository root is `$STEPTIME_ROOT` if set, else the first directory at or above the
current one that holds raw/MANIFEST.yaml. Paths in the manifest are relative to that root.

Every loader reads a raw file through `Entry.checked_path`, which first checks the file's size
and sha256 against its manifest entry (`check_entry`; the digest is cached per process by
path, mtime and size, so a build hashes each file once). `load_manifest` refuses a manifest
cut short: a file under raw/ that it does not list, or a listed file that is missing
(`completeness`). Each failure is one DataError line naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from steptime.errors import DataError
from steptime.io import ENV_ROOT, MANIFEST_REL, file_sha256, find_root, read_yaml, yaml_problem  # noqa: F401 (re-exported)

# written by the pipeline's own collection rules (workflow/rules/collect.smk) and read by their
# parsers (steptime_collect), not through the manifest; a loader does not refuse raw/ for them
COLLECTED_REL = "raw/telemetry/"


def _meta(key: str, default: Any = None, *, required: bool = False) -> property:
    """A read-only attribute of an Entry backed by one key of its manifest mapping."""
    if required:
        return property(lambda self: self.meta[key], doc=f"manifest key {key!r} (required)")
    return property(lambda self: self.meta.get(key, default), doc=f"manifest key {key!r}, else {default!r}")


@dataclass(frozen=True)
class Entry:
    """One manifest entry (one file under raw/)."""

    root: Path
    meta: dict

    rel = _meta("path", required=True)   # str: the file, relative to the root
    table = _meta("table", "")           # str: the table it holds
    gpu = _meta("gpu")                   # str | None: the GPU it covers

    @property
    def path(self) -> Path:
        return self.root / self.rel

    @property
    def checked_path(self) -> Path:
        """The file's path once its size and sha256 match the manifest (DataError otherwise)."""
        return check_entry(self)

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get(key, default)


@dataclass(frozen=True)
class Manifest:
    root: Path
    doc: dict

    @property
    def path(self) -> Path:
        return self.root / MANIFEST_REL

    def entries(self, table: str | None = None, gpu: str | Iterable[str] | None = None,
                model: str | Iterable[str] | None = None) -> list[Entry]:
        gpus = _as_set(gpu)
        models = _as_set(model)
        out = []
        for meta in self.doc.get("files", []):
            if table is not None and meta.get("table") != table:
                continue
            if gpus is not None and meta.get("gpu") not in gpus:
                continue
            if models is not None and meta.get("model") not in models:
                continue
            out.append(Entry(self.root, meta))
        return out


def _as_set(x) -> set | None:
    if x is None:
        return None
    if isinstance(x, str):
        return {x}
    return set(x)


@lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> dict:
    import yaml

    try:
        doc = read_yaml(path)
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML ({yaml_problem(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise DataError(f"{path}: expected a mapping with a 'files' list")
    for i, e in enumerate(doc["files"]):
        if not isinstance(e, dict) or "path" not in e:
            raise DataError(f"{path}: files[{i}]: entry without a 'path'")
    return doc


def load_manifest(root: str | os.PathLike | None = None, *, complete: bool = True) -> Manifest:
    """The manifest of the repository at `root`. With `complete` (what loaders use) a manifest
    that does not match raw/ file for file is a DataError naming the first file off (see
    `completeness`); `steptime data verify` reads it with complete=False and lists every problem."""
    r = find_root(root)
    p = r / MANIFEST_REL
    st = p.stat()
    man = Manifest(r, _read(str(p), st.st_mtime_ns, st.st_size))
    if complete:
        unlisted, missing = completeness(man)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise DataError(f"{missing[0]}: listed in {MANIFEST_REL} but missing{more}; restore it "
                            f"(git checkout -- {missing[0]}) or re-vendor raw/")
        if unlisted:
            more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
            raise DataError(f"{unlisted[0]}: file under raw/ that {MANIFEST_REL} does not list{more}: the manifest "
                            f"is cut short or the file is stray; re-vendor raw/ (workflow/scripts/vendor_raw.py) "
                            f"or remove the file")
    return man


def completeness(man: Manifest, *, collected_ok: bool = True) -> tuple[list[str], list[str]]:
    """(files under raw/ the manifest does not list, listed files that are missing), each a
    sorted list of root-relative paths. With `collected_ok`, files under raw/telemetry/ (written
    by the collection rules, read by steptime_collect) count as listed."""
    listed = {e.rel for e in man.entries()}
    raw_dir = man.root / "raw"
    unlisted = []
    if raw_dir.is_dir():
        for f in raw_dir.rglob("*"):
            if f.is_dir():
                continue
            rel = f.relative_to(man.root).as_posix()
            if rel == MANIFEST_REL.as_posix() or rel in listed:
                continue
            if collected_ok and rel.startswith(COLLECTED_REL):
                continue
            unlisted.append(rel)
    missing = [rel for rel in listed if not (man.root / rel).is_file()]
    return sorted(unlisted), sorted(missing)


def check_entry(entry: Entry) -> Path:
    """`entry`'s file, once present with the size and sha256 its manifest entry records; else a
    one-line DataError naming the file. The digest is cached by (path, mtime, size)."""
    p = entry.path
    try:
        st = p.stat()
    except OSError:
        raise DataError(f"{entry.rel}: file missing (listed in {MANIFEST_REL}); restore it "
                        f"(git checkout -- {entry.rel}) or re-vendor raw/") from None
    want = entry.get("sha256")
    if not want:
        raise DataError(f"{entry.rel}: its {MANIFEST_REL} entry records no sha256, so the file cannot be checked")
    size = entry.get("bytes")
    if size is not None and st.st_size != size:
        raise DataError(f"{entry.rel}: {st.st_size} bytes, {MANIFEST_REL} says {size}: the file is truncated, "
                        f"corrupted or changed; restore it (git checkout -- {entry.rel}) or re-vendor raw/")
    got = file_sha256(p)
    if got != want:
        raise DataError(f"{entry.rel}: sha256 {got[:12]}... does not match {MANIFEST_REL} ({str(want)[:12]}...): the "
                        f"file is corrupted or changed; restore it (git checkout -- {entry.rel}) or re-vendor raw/")
    return p


# the statuses whose registered raw inputs must be in raw/ now (awaiting: GPU telemetry still to collect)
REGISTERED_NOW = ("built", "optional")


def registered_problems(paths: Iterable[str], root: str | os.PathLike | None = None, *,
                        needed_by: str = "") -> list[tuple[str, str]]:
    """(path, one-line problem) for each registered raw input that is gone. Registered raw inputs are an
    experiment's `raw:` in config/experiments.yaml: the record of what it reads that does not live in the
    manifest, so a file removed together with its manifest entry is still caught. A file must exist and be
    listed in raw/MANIFEST.yaml (files under raw/telemetry/, collected, need only exist); a directory must
    hold at least one listed file, and every file the manifest lists under it. `needed_by` names who reads
    it in the message (e.g. 'E1.3')."""
    r = find_root(root)
    who = f"registered raw input of {needed_by} in config/experiments.yaml" if needed_by else \
        "registered raw input in config/experiments.yaml"
    fix = "restore it (git checkout -- {p}) or change the registry"
    out: list[tuple[str, str]] = []
    paths = list(paths)
    man = None
    if any(p != MANIFEST_REL.as_posix() and not p.startswith(COLLECTED_REL) for p in paths):
        if not (r / MANIFEST_REL).is_file():
            return [(MANIFEST_REL.as_posix(), f"raw file missing: {MANIFEST_REL} ({who}): "
                     + fix.format(p=MANIFEST_REL))]
        man = load_manifest(r, complete=False)
    listed = sorted(e.rel for e in man.entries()) if man is not None else []
    listed_set = set(listed)
    for p in paths:
        path = r / p
        if path.is_dir():
            under = [x for x in listed if x.startswith(p.rstrip("/") + "/")]
            if not under:
                out.append((p, f"registered raw directory {p} holds no file raw/MANIFEST.yaml lists ({who})"))
                continue
            gone = [x for x in under if not (r / x).is_file()]
            if gone:
                more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
                out.append((gone[0], f"raw file missing: {gone[0]}{more} (listed in raw/MANIFEST.yaml under {p}, "
                                     f"a {who}): " + fix.format(p=gone[0])))
        elif not path.is_file():
            out.append((p, f"raw file missing: {p} ({who}): " + fix.format(p=p)))
        elif p != MANIFEST_REL.as_posix() and not p.startswith(COLLECTED_REL) and p not in listed_set:
            out.append((p, f"raw file not in raw/MANIFEST.yaml: {p} ({who}): its manifest entry is gone; "
                           "re-vendor raw/ (workflow/scripts/vendor_raw.py) or change the registry"))
    return out


def registry_problems(root: str | os.PathLike | None = None, registry: dict | None = None) -> list[tuple[str, str]]:
    """registered_problems over every experiment of the registry (config/experiments.yaml under `root`, or
    `registry`, its `experiments` mapping) whose status needs its data now (built, optional)."""
    r = find_root(root)
    if registry is None:
        p = r / "config" / "experiments.yaml"
        if not p.is_file():
            return []  # a data-only checkout (raw/ without the registry): nothing registered to check
        registry = (read_yaml(p) or {}).get("experiments", {})
    by_path: dict[str, list[str]] = {}
    for eid, exp in registry.items():
        if isinstance(exp, dict) and exp.get("status") in REGISTERED_NOW:
            for path, _ in registered_problems(exp.get("raw") or [], r, needed_by=eid):
                by_path.setdefault(path, []).append(eid)
    out = []
    for path, eids in by_path.items():  # one line per path, naming every experiment that registers it
        raw = next(x for x in registry[eids[0]].get("raw") or [] if path == x or path.startswith(x.rstrip("/") + "/"))
        out += [(p, m) for p, m in registered_problems([raw], r, needed_by=", ".join(eids)) if p == path]
    return out


def table_registry_problems(files: Iterable[str], registry: dict, root: str | os.PathLike | None = None,
                            ) -> list[tuple[str, str]]:
    """The registered raw inputs that are gone and belong to the tidy table whose raw files (manifest paths) are
    `files`: of each experiment in `registry` (its `experiments` mapping) that registers one of these files or
    a directory holding one, the problems of registered_problems on a path the manifest does not give to another
    table and, when unlisted, with a file name one of `files` has (gemm_perf.bf16.parquet: a GEMM table's)."""
    r = find_root(root)
    mine = set(files)
    names = {Path(f).name for f in mine}
    listed = {e.rel for e in load_manifest(r, complete=False).entries()}

    def covers(p: str) -> bool:
        return p in mine or any(f.startswith(p.rstrip("/") + "/") for f in mine)

    out = []
    for eid, exp in registry.items():
        if exp.get("status") not in REGISTERED_NOW or not any(covers(p) for p in exp.get("raw") or []):
            continue
        for path, msg in registered_problems(exp.get("raw") or [], r, needed_by=eid):
            if path in mine or (path not in listed and Path(path).name in names):
                out.append((path, msg))
    return out
