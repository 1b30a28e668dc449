"""`steptime data verify`: raw/ matches raw/MANIFEST.yaml, file by file.

For every manifest entry: the file is present, its size and sha256 match, its licence file is
listed, and it passes its loader's checks (schema, ranges, units). Every file under raw/ must be
in the manifest, and every raw input a built experiment registers (config/experiments.yaml `raw:`)
must be present and listed. Exit 0 when all holds, 1 with a list of problems otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from steptime.errors import DataError
from steptime.io import sha256_file
from steptime.specs import gpu_keys
from steptime_lab.data.manifest import MANIFEST_REL, completeness, find_root, load_manifest, registry_problems
from steptime_lab.data.tables import read_entry

REQUIRED = ("path", "table", "source", "original_path", "licence", "licence_file", "sha256", "bytes", "measures",
            "units")


@dataclass
class Problem:
    path: str
    problem: str


@dataclass
class Report:
    root: str
    files: int
    bytes: int
    schema_checked: bool
    problems: list

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "root": self.root, "files": self.files, "bytes": self.bytes,
                "schema_checked": self.schema_checked, "problems": [asdict(p) for p in self.problems]}


def verify(root=None, schema: bool = True) -> Report:
    try:
        r = find_root(root)
        man = load_manifest(r, complete=False)  # every problem is listed below, not just the first
    except DataError as exc:
        return Report(str(root or "."), 0, 0, schema, [Problem(str(MANIFEST_REL), str(exc))])
    problems: list[Problem] = []
    raw_dir = r / "raw"
    listed: dict[str, int] = {}
    entries = man.entries()
    for e in entries:
        listed[e.rel] = listed.get(e.rel, 0) + 1
    for rel, n in listed.items():
        if n > 1:
            problems.append(Problem(rel, f"listed {n} times in the manifest"))
    total = 0

    keys = set(gpu_keys())
    for e in entries:
        rel = e.rel
        missing = [k for k in REQUIRED if k not in e.meta]
        if "version" not in e.meta and "commit" not in e.meta:
            missing.append("version or commit")
        if missing:
            problems.append(Problem(rel, f"manifest entry lacks {', '.join(missing)}"))
        p = e.path
        try:
            inside = p.resolve().is_relative_to(raw_dir.resolve())
        except OSError:
            inside = False
        if not rel.startswith("raw/") or not inside:
            problems.append(Problem(rel, "path is not under raw/"))
            continue
        if e.gpu is not None and e.gpu not in keys:
            problems.append(Problem(rel, f"gpu {e.gpu!r} is not a steptime GPU key"))
        lic = e.get("licence_file")
        if lic and lic not in listed:
            problems.append(Problem(rel, f"licence file {lic} is not in the manifest"))
        if not p.is_file():
            problems.append(Problem(rel, "file missing"))
            continue
        size = p.stat().st_size
        total += size
        if "bytes" in e.meta and size != e.get("bytes"):
            problems.append(Problem(rel, f"size {size} bytes, manifest says {e.get('bytes')}"))
        if "sha256" in e.meta:
            digest = sha256_file(p)
            if digest != e.get("sha256"):
                problems.append(Problem(rel, f"sha256 {digest[:12]}..., manifest says {str(e.get('sha256'))[:12]}..."))
                continue  # its loader would refuse it for the same reason
        if schema:
            try:
                read_entry(e)
            except DataError as exc:
                problems.append(Problem(rel, f"check failed: {exc}"))
    unlisted, _ = completeness(man, collected_ok=False)  # missing files are reported above
    for rel in unlisted:
        problems.append(Problem(rel, "file under raw/ is not in the manifest"))
    # what the experiments register (config/experiments.yaml `raw:`): a file removed together with its
    # manifest entry leaves the manifest consistent, but not the registry
    reported = {p.path for p in problems}
    for rel, msg in registry_problems(r):
        if rel not in reported:
            problems.append(Problem(rel, msg))
    return Report(str(r), len(entries), total, schema, problems)


def _print_text(rep: Report) -> None:
    if rep.ok:
        what = "sizes, sha256 and loader checks" if rep.schema_checked else "sizes and sha256"
        print(f"raw/ OK: {rep.files} files, {rep.bytes / 1e6:.1f} MB; {what} match raw/MANIFEST.yaml ({rep.root})")
        return
    print(f"raw/ has {len(rep.problems)} problem(s) against raw/MANIFEST.yaml ({rep.root}):")
    for p in rep.problems:
        first, *rest = p.problem.splitlines() or [""]
        print(f"  - {p.path}: {first}")
        for line in rest:
            print(f"      {line.strip()}")


USAGE = "usage: steptime data {verify,list} [--json] [--root DIR]"


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line refusal (exit 2), like every other steptime command (wave 40: a usage block and the
    error on two lines)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _root(a) -> None:
    """An empty --root read as the current folder (wave 40): refused like any empty value."""
    if a.root is not None and not a.root.strip():
        raise DataError(f"--root {a.root!r}: an empty value (leave --root out to take $STEPTIME_ROOT or the cwd)")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="steptime data verify", description="Check raw/ against raw/MANIFEST.yaml.")
    ap.add_argument("--json", action="store_true", help="print a JSON report")
    ap.add_argument("--root", default=None, help="repository root (default: $STEPTIME_ROOT or the cwd upwards)")
    ap.add_argument("--no-schema", action="store_true", help="check presence, sizes and sha256 only")
    a = ap.parse_args(argv)
    _root(a)
    if a.root is not None:  # a root that is no repository is a usage error (one line, exit 2), not a raw/ problem
        find_root(a.root)
    rep = verify(a.root, schema=not a.no_schema)
    if a.json:
        sys.stdout.write(json.dumps(rep.to_dict(), indent=1, sort_keys=True) + "\n")
    else:
        _print_text(rep)
    return 0 if rep.ok else 1


def list_main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="steptime data list", description="List the files raw/MANIFEST.yaml holds.")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--root", default=None)
    a = ap.parse_args(argv)
    _root(a)

    man = load_manifest(a.root, complete=False)
    rows = [{k: e.get(k) for k in ("path", "table", "gpu", "source", "rows", "bytes")} for e in man.entries()]
    if a.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    for x in rows:
        print(f"{x['table']:<26}{x['gpu'] or '-':<14}{x['bytes']:>10}  {x['path']}")
    return 0


def cli(argv: list[str]) -> int:
    cmds = {"verify": main, "list": list_main}
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if not argv or argv[0] not in cmds:  # one line on stderr, nothing on stdout (wave 40: usage on stdout, exit 2)
        what = f"unknown subcommand {argv[0]!r}" if argv else "a subcommand is required"
        print(f"steptime data: error: {what} (expected verify or list; {USAGE})", file=sys.stderr)
        return 2
    try:
        return cmds[argv[0]](argv[1:])
    except DataError as exc:
        print(f"steptime data: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(cli(sys.argv[1:]))
