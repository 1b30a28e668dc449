"""Safe file writing and checksums: nothing is half-written (temp file, then rename)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from steptime.errors import DataError, InputError

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


def _umask() -> int:
    """The process umask, read without changing it where Linux tells it (/proc/self/status)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    with _UMASK_LOCK:  # elsewhere: set and restore at once
        old = os.umask(0o022)
        os.umask(old)
    return old


_UMASK_LOCK = threading.Lock()
# the signals that would end the process between the temp file and the rename without running any cleanup
_CLEANUP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class _Signalled(BaseException):
    """Raised in the main thread by a signal that arrives while a temp file exists, so it is removed first."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, frame):
    raise _Signalled(signum)


@contextlib.contextmanager
def _signals_unwind() -> Iterator[bool]:
    """Within it, SIGTERM/SIGHUP raise _Signalled (where they would kill the process outright: default
    handler, main thread); yields whether this context installed the handlers (and so re-delivers them)."""
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for s in _CLEANUP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(s) == signal.SIG_DFL:
                    installed[s] = signal.signal(s, _raise_signalled)
    try:
        yield bool(installed)
    finally:
        for s, h in installed.items():
            signal.signal(s, h)


def _sweep_stale(target: Path, suffix: str) -> None:
    """Remove temp files of `target` left by a writer that no longer runs (killed with SIGKILL, power loss):
    their names carry the writer's pid."""
    pat = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)\.[^/]*{re.escape(suffix)}$")
    with contextlib.suppress(OSError):
        for f in target.parent.iterdir():
            m = pat.match(f.name)
            if not m or int(m.group(1)) == os.getpid():
                continue
            try:
                os.kill(int(m.group(1)), 0)
            except ProcessLookupError:
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            except (PermissionError, OverflowError):
                continue  # alive under another user, or not a pid


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename onto `path` on success.

    The temp file is removed and `path` left untouched on any exception, and on SIGTERM/SIGHUP (which are
    then delivered as before: the process still ends by that signal); temp files of the same target left by
    a writer killed outright (SIGKILL) are removed by the next write. The file gets the mode a plain open()
    would give (0666 less the umask, e.g. 0644), not mkstemp's 0600.
    """
    target = Path(path)
    suffix = suffix or target.suffix
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(target, suffix)
    mode = 0o666 & ~_umask()
    with _signals_unwind() as owner:
        tmp_path = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=suffix, dir=target.parent)
            tmp_path = Path(tmp)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            yield tmp_path
            with contextlib.suppress(FileNotFoundError):
                os.chmod(tmp_path, mode)  # a writer that replaced the file: the same mode again
            os.replace(tmp_path, target)
        except BaseException as exc:
            if tmp_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    tmp_path.unlink()
            if isinstance(exc, _Signalled) and owner:
                signal.signal(exc.signum, signal.SIG_DFL)
                os.kill(os.getpid(), exc.signum)  # end as the signal would have
                raise SystemExit(128 + exc.signum) from None  # pragma: no cover (where it does not end us)
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
        if not p.is_dir():
            why = "is not a directory" if p.exists() else "does not exist"
            raise DataError(f"root {os.fspath(root)!r} {why}: the root must be the repository's directory, the one "
                            f"holding {MANIFEST_REL} and the raw/ files it lists")
        if not (p / MANIFEST_REL).is_file():
            raise DataError(f"{p / MANIFEST_REL}: no manifest here (root given explicitly): the root must be the "
                            f"repository's directory, the one holding {MANIFEST_REL} and the raw/ files it lists")
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


class DuplicateKeyError(DataError):
    """A YAML mapping gives one key twice (yaml_load)."""


def _yaml_loader():
    """libyaml's safe loader (PyYAML's where it was built without libyaml) refusing a key given twice in one mapping:
    YAML keeps the last without a word, so a field pasted twice in a spec or constants file would silently replace
    the first. Merge keys (`<<`) may still be overridden, as YAML means them to be. Built per call (a class, cheap beside
    the parse), so the module keeps no state."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key, line = self.construct_object(key_node), key_node.start_mark.line + 1
                    if key in seen:
                        name = str(getattr(key_node.start_mark, "name", "") or "")
                        where = f"{name}: " if name and not name.startswith("<") else ""
                        raise DuplicateKeyError(f"{where}key {key!r} is given twice in one mapping (lines {seen[key]} "
                                                f"and {line}): YAML would keep the last without a word; remove one")
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return Loader


def yaml_load(source: Any) -> Any:
    """yaml.safe_load of a string or an open stream, with libyaml's parser where PyYAML was built with it (the same
    safe constructor and resolver, so the same document; several times faster on the large spec and settled files);
    a key given twice in one mapping is refused (DuplicateKeyError, a DataError: _yaml_loader)."""
    import yaml

    return yaml.load(source, Loader=_yaml_loader())


def yaml_problem(exc) -> str:
    """A YAML parse error in one line: where (line) and what, without PyYAML's multi-line context (wave 39: a
    truncated raw/MANIFEST.yaml printed four lines of scanner context inside one `steptime data verify` item)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    what = getattr(exc, "problem", None) or type(exc).__name__
    return f"YAML error{where}: {str(what)[:80]}"


def read_yaml(path: str | os.PathLike) -> Any:
    """The YAML document in the file at `path` (yaml_load)."""
    with open(path, encoding="utf-8") as fh:
        return yaml_load(fh)


@lru_cache(maxsize=64)
def _read_yaml_cached(path: str, mtime_ns: int, size: int) -> Any:
    return read_yaml(path)


def read_yaml_cached(path: str | os.PathLike) -> Any:
    """read_yaml of a file read many times in one process, parsed once per (path, modification time, size); the
    caller gets its own copy, so nothing it changes reaches the next reader."""
    import copy

    p = Path(path).resolve()
    st = p.stat()
    return copy.deepcopy(_read_yaml_cached(str(p), st.st_mtime_ns, st.st_size))


# The seal of a settled or engine-constants file (wave 40; here since wave 42, below both its readers: `calibration`
# ship / Constants.load and specs.engines.fitted_engines)
SEAL_PREFIX = "# sha256 of every line above: "


def seal_text(text: str) -> str:
    """`text` (a whole file, ending with a newline) closed by its seal line: SEAL_PREFIX and the sha256 of its UTF-8
    bytes. A YAML comment, so every reader parses the same document; `check_seal` verifies it."""
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{SEAL_PREFIX}{hashlib.sha256(text.encode('utf-8')).hexdigest()}\n"


def check_seal(text: str, path, required: bool = True) -> None:
    """Refuse (one line naming `path`) a file whose seal line does not match the bytes above it, or, when `required`
    (what `ship` asks), one without a seal line: a settled file cut exactly at a line end still parses as YAML."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(SEAL_PREFIX.split(":")[0]):
        if required:  # checked before the file is parsed (wave 41): it may be any file at all
            raise InputError(f"{path}: not a sealed settled or engine-constants file: no closing seal line "
                             f"('{SEAL_PREFIX}...', the last line every settle step writes): truncated, or written "
                             "before wave 40? copy it again from results/calibration/ or rebuild it with snakemake")
        return
    m = re.fullmatch(re.escape(SEAL_PREFIX) + r"([0-9a-f]{64})", last)
    if not m or hashlib.sha256((body + "\n").encode("utf-8")).hexdigest() != m.group(1):
        raise InputError(f"{path}: its seal line does not match the lines above it (edited, or a part cut out?): "
                         "copy it again from results/calibration/ or rebuild it with snakemake")
