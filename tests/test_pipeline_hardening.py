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


@pytest.mark.parametrize("target", [
    "raw/telemetry/gemm_sweep/l40s/x$(touch${IFS}PWNED).csv",
    "raw/telemetry/clock/x$(touch${IFS}PWNED)/cap_sweep.csv",
    "notebooks/x$(touch${IFS}PWNED).ipynb",
    "results/data/x$(touch${IFS}PWNED).parquet",
    "results/cache/rf/aic_gemm_x$(touch${IFS}PWNED).joblib",
])
def test_other_hostile_wildcards_match_no_rule(clean_workdir, target):
    r = _snakemake(clean_workdir, "-n", target)
    assert r.returncode != 0 and "No rule to produce" in r.stdout + r.stderr
    assert not list(clean_workdir.rglob("PWNED"))


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
    assert len(shells) >= 9, "the collection rules' shell commands were not seen"  # the notebook pairing is a script
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
    doc["gpus"]["h100-sxm-96"] = {"gres": "H100"}
    path.write_text(yaml.safe_dump(doc))
    r = _snakemake(clean_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0 and "unknown GPU 'h100-sxm-96'" in r.stdout + r.stderr


# ---------------------------------------------------------------- a registered raw input that is gone

L40S_GEMM = "raw/aiconfigurator/l40s/gemm/vllm/0.24.0/gemm_perf.bf16.parquet"


def _drop_with_its_manifest_entry(work: Path, rel: str) -> None:
    import yaml

    man = work / "raw/MANIFEST.yaml"
    doc = yaml.safe_load(man.read_text())
    n = len(doc["files"])
    doc["files"] = [f for f in doc["files"] if f["path"] != rel]
    assert len(doc["files"]) == n - 1, f"{rel} is not in the manifest"
    man.write_text(yaml.safe_dump(doc, sort_keys=False))
    (work / rel).unlink()


def _verify(work: Path):
    return subprocess.run([sys.executable, "-m", "steptime.cli", "data", "verify", "--no-schema", "--root", str(work)],
                          capture_output=True, text=True, timeout=300, env=_env(work))


def _env(work: Path) -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(work / "src"), "STEPTIME_ROOT": str(work)}


def test_a_raw_file_removed_with_its_manifest_entry_stops_the_build_and_verify(clean_workdir):
    work = clean_workdir
    assert _verify(work).returncode == 0, "the scratch copy must verify before the edit"
    _drop_with_its_manifest_entry(work, L40S_GEMM)
    v = _verify(work)
    assert v.returncode == 1 and f"raw file missing: {L40S_GEMM}" in v.stdout, v.stdout[-2000:]
    assert "E1.3" in v.stdout
    for target in ("results/E1_3.json", "results/data/gemm.parquet", "results/E2_1.json"):
        r = _snakemake(work, "-n", target)
        assert r.returncode != 0, f"{target} would rebuild without L40S"
        out = r.stdout + r.stderr
        lines = [ln for ln in out.splitlines() if f"raw file missing: {L40S_GEMM}" in ln]
        assert len(lines) == 1 and "config/experiments.yaml" in lines[0], out[-2000:]
    # a table that does not read the file still builds
    assert _snakemake(work, "-n", "results/data/scale_matrix.parquet").returncode == 0
    assert not (work / "results/E1_3.json").exists()


def test_a_registered_directory_missing_a_listed_file_stops_its_experiment(clean_workdir):
    import yaml

    work = clean_workdir
    reg = yaml.safe_load((work / "config/experiments.yaml").read_text())["experiments"]
    assert "raw/distserve" in reg["E2.4"]["raw"]
    man = yaml.safe_load((work / "raw/MANIFEST.yaml").read_text())["files"]
    gone = next(f["path"] for f in man if f["path"].startswith("raw/distserve/") and f["path"].endswith(".csv"))
    (work / gone).unlink()
    r = _snakemake(work, "-n", "results/E2_4.json")
    assert r.returncode != 0 and f"raw file missing: {gone}" in r.stdout + r.stderr
    assert "under raw/distserve" in r.stdout + r.stderr


