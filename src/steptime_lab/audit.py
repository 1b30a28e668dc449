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

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from steptime.errors import SteptimeError
from steptime_lab.data.manifest import find_root
from steptime_lab.results import ClaimSchemaError, DIGEST_KEY, result_digest, verdict
from steptime.io import read_yaml
from steptime_lab.status import (INTERMEDIATE, _registry, expand_raw, experiment_status, file_sha256,
                                  manifest_listing, read_result)



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
    check: str            # "ok", "descriptive" (no verdict) or "failed: ..."

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
    declared: str | None = None
    errors: list = field(default_factory=list)   # reasons the result itself is unusable or edited
    chain: list = field(default_factory=list)    # every raw file reached through the inputs, with its path
    chain_breaks: list = field(default_factory=list)  # a recorded input missing or changed, at its link
    chain_stops: list = field(default_factory=list)   # an intermediate whose own inputs are not recorded
    upstream: list = field(default_factory=list)      # registered experiments whose results are on the chain
    undeclared: list = field(default_factory=list)    # reached, declared neither by it nor by an upstream one
    unread: list = field(default_factory=list)        # in its registry raw:, not reached

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
    """'ok', 'descriptive' (no verdict to recompute) or 'failed: <why>' for one claim of a result file.

    A claim with a verdict must state its comparison as data (`op`, `target`, and `rule` / `key` /
    `abs` where they apply: steptime_lab.results.verdict); its verdict is recomputed from the stored
    value and must agree (a value within the file's rounding of the target is a tie: either stands)."""
    if not isinstance(c, dict) or "claim" not in c or "value" not in c:
        return "failed: a claim needs 'claim' and 'value'"
    value, met = c.get("value"), c.get("met")
    if not _finite(value):
        return f"failed: value {value!r} is missing or not finite"
    if met is None:
        if c.get("target") is not None or c.get("op") is not None:
            return "failed: the claim names a target but no verdict ('met')"
        return "descriptive"
    if not isinstance(met, bool):
        return f"failed: verdict {met!r} is not true/false"
    if c.get("op") is None:
        return "failed: not recomputable: the verdict states no operator (op) and target as data"
    try:
        got = verdict(c)
    except ClaimSchemaError as exc:
        return f"failed: not recomputable: {exc}"
    if got is not None and got != met:
        shown = f"|{_fmt(value)}|" if c.get("abs") else _fmt(value)
        key = f"[{c['key']!r}]" if c.get("key") is not None else ""
        rule = f" ({c['rule']})" if c.get("rule") else ""
        return f"failed: {shown}{key} {c['op']} {_fmt(c.get('target'))}{rule} is {got} but the result says met={met}"
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
    claims = doc.get("claims")
    for i, c in enumerate(claims if isinstance(claims, list) else [], start=1):
        met = c.get("met")
        out.append(ClaimAudit(id=f"{eid}:{i}", claim=str(c.get("claim", "")), value=c.get("value"),
                              comparison=str(c.get("comparison", "")), target=c.get("target"),
                              holds="info" if met is None else ("yes" if met else "no"), check=check_claim(c)))
    return out


def experiment_id(want: str, known) -> str:
    """The registered experiment ID `want` names: as written, or in another case / with '_' for '.' (`e2.11`,
    `E2_11` -> `E2.11`). Anything else is refused in one line naming the closest IDs (wave 37: the whole registry
    was listed)."""
    if want in known:
        return want
    norm = {k.upper().replace("_", "."): k for k in known}
    hit = norm.get(want.strip().upper().replace("_", "."))
    if hit is not None:
        return hit
    close = difflib.get_close_matches(want.strip().upper().replace("_", "."), list(norm), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(norm[c] for c in close)}" if close else ""
    raise AuditError(f"unknown experiment {want!r}{hint} (`steptime status` lists every ID)")


# ---- the transitive raw chain: result -> its inputs -> ... -> the raw bytes (wave 38) ----------------

