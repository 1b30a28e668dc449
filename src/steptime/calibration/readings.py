"""What a held-out GPU costs in readings, counted from the calibration records themselves.

DESIGN's contract: a GPU steptime has never seen is read three times per family (GEMM, NCCL
all-reduce, and the wall clock of each serving engine): nine readings in all. The count here is
taken from the cell records that every shipped constant carries (`defaults.yaml`: records
{gpu, table, cell}) and from the fitted engine constants (`engine_constants.yaml`: per engine and
GPU, the wall-clock steps read), never from labels a result writes about itself.
"""

from __future__ import annotations

from types import MappingProxyType

from steptime.calibration import DEFAULTS_FILE
from steptime.io import read_yaml
from steptime.specs.engines import FITTED_FILE

FAMILIES = ("gemm", "nccl", "wallclock")
PER_FAMILY = 3
CONTRACT = (f"nine readings per held-out GPU, three per family ({PER_FAMILY} GEMM + {PER_FAMILY} NCCL all-reduce + "
            f"{PER_FAMILY} wall-clock steps per serving engine)")
# cell-record tables -> reading family; tables outside these (host-scheduler rows, a light-kernel
# cell where a GPU has no GEMM table) are counted apart under `other`, never hidden
TABLE_FAMILY = MappingProxyType({"gemm": "gemm", "allreduce": "nccl"})


def _yaml(doc):
    if doc is None or isinstance(doc, dict):
        return doc

    return read_yaml(doc) or {}


def readings_by_family(constants_doc=None, engine_doc=None) -> dict:
    """{gpu: {'gemm': {cells}, 'nccl': {cells}, 'wallclock': {engine: {cells}}, 'other': {table: {cells}}}}
    from a constants document or a resolved `Constants` (default: the shipped defaults.yaml) and a fitted engine-constants
    document (default: the shipped engine_constants.yaml; absent: no wall-clock readings)."""
    if hasattr(constants_doc, "table") and hasattr(constants_doc, "lookup"):  # a resolved Constants
        cdoc = {"constants": {"gpu": {s: {c.name: {"cells": list(c.cells)} for c in t.values()}
                                      for s, t in constants_doc._scopes.items()}}}
    else:
        cdoc = _yaml(constants_doc) if constants_doc is not None else _yaml(DEFAULTS_FILE)
    if engine_doc is None:
        edoc = _yaml(FITTED_FILE) if FITTED_FILE.exists() else {}
    else:
        edoc = _yaml(engine_doc)
    out: dict = {}

    def gpu_entry(g):
        return out.setdefault(g, {"gemm": set(), "nccl": set(), "wallclock": {}, "other": {}})

    consts = cdoc.get("constants", {}) or {}
    scopes = [consts.get("global") or {}] + [t for kind in ("family", "gpu") for t in (consts.get(kind) or {}).values()]
    for table in scopes:
        for e in (table or {}).values():
            for rec in (e or {}).get("cells") or []:
                if not isinstance(rec, dict) or "gpu" not in rec:
                    continue  # a sample description ({"sample": ...}) of a shared fit, not a GPU's reading
                cell = (rec["table"], tuple(rec["cell"]))
                fam = TABLE_FAMILY.get(rec["table"])
                entry = gpu_entry(rec["gpu"])
                if fam:
                    entry[fam].add(cell)
                else:
                    entry["other"].setdefault(rec["table"], set()).add(cell)
    for sec in ("engines", "constants", "scales"):
        for engine, per_gpu in ((edoc or {}).get(sec) or {}).items():
            for g, tbl in (per_gpu or {}).items():
                for e in (tbl or {}).values():
                    cells = {tuple(c) for c in (e or {}).get("cells") or []}
                    gpu_entry(g)["wallclock"].setdefault(engine, set()).update(cells)
    return out


def count_readings(constants_doc=None, engine_doc=None) -> dict:
    """{gpu: {'gemm': n, 'nccl': n, 'wallclock': n (the most over its engines), 'wallclock_engines': {engine: n},
    'total': gemm + nccl + wallclock, 'other': {table: n}}} (see readings_by_family)."""
    out = {}
    for g, r in sorted(readings_by_family(constants_doc, engine_doc).items()):
        wc = {e: len(c) for e, c in sorted(r["wallclock"].items())}
        n = {"gemm": len(r["gemm"]), "nccl": len(r["nccl"]), "wallclock": max(wc.values(), default=0)}
        out[g] = {**n, "wallclock_engines": wc, "total": sum(n.values()),
                  "other": {t: len(c) for t, c in sorted(r["other"].items())}}
    return out
