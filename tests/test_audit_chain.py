"""`steptime audit`'s raw chain: each result followed through its inputs (other results, settled files, tidy
tables) to the raw files it read, compared with the registry's declared `raw:`, with the link where it breaks."""
import json

import pytest
import yaml

from steptime.io import sha256_file
from steptime_lab.audit import AuditError, ChainFollower, audit, failures, raw_chain, run
from steptime_lab.results import DIGEST_KEY, code_sha256, result_digest


def _write(path, doc):
    doc = {k: v for k, v in doc.items() if k != DIGEST_KEY}
    path.write_text(json.dumps(doc | {DIGEST_KEY: result_digest(doc)}))


def _result(root, name, inputs):
    doc = {"claims": [{"claim": "descriptive", "value": 1.0, "comparison": "count"}],
           "provenance": {"code_sha256": code_sha256(), "rule": name, "script": f"workflow/scripts/{name}.py",
                          "steptime_version": "0", "inputs": {p: {"sha256": sha256_file(root / p)} for p in inputs}}}
    _write(root / "results" / f"{name}.json", doc)


@pytest.fixture
def repo(tmp_path):
    """raw a.csv (table t_a) and b.csv (table t_b) -> tidy tables A and B -> E9.1 reads B -> the settled file
    s.yaml (inputs: [E9_1.json]) -> E9.2 reads A and s.yaml. The registry declares E9.1: b.csv, E9.2: a.csv."""
    r = tmp_path
    (r / "raw").mkdir()
    for name in ("a", "b", "c"):
        (r / "raw" / f"{name}.csv").write_text(f"{name}\n1\n")
    (r / "raw" / "MANIFEST.yaml").write_text(yaml.safe_dump({"files": [
        {"path": f"raw/{n}.csv", "table": f"t_{n}", "sha256": sha256_file(r / "raw" / f"{n}.csv"),
         "source": f"src-{n}", "version": "1"} for n in ("a", "b", "c")]}))
    (r / "config").mkdir()
    (r / "config" / "tables.yaml").write_text(yaml.safe_dump({"tables": {"A": {"raw": ["t_a"]}, "B": {"raw": ["t_b"]}}}))
    (r / "config" / "experiments.yaml").write_text(yaml.safe_dump({"experiments": {
        "E9.1": {"question": "q", "status": "built", "raw": ["raw/b.csv"], "outputs": ["results/E9_1.json"]},
        "E9.2": {"question": "q", "status": "built", "raw": ["raw/a.csv"], "outputs": ["results/E9_2.json"]}}}))
    (r / "results" / "data").mkdir(parents=True)
    (r / "results" / "calibration").mkdir()
    (r / "results" / "data" / "A.parquet").write_bytes(b"tidy A")
    (r / "results" / "data" / "B.parquet").write_bytes(b"tidy B")
    _result(r, "E9_1", ["results/data/B.parquet"])
    (r / "results" / "calibration" / "s.yaml").write_text("settled_by: settle\ninputs: [results/E9_1.json]\n")
    _result(r, "E9_2", ["results/data/A.parquet", "results/calibration/s.yaml"])
    return r


def test_chain_reaches_raw_behind_a_settled_file_with_its_path(repo):
    ch = raw_chain("results/E9_2.json", repo)
    assert set(ch.reached) == {"raw/a.csv", "raw/b.csv", "raw/MANIFEST.yaml"}      # c.csv: read by nothing
    assert ch.reached["raw/b.csv"] == ["results/E9_2.json", "results/calibration/s.yaml", "results/E9_1.json",
                                       "results/data/B.parquet", "raw/b.csv"]
    assert ch.reached["raw/a.csv"] == ["results/E9_2.json", "results/data/A.parquet", "raw/a.csv"]
    assert ch.breaks == [] and ch.stops == []


