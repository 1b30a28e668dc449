import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.register_assert_rewrite("refusals", "rawcopy", "rebuilt")  # the shared test helpers (tests/*.py)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session", autouse=True)
def _shipped_files_untouched():
    """The product's shipped constants (defaults.yaml, the fitted engine constants, the grey-box corrections) are
    written only by `steptime calibration ship` run by a person. A test that ships into them by mistake (e.g. a
    refusal test run against code that no longer refuses) would corrupt the checkout: restore their bytes after the
    session and fail it, naming the file."""
    import steptime.calibration as cal
    from steptime.specs import engines as E

    files = [Path(f) for f in (cal.DEFAULTS_FILE, E.FITTED_FILE, cal.GREYBOX_FILE)]
    before = {f: f.read_bytes() if f.exists() else None for f in files}
    yield
    changed = [f for f, b in before.items() if (f.read_bytes() if f.exists() else None) != b]
    for f in changed:
        if before[f] is None:
            f.unlink()
        else:
            f.write_bytes(before[f])
    assert not changed, f"a test wrote the shipped file(s) {[str(f) for f in changed]}; restored"


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