MANIFEST = "raw/MANIFEST.yaml"
_RESULT_REF = re.compile(r"results/[A-Za-z0-9_.-]+\.json")


@dataclass
class Chain:
    """What a result was built from, followed to the raw files.

    reached: raw file -> the first path by which it was reached (result -> settled file -> result -> table ->
    raw), each link a file; breaks: a recorded input that is missing or whose bytes changed since the file
    that records it was written, with the link where the chain breaks; stops: an intermediate whose own
    inputs are not recorded anywhere the audit can read (the chain cannot be followed past it)."""
    reached: dict = field(default_factory=dict)
    breaks: list = field(default_factory=list)
    stops: list = field(default_factory=list)
    nodes: set = field(default_factory=set)   # every intermediate file on the chain (results, settled files, tables)


class ChainFollower:
    """Follows results, settled files and tidy tables back to raw/ on one repository root, from what the
    repository records (no Snakemake, no build cache):

    - a result (results/*.json): its `provenance.inputs`, each with the sha256 recorded when it was built;
    - a tidy table results/data/<t>.parquet: config/tables.yaml's `raw` manifest tables for <t>, and every
      raw/MANIFEST.yaml file of those tables (the ingest rule reads them all);
    - a settled file with an `inputs:` list (results/calibration/{gemm,step,comm}.yaml);
    - another output of a registered experiment (config/experiments.yaml `outputs`): that experiment's result;
    - a YAML whose constants name their source results (`source: ... (results/E3_1.json)`): those results;
    - a git-ignored cache results/cache/<stem>_*.parquet: the result results/<stem>.json its rule writes too;
    - a path under raw/: itself (a directory: every file under it, on disk and in the manifest);
    - a path under config/: a leaf (configuration, no raw bytes behind it).
    Anything else is a stop. Nodes are memoised per root, so auditing every experiment reads each file once."""

    def __init__(self, root: Path, listed: dict | None = None, registry: dict | None = None):
        self.root = Path(root)
        self.listed = manifest_listing(self.root) if listed is None else listed
        self.registry = _registry(self.root) if registry is None else registry
        tp = self.root / "config" / "tables.yaml"
        self.tables = ((read_yaml(tp) or {}).get("tables") or {}) if tp.is_file() else {}
        self.by_table: dict[str, list[str]] = {}
        for path, m in self.listed.items():
            self.by_table.setdefault(m.get("table"), []).append(path)
        self.owner = {}
        for eid, e in self.registry.items():
            outs = list((e or {}).get("outputs") or [f"results/{eid.replace('.', '_')}.json"])
            prim = primary_result(eid, outs)
            for o in outs:
                if prim and o != prim:
                    self.owner[o] = prim
        self.results = sorted({primary_result(eid, list((e or {}).get("outputs") or
                                                        [f"results/{eid.replace('.', '_')}.json"])) or ""
                               for eid, e in self.registry.items()} - {""}, key=len, reverse=True)
        self._memo: dict[str, Chain] = {}

    # the links out of one node: [(input, recorded sha256 or None)], or a string saying why the chain stops
    def links(self, node: str):
        root = self.root
        if node.startswith("raw/") or node.startswith("config/"):
            return []
        if node.startswith("results/data/") and node.endswith(".parquet"):
            t = node[len("results/data/"):-len(".parquet")]
            if t not in self.tables:
                return f"{node} is not a tidy table of config/tables.yaml"
            files = sorted(f for mt in self.tables[t].get("raw") or [] for f in self.by_table.get(mt, []))
            if not files:
                return f"{node}: raw/MANIFEST.yaml lists no file of its tables {self.tables[t].get('raw')}"
            return [(f, self.listed[f].get("sha256")) for f in files] + [(MANIFEST, None)]
        if node.startswith("results/") and node.endswith(".json") and node not in self.owner:
            doc, why = read_result(root / node)
            if why:
                return why
            ins = (doc.get("provenance") or {}).get("inputs")
            if not isinstance(ins, dict) or not ins:
                return f"{node} records no inputs in its provenance"
            return [(p, (m or {}).get("sha256") if isinstance(m, dict) else None) for p, m in sorted(ins.items())]
        if node.endswith((".yaml", ".yml")) and (root / node).is_file():
            try:
                doc = read_yaml(root / node)
            except Exception as exc:  # noqa: BLE001 - any unreadable YAML is a stop, named
                return f"{node} cannot be read ({exc.__class__.__name__})"
            if isinstance(doc, dict) and isinstance(doc.get("inputs"), list):
                return [(str(p), None) for p in doc["inputs"]]
        if node in self.owner:
            return [(self.owner[node], None)]
        if node.endswith((".yaml", ".yml")) and (root / node).is_file():
            named = sorted(set(_RESULT_REF.findall((root / node).read_text())))
            if named:
                return [(p, None) for p in named]
        if node.startswith("results/cache/"):
            stem = Path(node).name
            hit = next((r for r in self.results if stem.startswith(Path(r).stem + "_")), None)
            if hit:
                return [(hit, None)]
        return f"{node} records no inputs (the chain cannot be followed past it)"

    def follow(self, node: str, _stack: tuple = ()) -> tuple[Chain, bool]:
        """The chain below `node` (paths relative to it) and whether it is complete (no cycle was cut)."""
        if node in self._memo:
            return self._memo[node], True
        ch, complete = Chain(), True
        if node.startswith("raw/"):
            d = self.root / node
            if d.is_dir():
                prefix = node.rstrip("/") + "/"
                files = {str(p.relative_to(self.root)) for p in d.rglob("*") if p.is_file() and p.name != ".gitkeep"}
                files |= {p for p in self.listed if p.startswith(prefix)}
                for f in sorted(files):
                    ch.reached.setdefault(f, [node, f])
            else:
                ch.reached[node] = [node]
            self._memo[node] = ch
            return ch, True
        out = self.links(node)
        if isinstance(out, str):
            ch.stops.append(out)
            self._memo[node] = ch
            return ch, True
        for inp, sha in out:
            if not isinstance(inp, str) or not inp:
                ch.stops.append(f"{node} names an input {inp!r} that is not a path")
                continue
            now = file_sha256(self.root / inp)
            if now is None and not (self.root / inp).exists():
                if not inp.startswith(INTERMEDIATE):
                    ch.breaks.append(f"{node} -> {inp}: missing")
                    continue
                # a git-ignored intermediate, absent from a clean clone (rebuilt by its rule): no break, and
                # followed by name to the result its rule writes too
            if sha is not None and now is not None and now != sha:
                what = "raw/MANIFEST.yaml" if node.startswith("results/data/") else node
                ch.breaks.append(f"{node} -> {inp}: changed since {what} recorded it "
                                 f"(sha256 {sha[:12]} -> {now[:12]})")
            if inp in _stack or inp == node:
                complete = False  # a cycle (an experiment's result reading its own rule's other output): cut
                continue
            sub, ok = self.follow(inp, _stack + (node,))
            complete &= ok
            if not inp.startswith("raw/"):
                ch.nodes.add(inp)
            ch.nodes |= sub.nodes
            for f, via in sub.reached.items():
                ch.reached.setdefault(f, [node] + via if via[0] != node else via)
            ch.breaks += [b for b in sub.breaks if b not in ch.breaks]
            ch.stops += [s for s in sub.stops if s not in ch.stops]
        if node.startswith("results/data/"):
            ch.reached.setdefault(MANIFEST, [node, MANIFEST])
        if complete:
            self._memo[node] = ch
        return ch, complete


