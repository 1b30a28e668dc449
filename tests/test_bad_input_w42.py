"""Wave 42 (fixes12): bad input, the four gaps wave 41 left, and one code injection. Each test fails on main's code."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def clean(e) -> str:
    return str(e.value)


def test_the_lone_gpu_script_passes_the_gpu_key_to_python_as_data_not_code(tmp_path):
    """Before: `python3 -c "...s.get_gpu('$gpu')..."`: a GPU_KEY holding a quote ran as Python (here: made a file)."""
    flag = tmp_path / "PWNED"
    key = f"h200-sxm').name); open({str(flag)!r}, 'w'); print(s.get_gpu('h200-sxm"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        r = subprocess.run(["bash", "workflow/scripts/collect_lone_gpu.sh", key, str(tmp_path / "o")], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:  # main's script went on to run every collector with the forged key
        r = None
    assert not flag.exists(), "the GPU key ran as Python code"
    assert r is not None and r.returncode == 2 and "unknown GPU" in r.stderr
