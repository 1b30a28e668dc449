"""Documents drawn from result files: the README block, figures/README.md, the E2.7 abstract points."""
import pytest

from steptime.errors import SteptimeError
from steptime_lab.experiments.abstract import points, summary
from steptime_lab.reporting import BEGIN, END, figures_index, readme_block, splice

RESULTS = {
    "E1.9": {"id": "E1.9", "claims": [{"claim": "x within 5%", "value": 0.04, "met": True, "op": "<=",
                                       "target": 0.05, "unit": "fraction", "comparison": "MAPE"},
                                      {"claim": "y within 5%", "value": 0.07, "met": False, "op": "<=",
                                       "target": 0.05, "unit": "fraction", "comparison": "MAPE"}],
             "provenance": {"script": "workflow/scripts/a.py", "inputs": {"results/data/t.parquet": {}}}},
    "E2.9": {"id": "E2.9", "claims": [{"claim": "simulated gain", "value": 0.3, "met": True, "op": ">=",
                                       "target": 0.2},
                                      {"claim": "info", "value": {"a": 1}}], "provenance": {}},
}
REGISTRY = {"E1.9": {"outputs": ["results/E1_9.json", "figures/E1_9_x.png"]},
            "E2.9": {"outputs": ["results/E2_9.json"], "claim_type": "decision"}}


def test_readme_block_has_every_experiment_and_its_values():
    b = readme_block(RESULTS, REGISTRY)
    assert b.startswith(BEGIN) and b.rstrip().endswith(END)
    assert "| E1.9 |  | 4.0% to 7.0% | <= 5.0% | 1/2 met |" in b
    assert "**Part 2: utility**" in b and "| E2.9 |  | 0.3 | >= 0.2 | 1/1 met |" in b


def test_splice_replaces_only_the_block():
    text = f"intro\n{BEGIN}\nold numbers\n{END}\noutro\n"
    out = splice(text, readme_block(RESULTS, REGISTRY))
    assert out.startswith("intro\n") and out.endswith("outro\n") and "old numbers" not in out
    with pytest.raises(SteptimeError, match="no <!-- results:begin -->"):
        splice("no markers", "x")


def test_figures_index(tmp_path):
    (tmp_path / "E1_9_x.caption.txt").write_text("E1.9: the caption.\n")
    idx = figures_index(RESULTS, REGISTRY, tmp_path)
    assert "| `figures/E1_9_x.png` | E1.9 | `workflow/scripts/a.py` | `results/data/t.parquet` | E1.9: the caption. |" in idx


def test_abstract_points_and_types():
    pts = points({"E2.9": RESULTS["E2.9"]}, {"E2.9": "decision"})
    assert [p["claim_id"] for p in pts] == ["E2.9:1", "E2.9:2"]
    assert pts[0]["verdict"] == "met" and pts[0]["simulated"] and pts[1]["verdict"] == "info"
    assert summary(pts)["decision"] == {"met": 1, "missed": 0, "info": 1}
    with pytest.raises(SteptimeError, match="no claim_type"):
        points({"E2.9": RESULTS["E2.9"]}, {})


def test_readme_carries_the_generated_numbers_block():
    """README.md's results block is results/README_numbers.md verbatim (no typed number)."""
    from pathlib import Path

    from steptime_lab.reporting import readme_cli

    root = Path(__file__).parents[1]
    assert (root / "results" / "README_numbers.md").exists(), "build it: snakemake results/README_numbers.md"
    assert readme_cli(write=False, root=root) == 0, "README.md's block differs: run `steptime readme --write`"


STRUCTURED = {
    "E1.23": {"id": "E1.23", "claims": [
        {"claim": "a: MAPE", "value": 0.064, "comparison": "MAPE", "op": "<=", "target": 0.06, "unit": "fraction",
         "met": False},
        {"claim": "b: MAPE", "value": 0.108, "comparison": "MAPE", "op": "<=", "target": 0.09, "unit": "fraction",
         "met": False},
        {"claim": "c: MAPE", "value": 0.05, "comparison": "MAPE", "op": "<=", "target": 0.06, "unit": "fraction",
         "met": True},
        {"claim": "a: ratio", "value": 4.2, "comparison": "x", "op": ">=", "target": 3.0, "unit": "x", "met": True}]},
    "E1.4": {"id": "E1.4", "claims": [{"claim": "floor", "value": 0.4, "comparison": "ms"}]},
}