def raw_chain(result: str, root: str | Path | None = None, follower: ChainFollower | None = None) -> Chain:
    """Every raw file `result` (a path relative to the root: results/<ID>.json) was built from, each with the
    path by which it was reached, plus the links where the chain is broken (a recorded input missing or
    changed) or cannot be followed (`ChainFollower` says what it reads). The raw files' bytes are checked
    against raw/MANIFEST.yaml by the caller (`audit`)."""
    root = Path(find_root(root))
    if not isinstance(result, str) or not result.strip():
        raise AuditError(f"raw_chain needs a result path relative to the repository root, not {result!r}")
    if not (root / result).is_file():
        raise AuditError(f"result {result} does not exist under {root}")
    f = follower or ChainFollower(root)
    ch, _ = f.follow(result)
    return ch


# raw/MANIFEST.yaml tables that document the data and are never read as data (a directory declaration
# carries them with the data; they are not "declared but not read")
DOC_TABLES = ("licence", "dataset_card")


def _declared(follower: ChainFollower, eid: str) -> set:
    """The raw files an experiment's registry `raw:` declares (directories expanded), the manifest itself aside."""
    memo = follower.__dict__.setdefault("_declared", {})
    if eid not in memo:
        memo[eid] = {p for p, why in expand_raw(follower.root, list(follower.registry[eid].get("raw") or []),
                                                 follower.listed) if not why} - {MANIFEST}
    return memo[eid]


