"""`steptime data verify`: passes on the repository, fails (readably) on tampered copies."""

from __future__ import annotations

import hashlib
import json
import shutil

import pandas as pd
import pytest
import yaml

from steptime_lab.data import cli_main
from steptime_lab.data.verify import main, verify

GEMM_L40S = "raw/aiconfigurator/l40s/gemm/vllm/0.24.0/gemm_perf.bf16.parquet"
TRACE_CONV = "raw/vidur/processed_traces/splitwise_conv.csv"
LICENCES = ["raw/aiconfigurator/LICENSE", "raw/vidur/LICENSE"]


def test_verify_passes_on_repo(repo_root, capsys):
    assert main(["--root", str(repo_root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("raw/ OK:") and "loader checks" in out


@pytest.fixture()
def raw_copy(tmp_path, repo_root):
    shutil.copytree(repo_root / "raw", tmp_path / "raw")
    return tmp_path


def test_verify_fails_on_tampered_copy(raw_copy, capsys):
    root = raw_copy
    p = root / TRACE_CONV
    lines = p.read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(",", ",9", 1)  # one edited value
    p.write_text("".join(lines))
    (root / "raw/vidur/extra.csv").write_text("a,b\n1,2\n")  # a file nobody listed
    (root / "raw/distserve/max_num_tokens.csv").unlink()  # a listed file gone
    rc = main(["--root", str(root), "--no-schema"])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"{TRACE_CONV}: size" in out or f"{TRACE_CONV}: sha256" in out
    assert "raw/vidur/extra.csv: file under raw/ is not in the manifest" in out
    assert "raw/distserve/max_num_tokens.csv: file missing" in out
    rep = verify(root, schema=False)
    assert not rep.ok and len(rep.problems) >= 3


def _mini(tmp_path, repo_root, paths):
    man = yaml.safe_load((repo_root / "raw/MANIFEST.yaml").read_text())
    man["files"] = [e for e in man["files"] if e["path"] in paths]
    for e in man["files"]:
        (tmp_path / e["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo_root / e["path"], tmp_path / e["path"])
    (tmp_path / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    return tmp_path, man


def test_verify_runs_loader_checks_even_when_checksums_match(tmp_path, repo_root, capsys):
    root, man = _mini(tmp_path, repo_root, [GEMM_L40S, TRACE_CONV, *LICENCES])
    assert cli_main(["verify", "--root", str(root)]) == 0
    capsys.readouterr()
    # corrupt a value, then re-record its checksum: only the loader's checks can catch it
    p = root / GEMM_L40S
    df = pd.read_parquet(p)
    df.loc[11, "m"] = 0
    df.to_parquet(p, index=False)
    for e in man["files"]:
        if e["path"] == GEMM_L40S:
            e["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
            e["bytes"] = p.stat().st_size
    (root / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    assert cli_main(["verify", "--json", "--root", str(root)]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["files"] == 4
    [prob] = rep["problems"]
    assert prob["path"] == GEMM_L40S and "row 11, column 'm'" in prob["problem"]


def test_cli_usage(capsys):
    assert cli_main([]) == 2
    assert cli_main(["frobnicate"]) == 2
    assert "unknown subcommand" in capsys.readouterr().err
