"""Issue 23, the pipeline's part: no wildcard can carry shell syntax into a command (every wildcard
constrained to the registry's names, every shell substitution quoted), a registered raw input that is
gone stops the build and `data verify`, every config field has a range in its schema, and the atomic
writers leave no temp file behind and honour the umask."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_TARGET = "raw/telemetry/steptrace/h100-sxm/x$(touch${IFS}PWNED).csv"


def _snakemake(work: Path, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=work,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- shell injection through a wildcard

def test_the_hostile_target_runs_nothing_and_creates_no_file(clean_workdir):
    before = {p for p in clean_workdir.rglob("*")}
    r = _snakemake(clean_workdir, "-j1", HOSTILE_TARGET)
    assert r.returncode != 0, r.stdout[-2000:]
    assert "No rule to produce" in r.stdout + r.stderr
    assert not list(clean_workdir.rglob("PWNED")), "the wildcard's command substitution ran"
    new = {p for p in clean_workdir.rglob("*")} - before
    # snakemake's own bookkeeping (.snakemake/) aside, the refused target writes nothing at all
    assert not [p for p in new if ".snakemake" not in p.parts], sorted(map(str, new))[:5]


# The rules as Snakemake parsed them (rules generated in loops included): name, wildcards, their
# constraints (the rule's own, else the Snakefile's global ones) and the shell command template.
_RULES_PROBE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings
    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path("Snakefile"),
                          workdir=Path("."))._workflow
        glob_c = dict(wf.wildcard_constraints)
        out = [{"name": r.name, "shell": r.shellcmd, "wildcards": sorted(r.wildcard_names),
                "constraints": {w: r.wildcard_constraints.get(w, glob_c.get(w)) for w in r.wildcard_names}}
               for r in wf.rules]
    sys.stdout.write(json.dumps(out))
""")


@pytest.fixture(scope="module")
def parsed_rules():
    r = subprocess.run([sys.executable, "-c", _RULES_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rules = json.loads(r.stdout)
    assert len(rules) > 40, "the probe saw too few rules"
    return rules


_SUBST = re.compile(r"\{(wildcards|params|input|output|log)\b[^{}]*\}")


def _unquoted(cmd: str) -> list[str]:
    """Every {wildcards.*}/{params.*}/{input}/{output}/{log} substitution of a shell command without :q."""
    return [m.group(0) for m in _SUBST.finditer(cmd) if not m.group(0).endswith(":q}")]


def test_the_unquoted_substitution_finder_finds_them():
    assert _unquoted("x --m {params.m} --o {output:q} {input.traces} > {log} {wildcards.gpu:q}") == [
        "{params.m}", "{input.traces}", "{log}"]


def test_every_shell_substitution_is_quoted(parsed_rules):
    shells = [r for r in parsed_rules if r["shell"]]
    assert len(shells) >= 10, "the collection rules' shell commands were not seen"
    bad = {r["name"]: _unquoted(r["shell"]) for r in shells if _unquoted(r["shell"])}
    assert not bad, f"unquoted shell substitutions (add :q): {bad}"


def test_every_shell_substitution_is_quoted_in_the_rule_files():
    """The same on the text of workflow/rules/*.smk (a shell: string the parse did not reach included)."""
    bad = []
    for f in sorted((ROOT / "workflow/rules").glob("*.smk")):
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "shell:":
                continue
            j = i + 1
            while j < len(lines) and lines[j].startswith(" " * 8):
                bad += [f"{f.name}:{j + 1}: {s}" for s in _unquoted(lines[j])]
                j += 1
    assert not bad, bad


HOSTILE = ["x$(touch${IFS}PWNED)", "x`id`", "a;b", "a b", "../x", "x/y", "", "h100-sxm;id", "l40s)|(.*"]


def test_every_wildcard_is_constrained_to_known_names(parsed_rules):
    with_wc = [r for r in parsed_rules if r["wildcards"]]
    assert {"collect_steptrace", "ingest", "rf_fit", "notebook"} <= {r["name"] for r in with_wc}
    for r in with_wc:
        for w, c in r["constraints"].items():
            assert c, f"rule {r['name']}: wildcard {w} has no constraint"
            for s in HOSTILE:
                assert not re.fullmatch(c, s), f"rule {r['name']}: {w}={s!r} matches {c!r}"
    st = next(r for r in with_wc if r["name"] == "collect_steptrace")["constraints"]
    assert re.fullmatch(st["model"], "llama-3.1-8b") and re.fullmatch(st["gpu"], "h100-sxm")
    assert not re.fullmatch(st["model"], "llama-3x1-8b"), "a dot in a name must be literal"


def test_a_rule_with_an_unconstrained_wildcard_is_refused_at_parse(clean_workdir):
    rules = clean_workdir / "workflow/rules/summary.smk"
    rules.write_text(rules.read_text() + textwrap.dedent('''

        rule hostile_probe:
            output:
                "results/probe/{anything}.txt",
            log:
                "logs/probe/{anything}.log",
            shell:
                "echo {wildcards.anything:q} > {output:q} 2> {log:q}"
        '''))
    r = _snakemake(clean_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0
    assert "wildcard(s) anything of rule hostile_probe without a constraint" in r.stdout + r.stderr


def test_collect_config_names_only_known_gpus_and_models(clean_workdir):
    import yaml

    path = clean_workdir / "config/collect.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["gpus"]["h100-pcie"] = {"gres": "H100"}
    path.write_text(yaml.safe_dump(doc))
    r = _snakemake(clean_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0 and "unknown GPU 'h100-pcie'" in r.stdout + r.stderr