def test_raw_behind_an_upstream_result_is_declared_by_that_experiment(repo, capsys):
    a1, a2 = audit(repo)
    assert a2.upstream == ["E9.1"] and a2.undeclared == [] and a2.unread == []   # b.csv: E9.1 declares it
    assert [c["path"] for c in a2.chain] == ["raw/MANIFEST.yaml", "raw/a.csv", "raw/b.csv"]
    assert failures([a1, a2], strict=True) == []
    assert run("E9.2", root=repo) == 0
    out = capsys.readouterr().out
    assert "raw chain: 2 raw files reached through the inputs (src-a 1, src-b 1); 2 match" in out
    assert "registry raw: declares 1, all read; 1 more reached through registered results (upstream: E9.1" in out


def test_raw_declared_nowhere_on_the_chain_fails(repo, capsys):
    reg = yaml.safe_load((repo / "config" / "experiments.yaml").read_text())
    reg["experiments"]["E9.1"]["raw"] = []
    (repo / "config" / "experiments.yaml").write_text(yaml.safe_dump(reg))
    a1, a2 = audit(repo)
    assert a1.undeclared == ["raw/b.csv"] and a2.undeclared == ["raw/b.csv"]
    bad = failures([a1, a2])
    assert "E9.1: reads 1 raw file(s) that neither its registry raw: nor an upstream experiment's declares, e.g. " \
           "raw/b.csv" in bad
    assert any(b.startswith("E9.2: reads 1 raw file(s)") for b in bad)
    assert run("E9.2", root=repo) == 1
    assert "1 read but declared nowhere on the chain, 0 declared but not read" in capsys.readouterr().out


def test_declared_but_not_read_fails_but_a_licence_under_a_declared_directory_does_not(repo):
    reg = yaml.safe_load((repo / "config" / "experiments.yaml").read_text())
    reg["experiments"]["E9.2"]["raw"] = ["raw/a.csv", "raw/c.csv"]
    (repo / "config" / "experiments.yaml").write_text(yaml.safe_dump(reg))
    a2 = audit(repo, "E9.2")[0]
    assert a2.undeclared == [] and a2.unread == ["raw/c.csv"]
    assert failures([a2]) == ["E9.2: its registry raw: declares 1 raw file(s) it does not read, e.g. raw/c.csv"]
    # a directory holding the data and its licence: the licence travels with the data, it is not "unread"
    (repo / "raw" / "d").mkdir()
    (repo / "raw" / "a.csv").rename(repo / "raw" / "d" / "a.csv")
    (repo / "raw" / "d" / "LICENSE").write_text("licence text")
    man = yaml.safe_load((repo / "raw" / "MANIFEST.yaml").read_text())
    man["files"][0]["path"] = "raw/d/a.csv"
    man["files"].append({"path": "raw/d/LICENSE", "table": "licence", "source": "src-a", "version": "1",
                         "sha256": sha256_file(repo / "raw" / "d" / "LICENSE")})
    (repo / "raw" / "MANIFEST.yaml").write_text(yaml.safe_dump(man))
    reg["experiments"]["E9.2"]["raw"] = ["raw/d"]
    (repo / "config" / "experiments.yaml").write_text(yaml.safe_dump(reg))
    a2 = audit(repo, "E9.2")[0]
    assert a2.undeclared == [] and a2.unread == [] and failures([a2]) == []


def test_changed_table_behind_an_upstream_result_breaks_the_chain_at_its_link(repo, capsys):
    (repo / "results" / "data" / "B.parquet").write_bytes(b"edited")
    a2 = audit(repo, "E9.2")[0]
    assert a2.state == "ok"                       # its own inputs did not change: not stale by itself
    (brk,) = a2.chain_breaks
    assert brk.startswith("results/E9_1.json -> results/data/B.parquet: changed since results/E9_1.json recorded it")
    assert "results/E9_1.json -> results/data/B.parquet: changed" in failures([a2])[0]
    assert run("E9.2", root=repo, as_json=True) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0]["chain_breaks"] == a2.chain_breaks


def test_missing_upstream_result_breaks_the_chain_at_the_settled_file(repo):
    (repo / "results" / "E9_1.json").unlink()
    a2 = [a for a in audit(repo) if a.id == "E9.2"][0]
    assert a2.chain_breaks == ["results/calibration/s.yaml -> results/E9_1.json: missing"]
    assert "raw/b.csv" not in {c["path"] for c in a2.chain}
    assert any("chain broken at results/calibration/s.yaml -> results/E9_1.json: missing" in b
               for b in failures([a2]))


