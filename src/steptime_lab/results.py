"""Result files: question, metrics, claims and a provenance block, written atomically.

A result is deterministic: the same inputs and code give the same bytes (sorted keys,
rounded floats, no wall-clock time). Provenance names every input with its sha256, the
steptime version, a hash of the library source (`code_sha256`, which pins the code
without the chicken-and-egg of a commit id inside a committed file), the Python and numeric
library versions it ran on (`environment`: the pins of `constraints.txt` that can move a number),
the config used, and which cells calibrated which constant.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable

from steptime.errors import SteptimeError
from steptime.io import dumps, sha256_file, write_json
from steptime import __version__
from steptime.errors import InputError

RESULT_KEYS = ("id", "question", "status", "metrics", "claims", "provenance")

# The installed distributions whose version can move a result's numbers (numerics, fitting, tables,
# parquet bytes, figures). Each is pinned in constraints.txt, the environment the committed results
# were built in; a result records the versions it ran on, and tests/test_environment_pins.py checks the
# committed results against the pins.
NUMERIC_DISTRIBUTIONS = ("numpy", "scipy", "pandas", "scikit-learn", "pyarrow", "matplotlib", "seaborn",
                         "pyyaml", "snakemake")
DIGEST_KEY = "result_sha256"


def result_digest(doc: dict) -> str:
    """sha256 of a result document as written (every key but `result_sha256` itself, canonical JSON):
    recorded by `write_result` in the file, recomputed by `steptime audit`, so an edit of a value
    together with its verdict after the build is caught."""
    body = {k: v for k, v in doc.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


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


OPS = ("<=", "<", ">=", ">", "==", "in")
_RULE = re.compile(r"^(all|any|count>=(\d+)|argmin|argmax)$")
ROUND_REL = 1e-4  # result files round floats to 6 significant digits: a value this close to its target is a tie


class ClaimSchemaError(SteptimeError, ValueError):
    """A claim whose verdict cannot be recomputed from its value, operator and target."""


def _compare(value, op: str, target, abs_value: bool = False):
    """True/False for one comparison; None where a stored (rounded) float sits on the boundary (either verdict).
    An integer value against an integer target (a count) is compared exactly: 3 readings <= 3 is True, and a
    claim saying otherwise is refused."""
    if value is None:
        return False  # nothing measured meets no target
    if op == "in":
        return value in target
    exact = all(isinstance(x, int) and not isinstance(x, bool) for x in (value, target))
    if op == "==":
        if isinstance(value, (int, float)) and isinstance(target, (int, float)) and not isinstance(value, bool):
            if value == target:
                return True
            return None if not exact and math.isclose(value, target, rel_tol=ROUND_REL, abs_tol=1e-12) else False
        return value == target
    v = abs(float(value)) if abs_value else float(value)
    t = float(target)
    if not exact and math.isclose(v, t, rel_tol=ROUND_REL, abs_tol=1e-12):
        return None  # a rounded float on its target: either verdict stands (a count is never rounded)
    return {"<=": v <= t, "<": v < t, ">=": v >= t, ">": v > t}[op]


def verdict(c: dict):
    """The verdict a structured claim's data gives (True / False), None on a rounding boundary.

    value (a number, a pick, or a mapping / list), `key` (the entry of a mapping or list compared),
    `abs` (compare |value|), `op` among <=, <, >=, >, ==, in, `target`, and for a mapping `rule`:
    all / any / count>=k of its entries (None entries are not applicable and skipped).
    Raises ClaimSchemaError when the data cannot give a verdict."""
    op, tgt, value = c.get("op"), c.get("target"), c.get("value")
    if op not in OPS:
        raise ClaimSchemaError(f"operator {op!r} is not one of {', '.join(OPS)}")
    if "target" not in c:
        raise ClaimSchemaError("a verdict needs a target")
    if op == "in" and not isinstance(tgt, list):
        raise ClaimSchemaError(f"'in' needs a list target, not {tgt!r}")
    if op in ("<=", "<", ">=", ">") and (not isinstance(tgt, (int, float)) or isinstance(tgt, bool)):
        raise ClaimSchemaError(f"{op!r} needs a numeric target, not {tgt!r}")
    key = c.get("key")
    if key is not None:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise ClaimSchemaError(f"value has no entry {key!r}") from None
    if isinstance(value, (dict, list)):
        rule = c.get("rule")
        m = _RULE.match(str(rule or ""))
        if not m:
            raise ClaimSchemaError(f"a {type(value).__name__} value needs a rule (all, any, count>=k, argmin or "
                                   f"argmax), not {rule!r}")
        if m.group(1) in ("argmin", "argmax"):  # the key of the smallest / largest entry is compared
            if not isinstance(value, dict):
                raise ClaimSchemaError(f"{m.group(1)} needs a mapping value")
            scored = {k: x for k, x in value.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}
            if not scored:
                raise ClaimSchemaError("a mapping value with no applicable entry")
            pick = (min if m.group(1) == "argmin" else max)(scored, key=scored.get)
            return _compare(pick, op, tgt)
        items = [x for x in (value.values() if isinstance(value, dict) else value) if x is not None]
        if not items:
            raise ClaimSchemaError("a mapping value with no applicable entry")
        got = [_compare(x, op, tgt, c.get("abs", False)) for x in items]
        if m.group(1) == "all":
            return False if False in got else (None if None in got else True)
        if m.group(1) == "any":
            return True if True in got else (None if None in got else False)
        k = int(m.group(2))
        lo, hi = got.count(True), got.count(True) + got.count(None)
        return True if lo >= k else (False if hi < k else None)
    if op in ("<=", "<", ">=", ">") and value is not None and (isinstance(value, (bool, str)) or not isinstance(value, (int, float))):
        raise ClaimSchemaError(f"{op!r} needs a numeric value, not {value!r}")
    return _compare(value, op, tgt, c.get("abs", False))


def claim(text: str, value: Any, comparison: str, target: Any = None, met: bool | None = None, *,
          op: str | None = None, unit: str | None = None, rule: str | None = None, key: Any = None,
          abs_value: bool = False) -> dict:
    """One claim: what is asserted, the measured value, against what, and whether it holds.

    A claim with a verdict (`met`) states its comparison as data (`op`, `target`, `unit`; `rule` for a
    mapping or list, `key` for one entry of it, `abs_value` to compare |value|) and the verdict is
    recomputed here: one that cannot be recomputed, or that disagrees with `met`, is a ClaimSchemaError
    when the result is written. A claim without a verdict is descriptive (no op, no target)."""
    out = {"claim": text, "value": value, "comparison": comparison}
    for k, v in (("target", target), ("op", op), ("unit", unit), ("rule", rule), ("key", key)):
        if v is not None:
            out[k] = v
    if abs_value:
        out["abs"] = True
    if met is None:
        if op is not None or target is not None:
            raise ClaimSchemaError(f"claim {text[:60]!r}: a target or operator without a verdict ('met')")
        return out
    out["met"] = bool(met)
    if op is None:
        raise ClaimSchemaError(f"claim {text[:60]!r}: a verdict needs its comparison as data (op=, target=)")
    try:
        got = verdict(json.loads(dumps(out)))  # recomputed from the value as it will be stored
    except ClaimSchemaError as exc:
        raise ClaimSchemaError(f"claim {text[:60]!r}: {exc}") from None
    if got is not None and got != bool(met):
        raise ClaimSchemaError(f"claim {text[:60]!r}: {out.get('value')!r} {op} {target!r} gives {got}, "
                               f"but the experiment says met={bool(met)}")
    return out


def validate_claims(claims, experiment: str = "") -> None:
    """Every claim of a result, as it will be stored, is recomputable: a ClaimSchemaError otherwise."""
    if not isinstance(claims, list):
        raise ClaimSchemaError(f"{experiment}: claims must be a list, not {type(claims).__name__}")
    for i, c in enumerate(json.loads(dumps(claims)), start=1):
        if not isinstance(c, dict) or "claim" not in c or "value" not in c:
            raise ClaimSchemaError(f"{experiment}:{i}: a claim needs 'claim' and 'value'")
        if c.get("met") is None:
            if c.get("op") is not None or c.get("target") is not None:
                raise ClaimSchemaError(f"{experiment}:{i}: a target or operator without a verdict ('met')")
            continue
        if c.get("op") is None:
            raise ClaimSchemaError(f"{experiment}:{i}: a verdict needs its comparison as data (op=, target=)")
        try:
            got = verdict(c)
        except ClaimSchemaError as exc:
            raise ClaimSchemaError(f"{experiment}:{i}: {exc}") from None
        if got is not None and got != c["met"]:
            raise ClaimSchemaError(f"{experiment}:{i}: {c['value']!r} {c['op']} {c['target']!r} gives {got}, "
                                   f"but the claim says met={c['met']}")


def target(targets: dict | None, key: str, experiment: str):
    """A pass/fail target from the registry (config/experiments.yaml `targets:`, the one home of
    targets): a missing one is one clear error, never a default typed in the code."""
    if key not in (targets or {}):
        raise InputError(f"{experiment}: no target {key!r} under its `targets:` in config/experiments.yaml")
    return targets[key]


def environment() -> dict:
    """The Python and the versions of NUMERIC_DISTRIBUTIONS this process runs on (None where one is
    not installed), so a reader can tell which environment built a result."""
    import platform
    from importlib import metadata

    def version(name: str):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(),
            "packages": {name: version(name) for name in NUMERIC_DISTRIBUTIONS},
            "numeric": numeric_environment()}


# Environment variables that change which kernels numpy / BLAS run, or how many threads (wave 37, helper repro)
NUMERIC_ENV_VARS = ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR")


def _cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo's first `model name`; platform.processor() elsewhere)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def numeric_environment() -> dict:
    """What decides a result's last digits on this machine: the CPU model, the SIMD extensions numpy dispatches
    to (its baseline, and the dispatch targets this CPU has: AVX512 and AVX2 builds of log/exp round differently),
    the BLAS library (vendor, version, the core type it picked, threads), the CPU count and the environment
    variables that override any of these. Recorded in every result's provenance (`environment`), so a reviewer
    whose last digits differ can see why; `steptime audit` does not compare it (a CPU may differ)."""
    import os as _os
    import platform

    out: dict = {"machine": platform.machine(), "cpu_model": _cpu_model(), "cpu_count": _os.cpu_count()}
    try:
        from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__

        out["numpy_simd"] = {"baseline": list(__cpu_baseline__),
                             "dispatched": [f for f in __cpu_dispatch__ if __cpu_features__.get(f)],
                             "not_found": [f for f in __cpu_dispatch__ if not __cpu_features__.get(f)]}
    except ImportError:  # another numpy layout: say so rather than guess
        out["numpy_simd"] = None
    try:
        from threadpoolctl import threadpool_info

        out["threadpools"] = [{k: t.get(k) for k in ("user_api", "internal_api", "version", "architecture",
                                                     "threading_layer", "num_threads")} for t in threadpool_info()]
    except ImportError:
        out["threadpools"] = None
    out["env"] = {k: _os.environ.get(k) for k in NUMERIC_ENV_VARS if _os.environ.get(k) is not None}
    return out


def provenance(inputs: Iterable[str | os.PathLike], config: dict | None = None,
               calibration: dict | None = None, rule: str | None = None,
               script: str | None = None) -> dict:
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
        "environment": environment(),
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
    validate_claims(claims, id)
    doc = json.loads(dumps(doc))  # as it will read back (rounded floats, no NaN), then hashed
    doc[DIGEST_KEY] = result_digest(doc)
    write_json(path, doc)
    return doc


def write_experiment(smk, *, id: str, doc: dict, script: str, figure=None, calibration: dict | None = None,
                     extra: dict | None = None, peers: dict | None = None) -> dict:
    """The tail every thin experiment script shares: the result file (`doc`'s metrics and claims, the
    question from the rule's params, `rule_provenance`, `peers` recorded in it when given) at
    `smk.output.result`, one log line with the claims met, then the figure: `figure(stem)` draws at
    `smk.output.fig` without its extension."""
    prov = rule_provenance(smk, calibration=calibration, script=script)
    if peers:
        prov["peers"] = peers
    out = write_result(smk.output.result, id=id, question=smk.params.question, metrics=doc["metrics"],
                       claims=doc["claims"], provenance=prov, extra=extra)
    logging.info("%s: %d claims, %d met", id, len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
    if figure is not None:
        figure(os.path.splitext(str(smk.output.fig))[0])
    return out