def test_registered_problems_unit(tmp_path):
    from steptime_lab.data.manifest import registered_problems, registry_problems

    (tmp_path / "raw/src/a").mkdir(parents=True)
    (tmp_path / "raw/src/a/x.csv").write_text("1\n")
    (tmp_path / "raw/src/a/y.csv").write_text("2\n")
    (tmp_path / "raw/MANIFEST.yaml").write_text(
        "files:\n- {path: raw/src/a/x.csv, table: t}\n- {path: raw/src/a/gone.csv, table: t}\n")
    probs = dict(registered_problems(["raw/MANIFEST.yaml", "raw/src/a/x.csv", "raw/src/a/y.csv", "raw/src/a",
                                      "raw/src/b.csv", "raw/telemetry/clock/l40s/c.csv"], tmp_path, needed_by="E9.9"))
    assert set(probs) == {"raw/src/a/y.csv", "raw/src/a/gone.csv", "raw/src/b.csv", "raw/telemetry/clock/l40s/c.csv"}
    assert probs["raw/src/a/y.csv"].startswith("raw file not in raw/MANIFEST.yaml: raw/src/a/y.csv (registered raw input of E9.9")
    assert probs["raw/src/b.csv"].startswith("raw file missing: raw/src/b.csv")
    assert "under raw/src/a" in probs["raw/src/a/gone.csv"]
    reg = {"E9.9": {"status": "built", "raw": ["raw/src/b.csv"]}, "E9.8": {"status": "built", "raw": ["raw/src/b.csv"]},
           "E9.7": {"status": "awaiting", "raw": ["raw/telemetry/x.csv"]}}
    (p, msg), = registry_problems(tmp_path, reg)
    assert p == "raw/src/b.csv" and "E9.9, E9.8" in msg


def test_a_rule_without_its_registered_raw_check_is_refused_at_parse(clean_workdir):
    f = clean_workdir / "workflow/rules/gemm.smk"
    text = f.read_text()
    assert '        registered=registered_raw("E1.3"),\n' in text
    f.write_text(text.replace('        registered=registered_raw("E1.3"),\n', ""))
    r = _snakemake(clean_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0 and "the rule E1_3 writes outputs of E1.3 without" in r.stdout + r.stderr


# ---------------------------------------------------------------- every config field has a range

def _set(doc, keys, value):
    for k in keys[:-1]:
        doc = doc[k]
    doc[keys[-1]] = value


BAD_CONFIG = [
    ("config/config.yaml", ["seed"], -1, "validat"),
    ("config/config.yaml", ["seed"], 2 ** 40, "validat"),
    ("config/config.yaml", ["seed"], 1.5, "validat"),
    ("config/config.yaml", ["bootstrap"], 0, "validat"),
    ("config/config.yaml", ["bootstrap"], 10 ** 9, "validat"),
    ("config/config.yaml", ["sizes", "e1_24_fit_sample", "fast"], -5, "validat"),
    ("config/config.yaml", ["sizes", "r2_1_design", "fast", "targets"], ["h100-sxm; rm -rf x"], "validat"),
    ("config/config.yaml", ["sizes", "r2_1_design", "fast", "targets"], ["h100-sxm-96"], "unknown GPU 'h100-sxm-96'"),
    ("config/config.yaml", ["sizes", "greybox_cv", "fast", "max_iter"], 0, "validat"),
    ("config/config.yaml", ["sizes", "greybox_cv", "fast", "learning_rate"], 1.5, "validat"),
    ("config/config.yaml", ["sizes", "greybox_cv", "fast"], {"max_leaf_nodes": 7}, "validat"),
    ("config/config.yaml", ["sizes", "greybox_cv", "full"], {}, "validat"),
    ("config/config.yaml", ["experiments"], "../elsewhere/experiments.yaml", "validat"),
    ("config/collect.yaml", ["clock_sweep", "runs"], 0, "validat"),
    ("config/collect.yaml", ["clock_sweep", "hold_s"], float("inf"), "validat"),
    ("config/collect.yaml", ["gpus", "l40s", "caps_w"], [-1, 300], "validat"),
    ("config/collect.yaml", ["gpus", "l40s", "gres"], "L40S --exclusive=no", "validat"),
    ("config/collect.yaml", ["ncu", "m"], "1,$(id)", "validat"),
    ("config/collect.yaml", ["steptrace", "requests"], -1, "validat"),
    ("config/experiments.yaml", ["experiments", "E2.9", "settings", "seed"], -1, "validat"),
    ("config/experiments.yaml", ["experiments", "E2.9", "settings", "requests"], -1000, "validat"),
    ("config/experiments.yaml", ["experiments", "E2.9", "settings", "requests"], float("nan"), "not a finite number"),
    ("config/experiments.yaml", ["experiments", "E1.23", "targets", "mape", "blackwell"], -0.1, "validat"),
    ("config/experiments.yaml", ["experiments", "E1.3", "raw"], ["raw/../../etc/passwd"], "validat"),
    ("config/experiments.yaml", ["experiments", "E1.3", "outputs"], ["results/E1_3 x.json"], "validat"),
    ("config/tables.yaml", ["tables", "gemm", "raw"], ["aic gemm"], "validat"),
]


@pytest.mark.parametrize("path,keys,value,needle", BAD_CONFIG,
                         ids=[f"{p.split('/')[1].split('.')[0]}:{'.'.join(k)}={v!r}" for p, k, v, _ in BAD_CONFIG])
def test_out_of_range_config_is_refused_at_parse(clean_workdir, path, keys, value, needle):
    import yaml

    doc = yaml.safe_load((clean_workdir / path).read_text())
    _set(doc, keys, value)
    (clean_workdir / path).write_text(yaml.safe_dump(doc))
    r = _snakemake(clean_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0, f"{path} {keys}={value!r} passed"
    assert needle in (r.stdout + r.stderr).lower() if needle == "validat" else needle in r.stdout + r.stderr, \
        (r.stdout + r.stderr)[-1500:]


def test_a_bad_seed_leaves_the_committed_result_and_figures_in_place(clean_workdir):
    """The issue's case: `seed: -1` used to pass the schema; the job then failed late, after Snakemake had
    deleted results/E1_11.json and its figures. Now the parse refuses it and nothing is touched."""
    import shutil

    import yaml

    work = clean_workdir
    kept = ["results/E1_11.json"] + [f"figures/{p.name}" for p in (ROOT / "figures").glob("E1_11_*")]
    assert len(kept) >= 4
    for rel in kept:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, work / rel)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg["seed"] = -1
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    r = _snakemake(work, "-j1", "--forcerun", "E1_11", "results/E1_11.json")
    assert r.returncode != 0 and "seed" in r.stdout + r.stderr
    for rel in kept:
        assert (work / rel).read_bytes() == (ROOT / rel).read_bytes(), f"{rel} was touched"


# ---------------------------------------------------------------- atomic writers: no temp left, umask honoured

@pytest.fixture
def umask():
    import os

    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)], ids=["022", "027", "077"])
