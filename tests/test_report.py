"""`snakemake --report report.html` builds the HTML report from the committed outputs, every
figure in it under its part and experiment, with a caption."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_snakemake_report_builds(tmp_path):
    out = tmp_path / "report.html"
    r = subprocess.run(["snakemake", "--report", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    html = out.read_text(errors="replace")
    assert out.stat().st_size > 100_000
    for needle in ("Part 1 (the predictor)", "Part 2 (utility)", "E1.23", "E2.1", "steptime audit"):
        assert needle in html, needle
