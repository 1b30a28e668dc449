"""GEMM pipeline pieces: E1.3 rebuilds in a clean directory to the committed metrics, and
`steptime evaluate --family gemm` returns well-formed held-out records."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rebuilt import assert_reproduced

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_e1_3_rebuilds_in_a_clean_directory(clean_workdir):
    work = clean_workdir
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "results/E1_3.json"], cwd=work,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    new = json.loads((work / "results/E1_3.json").read_text())
    old = json.loads((ROOT / "results/E1_3.json").read_text())
    assert_reproduced(old["metrics"], new["metrics"], "E1.3 metrics")
    assert_reproduced(old["claims"], new["claims"], "E1.3 claims")
    assert_reproduced(old["decision"], new["decision"], "E1.3 decision")


@pytest.mark.slow
def test_evaluate_gemm_records(monkeypatch):
    if not (ROOT / "results/calibration/gemm_constants.json").exists():
        pytest.skip("settle_gemm_constants has not run")
    monkeypatch.setenv("STEPTIME_ROOT", str(ROOT))
    from steptime_lab.evaluate import RECORD_KEYS, evaluate

    recs = evaluate("gemm", ["h100-sxm"], n_boot=50)
    assert {r["predictor"] for r in recs} == {"steptime", "bare_roofline", "datasheet_alpha", "aic_empirical",
                                              "calibrated_roofline"}
    assert {r["subset"] for r in recs} == {"llm", "all", "decode", "prefill"}
    for r in recs:
        assert all(k in r for k in RECORD_KEYS)
        assert r["gpu"] == "h100-sxm" and 0 < r["mape"] < 1
    st = {r["subset"]: r for r in recs if r["predictor"] == "steptime"}
    bare = {r["subset"]: r for r in recs if r["predictor"] == "bare_roofline"}
    assert st["llm"]["mape"] < bare["llm"]["mape"]
