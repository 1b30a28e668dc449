"""Constants with provenance, and the calibration contract as code.

`Constants` resolves a constant for a GPU (per-GPU deploy reading > family > global),
and remembers where each value came from. `Calibration` records which cells set which
constant; `Calibration.check_disjoint(cells)` refuses to score any of them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from steptime.errors import CalibrationLeakError

DEFAULTS_FILE = Path(__file__).resolve().parent / "defaults.yaml"
PROVENANCES = ("DERIVED", "DATASHEET", "MEASURED", "FITTED")


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
    import yaml

    with open(DEFAULTS_FILE) as fh:
        return yaml.safe_load(fh)


class Constants:
    """A resolved set of constants. Immutable in use: `with_overrides` returns a new one."""

    def __init__(self, scopes: dict[str, dict[str, Constant]] | None = None):
        self._scopes = scopes if scopes is not None else _parse(_default_doc())
        self._cache: dict[tuple, Any] = {}

    @classmethod
    def default(cls) -> "Constants":
        return _default_constants()

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

    def get(self, name: str, gpu=None) -> Any:
        key = (name, getattr(gpu, "key", None))
        try:
            return self._cache[key]
        except KeyError:
            v = self.lookup(name, gpu).value
            self._cache[key] = v
            return v

    def with_overrides(self, overrides: dict[str, Any] | None = None, scope: str = "global",
                       provenance: str = "FITTED", source: str = "override", cells: Iterable = (),
                       experiment: str | None = None) -> "Constants":
        scopes = copy.deepcopy(self._scopes)
        table = scopes.setdefault(scope, {})
        for name, value in (overrides or {}).items():
            table[name] = Constant(name=name, value=value, provenance=provenance, source=source, scope=scope,
                                   experiment=experiment, cells=tuple(cells))
        return Constants(scopes)

    def without_gpu(self, gpu_key: str) -> "Constants":
        """Drop a GPU's own deploy readings (for scoring it held out)."""
        scopes = {k: v for k, v in self._scopes.items() if k != f"gpu.{gpu_key}"}
        return Constants(copy.deepcopy(scopes))

    def table(self) -> list[dict]:
        rows = []
        for scope, tbl in self._scopes.items():
            for c in tbl.values():
                rows.append({"scope": scope, "name": c.name, "value": c.value, "provenance": c.provenance,
                             "source": c.source, "experiment": c.experiment, "cells": len(c.cells)})
        return rows


@lru_cache(maxsize=1)
def _default_constants() -> Constants:
    return Constants()


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
                    cal.record(f"{scope}.{c.name}", [tuple(x) if isinstance(x, list) else x for x in c.cells],
                               note=c.source[:120])
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
        leak = self.all_cells() & set(map(_freeze, eval_cells))
        if leak:
            sample = sorted(map(str, leak))[:3]
            raise CalibrationLeakError(
                f"{len(leak)} evaluation cell(s) also set a constant (calibration contract), e.g. {', '.join(sample)}")

    def exclude(self, cells: list) -> list:
        """Return `cells` minus every calibration cell (order kept)."""
        used = self.all_cells()
        return [c for c in cells if _freeze(c) not in used]

    def to_dict(self) -> dict:
        return {name: {"n_cells": len(cells), "cells": sorted(map(_jsonable, cells), key=str),
                       "note": self.notes.get(name, "")} for name, cells in sorted(self.used.items())}


def _freeze(cell):
    if isinstance(cell, (list, tuple)):
        return tuple(_freeze(c) for c in cell)
    if hasattr(cell, "item"):
        return cell.item()
    return cell


def _jsonable(cell):
    if isinstance(cell, tuple):
        return [_jsonable(c) for c in cell]
    return cell


def update_defaults(updates: list[dict], path: Path = DEFAULTS_FILE) -> None:
    """Write settled constants into the defaults file (atomic).

    Each update: {scope: 'global'|'family.hopper'|'gpu.h100-sxm', name, value, provenance,
    source, experiment, cells}. Existing keys of other constants are kept.
    """
    import yaml

    from steptime.io import atomic_path

    with open(path) as fh:
        doc = yaml.safe_load(fh)
    consts = doc["constants"]
    for u in updates:
        scope = u["scope"]
        if scope == "global":
            table = consts.setdefault("global", {})
        else:
            kind, _, name = scope.partition(".")
            table = consts.setdefault(kind, {}).setdefault(name, {})
        entry = {"value": u["value"], "provenance": u["provenance"], "source": u["source"]}
        if u.get("experiment"):
            entry["experiment"] = u["experiment"]
        if u.get("cells") is not None:
            entry["cells"] = [list(c) if isinstance(c, tuple) else c for c in u["cells"]]
        table[u["name"]] = entry
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False, width=120)
    _default_doc.cache_clear()
    _default_constants.cache_clear()
