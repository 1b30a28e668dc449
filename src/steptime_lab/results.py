"""Result files: question, metrics, claims and a provenance block, written atomically.

A result is deterministic: the same inputs and code give the same bytes (sorted keys,
rounded floats, no wall-clock time). Provenance names every input with its sha256, the
steptime version, a hash of the library source (`code_sha256`, which pins the code
without the chicken-and-egg of a commit id inside a committed file), the config used,
and which cells calibrated which constant.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable

from steptime.io import sha256_file, write_json

RESULT_KEYS = ("id", "question", "status", "metrics", "claims", "provenance")


def code_sha256(root: str | os.PathLike | None = None) -> str:
    """sha256 over the code's source files (path + bytes, .py and .yaml), sorted by path: all of
    src/ (the product steptime, the lab steptime_lab and the collectors steptime_collect), the shipped
    constants included (no build step writes there)."""
    base = Path(root) if root else Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(base.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(base)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def claim(text: str, value: Any, comparison: str, target: Any = None, met: bool | None = None) -> dict:
    """One claim: what is asserted, the measured value, against what, and whether it holds."""
    out = {"claim": text, "value": value, "comparison": comparison}
    if target is not None:
        out["target"] = target
    if met is not None:
        out["met"] = bool(met)
    return out


def target(targets: dict | None, key: str, experiment: str):
    """A pass/fail target from the registry (config/experiments.yaml `targets:`, the one home of
    targets): a missing one is one clear error, never a default typed in the code."""
    if key not in (targets or {}):
        from steptime.errors import InputError

        raise InputError(f"{experiment}: no target {key!r} under its `targets:` in config/experiments.yaml")
    return targets[key]


def provenance(inputs: Iterable[str | os.PathLike], config: dict | None = None,
               calibration: dict | None = None, rule: str | None = None,
               script: str | None = None) -> dict:
    from steptime import __version__

    files = {}
    for p in sorted({str(x) for x in inputs}):
        path = Path(p)
        if path.is_file():
            files[p] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        elif path.is_dir():
            files[p] = {"sha256": None, "bytes": None, "note": "directory"}
        else:
            raise FileNotFoundError(f"provenance: input {p!r} does not exist")
    return {
        "inputs": files,
        "steptime_version": __version__,
        "code_sha256": code_sha256(),
        "config": config or {},
        "calibration": calibration or {},
        "rule": rule,
        "script": script,
    }


def rule_inputs(smk, exclude=("code",)) -> list[str]:
    """Every file a Snakemake job declared as input, less the named groups in `exclude` (the
    library code, which `code_sha256` covers)."""
    def flat(v):
        return [str(v)] if isinstance(v, (str, os.PathLike)) else [q for x in v for q in flat(x)]

    skip = {q for key in exclude if hasattr(smk.input, key) for q in flat(getattr(smk.input, key))}
    return sorted(set(flat(list(smk.input))) - skip)


def rule_provenance(smk, *, script: str, calibration: dict | None = None, exclude=("code",)) -> dict:
    """Provenance of a pipeline script's result, from what its rule declared: the input files
    (`rule_inputs` less the named groups in `exclude`: the library code, and cached model files
    whose bytes hold wall seconds), the params it ran with as its config (questions left out:
    they are in the result itself), the rule and the script."""
    params = {k: v for k, v in dict(smk.params.items()).items() if not (k == "question" or k[:1] == "q" and k[1:2].isdigit())}
    return provenance(rule_inputs(smk, exclude), config=params, calibration=calibration, rule=smk.rule,
                      script=script)


def write_result(path: str | os.PathLike, *, id: str, question: str, metrics: dict,
                 claims: list[dict], provenance: dict, status: str = "built",
                 extra: dict | None = None) -> dict:
    doc = {
        "id": id,
        "question": question,
        "status": status,
        "metrics": metrics,
        "claims": claims,
        "provenance": provenance,
    }
    if extra:
        overlap = set(extra) & set(doc)
        if overlap:
            raise ValueError(f"write_result: extra keys clash with {sorted(overlap)}")
        doc.update(extra)
    write_json(path, doc)
    return doc