def _attach_chain(a: "ResultAudit", res: str, follower: ChainFollower) -> None:
    """Fill a result's transitive raw chain and compare it with the registry. An experiment declares the raw
    data it brings in itself; what reaches it through another registered experiment's result (a node on its
    chain, directly or behind a settled file) is declared by that experiment's own `raw:`, which its own audit
    checks in turn. So: `undeclared` = reached but declared neither by it nor by an experiment upstream;
    `unread` = declared by it but not reached (a documentation file under a declared directory aside)."""
    ch = follower.follow(res)[0]
    listed = follower.listed
    for p, via in sorted(ch.reached.items()):
        m = listed.get(p) or {}
        a.chain.append({"path": p, "via": via, "sha256_manifest": m.get("sha256"),
                        "sha256_now": file_sha256(follower.root / p), "source": m.get("source"),
                        "table": m.get("table")})
    a.chain_breaks, a.chain_stops = list(ch.breaks), list(ch.stops)
    prim = {}
    for eid, e in follower.registry.items():
        r = primary_result(eid, list((e or {}).get("outputs") or [f"results/{eid.replace('.', '_')}.json"]))
        if r and r != res:
            prim[r] = eid
    a.upstream = sorted({prim[n] for n in ch.nodes if n in prim})
    own = _declared(follower, a.id)
    effective = own.union(*(_declared(follower, u) for u in a.upstream))
    reached = set(ch.reached) - {MANIFEST}
    explicit = set(follower.registry[a.id].get("raw") or [])
    a.undeclared = sorted(reached - effective)
    a.unread = sorted(p for p in own - reached
                      if p in explicit or (listed.get(p) or {}).get("table") not in DOC_TABLES)

