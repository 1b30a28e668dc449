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
