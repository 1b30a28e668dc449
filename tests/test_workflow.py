"""The pipeline itself: the DAG resolves, and a small part rebuilds in a clean directory
to the same bytes as the committed results (so an existing result cannot hide a broken rule)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _snakemake(work: Path, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=work,
                          capture_output=True, text=True, timeout=timeout)


def test_dag_resolves_for_rule_all(clean_workdir):
    work = clean_workdir
    r = _snakemake(work, "-n", "--quiet", "rules")
    assert r.returncode == 0, r.stderr[-2000:]


def test_lint_is_clean(clean_workdir):
    """`snakemake --lint` finds nothing (it exits non-zero on any lint), so a new lint fails here too."""
    work = clean_workdir
    r = _snakemake(work, "--lint")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


@pytest.mark.slow
def test_specs_tables_rebuild_identically(clean_workdir):
    work = clean_workdir
    r = _snakemake(work, "results/specs/gpus.json", "results/specs/models.json")
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("gpus.json", "models.json"):
        assert (work / "results/specs" / name).read_bytes() == (ROOT / "results/specs" / name).read_bytes()