def audit(root: str | Path | None = None, select: str | None = None) -> list[ResultAudit]:
    """Audit every registered experiment (or one ID, or one claim `<ID>:<n>`)."""
    root = Path(find_root(root))
    if select is not None and (not isinstance(select, str) or not select.strip()):
        raise AuditError(f"empty or non-text selection {select!r}: give an experiment ID (E2.1) or a claim (E2.1:3)")
    want_id, want_claim = (select.split(":", 1) + [None])[:2] if select else (None, None)
    rows = experiment_status(root)
    known = {r["id"] for r in rows}
    if want_id is not None:
        want_id = experiment_id(want_id, known)
        select = want_id if want_claim is None else f"{want_id}:{want_claim}"
    listed = manifest_listing(root)
    reg = _registry(root)
    follower = ChainFollower(root, listed, reg) if rows else None
    out = []
    for r in rows:
        if want_id is not None and r["id"] != want_id:
            continue
        res = primary_result(r["id"], r["outputs"])
        a = ResultAudit(id=r["id"], state=r["state"], result=res, stale=list(r["reasons"]), declared=r["declared"])
        for p, why in expand_raw(root, list(reg[r["id"]].get("raw") or []), listed):
            if why:
                a.errors.append(why)
                continue
            m = listed.get(p) or {}
            a.raw.append({"path": p, "sha256_manifest": m.get("sha256"), "sha256_now": file_sha256(root / p),
                          "source": m.get("source"), "version": m.get("version") or m.get("commit"),
                          "original_path": m.get("original_path")})
        doc = None
        if res and (root / res).is_file() and r["state"] in ("ok", "stale"):
            doc, why = read_result(root / res)
            if why:
                a.errors.append(why)
                a.stale = [s for s in a.stale if s != why]
            elif DIGEST_KEY not in doc:
                a.errors.append(f"{res} records no {DIGEST_KEY} (written before results were hashed; rebuild it)")
            elif doc[DIGEST_KEY] != result_digest(doc):
                a.errors.append(f"{res} was edited after it was written ({DIGEST_KEY} does not match its content)")
        elif r["declared"] == "built" and r["state"] == "missing":
            a.errors += list(r["reasons"])  # a built experiment's committed output is gone (deleted, killed job)
        if doc is not None:
            prov = doc.get("provenance") or {}
            a.rule, a.script = prov.get("rule"), prov.get("script")
            a.steptime_version, a.code_sha256 = prov.get("steptime_version"), prov.get("code_sha256")
            for p, meta in sorted((prov.get("inputs") or {}).items()):
                a.inputs.append({"path": p, "sha256_recorded": (meta or {}).get("sha256"),
                                 "sha256_now": file_sha256(root / p)})
            _attach_chain(a, res, follower or ChainFollower(root, listed, reg))
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
        for e in a.errors:
            bad.append(f"{a.id}: {e}")
        if a.state == "stale" and a.stale:
            bad.append(f"{a.id}: stale: {a.stale[0]}" + (f" (+{len(a.stale) - 1} more)" if len(a.stale) > 1 else ""))
        if a.state == "missing-data":
            bad.append(f"{a.id}: {a.stale[0]}")
        for rw in a.raw:
            if rw["path"] == "raw/MANIFEST.yaml" or (rw["sha256_now"] is None and a.state in ("awaiting", "planned",
                                                                                               "optional")):
                continue
            if rw["sha256_manifest"] is None:
                if rw["path"].startswith("raw/telemetry/") and rw["sha256_now"] is not None:
                    continue  # collected telemetry is checked by its own collector's manifest
                bad.append(f"{a.id}: raw file {rw['path']} has no sha256 in raw/MANIFEST.yaml")
            elif rw["sha256_now"] is None:
                bad.append(f"{a.id}: raw file {rw['path']} is missing")
            elif rw["sha256_now"] != rw["sha256_manifest"]:
                bad.append(f"{a.id}: raw file {rw['path']} does not match its sha256 in raw/MANIFEST.yaml")
        seen = {rw["path"] for rw in a.raw}
        for rw in a.chain:  # the raw files reached through the inputs, each checked against the manifest once
            if rw["path"] in seen or rw["path"] == MANIFEST:
                continue
            if rw["sha256_manifest"] is None:
                if not (rw["path"].startswith("raw/telemetry/") and rw["sha256_now"] is not None):
                    bad.append(f"{a.id}: raw file {rw['path']} (reached {' -> '.join(rw['via'])}) has no sha256 in "
                               "raw/MANIFEST.yaml")
            elif rw["sha256_now"] is None:
                bad.append(f"{a.id}: raw file {rw['path']} (reached {' -> '.join(rw['via'])}) is missing")
            elif rw["sha256_now"] != rw["sha256_manifest"]:
                bad.append(f"{a.id}: raw file {rw['path']} (reached {' -> '.join(rw['via'])}) does not match its "
                           "sha256 in raw/MANIFEST.yaml")
        for b in a.chain_breaks:  # the result's own inputs are its staleness (above); deeper links are new
            if not (a.result and b.startswith(f"{a.result} -> ")):
                bad.append(f"{a.id}: chain broken at {b}")
        if a.undeclared:
            bad.append(f"{a.id}: reads {len(a.undeclared)} raw file(s) that neither its registry raw: nor an upstream "
                       f"experiment's declares, e.g. {a.undeclared[0]}")
        if a.unread:
            bad.append(f"{a.id}: its registry raw: declares {len(a.unread)} raw file(s) it does not read, e.g. "
                       f"{a.unread[0]}")
        if strict:
            bad += [f"{a.id}: chain stops: {s} (--strict)" for s in a.chain_stops]
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
        for s in a.stale + a.errors:
            lines.append(f"    ! {s}")
        if a.result and (verbose or len(audits) == 1):
            lines.append(f"    rule {a.rule} <- script {a.script}; steptime {a.steptime_version}, "
                         f"code {str(a.code_sha256)[:12]}")
            for i in a.inputs:
                same = "=" if i["sha256_recorded"] == i["sha256_now"] else "CHANGED"
                lines.append(f"    input {i['path']} sha256 {str(i['sha256_recorded'])[:12]} {same}")
            if not verbose and len(a.raw) > 12:  # the full list with --verbose; a count here
                files = [rw for rw in a.raw if rw["path"] != MANIFEST]
                n_ok = sum(1 for rw in files if rw["sha256_manifest"] is not None
                           and rw["sha256_manifest"] == rw["sha256_now"])
                lines.append(f"    raw declared by the registry: {len(files)} files, {n_ok} match raw/MANIFEST.yaml "
                             "(--verbose lists them)")
            for rw in (a.raw if verbose or len(a.raw) <= 12 else []):
                if rw["path"] == "raw/MANIFEST.yaml":
                    lines.append(f"    raw raw/MANIFEST.yaml (the manifest itself) sha256 {str(rw['sha256_now'])[:12]}")
                    continue
                same = "=" if rw["sha256_manifest"] == rw["sha256_now"] else "MISMATCH"
                lines.append(f"    raw {rw['path']} sha256 {str(rw['sha256_manifest'])[:12]} {same} "
                             f"(source {rw['source']} {rw['version']}: {rw['original_path']})")
        if a.result and a.chain and (verbose or len(audits) == 1):
            lines += _chain_lines(a, verbose)
        elif a.chain_breaks:
            lines += [f"    ! chain broken at {b}" for b in a.chain_breaks if not b.startswith(f"{a.result} -> ")]
        for c in a.claims:
            if verbose or len(audits) == 1 or c.failed:
                lines.append(f"  {c.id} holds:{c.holds} check:{c.check} value={_fmt(c.value)} :: {c.claim[:120]}")
    return "\n".join(lines)


