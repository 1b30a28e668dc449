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


# ---- 2a. get_engine(fitted=path) checks the file's seal, as `steptime calibration ship` does -----------------------
def _fitted_text(value: float = 1.5) -> str:
    return ("engines:\n  vllm:\n    b300:\n      sched_a_ms: {value: %s, provenance: FITTED, source: test, "
            "cells: [[b300, fpm, 1]]}\n" % value)


def test_get_engine_refuses_a_hand_edited_fitted_file(tmp_path):
    """Before: a sealed fitted file whose value was edited afterwards was read as it stood (1.5 -> 9.5, no word)."""
    from steptime.calibration import seal_text
    from steptime.errors import SteptimeError
    from steptime.specs import get_gpu
    from steptime.specs.engines import get_engine

    f = tmp_path / "engine_constants.yaml"
    f.write_text(seal_text(_fitted_text()))
    assert get_engine("vllm", fitted=f).get("sched_a_ms", get_gpu("b300")) == 1.5  # sealed: read
    f.write_text(f.read_text().replace("value: 1.5", "value: 9.5"))
    with pytest.raises(SteptimeError) as e:
        get_engine("vllm", fitted=f)
    assert "seal line does not match the lines above it" in clean(e) and str(f) in clean(e)


def test_get_engine_refuses_an_unsealed_or_missing_fitted_file(tmp_path):
    """Before: an unsealed (hand-written, or cut at a line end) file was read; a path that names no file gave no fits."""
    from steptime.calibration import Constants
    from steptime.errors import SteptimeError
    from steptime.specs.engines import get_engine

    f = tmp_path / "engine_constants.yaml"
    f.write_text(_fitted_text())
    with pytest.raises(SteptimeError) as e:
        get_engine("vllm", fitted=f)
    assert "no closing seal line" in clean(e)
    with pytest.raises(SteptimeError) as e:
        Constants.default().with_engines(f)
    assert "no closing seal line" in clean(e)
    with pytest.raises(SteptimeError) as e:
        get_engine("vllm", fitted=tmp_path / "no_such.yaml")
    assert "no_such.yaml" in clean(e) and "No such file" in clean(e)
