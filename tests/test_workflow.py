"""The pipeline itself: the DAG resolves and is lint-clean; the .test/ configuration (a data
subset, snakemake-workflows style) builds rule all in seconds in a scratch directory to the
committed bytes; a deleted raw file stops the build naming it; every config file is validated
(unknown keys refused); every file a rule writes into figures/ is a declared output."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rebuilt import assert_reproduced

ROOT = Path(__file__).resolve().parents[1]


def _snakemake(work: Path, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=work,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def test_workdir(tmp_path) -> Path:
    """A scratch copy of the workflow and library with .test/ (its config and raw subset) laid over it."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "config", "workflow"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / ".test", work, dirs_exist_ok=True)
    return work


def test_dag_resolves_for_rule_all(clean_workdir):
    r = _snakemake(clean_workdir, "-n", "--quiet", "rules")
    assert r.returncode == 0, r.stderr[-2000:]


def test_lint_is_clean(clean_workdir):
    """`snakemake --lint` finds nothing (it exits non-zero on any lint), so a new lint fails here too."""
    r = _snakemake(clean_workdir, "--lint")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_test_config_builds_rule_all_to_the_committed_bytes(test_workdir):
    work = test_workdir
    r = _snakemake(work, "--quiet", "rules")
    assert r.returncode == 0, r.stderr[-3000:]
    for t in ("vidur_cpu_overheads", "distserve", "distserve_max_num_tokens"):
        assert (work / f"results/data/{t}.parquet").read_bytes() == (ROOT / f"results/data/{t}.parquet").read_bytes()
    for name in ("gpus.json", "models.json"):
        assert (work / "results/specs" / name).read_bytes() == (ROOT / "results/specs" / name).read_bytes()
    new, old = (json.loads((d / "results/L0_1.json").read_text()) for d in (work, ROOT))
    assert_reproduced(old["metrics"], new["metrics"], "L0.1 metrics")
    assert_reproduced(old["claims"], new["claims"], "L0.1 claims")
    # L0.1's figure and the figures indexes (figures/README.md, figures/PAPER.md: documents of rule all), nothing else
    assert {p.name for p in (work / "figures").iterdir()} == {f"L0_1_literature.{e}" for e in ("png", "pdf", "caption.txt")} | {"README.md", "PAPER.md"}
    assert "L0_1_literature" in (work / "figures/README.md").read_text()
    assert "L0.1" in (work / "results/SUMMARY.md").read_text()
    assert (work / "logs/data/vidur_cpu_overheads.log").read_text().strip(), "the ingest log says nothing"


def test_a_deleted_raw_file_stops_the_build_naming_it(test_workdir):
    gone = "raw/vidur/profiling/cpu_overheads/a100/meta-llama/Llama-2-7b-hf/cpu_overheads.csv"
    files = [f["path"] for f in yaml.safe_load((test_workdir / "raw/MANIFEST.yaml").read_text())["files"]
             if f["table"] == "vidur_cpu_overheads"]
    gone = files[0]
    (test_workdir / gone).unlink()
    r = _snakemake(test_workdir, "-n", "results/data/vidur_cpu_overheads.parquet")
    assert r.returncode != 0
    assert f"raw file missing: {gone}" in r.stdout + r.stderr
    # a built experiment whose raw file is gone is not dropped from rule all: the build stops
    reg = yaml.safe_load((test_workdir / "config/experiments.yaml").read_text())
    reg["experiments"]["L0.1"]["raw"] = [gone]
    (test_workdir / "config/experiments.yaml").write_text(yaml.safe_dump(reg))
    r = _snakemake(test_workdir, "-n")
    assert r.returncode != 0 and f"raw file missing: {gone}" in r.stdout + r.stderr
    # targets that do not need it still build
    assert _snakemake(test_workdir, "-n", "results/specs/gpus.json").returncode == 0


@pytest.mark.parametrize("edit", [
    ("config/config.yaml", lambda d: d.update(fsat=True)),
    ("config/config.yaml", lambda d: d["rf"].update(n_jobs=4)),
    ("config/experiments.yaml", lambda d: d["experiments"]["L0.1"].update(qestion="typo")),
    ("config/experiments.yaml", lambda d: d["experiments"]["L0.1"].update(status="done")),
    ("config/collect.yaml", lambda d: d["clock_sweep"].update(rnus=5)),
    ("config/tables.yaml", lambda d: d["tables"]["distserve"].update(loader="x")),
])
def test_every_config_file_refuses_unknown_keys(test_workdir, edit):
    path, change = edit
    doc = yaml.safe_load((test_workdir / path).read_text())
    change(doc)
    (test_workdir / path).write_text(yaml.safe_dump(doc))
    r = _snakemake(test_workdir, "-n", "results/specs/gpus.json")
    assert r.returncode != 0 and "validat" in (r.stdout + r.stderr).lower()


def test_registry_targets_mapping_is_allowed(test_workdir):
    reg = yaml.safe_load((test_workdir / "config/experiments.yaml").read_text())
    reg["experiments"]["L0.1"]["targets"] = {"mape": 0.06, "per_gpu": {"h100-sxm": 0.06}}
    (test_workdir / "config/experiments.yaml").write_text(yaml.safe_dump(reg))
    assert _snakemake(test_workdir, "-n", "results/specs/gpus.json").returncode == 0


def test_every_figure_a_rule_writes_is_declared(clean_workdir):
    """Each committed file under figures/ is an output of some job of rule all (png, pdf and caption), or of
    an optional experiment's rule (registry status `optional`: built by name, outside rule all)."""
    reg = yaml.safe_load((ROOT / "config/experiments.yaml").read_text())["experiments"]
    optional = [o for e in reg.values() if e["status"] == "optional" for o in e["outputs"] if o.endswith(".json")]
    r = _snakemake(clean_workdir, "--summary", "all", *optional)
    assert r.returncode == 0, r.stderr[-2000:]
    declared = {line.split("\t")[0] for line in r.stdout.splitlines()[1:]}
    committed = {f"figures/{p.name}" for p in (ROOT / "figures").iterdir()}
    assert committed, "no committed figures"
    assert committed <= declared, f"written but not declared: {sorted(committed - declared)[:5]}"


def test_conda_env_lists_the_pipeline_dependencies():
    """workflow/envs/steptime.yaml (every rule's conda:) holds pyproject's core + pipeline
    dependencies (less snakemake itself) and does not install the project (-e . breaks there)."""
    import tomllib

    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    need = {re.split(r"[<>=\[ ]", d)[0].lower() for d in py["dependencies"] + py["optional-dependencies"]["pipeline"]}
    need -= {"snakemake"}
    env = yaml.safe_load((ROOT / "workflow/envs/steptime.yaml").read_text())
    have = {re.split(r"[<>= ]", d)[0].lower().replace("matplotlib-base", "matplotlib")
            for d in env["dependencies"] if isinstance(d, str)}
    assert need <= have, f"missing from the conda env: {sorted(need - have)}"
    assert not any(isinstance(d, dict) for d in env["dependencies"]), "the env must not pip-install the project"
