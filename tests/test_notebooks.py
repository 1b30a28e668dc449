"""The notebooks (jupytext percent scripts) run top to bottom, and their paired .ipynb match them."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_there_are_three_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"predictor_walkthrough", "main_figures", "audit_claim"}


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(nb):
    r = subprocess.run([sys.executable, str(nb)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_ipynb_is_generated_from_the_script(nb):
    jupytext = pytest.importorskip("jupytext")
    ipynb = nb.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: snakemake {ipynb.relative_to(ROOT)}"
    want = [c.source for c in jupytext.read(nb).cells]
    have = [c.source for c in jupytext.read(ipynb).cells]
    assert want == have, f"{ipynb.name} is out of date with {nb.name}: snakemake -f {ipynb.relative_to(ROOT)}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_notebook_rebuilds_byte_identical(nb, tmp_path):
    """The build rewrites notebooks/*.ipynb from the scripts: twice gives the same bytes, and the same bytes as
    the committed file (a fresh clone's `git status` stays clean)."""
    from steptime_lab.reporting import pair_notebook

    a, b = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    pair_notebook(nb, a)
    pair_notebook(nb, b)
    assert a.read_bytes() == b.read_bytes() == nb.with_suffix(".ipynb").read_bytes()
