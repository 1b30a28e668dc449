import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _root_env(monkeypatch):
    monkeypatch.setenv("STEPTIME_ROOT", os.environ.get("STEPTIME_ROOT", str(ROOT)))