def test_readme_line_per_experiment_with_headline_target_and_verdicts():
    b = readme_block(STRUCTURED, {"E1.23": {"question": "GEMM, held-out MAPE on LLM-shaped cells, per GPU"}}, ["x"])
    assert ("| E1.23 | GEMM, held-out MAPE on LLM-shaped cells, per GPU | 3 of 4: 5.0% to 10.8% | <= 6.0% / 9.0% "
            "| 2/4 met |") in b
    assert "| E1.4 |  | 0.4 (ms) | - | descriptive |" in b and "<!-- sources: x -->" in b


def _repo(tmp_path):
    import json

    import yaml

    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "MANIFEST.yaml").write_text("files: []\n")
    (tmp_path / "config").mkdir()
    reg = {"E1.23": {"question": "q", "status": "built"}, "E1.4": {"question": "q4", "status": "built"}}
    (tmp_path / "config" / "experiments.yaml").write_text(yaml.safe_dump({"experiments": reg}))
    (tmp_path / "results").mkdir()
    for eid, doc in STRUCTURED.items():
        (tmp_path / "results" / f"{eid.replace('.', '_')}.json").write_text(json.dumps(doc))
    src = ["results/E1_23.json", "results/E1_4.json"]
    block = readme_block({k: STRUCTURED[k] for k in STRUCTURED}, reg, src)
    (tmp_path / "results" / "README_numbers.md").write_text(block)
    (tmp_path / "README.md").write_text(f"intro\n{block}outro\n")
    return tmp_path


def test_readme_check_fails_when_a_result_value_is_edited(tmp_path, capsys):
    import json

    from steptime_lab.reporting import readme_cli

    root = _repo(tmp_path)
    assert readme_cli(root=root) == 0
    p = root / "results" / "E1_23.json"
    doc = json.loads(p.read_text())
    doc["claims"][1]["value"] = 0.2
    p.write_text(json.dumps(doc))
    assert readme_cli(root=root) == 1
    assert "differs from what the result files give" in capsys.readouterr().out
    assert readme_cli(root=root, write=True) == 0 and readme_cli(root=root) == 0
    assert "20.0%" in (root / "README.md").read_text()


def test_readme_check_fails_when_a_readme_number_is_edited_naming_the_line(tmp_path, capsys):
    """A number typed over in README.md's block (or in results/README_numbers.md) fails `steptime readme`,
    printing the edited line."""
    from steptime_lab.reporting import readme_cli

    root = _repo(tmp_path)
    readme = (root / "README.md").read_text()
    assert "5.0% to 10.8%" in readme
    (root / "README.md").write_text(readme.replace("5.0% to 10.8%", "5.0% to 6.8%"))
    assert readme_cli(root=root) == 1
    out = capsys.readouterr().out
    assert "README.md: results block differs" in out and "| E1.23 |" in out and "6.8%" in out
    (root / "README.md").write_text(readme)
    assert readme_cli(root=root) == 0
    nums = root / "results" / "README_numbers.md"
    nums.write_text(nums.read_text().replace("2/4 met", "3/4 met"))
    assert readme_cli(root=root) == 1
    assert "results/README_numbers.md differs from what the result files give (first: | E1.23 |" in capsys.readouterr().out


def test_readme_check_fails_when_a_built_result_is_left_out(tmp_path, capsys):
    from steptime_lab.reporting import readme_cli

    root = _repo(tmp_path)
    text = (root / "results" / "README_numbers.md").read_text().replace(" results/E1_4.json", "")
    (root / "results" / "README_numbers.md").write_text(text)
    assert readme_cli(root=root) == 1
    assert "leaves out the built result results/E1_4.json" in capsys.readouterr().out


def test_every_paper_figure_has_its_file_or_a_reason():
    """config/paper_figures.yaml: each figure of the round-1 reports maps to an existing file or says why not."""
    from pathlib import Path

    import yaml

    from steptime_lab.reporting import paper_index

    root = Path(__file__).parents[1]
    mapping = yaml.safe_load((root / "config" / "paper_figures.yaml").read_text())
    registry = yaml.safe_load((root / "config" / "experiments.yaml").read_text())["experiments"]
    assert len(mapping["figures"]) >= 46
    for fid, m in mapping["figures"].items():
        assert m.get("file") or m.get("reason") or registry[m["experiment"]]["status"] == "awaiting", fid
        if m.get("file"):
            assert (root / m["file"]).is_file(), f"{fid}: {m['file']} missing"
            assert m["file"] in registry[m["experiment"]]["outputs"], fid
    md = paper_index(mapping, registry, {}, root)
    assert "MISSING FILE" not in md and "| E1.5a | - | E1.5 | - | awaiting GPU telemetry; collect with:" in md


