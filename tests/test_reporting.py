"""Documents drawn from result files: the README block, figures/README.md, the E2.7 abstract points."""
import pytest

from steptime.errors import SteptimeError
from steptime_lab.experiments.abstract import points, summary
from steptime_lab.reporting import BEGIN, END, figures_index, readme_block, splice

RESULTS = {
    "E1.9": {"id": "E1.9", "claims": [{"claim": "x within 5%", "value": 0.04, "met": True},
                                      {"claim": "y within 5%", "value": 0.07, "met": False}],
             "provenance": {"script": "workflow/scripts/a.py", "inputs": {"results/data/t.parquet": {}}}},
    "E2.9": {"id": "E2.9", "claims": [{"claim": "simulated gain", "value": 0.3, "met": True},
                                      {"claim": "info", "value": {"a": 1}}], "provenance": {}},
}
REGISTRY = {"E1.9": {"outputs": ["results/E1_9.json", "figures/E1_9_x.png"]},
            "E2.9": {"outputs": ["results/E2_9.json"], "claim_type": "decision"}}


def test_readme_block_has_every_experiment_and_its_values():
    b = readme_block(RESULTS, REGISTRY)
    assert b.startswith(BEGIN) and b.rstrip().endswith(END)
    assert "| E1.9 | 1 / 1 |" in b and "MISSED: y within 5% = 0.07" in b and "met: x within 5% = 0.04" in b
    assert "**Part 2: utility**" in b and "| E2.9 | 1 / 0 |" in b


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
