"""Safe file writing and checksums: nothing is half-written (temp file, then rename)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from steptime.errors import DataError

# The repository root (what serve's trace names and the lab's loaders resolve against): the
# directory holding raw/MANIFEST.yaml.
MANIFEST_REL = Path("raw") / "MANIFEST.yaml"
ENV_ROOT = "STEPTIME_ROOT"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=4096)
def _cached_sha256(path: str, mtime_ns: int, size: int) -> str:
    return sha256_file(path)


def file_sha256(path: str | os.PathLike) -> str | None:
    """sha256 of a file, cached per (resolved path, mtime, size) so repeated checks in one process
    read each file once; None when the file does not exist."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None
    if not p.is_file():
        return None
    return _cached_sha256(str(p.resolve()), st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename onto `path` on success.

    On any exception the temporary file is removed and `path` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix or target.suffix, dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def _default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.bool_):
            return bool(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def round_floats(obj: Any, digits: int = 6) -> Any:
    """Round floats to `digits` significant digits so results are stable across BLAS builds."""
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return None
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, digits) for v in obj]
    try:
        import numpy as np

        if isinstance(obj, np.floating):
            return round_floats(float(obj), digits)
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.ndarray):
            return round_floats(obj.tolist(), digits)
    except ImportError:  # pragma: no cover
        pass
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(round_floats(obj), indent=1, sort_keys=True, default=_default, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    text = dumps(obj)
    with atomic_path(path) as tmp:
        tmp.write_text(text)


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
