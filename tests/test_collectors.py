"""Parsers and reductions of the GPU collectors, on small synthetic format fixtures."""
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from steptime_collect.clock import parse_clock_sweep, reduce_clock_sweep
from steptime_collect.ncu import parse_ncu_csv, reduce_factors
from steptime.errors import DataError

FIX = Path(__file__).parent / "fixtures"


def _rejects(parse, path, lines, match):
    """Write `lines` to `path`; `parse` must refuse the file with a DataError matching `match`."""
    path.write_text("\n".join(lines))
    with pytest.raises(DataError, match=match) as exc:
        parse(path)
    return exc


def test_ncu_parse_units_and_pick_gemm_kernel():
    df = parse_ncu_csv(FIX / "ncu_gemm_small.csv")
    assert len(df) == 3
    assert df["duration_ms"].iloc[0] == pytest.approx(0.004)   # 4,000 ns
    assert df["sm_clock_mhz"].iloc[2] == pytest.approx(1400.0)  # 1.40 cycle/ns
    rows = reduce_factors(df, "h100-sxm")
    assert [r["m"] for r in rows] == [64, 4096]
    small, big = rows
    assert "gemm" in small["kernel"]                           # not the randn kernel
    assert big["grid"] == 112 and big["cluster"] == 16
    assert big["eta_fill"] == pytest.approx(112 / 132)
    assert big["eta_active"] == pytest.approx(260 / 280)
    assert big["eta_duty"] == pytest.approx(0.95)
    assert big["f_clk"] == pytest.approx(1400 / 1980)


@pytest.mark.filterwarnings("ignore:Length of header")  # the header lacks a field the rows have
def test_ncu_bad_files(tmp_path):
    text = (FIX / "ncu_gemm_small.csv").read_text().splitlines()
    _rejects(parse_ncu_csv, tmp_path / "missing.csv", [text[0].replace('"launch__grid_size",', "")] + text[1:],
             r"missing.csv: row all, column 'launch__grid_size': required column missing")
    _rejects(parse_ncu_csv, tmp_path / "pct.csv", text[:4] + [text[4].replace('"95.00"', '"195.00"')],
             r"pct.csv: row 3 \(line 5\), column 'sm__pipe_tensor.*in_range")
    _rejects(parse_ncu_csv, tmp_path / "unit.csv", [text[0], text[1].replace('"nsecond"', '"fortnight"')] + text[2:],
             r"unit.csv: row 0 \(line 2\), column 'gpu__time_duration.sum': unknown unit")
    _rejects(parse_ncu_csv, tmp_path / "trunc.csv", text[:2], "no kernel rows")
    exc = _rejects(parse_ncu_csv, tmp_path / "nan.csv", text[:3] + [text[3].replace('"16,000"', '"n/a"')] + text[4:],
                   r"nan.csv: row 2 \(line 4\), column 'gpu__time_duration.sum'.*'n/a'")
    assert "row all" not in str(exc.value)  # no column-wide echo of the value that would not convert
    with pytest.raises(DataError, match=r"absent.csv: file missing$"):  # telemetry is not in raw/MANIFEST.yaml
        parse_ncu_csv(tmp_path / "absent.csv")


def test_clock_sweep_reduction():
    df = parse_clock_sweep(FIX / "clock_sweep_small.csv")
    rows = reduce_clock_sweep(df, "h100-sxm", n_boot=200)
    assert [r["m"] for r in rows] == [64, 16384]
    assert rows[1]["sm_clock_mhz"] == 1390 and rows[1]["runs"] == 3
    assert rows[1]["f_clk"] == pytest.approx(1390 / 1980)
    lo, hi = rows[1]["sm_clock_ci"]
    assert 1380 <= lo <= 1390 <= hi <= 1400


def test_clock_sweep_bad_rows(tmp_path):
    lines = (FIX / "clock_sweep_small.csv").read_text().splitlines()
    _rejects(parse_clock_sweep, tmp_path / "neg.csv", lines[:2] + [lines[2].replace(",0.02,", ",-0.02,")],
             r"neg.csv: row 1 \(line 3\), column 'latency_ms'")
    _rejects(parse_clock_sweep, tmp_path / "nan.csv", lines[:2] + [lines[2].replace(",1980,", ",,")],
             r"nan.csv: row 1 \(line 3\), column 'sm_clock_mhz'")
    _rejects(parse_clock_sweep, tmp_path / "cols.csv",
             [lines[0].replace(",samples", "")] + [r.rsplit(",", 1)[0] for r in lines[1:]],
             r"cols.csv: row all, column 'samples': required column missing")


