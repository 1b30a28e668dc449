"""raw/MANIFEST.yaml: the one place that says which file holds which table.

The repository root is `$STEPTIME_ROOT` if set, else the first directory at or above the
current one that holds raw/MANIFEST.yaml. Paths in the manifest are relative to that root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from steptime.errors import DataError

MANIFEST_REL = Path("raw") / "MANIFEST.yaml"
ENV_ROOT = "STEPTIME_ROOT"


def find_root(root: str | os.PathLike | None = None) -> Path:
    """The repository root holding raw/MANIFEST.yaml (argument, then $STEPTIME_ROOT, then cwd upwards)."""
    if root is not None:
        p = Path(root).resolve()
        if not (p / MANIFEST_REL).is_file():
            raise DataError(f"{p / MANIFEST_REL}: no manifest here (root given explicitly)")
        return p
    env = os.environ.get(ENV_ROOT)
    if env:
        p = Path(env).resolve()
        if not (p / MANIFEST_REL).is_file():
            raise DataError(f"{p / MANIFEST_REL}: no manifest here (from ${ENV_ROOT})")
        return p
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / MANIFEST_REL).is_file():
            return d
    raise DataError(f"no {MANIFEST_REL} in {here} or any parent; set ${ENV_ROOT} to the repository root")


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

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path) as fh:
            doc = yaml.load(fh, Loader=loader)
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise DataError(f"{path}: expected a mapping with a 'files' list")
    for i, e in enumerate(doc["files"]):
        if not isinstance(e, dict) or "path" not in e:
            raise DataError(f"{path}: files[{i}]: entry without a 'path'")
    return doc


def load_manifest(root: str | os.PathLike | None = None) -> Manifest:
    r = find_root(root)
    p = r / MANIFEST_REL
    st = p.stat()
    return Manifest(r, _read(str(p), st.st_mtime_ns, st.st_size))