def test_e2_7_one_row_per_system_with_numbers_read_from_the_results():
    from steptime_lab.experiments.abstract import systems

    res = {"E2.9": RESULTS["E2.9"],
           "E2.1": {"id": "E2.1", "claims": [
               {"claim": "vidur_step, home a: steptime's MAPE is below the RF's", "value": {"x": 2.0, "y": 0.5},
                "unit": "x", "op": ">=", "target": 1.5, "rule": "all", "met": False},
               {"claim": "vidur_step, at home on a: the RF", "value": {"rf_home": 0.02, "steptime": 0.08}}]}}
    spec = [{"system": "Vidur", "replaces": "an RF", "type": "accuracy", "outcome": [
                {"result": "E2.1", "match": "below the RF", "show": "range", "label": "RF over steptime:"},
                {"result": "E2.1", "match": "at home on", "show": "wins", "a": "rf_home", "b": "steptime",
                 "label": "home RF wins"}]},
            {"system": "Gone", "replaces": "x", "type": "decision", "outcome": [
                {"result": "E2.99", "match": ".", "show": "met", "label": "met:"}]},
            {"system": "Note", "replaces": "y", "type": "accuracy", "note": "not measured"}]
    rows = systems(res, spec)
    assert rows[0]["outcome"] == "RF over steptime: 1.25x (0.50x to 2.00x, n=2); home RF wins 1/1"
    assert rows[0]["claims"] == ["E2.1:1", "E2.1:2"] and rows[0]["files"] == ["results/E2_1.json"]
    assert rows[1]["outcome"] == "met: E2.99 not built" and rows[1]["files"] == []
    assert rows[2]["outcome"] == "not measured"
    res["E2.1"]["claims"][0]["value"]["y"] = 0.25  # the numbers follow the file
    assert systems(res, spec[:1])[0]["parts"][0]["numbers"]["min"] == 0.25
    with pytest.raises(SteptimeError, match="no claim of E2.1 matches"):
        systems(res, [{**spec[0], "outcome": [{"result": "E2.1", "match": "nothing like this", "show": "met"}]}])
    with pytest.raises(SteptimeError, match="show 'typed'"):
        systems(res, [{**spec[0], "outcome": [{"result": "E2.1", "match": ".", "show": "typed"}]}])


def test_committed_e2_7_rows_are_what_the_committed_results_give():
    import json
    from pathlib import Path

    import yaml

    from steptime.io import dumps
    from steptime_lab.experiments.abstract import systems
    from steptime_lab.reporting import load_results

    root = Path(__file__).parents[1]
    reg = yaml.safe_load((root / "config/experiments.yaml").read_text())["experiments"]
    doc = json.loads((root / "results/E2_7.json").read_text())
    names = [s["system"] for s in reg["E2.7"]["settings"]["systems"]]
    assert [r["system"] for r in doc["metrics"]["systems"]] == names
    for s in ("Vidur", "DistServe", "QLM", "Sarathi-Serve", "Splitwise", "End-to-end replay (vLLM)"):
        assert any(n.startswith(s) for n in names), s
    srcs = sorted({f for r in doc["metrics"]["systems"] for f in r["files"]})
    fresh = systems(load_results([root / f for f in srcs]), reg["E2.7"]["settings"]["systems"])
    assert json.loads(dumps(fresh)) == doc["metrics"]["systems"]  # as stored (the writer rounds floats)


def test_readme_block_groups_every_experiment_by_its_id_prefix():
    """E3.x and R2.x have their parts, a new prefix its own group: no experiment is left out by a hand list."""
    res = {e: {"id": e, "claims": [{"claim": "c", "value": 1.0, "comparison": "ms"}]}
           for e in ("E3.1", "R2.3", "E1.16", "E9.2", "E2.7", "L0.1")}
    b = readme_block(res, {}, ["x"])
    titles = [ln for ln in b.splitlines() if ln.startswith("**")]
    assert titles == ["**Part 1: the predictor**", "**Part 1: literature**", "**Part 2: utility**",
                      "**Part 3: mixture of experts**", "**Round 2**", "**Experiments E9.x**"]
    for e in res:
        assert f"| {e} |" in b
