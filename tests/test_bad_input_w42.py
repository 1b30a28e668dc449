"""Wave 42 (fixes12): bad input, the four gaps wave 41 left, and one code injection. Each test fails on main's code."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refusals import clean, refuses, run_cli

ROOT = Path(__file__).resolve().parents[1]
QWEN_MOE = ["--model", "qwen3-30b-a3b", "--decode", "8x1024"]


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


# ---- 2b / 2c. the routed-expert law line: one formatter, the kernel dtype, and a GPU the tables do not hold --------
def test_predict_says_when_the_selected_kernels_tables_do_not_hold_the_gpu(capsys):
    """Before: `--moe-kernels trtllm` on A100 / MI300X printed "priced with trtllm's fused-MoE laws at bf16" as on a
    GPU TensorRT-LLM's tables cover: its all-GPU law, said nowhere (text or JSON)."""
    for gpu in ("a100-sxm", "mi300x"):
        rc, out, _ = run_cli(capsys, ["predict", *QWEN_MOE, "--gpu", gpu, "--moe-kernels", "trtllm"])
        assert rc == 0 and (f"trtllm's fused-MoE laws at bf16 (trtllm's tables give {gpu} no bf16 kernel family: "
                            "priced with trtllm's all-GPU bf16 law)") in out.splitlines()[0]
        rc, out, _ = run_cli(capsys, ["predict", *QWEN_MOE, "--gpu", gpu, "--moe-kernels", "trtllm", "--json"])
        doc = json.loads(out)
        assert rc == 0 and "moe_kernel_family" in doc and doc["moe_kernel_family"] is None
    rc, out, _ = run_cli(capsys, ["predict", *QWEN_MOE, "--gpu", "h100-sxm", "--moe-kernels", "trtllm", "--json"])
    assert json.loads(out)["moe_kernel_family"] == "cutlass_sm90"  # a GPU the tables hold: its family, no flag
    rc, out, _ = run_cli(capsys, ["predict", *QWEN_MOE, "--gpu", "h100-sxm", "--moe-kernels", "trtllm"])
    assert out.splitlines()[0].endswith("routed experts priced with trtllm's fused-MoE laws at bf16")


def test_serve_json_and_header_flag_the_all_gpu_law(capsys):
    argv = ["serve", "--model", "qwen3-30b-a3b", "--gpu", "a100-sxm", "--moe-kernels", "trtllm", "--n", "4", "--isl",
            "64", "--osl", "4", "--no-progress"]
    rc, out, _ = run_cli(capsys, [*argv, "--json"])
    doc = json.loads(out)
    assert rc == 0 and "moe_kernel_family" in doc and doc["moe_kernel_family"] is None
    rc, out, _ = run_cli(capsys, argv)
    assert "trtllm's tables give a100-sxm no bf16 kernel family" in out.splitlines()[0]


def test_plan_names_the_kernel_dtype_per_gpu_as_predict_does(capsys):
    """Before: plan's line was "routed experts priced with: trtllm's fused-MoE laws under engine vllm" (no dtype)."""
    argv = ["plan", "--model", "gpt-oss-20b", "--slo-tpot-ms", "100", "--gpus", "b200,h200-sxm", "--tp", "1",
            "--max-gpus", "1", "--dtypes", "mxfp4", "--no-disagg", "--n", "10", "--isl", "64", "--osl", "4",
            "--jobs", "1", "--no-progress", "--moe-kernels", "trtllm"]
    rc, out, _ = run_cli(capsys, argv)
    line = next(ln for ln in out.splitlines() if ln.startswith("routed experts priced with"))
    assert rc == 0 and line == ("routed experts priced with: engine vllm: trtllm's fused-MoE laws at mxfp4_mxfp8 on "
                                "b200; mxfp4 on h200-sxm")