def test_report_writes_result_and_figure(tmp_path):
    """The body of every awaiting experiment's script (E1.10 here): result, provenance, its own figure."""
    from steptime_lab.experiments.telemetry import report

    sweep = tmp_path / "raw" / "telemetry" / "clock" / "h100-sxm" / "clock_sweep.csv"
    sweep.parent.mkdir(parents=True)
    shutil.copy(FIX / "clock_sweep_small.csv", sweep)
    inputs = type("Input", (list,), {})([str(sweep)])  # a Snakemake named list: files, and groups as attributes
    inputs.telemetry = [str(sweep)]
    params = {"id": "E1.10", "question": "q", "seed": 1, "bootstrap": 50}
    smk = SimpleNamespace(input=inputs, params=SimpleNamespace(items=lambda: params.items(), **params),
                          output=SimpleNamespace(result=str(tmp_path / "E1_10.json"),
                                                 fig=str(tmp_path / "E1_10_clock.png")), rule="telemetry_E1_10")
    metrics, claims = report(smk)
    assert list(metrics["per_gpu"]) == ["h100-sxm"]            # the GPU is the folder name
    doc = json.loads((tmp_path / "E1_10.json").read_text())
    assert doc["id"] == "E1.10" and [r["m"] for r in doc["metrics"]["per_gpu"]["h100-sxm"]] == [64, 16384]
    assert doc["provenance"]["rule"] == "telemetry_E1_10" and str(sweep) in doc["provenance"]["inputs"]
    assert doc["provenance"]["config"] == {"id": "E1.10", "seed": 1, "bootstrap": 50}  # the rule's params only
    assert claims[-1]["claim"].startswith("reported in round 1 (E1.10")
    for ext in (".png", ".pdf", ".caption.txt"):
        assert (tmp_path / f"E1_10_clock{ext}").stat().st_size > 0


# ---------------------------------------------------------------------------------------
# The collectors' command lines: a bad value is one clear line and exit 2, before any GPU is touched
@pytest.mark.parametrize("module, argv, needle", [
    ("clock", ["--out", "x.csv", "--m", "16,abc", "--dry-run"], "'abc' in '16,abc' is not a whole number"),
    ("clock", ["--out", "x.csv", "--m", "0,16", "--dry-run"], "'0' in '0,16' must be >= 1"),
    ("clock", ["--out", "x.csv", "--runs", "-1", "--dry-run"], "'-1' must be >= 1"),
    ("clock", ["--out", "x.csv", "--caps", "500,abc", "--dry-run"], "'abc' in '500,abc' is not a number"),
    ("clock", ["--out", "x.csv", "--caps", "0", "--dry-run"], "'0' in '0' must be >= 1"),
    ("clock", ["--out", "x.csv", "--lock-mhz", "none,nan", "--dry-run"], "'nan' in 'none,nan' must be >= 1"),
    ("gemm_sweep", ["--plan", "duty", "--gpu", "h100", "--out", "x", "--repeats", "0", "--dry-run"],
     "'0' must be >= 1"),
    ("gemm_sweep", ["--plan", "duty", "--gpu", "h100", "--out", "x", "--seed", "-3", "--dry-run"],
     "'-3' must be >= 0"),
    ("steptrace", ["--model", "llama-3.1-8b", "--out", "x", "--requests", "2.5", "--dry-run"],
     "'2.5' is not a whole number"),
    ("engine_kernels", ["--model", "llama-3.1-8b", "--gpu", "h100", "--out", "x", "--requests", "0"],
     "'0' must be >= 1"),
    ("gemm_bench", ["--m", "1,x", "--n", "16", "--k", "16"], "'x' in '1,x' is not a whole number"),
])
def test_collector_cli_refuses_bad_values_in_one_line(module, argv, needle, capsys):
    import importlib

    mod = importlib.import_module(f"steptime_collect.{module}")
    with pytest.raises(SystemExit) as exc:
        mod.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith(needle), err


def test_clock_plan_cli_takes_the_parsed_settings(capsys):
    from steptime_collect import clock

    assert clock.main(["--out", "x.csv", "--m", "16,256", "--runs", "2", "--caps", "none,450", "--dry-run"]) == 0
    import ast

    cells = [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines()]
    assert len(cells) == 2 * 2 * 2 and {c["m"] for c in cells} == {16, 256}
    assert {c["cap_w"] for c in cells} == {None, 450.0}


