"""`steptime audit`: claims with verdicts and checks, staleness, and the chain to the raw bytes."""
import json

import pytest
import yaml

from steptime_lab.audit import AuditError, audit, check_claim, failures, run
from steptime.cli import main
from steptime.io import sha256_file
from steptime_lab.results import code_sha256


def _claims():
    return [
        {"claim": "A MAPE within 10%", "value": 0.08, "comparison": "<= 10%", "target": 0.1, "met": True},
        {"claim": "B MAPE within 5%", "value": 0.07, "comparison": "<= 5%", "target": 0.05, "met": False},
        {"claim": "speed-up", "value": 4.0, "comparison": "ratio", "target": 3.0, "met": True},
        {"claim": "descriptive", "value": {"a": 1, "b": None}, "comparison": "count"},
    ]


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "raw").mkdir()
    raw = tmp_path / "raw" / "t.csv"
    raw.write_text("a\n1\n")
    (tmp_path / "raw" / "MANIFEST.yaml").write_text(yaml.safe_dump({"files": [
        {"path": "raw/t.csv", "sha256": sha256_file(raw), "source": "somewhere", "version": "1"}]}))
    (tmp_path / "results" / "data").mkdir(parents=True)
    tidy = tmp_path / "results" / "data" / "t.parquet"
    tidy.write_bytes(b"tidy")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "experiments.yaml").write_text(yaml.safe_dump({"experiments": {
        "E9.1": {"question": "q", "status": "built", "raw": ["raw/t.csv"], "outputs": ["results/E9_1.json"]}}}))
    doc = {"id": "E9.1", "claims": _claims(), "provenance": {
        "code_sha256": code_sha256(), "rule": "E9_1", "script": "workflow/scripts/E9_1.py", "steptime_version": "0",
        "inputs": {"results/data/t.parquet": {"sha256": sha256_file(tidy)}}}}
    (tmp_path / "results" / "E9_1.json").write_text(json.dumps(doc))
    return tmp_path


def test_clean_repository_passes_with_verdicts_and_chain(repo, capsys):
    (a,) = audit(repo)
    assert a.state == "ok" and a.rule == "E9_1" and a.script.endswith("E9_1.py")
    assert [c.holds for c in a.claims] == ["yes", "no", "yes", "info"]
    assert [c.check for c in a.claims] == ["ok", "ok", "not recomputable", "not recomputable"]
    assert a.raw[0]["source"] == "somewhere" and a.raw[0]["sha256_manifest"] == a.raw[0]["sha256_now"]
    assert failures([a]) == []                      # a missed target is reported, not a failure
    assert failures([a], strict=True) == ["E9.1:2: target missed (--strict)"]
    assert run(root=repo) == 0


def test_tampered_raw_file_makes_it_stale_and_fail(repo, capsys):
    (repo / "raw" / "t.csv").write_text("a\n2\n")
    assert run(root=repo) == 1
    assert "does not match its sha256" in capsys.readouterr().out


def test_changed_tidy_input_fails(repo, capsys):
    (repo / "results" / "data" / "t.parquet").write_bytes(b"edited")
    assert run(root=repo, as_json=True) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["passed"] and "t.parquet changed" in out["failures"][0]


def test_claim_whose_verdict_contradicts_its_value_fails(repo, capsys):
    p = repo / "results" / "E9_1.json"
    doc = json.loads(p.read_text())
    doc["claims"][0]["value"] = 0.2          # > 10% but still says met
    p.write_text(json.dumps(doc))
    assert run(root=repo) == 1
    assert "E9.1:1: check failed" in capsys.readouterr().out


@pytest.mark.parametrize("c, expect", [
    ({"claim": "x", "value": float("nan"), "comparison": "<= 5%", "target": 0.05, "met": True}, "failed"),
    ({"claim": "x", "value": None, "comparison": "count"}, "failed"),
    ({"claim": "x", "value": 0.04, "comparison": "MAPE", "target": 0.05}, "failed"),  # target, no verdict
    ({"claim": "x", "value": 0.04, "comparison": "<= 6%", "target": 0.05, "met": True}, "failed"),  # disagree
    ({"claim": "x", "value": 0.05, "comparison": "<= 5%", "target": 0.05, "met": False}, "ok"),  # boundary
    ({"claim": "x", "value": 2.0, "comparison": ">= 1.5", "target": 1.5, "met": True}, "ok"),
    ({"claim": "x", "value": 1.2, "comparison": "speed", "op": ">=", "target": 1.5, "met": True}, "failed"),
])
def test_check_claim(c, expect):
    assert check_claim(c).startswith(expect)


def test_select_one_claim_and_unknown_ids(repo, capsys):
    (a,) = audit(repo, "E9.1:2")
    assert [c.id for c in a.claims] == ["E9.1:2"]
    with pytest.raises(AuditError, match="unknown experiment 'E7.7'"):
        audit(repo, "E7.7")
    with pytest.raises(AuditError, match="no claim 'E9.1:9'"):
        audit(repo, "E9.1:9")
    for bad in ("", "  "):  # an empty selection is refused, not read as "everything"
        with pytest.raises(AuditError, match="empty or non-text selection"):
            audit(repo, bad)


def test_cli_unknown_experiment_is_one_line(monkeypatch, repo, capsys):
    monkeypatch.setenv("STEPTIME_ROOT", str(repo))
    assert main(["audit", "E7.7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown experiment" in err
