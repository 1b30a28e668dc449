"""Constants with provenance, and the calibration contract as code.

`Constants` resolves a constant for a GPU (per-GPU deploy reading > family > global),
and remembers where each value came from. `Calibration` records which cells set which
constant; `Calibration.check_disjoint(cells)` refuses to score any of them.

Where constants come from, and who writes what:

- `defaults.yaml` (shipped in the package) is what `Constants.default()` reads. Only
  `ship(settled_files)` (the `steptime calibration ship` command) writes it.
- The pipeline's settle rules write *settled files* (`results/calibration/*.yaml`: a list of
  update records with provenance), each closed by a seal line (`# sha256 of every line above: ...`,
  `seal_text`) that `ship` requires and checks, so a copy cut at a line end is refused. A rule that needs them names them as inputs and loads
  `Constants.load(DEFAULTS_FILE, *settled)` and passes those constants down to every
  prediction (`constants=`): nothing process-wide decides what a prediction uses, and nothing
  is written into src/.
- The grey box's per-term corrections (`greybox.npz`, rule settle_greybox_corrections) are data
  too: `ship` copies a settled .npz to GREYBOX_FILE, which only `steptime predict --explain` reads.
- A `Constants` also carries the fitted engine constants (`engines`: R2.3's
  {engine: {gpu: {field: entry}}}): `Constants.default()` holds the shipped copy
  (`specs.engines.FITTED_FILE`), `Constants.load` only the engine-constants files it is given.
- Calibration cells are records: `{gpu, table, cell}` for a named cell of one GPU's table
  (e.g. `{gpu: h100-sxm, table: gemm, cell: [1, 10240, 10240]}`), `{sample}` for a
  described sample of many cells.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from steptime.errors import CalibrationLeakError, InputError
from steptime.specs import engines as E
from steptime.terms.comm_bounds import check_updates
from steptime.io import atomic_path, read_yaml, yaml_load, yaml_problem
from steptime.io import SEAL_PREFIX, check_seal, seal_text  # noqa: F401 - the seal, re-exported where wave 40 put it
from steptime.readonly import ReadOnlyDict
from steptime.validation import MAX_SETTLED_BYTES, check_regular_file

DEFAULTS_FILE = Path(__file__).resolve().parent / "defaults.yaml"
# the grey box's per-term corrections (steptime.greybox; `steptime predict --explain`), written only by `ship`
GREYBOX_FILE = Path(__file__).resolve().parent / "greybox.npz"
# ASSUMED: a stated design choice (its source says why and which experiment tests it)
PROVENANCES = ("DERIVED", "DATASHEET", "MEASURED", "FITTED", "ASSUMED")


@dataclass(frozen=True)
class Constant:
    name: str
    value: Any
    provenance: str
    source: str
    scope: str = "global"
    experiment: str | None = None
    cells: tuple = ()

    def __post_init__(self):
        if self.provenance not in PROVENANCES:
            raise ValueError(f"constant {self.name}: provenance {self.provenance!r} not in {PROVENANCES}")


def _parse(doc: dict) -> dict[str, dict[str, Constant]]:
    """Flatten the YAML into {scope: {name: Constant}} with scopes 'global', 'family.x', 'gpu.y'."""
    out: dict[str, dict[str, Constant]] = {}
    consts = doc["constants"]

    def add(scope, table):
        out[scope] = {
            name: Constant(name=name, value=e["value"], provenance=e["provenance"], source=e.get("source", ""),
                           scope=scope, experiment=e.get("experiment"), cells=tuple(e.get("cells", ())))
            for name, e in (table or {}).items()
        }

    add("global", consts.get("global"))
    for fam, table in (consts.get("family") or {}).items():
        add(f"family.{fam}", table)
    for gpu, table in (consts.get("gpu") or {}).items():
        add(f"gpu.{gpu}", table)
    return out


@lru_cache(maxsize=1)
def _default_doc() -> dict:
    return read_yaml(DEFAULTS_FILE)


_REQUIRED = object()  # Constants.get without a default: a missing name is an error


class Constants:
    """A resolved set of constants, with the fitted engine constants. Immutable in use:
    `with_overrides`, `without_gpu` and `with_engines` return new ones."""

    def __init__(self, scopes: dict[str, dict[str, Constant]] | None = None, engines: dict | None = None):
        """`scopes` {scope: {name: Constant}} (None: the shipped defaults.yaml); `engines` the fitted
        engine constants {engine: {gpu: {field: entry}}} (None: none)."""
        scopes = scopes if scopes is not None else _parse(_default_doc())
        # read-only tables of frozen Constants: a Constants changes only by building another
        self._scopes = ReadOnlyDict({s: ReadOnlyDict(t) for s, t in scopes.items()})  # picklable: plan's workers get it
        self.engines: dict = copy.deepcopy(engines) if engines else {}
        self._cache: dict[tuple, Any] = {}  # memo of get(): a pure function of the read-only tables

    @classmethod
    def default(cls) -> "Constants":
        """The shipped constants: defaults.yaml with the shipped fitted engine constants (FITTED_FILE)."""
        return _default_constants()

    @classmethod
    def load(cls, base: str | Path = DEFAULTS_FILE, *settled) -> "Constants":
        """A constants file overlaid with settled files (in order), as `ship` would write it.

        Each of `settled` is a path or a list of paths (as a rule's named input gives them). A
        fitted engine-constants file among them (R2.3's) becomes `engines`; without one, no engine
        fits apply (a pipeline rule reads them only as a declared input, never the shipped copy)."""
        for s in settled:
            if not isinstance(s, (str, Path, list, tuple)):
                raise InputError(f"Constants.load: a settled file is a path or a list of paths, got {type(s).__name__}")
        paths = [q for s in settled for q in ([s] if isinstance(s, (str, Path)) else list(s))]
        loaded = [(p, _read_input(p)[0]) for p in paths]  # each file read once (wave 41)
        engine_files = [p for p, doc in loaded if _is_engine_doc(doc)]
        if len(engine_files) > 1:
            raise InputError(f"Constants.load: one engine-constants file at most, got {engine_files}")
        docs = [_check_settled_doc(doc, p) for p, doc in loaded if p not in engine_files]
        engines = E.fitted_engines(next(doc for p, doc in loaded if p in engine_files)) if engine_files else {}
        return cls(_parse(settle_doc(_read_base(base), docs)), engines)

    def with_engines(self, fitted) -> "Constants":
        """A copy whose fitted engine constants are `fitted` (a path, a fitted document or
        {engine: {gpu: ...}}; {} for none)."""
        return Constants(self._scopes, E.fitted_engines(fitted))

    def engine(self, name=None):
        """The engine profile `name` (default: the default engine) with these fitted engine constants."""
        return E.get_engine(name, fitted=self.engines)

    def lookup(self, name: str, gpu=None) -> Constant:
        """The Constant that applies to `gpu` (a steptime.specs.GPU or None)."""
        if gpu is not None:
            for scope in (f"gpu.{gpu.key}", f"family.{gpu.architecture}"):
                c = self._scopes.get(scope, {}).get(name)
                if c is not None:
                    return c
        c = self._scopes.get("global", {}).get(name)
        if c is None:
            where = f" for {gpu.key}" if gpu is not None else ""
            raise KeyError(f"no constant {name!r}{where}")
        return c

    def get(self, name: str, gpu=None, default: Any = _REQUIRED) -> Any:
        """The value of constant `name` for `gpu`; a name this set lacks raises KeyError, or gives
        `default` where one is passed (a factor that older constant sets predate: its neutral value)."""
        key = (name, getattr(gpu, "key", None))
        try:
            return self._cache[key]
        except KeyError:
            try:
                v = self.lookup(name, gpu).value
            except KeyError:
                if default is _REQUIRED:
                    raise
                return default
            self._cache[key] = v
            return v

    def with_overrides(self, overrides: dict[str, Any] | None = None, scope: str = "global",
                       provenance: str = "FITTED", source: str = "override", cells: Iterable = (),
                       experiment: str | None = None) -> "Constants":
        scopes = copy.deepcopy({s: dict(t) for s, t in self._scopes.items()})
        table = scopes.setdefault(scope, {})
        for name, value in (overrides or {}).items():
            table[name] = Constant(name=name, value=value, provenance=provenance, source=source, scope=scope,
                                   experiment=experiment, cells=tuple(cells))
        return Constants(scopes, self.engines)

    def calibrated(self, gpu) -> bool:
        """Whether `gpu` (a key or a steptime.specs.GPU) has deploy readings of its own here (a
        `gpu.<key>` scope). Without them it is predicted from its datasheet and its family's
        constants, and every output labels it `uncalibrated` (the AMD GPUs always are)."""
        return f"gpu.{getattr(gpu, 'key', gpu)}" in self._scopes

    def calibration_note(self, gpu) -> str | None:
        """One line for outputs when `gpu` is uncalibrated (None when it has readings)."""
        if self.calibrated(gpu):
            return None
        from steptime.specs import get_gpu

        g = get_gpu(gpu)
        return (f"{g.key} is uncalibrated: no deploy readings; predicted from its datasheet and the {g.architecture} "
                "family constants (see `steptime gpus`)")

    def without_gpu(self, gpu_key: str) -> "Constants":
        """Drop a GPU's own deploy readings (for scoring it held out)."""
        scopes = {k: dict(v) for k, v in self._scopes.items() if k != f"gpu.{gpu_key}"}
        return Constants(copy.deepcopy(scopes), self.engines)

    def table(self) -> list[dict]:
        rows = []
        for scope, tbl in self._scopes.items():
            for c in tbl.values():
                rows.append({"scope": scope, "name": c.name, "value": c.value, "provenance": c.provenance,
                             "source": c.source, "experiment": c.experiment, "cells": len(c.cells)})
        return rows


# lru_caches of the immutable shipped files (defaults.yaml, FITTED_FILE): not state that decides a
# prediction (only `ship`, which rewrites those files, clears them)
@lru_cache(maxsize=1)
def _default_constants() -> Constants:
    return Constants(_parse(_default_doc()), E.fitted_engines(E.FITTED_FILE))


# ---------------------------------------------------------------------------------------
@dataclass
class Calibration:
    """Which cells set which constant. The evaluation side of the contract.

    Cells are hashable identifiers (e.g. ('h100-sxm', 'gemm', m, n, k)). Register every
    cell that informed a constant with `record`; `check_disjoint` raises
    CalibrationLeakError if any evaluation cell is among them.
    """

    used: dict[str, set] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_constants(cls, constants: "Constants | None" = None) -> "Calibration":
        """Every cell a constants file says set one of its constants (defaults.yaml by default)."""
        constants = constants or Constants.default()
        cal = cls()
        for scope, table in constants._scopes.items():
            for c in table.values():
                if c.cells:
                    cal.record(f"{scope}.{c.name}", [cell_key(x) for x in c.cells], note=c.source[:120])
        return cal

    def record(self, constant: str, cells: Iterable, note: str = "") -> None:
        self.used.setdefault(constant, set()).update(map(_freeze, cells))
        if note:
            self.notes[constant] = note

    def all_cells(self) -> set:
        out: set = set()
        for cells in self.used.values():
            out |= cells
        return out

    def check_disjoint(self, eval_cells: Iterable) -> None:
        used = self.all_cells()  # one union, then one look-up per evaluation cell
        leak = {c for c in map(_freeze, eval_cells) if c in used}
        if leak:
            sample = sorted(map(str, leak))[:3]
            raise CalibrationLeakError(
                f"{len(leak)} evaluation cell(s) also set a constant (calibration contract), e.g. {', '.join(sample)}")

    def exclude(self, cells: list) -> list:
        """Return `cells` minus every calibration cell (order kept)."""
        used = self.all_cells()
        return [c for c in cells if _freeze(c) not in used]

    def to_dict(self) -> dict:
        return {name: {"n_cells": len(cells), "cells": sorted(map(_cell_json, cells), key=str),
                       "note": self.notes.get(name, "")} for name, cells in sorted(self.used.items())}


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _freeze(cell):
    """A hashable cell of plain Python values (lists to tuples, numpy scalars to Python); a tuple that already is one
    (what the cell builders make) is returned as it is, without walking it again."""
    if type(cell) is tuple and all(type(c) in _PLAIN for c in cell):
        return cell
    if isinstance(cell, (list, tuple)):
        return tuple(_freeze(c) for c in cell)
    if hasattr(cell, "item"):
        return cell.item()
    return cell


def _cell_json(cell):
    """A recorded cell for a result file: a {gpu, table, cell} record where it names one."""
    try:
        return cell_record(cell)
    except ValueError:
        return _jsonable(cell)


def _jsonable(cell):
    if isinstance(cell, tuple):
        return [_jsonable(c) for c in cell]
    return cell


# ---------------------------------------------------------------------------------------
# calibration cells as records
def cell_record(cell) -> dict:
    """One calibration cell as a record.

    `{gpu, table, cell}` for a named cell of one GPU's table (from a record, a list/tuple
    `(gpu, table, *cell)` or the older text form `"gpu: [gpu, table, ...]"`); `{sample}` for a
    described sample of many cells (free text)."""
    import re

    if isinstance(cell, dict):
        if set(cell) == {"sample"} and isinstance(cell["sample"], str):
            return dict(cell)
        if set(cell) != {"gpu", "table", "cell"}:
            raise ValueError(f"calibration cell record {cell!r}: keys must be gpu, table, cell (or sample)")
        return {"gpu": str(cell["gpu"]), "table": str(cell["table"]), "cell": [_jsonable(_freeze(c)) for c in cell["cell"]]}
    if isinstance(cell, (list, tuple)) and len(cell) >= 2 and all(isinstance(c, str) for c in cell[:2]):
        return {"gpu": cell[0], "table": cell[1], "cell": [_jsonable(_freeze(c)) for c in cell[2:]]}
    if isinstance(cell, str):
        m = re.fullmatch(r"([\w.-]+): (\[.*\])", cell.strip())
        if m:
            inner = yaml_load(m.group(2))
            if isinstance(inner, list) and inner and inner[0] == m.group(1):
                return cell_record(inner)
        return {"sample": cell}
    raise ValueError(f"calibration cell {cell!r}: expected a record, (gpu, table, *cell) or a description")


def cell_key(cell) -> Any:
    """The hashable key of a cell (as evaluation cells are written): (gpu, table, *cell), or the text."""
    r = cell_record(cell)
    if "sample" in r:
        return r["sample"]
    return (r["gpu"], r["table"], *(_freeze(c) for c in r["cell"]))


# ---------------------------------------------------------------------------------------
# settled files and the shipped defaults
def _table(consts: dict, scope: str) -> dict:
    if scope == "global":
        return consts.setdefault("global", {})
    kind, _, name = scope.partition(".")
    if kind not in ("family", "gpu") or not name:
        raise ValueError(f"constant scope {scope!r}: expected global, family.<name> or gpu.<key>")
    return consts.setdefault(kind, {}).setdefault(name, {})


def apply_updates(doc: dict, updates: list[dict]) -> dict:
    """`doc` (a constants document) with `updates` written in; cells become records. Returns a copy."""
    doc = copy.deepcopy(doc)
    consts = doc["constants"]
    for u in updates:
        if u["provenance"] not in PROVENANCES:
            raise ValueError(f"constant {u['name']}: provenance {u['provenance']!r} not in {PROVENANCES}")
        entry = {"value": u["value"], "provenance": u["provenance"], "source": u["source"]}
        if u.get("experiment"):
            entry["experiment"] = u["experiment"]
        if u.get("cells") is not None:
            entry["cells"] = [cell_record(c) for c in u["cells"]]
        _table(consts, u["scope"])[u["name"]] = entry
    return doc


def settle_doc(doc: dict, settled: list[dict]) -> dict:
    """`doc` with every settled file applied in order. Each settled file replaces what its
    experiments set before: constants of `doc` recorded as set by one of them (`experiment`)
    and not set again are dropped (so a GPU keeps only its current deploy readings)."""
    doc = copy.deepcopy(doc)
    for kind, tables in doc["constants"].items():  # every cell as a record
        for table in ([tables] if kind == "global" else list((tables or {}).values())):
            for e in (table or {}).values():
                if e.get("cells") is not None:
                    e["cells"] = [cell_record(c) for c in e["cells"]]
    for s in settled:
        ups = s["updates"]
        exps = {u.get("experiment") for u in ups} - {None}
        names = {(u["scope"], u["name"]) for u in ups}
        consts = doc["constants"]
        for scope_kind in ("global", "family", "gpu"):
            tables = {"global": consts.get("global") or {}} if scope_kind == "global" else {
                f"{scope_kind}.{k}": v for k, v in (consts.get(scope_kind) or {}).items()}
            for scope, table in tables.items():
                for name in list(table or {}):
                    if table[name].get("experiment") in exps and (scope, name) not in names:
                        del table[name]
        doc = apply_updates(doc, ups)
    return doc


def _read_input(path, sealed: bool = False) -> tuple:
    """(document, bytes) of a YAML file a user hands in (`steptime calibration ship`, Constants.load), its bytes read
    ONCE: one line if it is missing, not a regular file, too large, not UTF-8 text, ends mid-line, not YAML, or uses
    a tag safe_load refuses (!!python/...). A seal line present is checked, and `sealed` (ship) requires one
    (`check_seal`), on the very bytes that are then parsed and, by ship, written (wave 41: ship read each file two to
    four times, the seal checked last on a second read and the engine file copied from a third)."""
    import yaml

    p = check_regular_file(path, "constants file", MAX_SETTLED_BYTES)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not a constants file (not UTF-8 text: byte at offset {exc.start})") from None
    if text and not text.endswith("\n"):  # a truncated copy that still parses would ship its first entries only
        raise InputError(f"{p}: ends mid-line (every settled or constants file the pipeline writes ends with a "
                         "newline): truncated? copy it again from results/calibration/")
    check_seal(text, p, required=sealed)  # before parsing: the seal vouches for exactly these bytes
    try:
        doc = yaml_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{p}: not a constants file ({yaml_problem(exc)})") from None
    return doc, data


def _read_input_yaml(path, sealed: bool = False) -> dict:
    """The document of `_read_input`."""
    return _read_input(path, sealed)[0]


def _read_base(path) -> dict:
    """A constants file Constants.load overlays (defaults.yaml or a copy): one line if it is not a file, not YAML or
    has no `constants:` mapping (wave 40: a traceback for a folder, an empty file or a list)."""
    if not isinstance(path, (str, Path)):
        raise InputError(f"Constants.load: the constants file is a path, got {type(path).__name__}")
    doc = _read_input_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("constants"), dict):
        raise InputError(f"{path}: not a constants file (no `constants:` mapping, as defaults.yaml has)")
    return doc


_UPDATE_KEYS = ("scope", "name", "value", "provenance", "source")


def read_settled(path, sealed: bool = False) -> dict:
    """A settled file (results/calibration/*.yaml): {settled_by, inputs, updates: [...]}, each update a
    mapping with scope, name, value, provenance and source (one line naming the first that is not); `sealed`:
    its closing seal line is required (`check_seal`; a seal line present is always checked)."""
    return _check_settled_doc(_read_input_yaml(path, sealed), path)


def _check_settled_doc(doc, path) -> dict:
    """read_settled's checks of a parsed settled file `doc` (read from `path`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("updates"), list):
        raise InputError(f"{path}: not a settled-constants file (no 'updates' list)")
    for i, u in enumerate(doc["updates"]):
        if not isinstance(u, dict):
            raise InputError(f"{path}: updates[{i}] is not a mapping")
        missing = [k for k in _UPDATE_KEYS if k not in u]
        if missing:
            raise InputError(f"{path}: updates[{i}] lacks {', '.join(missing)}")
        if u["provenance"] not in PROVENANCES:
            raise InputError(f"{path}: updates[{i}] ({u['name']}): provenance {u['provenance']!r} not in {PROVENANCES}")
        try:
            _table({}, str(u["scope"]))
        except ValueError as exc:
            raise InputError(f"{path}: updates[{i}]: {exc}") from None
    return doc


def write_settled(path, updates: list[dict], settled_by: str, inputs: Iterable = ()) -> dict:
    """Write a settled file: the update records (cells as records), who settled them, from what."""
    ups = apply_updates({"constants": {}}, updates)  # validates provenance/scope, normalises cells
    out = []
    for u in updates:
        e = _table(ups["constants"], u["scope"])[u["name"]]
        out.append({"scope": u["scope"], "name": u["name"], **e})
    doc = {"settled_by": settled_by, "inputs": sorted(map(str, inputs)), "updates": out}
    _dump_yaml(doc, path, sealed=True)
    return doc


def _dump_yaml(doc: dict, path, sealed: bool = False) -> None:
    """Block YAML with short lists of scalars (a cell's shape) on one line; atomic; `sealed`: closed by its seal
    line (`seal_text`)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _list(d, data):
        flow = all(isinstance(x, (int, float, str, bool)) and len(str(x)) < 40 for x in data) and len(data) <= 12
        return d.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(list, _list)
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write(seal_text(text) if sealed else text)


def _write_defaults(doc: dict, path: Path) -> None:
    _dump_yaml(doc, path)
    if Path(path).resolve() == DEFAULTS_FILE:
        _default_doc.cache_clear()
        _default_constants.cache_clear()


def is_engine_constants(path) -> bool:
    """True for a fitted engine-constants file (R2.3's results/calibration/engine_constants.yaml:
    `engines:` per engine and GPU), False for a settled file (`updates:`)."""
    return _is_engine_doc(_read_input_yaml(path))


def _is_engine_doc(doc) -> bool:
    return isinstance(doc, dict) and "engines" in doc and "updates" not in doc


def _write_bytes(data: bytes, dest: Path) -> None:
    """`data` (the bytes a ship checked) written to `dest`, whole or not at all."""
    with atomic_path(dest) as tmp:
        Path(tmp).write_bytes(data)


def ship_engine_constants(src, dest: Path | None = None) -> dict:
    """Copy R2.3's fitted engine constants (byte for byte, provenance and cells included) to where
    the engine loader reads fitted overrides (`specs.engines.FITTED_FILE`), so `steptime predict
    --engine <name>` on a GPU that holds readings uses them. Every entry is checked first: each
    engine is a profile, each field one of its fields, each provenance a known one; the bytes written are the
    bytes checked (one read)."""
    doc, data = _read_input(src, sealed=True)
    return _write_engine_constants(data, _check_engine_doc(doc, src), dest)


def _write_engine_constants(data: bytes, fields: list[str], dest) -> dict:
    """Write an engine-constants file's checked bytes `data` (its checked `fields`) where the engine loader reads them."""
    dest = Path(E.FITTED_FILE if dest is None else dest)
    _write_bytes(data, dest)
    _default_constants.cache_clear()
    return {"engine_constants": str(dest), "fields": fields}


def _check_engine_doc(doc, src) -> list[str]:
    """ship_engine_constants' checks of the parsed file `doc` (from `src`, its seal already checked), before anything
    is written: the fields it would ship, sorted."""
    if not _is_engine_doc(doc):
        raise InputError(f"{src}: not an engine-constants file (no `engines:` mapping, as R2.3's has)")
    shipped = []
    for eng, per_gpu in (doc.get("engines") or {}).items():
        profile = E.get_engine(eng, fitted={})  # unknown engine: ValueError naming it
        for gpu, fields in (per_gpu or {}).items():
            for name, e in (fields or {}).items():
                if name not in profile.values:
                    raise InputError(f"{src}: engine {eng} has no field {name!r} (gpu {gpu})")
                if e.get("provenance") not in PROVENANCES:
                    raise InputError(f"{src}: {eng}/{gpu}/{name}: provenance {e.get('provenance')!r} not in "
                                     f"{PROVENANCES}")
                shipped.append(f"{eng}@{gpu}:{name}")
    E.get_engine(next(iter(doc.get("engines") or {E.default_engine(): {}})), fitted=doc)  # loads as a whole
    return sorted(shipped)


def ship_greybox(src, dest: Path | None = None) -> dict:
    """Copy the grey box's settled corrections (results/calibration/greybox.npz, rule
    settle_greybox_corrections) to where `steptime predict --explain` reads them (GREYBOX_FILE),
    after checking it is an .npz of arrays (no pickles) whose `meta` names its models (the bytes checked are the
    bytes written: one read)."""
    data = _read_greybox(src)
    return _write_greybox(data, _check_greybox(data, src), dest)


def _write_greybox(data: bytes, models: list[str], dest) -> dict:
    """Write a grey-box corrections file's checked bytes `data` (its checked `models`) where --explain reads them."""
    dest = Path(GREYBOX_FILE if dest is None else dest)
    _write_bytes(data, dest)
    return {"greybox": str(dest), "models": models}


def _read_greybox(src) -> bytes:
    """The bytes of a grey-box corrections file, read once (one line if it cannot be)."""
    p = check_regular_file(src, "grey-box corrections file", MAX_SETTLED_BYTES)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None


def _check_greybox(data: bytes, src) -> list[str]:
    """ship_greybox's checks of the file's bytes `data` (from `src`), before anything is written: the grey-box models
    the file holds, sorted."""
    import io
    import zipfile

    if not zipfile.is_zipfile(io.BytesIO(data)):  # numpy would read it as a pickle and say so
        raise InputError(f"{src}: not a grey-box corrections file (not an .npz, numpy's zip of arrays)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            names = set(z.files)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{src}: not a grey-box corrections file ({exc})") from None
    models = meta.get("models") if isinstance(meta, dict) else None
    if not isinstance(models, dict) or not models:
        raise InputError(f"{src}: grey-box corrections without `models` in its meta")
    for name, m in models.items():
        if m.get("setting") != "none" and f"{name}/value" not in names:
            raise InputError(f"{src}: grey-box model {name!r} has no trees")
    return sorted(models)


def ship(settled: Iterable[str | Path], path: Path = DEFAULTS_FILE, engine_path: Path | None = None,
         greybox_path: Path | None = None) -> dict:
    """Write the settled files into the shipped constants file (the one explicit writer of
    defaults.yaml: `steptime calibration ship results/calibration/{gemm,step,comm}.yaml
    results/calibration/engine_constants.yaml`), in order; a fitted engine-constants file among
    them (R2.3's) goes to the engine loader's FITTED_FILE instead (`engine_path`). Returns what changed."""
    settled = list(settled)
    grey_files = [p for p in settled if str(p).endswith(".npz")]
    if len(grey_files) > 1:
        raise InputError(f"ship: one grey-box corrections file at most, got {grey_files}")
    settled = [p for p in settled if p not in grey_files]
    # each file read once (wave 41): its seal checked on those bytes before they are parsed; what is written is them
    loaded = [(p, *_read_input(p, sealed=True)) for p in settled]
    engine_files = [(p, doc, data) for p, doc, data in loaded if _is_engine_doc(doc)]
    if len(engine_files) > 1:
        raise InputError(f"ship: one engine-constants file at most, got {[p for p, _, _ in engine_files]}")
    settled = [(p, _check_settled_doc(doc, p)) for p, doc, _ in loaded if not _is_engine_doc(doc)]
    for p, d in settled:
        try:
            check_updates(d["updates"])
        except InputError as exc:
            raise InputError(f"{p}: {exc}") from None
    docs = [d for _, d in settled]
    # every file checked once, before any is written: a bad one leaves all three as they were
    engines = [(data, _check_engine_doc(doc, p)) for p, doc, data in engine_files]
    grey = [(data, _check_greybox(data, p)) for p, data in ((p, _read_greybox(p)) for p in grey_files)]
    before = read_yaml(path)
    after = settle_doc(before, docs)
    _write_defaults(after, Path(path))

    def flat(d):
        return {f"{scope}:{name}": e for scope, t in _parse(d).items() for name, e in t.items()}

    b, a = flat(before), flat(after)
    out = {"added": sorted(set(a) - set(b)), "removed": sorted(set(b) - set(a)),
           "changed": sorted(k for k in set(a) & set(b) if a[k] != b[k])}
    for data, fields in engines:
        out.update(_write_engine_constants(data, fields, engine_path))
    for data, models in grey:
        out.update(_write_greybox(data, models, greybox_path))
    return out


def update_defaults(updates: list[dict], path: Path = DEFAULTS_FILE) -> None:
    """Write update records into a constants file (atomic); other constants are kept."""
    _write_defaults(apply_updates(read_yaml(path), updates), Path(path))


def check_constants(constants) -> None:
    """Refuse `constants` that are neither None (the shipped defaults) nor a steptime Constants: the one check of
    every entry point that takes them (predict_step, predict_steps, predict_ops, the serving timers)."""
    if constants is not None and not isinstance(constants, Constants):
        raise InputError(f"constants must be a steptime Constants (or None for the defaults), got "
                         f"{type(constants).__name__}")
