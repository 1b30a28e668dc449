"""`steptime audit`: every claim of every result, whether it holds, whether it is current,
and the chain from the number back to the raw bytes.

For each registered experiment whose result is built, the audit reads `results/<ID>.json`
and reports:

- each claim (id `<ID>:<n>`, 1-based in the file's order) with its value, its verdict
  (`holds`: yes / no / info, the experiment's own `met`), and its *check*: the verdict
  recomputed from the value, the comparison and the target where the comparison is an
  explicit inequality (`<= 10%`, `>= 1.5`), and the value being present and finite;
- whether the result is stale (`steptime_lab.status.stale_reasons`: an input's sha256 or the
  library code changed since it was built);
- the provenance chain: result file -> rule -> script -> declared inputs (tidy tables and
  other results, sha256 recorded vs now) -> the registry's raw files (sha256 in
  raw/MANIFEST.yaml vs now, and the manifest's source/version/original path) -> steptime
  version and code hash.

A missed target is reported (holds: no), not counted as a failure: the project reports its
losses. The audit fails (exit 1) when a result with data is stale, a raw file no longer
matches the manifest, or a claim's check fails; `--strict` also fails on missed targets.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from steptime.errors import SteptimeError

_OP = re.compile(r"^\s*(<=|>=|<|>|==)\s*([-+0-9.eE]+)\s*(%?)")
_OPS = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
        ">": lambda a, b: a > b, "==": lambda a, b: a == b}
_ROUND = 1e-4  # result files round floats to ~6 significant digits


class AuditError(SteptimeError, ValueError):
    """An audit was asked for an experiment or claim the registry does not know."""


@dataclass
class ClaimAudit:
    id: str
    claim: str
    value: object
    comparison: str
    target: object
    holds: str            # "yes", "no" or "info"
    check: str            # "ok", "not recomputable" or "failed: ..."

    @property
    def failed(self) -> bool:
        return self.check.startswith("failed")


@dataclass
class ResultAudit:
    id: str
    state: str            # ok, stale, awaiting, missing, missing-data, planned
    result: str | None
    rule: str | None = None
    script: str | None = None
    steptime_version: str | None = None
    code_sha256: str | None = None
    inputs: list = field(default_factory=list)
    raw: list = field(default_factory=list)
    stale: list = field(default_factory=list)
    claims: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["claims"] = [c.__dict__ | {"failed": c.failed} for c in self.claims]
        return d


def _finite(v) -> bool:
    if v is None:
        return False
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, str):
        return v.strip().lower() not in ("nan", "inf", "-inf", "")
    if isinstance(v, dict):  # a None inside a mapping means "not applicable" for that key
        return all(x is None or _finite(x) for x in v.values())
    if isinstance(v, list):
        return all(x is None or _finite(x) for x in v)
    return True


def check_claim(c: dict) -> str:
    """'ok', 'not recomputable' or 'failed: <why>' for one claim of a result file."""
    value, met, target = c.get("value"), c.get("met"), c.get("target")
    if "claim" not in c or "value" not in c:
        return "failed: a claim needs 'claim' and 'value'"
    if not _finite(value):
        return f"failed: value {value!r} is missing or not finite"
    if target is not None and met is None:
        return "failed: the claim names a target but no verdict ('met')"
    # an explicit operator (claim(..., op="<=")) wins; else an inequality at the start of the comparison
    m = _OP.match(f"{c['op']} {target}") if c.get("op") and isinstance(target, (int, float)) else None
    m = m or _OP.match(str(c.get("comparison", "")))
    if not m or met is None or isinstance(value, (dict, list, str)) or isinstance(value, bool):
        return "not recomputable"
    op, num, pct = m.groups()
    bound = float(num) / (100.0 if pct else 1.0)
    if isinstance(target, (int, float)) and not math.isclose(bound, float(target), rel_tol=1e-6, abs_tol=1e-12):
        return f"failed: comparison {c.get('comparison')!r} and target {target!r} disagree"
    if math.isclose(float(value), bound, rel_tol=_ROUND, abs_tol=1e-12):
        return "ok"  # on the boundary within the rounding of the stored value: either verdict stands
    got = _OPS[op](float(value), bound)
    if bool(got) != bool(met):
        return f"failed: {value!r} {op} {bound:g} is {bool(got)} but the result says met={bool(met)}"
    return "ok"


def primary_result(eid: str, outputs: list[str]) -> str | None:
    """The result file of an experiment: results/<ID with '.' -> '_'>.json (else its first JSON output)."""
    want = f"results/{eid.replace('.', '_')}.json"
    if want in outputs:
        return want
    js = [o for o in outputs if o.startswith("results/") and o.endswith(".json")]
    return js[0] if js else None


def _claims(eid: str, doc: dict) -> list[ClaimAudit]:
    out = []
    for i, c in enumerate(doc.get("claims") or [], start=1):
        met = c.get("met")
        out.append(ClaimAudit(id=f"{eid}:{i}", claim=str(c.get("claim", "")), value=c.get("value"),
                              comparison=str(c.get("comparison", "")), target=c.get("target"),
                              holds="info" if met is None else ("yes" if met else "no"), check=check_claim(c)))
    return out


def audit(root: str | Path | None = None, select: str | None = None) -> list[ResultAudit]:
    """Audit every registered experiment (or one ID, or one claim `<ID>:<n>`)."""
    from steptime_lab.data.manifest import find_root
    from steptime_lab.status import _registry, experiment_status, file_sha256, manifest_listing

    root = Path(find_root(root))
    if select is not None and (not isinstance(select, str) or not select.strip()):
        raise AuditError(f"empty or non-text selection {select!r}: give an experiment ID (E2.1) or a claim (E2.1:3)")
    want_id, want_claim = (select.split(":", 1) + [None])[:2] if select else (None, None)
    rows = experiment_status(root)
    known = {r["id"] for r in rows}
    if want_id is not None and want_id not in known:
        raise AuditError(f"unknown experiment {want_id!r}; registered: {', '.join(sorted(known))}")
    listed = manifest_listing(root)
    reg = _registry(root)
    out = []
    for r in rows:
        if want_id is not None and r["id"] != want_id:
            continue
        res = primary_result(r["id"], r["outputs"])
        a = ResultAudit(id=r["id"], state=r["state"], result=res, stale=list(r["reasons"]))
        for p in reg[r["id"]].get("raw") or []:
            m = listed.get(p) or {}
            a.raw.append({"path": p, "sha256_manifest": m.get("sha256"), "sha256_now": file_sha256(root / p),
                          "source": m.get("source"), "version": m.get("version") or m.get("commit"),
                          "original_path": m.get("original_path")})
        if res and (root / res).is_file() and r["state"] in ("ok", "stale"):
            doc = json.loads((root / res).read_text())
            prov = doc.get("provenance") or {}
            a.rule, a.script = prov.get("rule"), prov.get("script")
            a.steptime_version, a.code_sha256 = prov.get("steptime_version"), prov.get("code_sha256")
            for p, meta in sorted((prov.get("inputs") or {}).items()):
                a.inputs.append({"path": p, "sha256_recorded": (meta or {}).get("sha256"),
                                 "sha256_now": file_sha256(root / p)})
            a.claims = _claims(r["id"], doc)
            if want_claim is not None:
                a.claims = [c for c in a.claims if c.id == select]
                if not a.claims:
                    raise AuditError(f"{want_id} has no claim {select!r} (claims are numbered {want_id}:1.."
                                     f"{want_id}:{len(doc.get('claims') or [])})")
        elif want_claim is not None:
            raise AuditError(f"{want_id} has no built result, so no claim {select!r}")
        out.append(a)
    return out


def failures(audits: list[ResultAudit], strict: bool = False) -> list[str]:
    """One line per reason the audit fails (empty when it passes)."""
    bad = []
    for a in audits:
        if a.state == "stale":
            bad.append(f"{a.id}: stale: {a.stale[0]}" + (f" (+{len(a.stale) - 1} more)" if len(a.stale) > 1 else ""))
        if a.state == "missing-data":
            bad.append(f"{a.id}: {a.stale[0]}")
        for c in a.claims:
            if c.failed:
                bad.append(f"{c.id}: check {c.check}")
            elif strict and c.holds == "no":
                bad.append(f"{c.id}: target missed (--strict)")
    return bad


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
    return s if len(s) <= 80 else s[:77] + "..."


def report(audits: list[ResultAudit], verbose: bool = False) -> str:
    lines = []
    for a in audits:
        n_no = sum(c.holds == "no" for c in a.claims)
        n_yes = sum(c.holds == "yes" for c in a.claims)
        lines.append(f"{a.id} [{a.state}] {a.result or ''}: {len(a.claims)} claims ({n_yes} hold, {n_no} missed)")
        for s in a.stale:
            lines.append(f"    ! {s}")
        if a.result and (verbose or len(audits) == 1):
            lines.append(f"    rule {a.rule} <- script {a.script}; steptime {a.steptime_version}, "
                         f"code {str(a.code_sha256)[:12]}")
            for i in a.inputs:
                same = "=" if i["sha256_recorded"] == i["sha256_now"] else "CHANGED"
                lines.append(f"    input {i['path']} sha256 {str(i['sha256_recorded'])[:12]} {same}")
            for rw in a.raw:
                same = "=" if rw["sha256_manifest"] == rw["sha256_now"] else "MISMATCH"
                lines.append(f"    raw {rw['path']} sha256 {str(rw['sha256_manifest'])[:12]} {same} "
                             f"(source {rw['source']} {rw['version']}: {rw['original_path']})")
        for c in a.claims:
            if verbose or len(audits) == 1 or c.failed:
                lines.append(f"  {c.id} holds:{c.holds} check:{c.check} value={_fmt(c.value)} :: {c.claim[:120]}")
    return "\n".join(lines)


def run(select: str | None = None, as_json: bool = False, strict: bool = False, verbose: bool = False,
        root: str | Path | None = None) -> int:
    audits = audit(root, select)
    bad = failures(audits, strict)
    if as_json:
        print(json.dumps({"passed": not bad, "failures": bad, "results": [a.to_dict() for a in audits]},
                         indent=1, sort_keys=True, default=str))
    else:
        print(report(audits, verbose))
        n = sum(len(a.claims) for a in audits)
        print(f"audit: {len(audits)} experiments, {n} claims; " + ("PASSED" if not bad else f"FAILED ({len(bad)})"))
        for b in bad:
            print(f"  FAIL {b}")
    return 1 if bad else 0
