import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.register_assert_rewrite("refusals", "rawcopy", "rebuilt")  # the shared test helpers (tests/*.py)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _root_env(monkeypatch):
    monkeypatch.setenv("STEPTIME_ROOT", os.environ.get("STEPTIME_ROOT", str(ROOT)))


@pytest.fixture
def clean_workdir(tmp_path) -> Path:
    """A scratch copy of the pipeline (Snakefile, config, workflow, raw, src) without any
    results, so a rule must really rebuild what it is asked for. Tests that only need the
    workflow's behaviour use tests/test_workflow.py's `test_workdir` (.test/'s data subset)."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "config", "workflow", "raw"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return work