def test_one_formatter_words_every_law_line():
    from steptime.moe_step import moe_law, moe_law_text

    assert moe_law("vllm", "fp8_block", "h200-sxm", 1)[1] != moe_law("vllm", "fp8_block", "h200-sxm", 2)[1]  # family_ep
    assert moe_law_text("trtllm", [("b200", "mxfp4")]) == "trtllm's fused-MoE laws at mxfp4_mxfp8"
    text = moe_law_text("trtllm", [("l40s", "fp8_block"), ("h100-sxm", "fp8_block")])
    assert text == ("trtllm's fused-MoE laws at fp8_block (trtllm's tables give l40s no fp8_block kernel family: "
                    "priced with trtllm's all-GPU fp8_block law)")


# ---- 2d. tactic_tiles refuses bad input with the package's named errors ---------------------------------------------
def test_tactic_tiles_refuses_with_named_errors():
    """Before: a bare ValueError (not a SteptimeError: the CLI's one-line handler would not catch it), a TypeError for
    an unhashable dtype, and a GPU given by name refused as 'sm None'."""
    from steptime.errors import InputError, UnsupportedError
    from steptime.specs import get_gpu
    from steptime.terms import moe as M

    with pytest.raises(UnsupportedError) as e:
        M.tactic_tiles(get_gpu("l40s"), "bf16")
    assert "no CUTLASS tile list for bf16 on" in clean(e)
    for gpu, dtype, needle in ((get_gpu("b200"), ["bf16"], "got list"), ("b200", "bf16", "must be a GPU spec"),
                               (None, "bf16", "must be a GPU spec")):
        with pytest.raises(InputError) as e:
            M.tactic_tiles(gpu, dtype)
        assert needle in clean(e)
    with pytest.raises(InputError) as e:
        M.tactic_compute(np.array([8.0]), 4096.0, 1536.0, 8, 128, 1, get_gpu("b200"), "bf16", lambda tN: 1.0, ["x"])
    assert "tactic choice" in clean(e)


# ---- 3. the API sweep's one failure ----------------------------------------------------------------------------------
def test_predict_ops_refuses_a_ragged_array_in_one_line():
    """Before: numpy's ValueError ('setting an array element with a sequence. The requested array has an
    inhomogeneous shape ...'), not a SteptimeError."""
    import steptime
    from steptime.errors import InputError

    with pytest.raises(InputError) as e:
        steptime.predict_ops("gemm", "l40s", m=[[1, 2], [3]], n=4096, k=4096)
    assert "predict_ops('gemm'): m must be a number or a regular array of numbers" in clean(e)


def test_poisson_arrivals_refuses_a_count_that_is_not_one():
    """Before: n a list -> TypeError, 1.5 -> TypeError, -1 -> numpy's ValueError, 0 -> IndexError (gaps[0] of an empty
    array); 1e12 would allocate 8 TB."""
    from steptime.errors import ServeError
    from steptime.serve import poisson_arrivals

    for n, needle in (([[1], [2, 3]], "must be an integer"), (1.5, "must be an integer"), (-1, "must be >= 1"),
                      (0, "must be >= 1"), (10**12, "above the limit of 100000000")):
        with pytest.raises(ServeError) as e:
            poisson_arrivals(n, 1.0)
        assert clean(e).startswith("number of arrivals n") and needle in clean(e)
    assert poisson_arrivals(3, 1.0)[0] == 0.0 and len(poisson_arrivals(3, 1.0)) == 3


def test_plan_prices_names_what_the_file_is_and_where_its_yaml_breaks(capsys, tmp_path):
    """Before: `--prices /dev/zero` (or a FIFO) said "no such file"; a YAML error said "(ParserError)", no line."""
    refuses(capsys, ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "100", "--n", "4", "--prices", "/dev/zero"],
            "--prices '/dev/zero': a device, not a regular file")
    (tmp_path / "p.yaml").write_text("prices:\n  h100-sxm: [\n")
    err = refuses(capsys, ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "100", "--n", "4", "--prices",
                           str(tmp_path / "p.yaml")], "not a YAML price table (YAML error at line ")
    assert "ParserError" not in err