def test_tampered_raw_reached_only_through_the_chain_fails(repo, capsys):
    (repo / "raw" / "b.csv").write_text("b\n2\n")
    a2 = audit(repo, "E9.2")[0]
    bad = failures([a2])
    assert any(b.startswith("E9.2: raw file raw/b.csv (reached results/E9_2.json -> results/calibration/s.yaml")
               and b.endswith("does not match its sha256 in raw/MANIFEST.yaml") for b in bad)


def test_cycle_and_unfollowable_input_terminate_and_are_named(repo):
    # E9.2's rule also writes results/calibration/own.json, which E9.2's result reads (as settle rules do)
    reg = yaml.safe_load((repo / "config" / "experiments.yaml").read_text())
    reg["experiments"]["E9.2"]["outputs"] += ["results/calibration/own.json"]
    (repo / "config" / "experiments.yaml").write_text(yaml.safe_dump(reg))
    (repo / "results" / "calibration" / "own.json").write_text("{}")
    (repo / "results" / "calibration" / "loose.npz").write_bytes(b"x")
    _result(repo, "E9_2", ["results/data/A.parquet", "results/calibration/s.yaml", "results/calibration/own.json",
                           "results/calibration/loose.npz"])
    f = ChainFollower(repo)
    ch, complete = f.follow("results/E9_2.json")
    assert not complete                           # own.json -> E9_2.json was cut, not followed forever
    assert set(ch.reached) == {"raw/a.csv", "raw/b.csv", "raw/MANIFEST.yaml"}
    assert ch.stops == ["results/calibration/loose.npz records no inputs (the chain cannot be followed past it)"]
    a2 = audit(repo, "E9.2")[0]
    assert failures([a2]) == [] and any("chain stops" in b for b in failures([a2], strict=True))


def test_an_absent_cache_intermediate_is_followed_by_name_to_its_result(repo):
    """results/cache/ is git-ignored: a clean clone lacks it. The chain goes on to the result its rule writes."""
    (repo / "results" / "cache").mkdir()
    (repo / "results" / "cache" / "E9_1_pred.parquet").write_bytes(b"cache")
    _result(repo, "E9_2", ["results/data/A.parquet", "results/cache/E9_1_pred.parquet"])
    (repo / "results" / "cache" / "E9_1_pred.parquet").unlink()
    ch = raw_chain("results/E9_2.json", repo)
    assert ch.breaks == [] and ch.stops == []
    assert ch.reached["raw/b.csv"] == ["results/E9_2.json", "results/cache/E9_1_pred.parquet", "results/E9_1.json",
                                       "results/data/B.parquet", "raw/b.csv"]


def test_raw_chain_refuses_a_result_that_is_not_there(repo):
    with pytest.raises(AuditError, match="results/E9_9.json does not exist"):
        raw_chain("results/E9_9.json", repo)
    with pytest.raises(AuditError, match="needs a result path"):
        raw_chain("", repo)


def test_e3_2_reaches_only_its_all_to_all_tables_in_aiconfigurator():
    """The real repository: E3.2 declares all of raw/aiconfigurator (153 files) but reads its all-to-all tables."""
    ch = raw_chain("results/E3_2.json")
    files = set(ch.reached) - {"raw/MANIFEST.yaml"}
    assert 0 < len(files) <= 13 and all(p.startswith("raw/aiconfigurator/") for p in files)
    assert all("moe_a2a" in p.rsplit("/", 1)[1] for p in files)
    assert ch.breaks == [] and ch.stops == []


def test_the_registry_declares_what_every_built_result_reads():
    """The real repository: every built result's raw chain is declared by its own registry raw: or by an
    upstream experiment's, and nothing it declares goes unread (the registry was narrowed in wave 38)."""
    off = [(a.id, a.undeclared[:2], a.unread[:2]) for a in audit() if a.undeclared or a.unread]
    assert off == []
    (a,) = audit(None, "E3.2")
    assert {c["path"] for c in a.chain} - {"raw/MANIFEST.yaml"} == {rw["path"] for rw in a.raw} - {"raw/MANIFEST.yaml"}
