"""`steptime status`: ok / stale / missing / awaiting from the registry and the files on disk."""
import json

import pytest
import yaml

from steptime.io import sha256_file
from steptime_lab.results import code_sha256
from steptime_lab.status import experiment_status, stale_reasons


@pytest.fixture
def repo(tmp_path):
    """A tiny repository: one raw file in the manifest, one tidy input, one built result."""
    (tmp_path / "raw").mkdir()
    raw = tmp_path / "raw" / "table.csv"
    raw.write_text("a,b\n1,2\n")
    (tmp_path / "raw" / "MANIFEST.yaml").write_text(yaml.safe_dump(
        {"files": [{"path": "raw/table.csv", "sha256": sha256_file(raw)}]}))
    (tmp_path / "results" / "data").mkdir(parents=True)
    tidy = tmp_path / "results" / "data" / "table.parquet"
    tidy.write_bytes(b"tidy bytes")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "experiments.yaml").write_text(yaml.safe_dump({"experiments": {
        "E9.1": {"question": "q", "status": "built", "raw": ["raw/table.csv"], "outputs": ["results/E9_1.json"]},
        "E9.2": {"question": "q", "status": "awaiting", "raw": ["raw/telemetry/x.csv"],
                 "collect": "snakemake raw/telemetry/x.csv", "outputs": ["results/E9_2.json"]},
        "E9.3": {"question": "q", "status": "built", "raw": ["raw/table.csv"], "outputs": ["results/E9_3.json"]},
    }}))
    doc = {"id": "E9.1", "provenance": {"code_sha256": code_sha256(), "inputs": {
        "results/data/table.parquet": {"sha256": sha256_file(tidy), "bytes": tidy.stat().st_size}}}}
    (tmp_path / "results" / "E9_1.json").write_text(json.dumps(doc))
    return tmp_path


def states(root):
    return {r["id"]: r for r in experiment_status(root)}


def test_fresh_result_is_ok_and_unbuilt_or_awaiting_are_named(repo):
    s = states(repo)
    assert s["E9.1"]["state"] == "ok" and s["E9.1"]["reasons"] == []
    assert s["E9.2"]["state"] == "awaiting" and s["E9.2"]["collect"] == "snakemake raw/telemetry/x.csv"
    assert s["E9.3"]["state"] == "missing"


def test_changed_input_makes_the_result_stale(repo):
    (repo / "results" / "data" / "table.parquet").write_bytes(b"other bytes")
    s = states(repo)["E9.1"]
    assert s["state"] == "stale" and "results/data/table.parquet changed" in s["reasons"][0]


def test_code_change_makes_the_result_stale(repo):
    p = repo / "results" / "E9_1.json"
    doc = json.loads(p.read_text())
    doc["provenance"]["code_sha256"] = "0" * 64
    p.write_text(json.dumps(doc))
    assert any("library changed" in r for r in stale_reasons(p, repo))
    assert states(repo)["E9.1"]["state"] == "stale"


def test_corrupted_raw_file_is_reported(repo):
    (repo / "raw" / "table.csv").write_text("a,b\n1,3\n")
    s = states(repo)["E9.1"]
    assert s["state"] == "stale" and "does not match its sha256" in s["reasons"][0]


def test_deleted_raw_file_is_missing_data(repo):
    (repo / "raw" / "table.csv").unlink()
    s = states(repo)["E9.1"]
    assert s["state"] == "missing-data" and "raw/table.csv is missing" in s["reasons"][0]