def test_collector_run_prints_a_steptime_error_as_one_line(capsys):
    from steptime_collect.cli import run
    from steptime_collect.dispatch import main

    assert run(main, "steptime_collect.dispatch", ["--gpu", "h100", "--out", "x", "--parse", "/no/such.log"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("steptime_collect.dispatch: error: ") and err.count("\n") == 1, err


def test_engine_kernels_without_ncu_stops_in_one_line(monkeypatch, tmp_path, capsys):
    """On a GPU node without Nsight Compute on PATH, engine_kernels (which runs under `ncu`) names what is missing in
    one line, as the ncu collector does (until wave 38 it ran `ncu` and died with a FileNotFoundError traceback)."""
    import steptime_collect.safety as safety
    from steptime_collect.cli import run
    from steptime_collect.engine_kernels import main

    monkeypatch.setattr(safety, "require_gpu", lambda: None)  # as on a GPU node
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    argv = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--out", str(tmp_path / "ncu.csv")]
    assert run(main, "steptime_collect.engine_kernels", argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("steptime_collect.engine_kernels: error: ") and err.count("\n") == 1, err
    assert "ncu" in err and not (tmp_path / "ncu.csv").exists()


def test_write_csv_is_the_collectors_one_writer(tmp_path):
    import pandas as pd

    from steptime_collect.cli import write_csv
    from steptime_collect.steptrace import FPM_COLUMNS, step_row, write_rows

    write_rows(tmp_path / "t.csv", [step_row(0, [(5, 0)], [10, 12], [], 1.5), step_row(1, [], [11, 13], [], 0.7)])
    d = pd.read_csv(tmp_path / "t.csv")
    assert list(d.columns) == list(FPM_COLUMNS) and d["latency_ms"].tolist() == [1.5, 0.7]
    with pytest.raises(ValueError, match="a row of 2 values under 3 columns"):
        write_csv(tmp_path / "bad.csv", ["a", "b", "c"], [[1, 2]])
    assert not (tmp_path / "bad.csv").exists()  # atomic: nothing half-written


def _no_gpu_path(tmp_path):
    """A PATH whose python3 is this interpreter (no CUDA GPU in CI) and which has no nvidia-smi or ncu."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any((Path(d) / x).exists() for x in ("nvidia-smi", "ncu", "python3"))]
    return os.pathsep.join([str(bin_dir), *keep, "/usr/bin", "/bin"])


def test_lone_gpu_script_runs_every_step_and_logs_it_without_a_gpu(tmp_path, repo_root):
    """workflow/scripts/collect_lone_gpu.sh on a node without a GPU: each collector step is tried under its limit,
    refuses with its one 'no GPU here' line (exit 2), and the script still finishes with its log and environment
    record; nothing half-written is left (no CSV)."""
    import os
    import subprocess

    torch_cuda = subprocess.run([os.sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                                capture_output=True)
    if torch_cuda.returncode == 0:  # pragma: no cover - a GPU node
        pytest.skip("a CUDA GPU is present: the script would collect for real")
    out = tmp_path / "out"
    env = {**os.environ, "PATH": _no_gpu_path(tmp_path), "PYTHONPATH": str(repo_root / "src")}
    r = subprocess.run(["bash", "workflow/scripts/collect_lone_gpu.sh", "h200-sxm", str(out)], cwd=repo_root,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [ln.split()[0] for ln in r.stdout.splitlines() if " rc=" in ln] == ["l2", "dispatch", "duty", "clock", "ncu"]
    log = (out / "collect.log").read_text()
    assert "steptime GPU: NVIDIA H200" in log
    assert log.count("rc=2 ") == 5 and log.count("no GPU here") == 5
    assert "--hold-s 2 --cool-s 0.5" in log  # the lease's settings are recorded with the run
    assert (out / "environment.txt").is_file()
    assert not list(out.glob("*.csv")) and not list(out.glob("*.log.part"))


def test_lone_gpu_script_refuses_bad_usage_and_unknown_gpu(tmp_path, repo_root):
    import os
    import subprocess

    env = {**os.environ, "PATH": _no_gpu_path(tmp_path), "PYTHONPATH": str(repo_root / "src")}
    script = "workflow/scripts/collect_lone_gpu.sh"
    r = subprocess.run(["bash", script], cwd=repo_root, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "usage:" in r.stderr
    r = subprocess.run(["bash", script, "no-such-gpu", str(tmp_path / "o")], cwd=repo_root, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown GPU 'no-such-gpu'" in r.stderr
    assert not (tmp_path / "o" / "l2.csv").exists() and "== l2" not in (tmp_path / "o" / "collect.log").read_text()