def _chain_lines(a: "ResultAudit", verbose: bool) -> list[str]:
    """The raw chain of one result: a count by source, the registry comparison, breaks and stops; with
    `verbose`, every raw file with its sha256 (manifest vs now) and the path by which it was reached."""
    by_source: dict[str, int] = {}
    for rw in a.chain:
        if rw["path"] != MANIFEST:
            by_source[str(rw["source"])] = by_source.get(str(rw["source"]), 0) + 1
    n = sum(by_source.values())
    ok = sum(1 for rw in a.chain if rw["path"] != MANIFEST and rw["sha256_now"] is not None
             and rw["sha256_now"] == rw["sha256_manifest"])
    srcs = ", ".join(f"{k} {v}" for k, v in sorted(by_source.items(), key=lambda kv: (-kv[1], kv[0])))
    out = [f"    raw chain: {n} raw files reached through the inputs ({srcs}); {ok} match raw/MANIFEST.yaml"]
    own = {rw["path"] for rw in a.raw} - {MANIFEST}
    inherited = len({rw["path"] for rw in a.chain if rw["path"] != MANIFEST} - own)
    up = f" (upstream: {', '.join(a.upstream)}; their own raw: declares them)" if a.upstream else ""
    if a.undeclared or a.unread:
        out.append(f"    ! registry raw: declares {len(own)}: {len(a.undeclared)} read but declared nowhere on the chain, "
                   f"{len(a.unread)} declared but not read")
    else:
        out.append(f"    registry raw: declares {len(own)}, all read; {inherited} more reached through "
                   f"registered results{up}" if inherited else f"    registry raw: declares {len(own)}, all read; "
                   "nothing else reached")
    out += [f"    ! chain broken at {b}" for b in a.chain_breaks]
    out += [f"    ~ chain stops: {s}" for s in a.chain_stops]
    if verbose:
        for rw in a.chain:
            if rw["path"] == MANIFEST:
                continue
            same = "=" if rw["sha256_manifest"] is not None and rw["sha256_manifest"] == rw["sha256_now"] else "MISMATCH"
            tag = " [not declared]" if rw["path"] in a.undeclared else ""
            out.append(f"    reached {rw['path']} sha256 {str(rw['sha256_manifest'])[:12]} {same}{tag} "
                       f"via {' -> '.join(rw['via'][:-1])}")
        out += [f"    declared, not read: {p}" for p in a.unread]
    return out