def test_atomic_writers_honour_the_umask(tmp_path, umask, mask, mode):
    import stat

    import pandas as pd

    from steptime import plotting
    from steptime_lab.data.tables import write_parquet
    from steptime.io import write_json

    umask(mask)
    write_json(tmp_path / "results/E9_9.json", {"a": 1})
    fig, ax = plotting.subplots()
    ax.plot([0, 1], [0, 1])
    plotting.save(fig, tmp_path / "figures/E9_9_x", caption="a caption")
    write_parquet(pd.DataFrame({"a": [1, 2]}), tmp_path / "results/data/t.parquet")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 5
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: oct(mode) for p in files}


def test_an_exception_mid_write_leaves_no_temp_and_the_old_file(tmp_path):
    from steptime.io import atomic_path

    target = tmp_path / "E9_9_x.png"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["E9_9_x.png"]


# A job that has written its result and is writing its first figure when the signal comes (savefig blocks
# after writing half a file into the temp path); it prints READY once inside.
# The job starts with the default signal dispositions a job in a terminal has, whatever it inherits (a CI
# runner or a shell's background job may start it with SIGINT/SIGHUP ignored, which the writer respects).
_KILLED_JOB = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from pathlib import Path
    from matplotlib.figure import Figure
    from steptime import plotting
    from steptime.io import write_json
    out = Path(sys.argv[1])
    write_json(out / "results/E9_9.json", {"a": 1})
    def blocking_savefig(self, fname, **kw):
        Path(fname).write_bytes(b"half a png")
        print("READY", flush=True)
        time.sleep(60)
    Figure.savefig = blocking_savefig
    fig, ax = plotting.subplots()
    plotting.save(fig, out / "figures/E9_9_memory_law", caption="c")
""")


def _start_killed_job(tmp_path):
    import os

    p = subprocess.Popen([sys.executable, "-c", _KILLED_JOB, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT / "src")})
    assert p.stdout.readline().strip() == "READY"
    temps = [f.name for f in (tmp_path / "figures").iterdir()]
    assert len(temps) == 1 and temps[0].startswith(".E9_9_memory_law.png."), temps  # the temp file exists
    return p


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_between_the_result_and_the_figures_leaves_no_temp_file(tmp_path, sig):
    import signal

    p = _start_killed_job(tmp_path)
    p.send_signal(getattr(signal, sig))
    rc = p.wait(timeout=60)
    assert rc != 0
    if sig != "SIGINT":  # the process still ends by the signal (a KeyboardInterrupt exits 1)
        assert rc == -getattr(signal, sig)
    assert list((tmp_path / "figures").iterdir()) == [], "a temp file is left"
    assert (tmp_path / "results/E9_9.json").is_file()


def test_a_writer_killed_outright_has_its_temp_file_removed_by_the_next_write(tmp_path):
    import signal

    from steptime import plotting

    p = _start_killed_job(tmp_path)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert len(list((tmp_path / "figures").iterdir())) == 1, "SIGKILL cannot be caught: the temp stays until"
    fig, ax = plotting.subplots()
    plotting.save(fig, tmp_path / "figures/E9_9_memory_law", caption="c")
    assert sorted(f.name for f in (tmp_path / "figures").iterdir()) == [
        "E9_9_memory_law.caption.txt", "E9_9_memory_law.pdf", "E9_9_memory_law.png"]