def mark_current(root: str | Path | None = None, select: str | None = None, dry_run: bool = False) -> int:
    """Make currency content-based on a fresh clone (git gives every file the checkout time as mtime):
    every result whose recorded input sha256s, raw bytes and code hash match what is on disk (`audit`
    state ok, no failure) has its outputs, and the jobs upstream of them, marked current for Snakemake
    (`snakemake --touch`, which touches in DAG order). Results that do not verify are left alone, so
    Snakemake rebuilds them; a later edit of any library file still reruns what declares it as input."""
    import subprocess
    import sys

    root = Path(find_root(root))
    audits = audit(root, select)
    bad = failures(audits)
    reg = _registry(root)
    verified, skipped = [], []
    for a in audits:
        if a.state == "ok" and not any(b.startswith(f"{a.id}:") or b.startswith(f"{a.id} ") for b in bad):
            verified += list((reg[a.id].get("outputs") or [a.result]))
        elif a.state in ("ok", "stale", "missing", "missing-data"):
            skipped.append(f"{a.id} ({a.state}{': ' + (a.stale + a.errors)[0] if (a.stale + a.errors) else ''})")
    for s in skipped:
        print(f"not marked (Snakemake will rebuild it): {s}")
    if not verified:
        print("mark-current: no result verifies; nothing marked")
        return 1
    cmd = [sys.executable, "-m", "snakemake", *verified, "--touch", "-j1", *(["-n"] if dry_run else []), "--quiet", "all"]
    print(f"mark-current: {len(verified)} outputs of {len(audits) - len(skipped)} verified results "
          "(snakemake --touch, in DAG order)")
    r = subprocess.run(cmd, cwd=root)
    if r.returncode:
        print(f"mark-current: snakemake --touch failed (exit {r.returncode})")
        return 1
    print(f"mark-current: done; `snakemake -n` now plans only what does not verify ({len(skipped)} result(s))")
    return 1 if skipped else 0


def run(select: str | None = None, as_json: bool = False, strict: bool = False, verbose: bool = False,
        root: str | Path | None = None, mark: bool = False) -> int:
    if mark:
        return mark_current(root, select)
    audits = audit(root, select)
    bad = failures(audits, strict)
    if as_json:
        print(json.dumps({"passed": not bad, "failures": bad, "results": [a.to_dict() for a in audits]},
                         indent=1, sort_keys=True, default=str))
    else:
        print(report(audits, verbose))
        n = sum(len(a.claims) for a in audits)
        n_raw = len({rw["path"] for a in audits for rw in a.chain} - {MANIFEST})
        print(f"raw chains: {sum(1 for a in audits if a.chain)} results followed to {n_raw} raw files "
              "(`steptime audit <ID>` counts them by source, --verbose lists each with its path)")
        print(f"audit: {len(audits)} experiments, {n} claims; " + ("PASSED" if not bad else f"FAILED ({len(bad)})"))
        for b in bad:
            print(f"  FAIL {b}")
    return 1 if bad else 0
