"""E2.7: the Part-2 abstract figure (thin)."""
import logging
from pathlib import Path

from steptime_lab.experiments.abstract import figure, points, summary
from steptime_lab.reporting import load_results
from steptime_lab.results import claim, rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
results = load_results(snakemake.input.results)
pts = points(results, snakemake.params.claim_types)
counts = summary(pts)
claims = [claim(f"{t}: Part-2 claims with a target, met vs missed", {"met": c["met"], "missed": c["missed"]},
                "count over " + ", ".join(sorted({p["result"] for p in pts if p["type"] == t})))
          for t, c in counts.items() if c["met"] + c["missed"]]
write_result(snakemake.output.result, id="E2.7", question=snakemake.params.question,
             metrics={"counts": counts, "points": pts}, claims=claims,
             provenance=rule_provenance(snakemake, script="workflow/scripts/E2_7.py"))
logging.info("E2.7: %d Part-2 results, %d claim points; per type %s", len(results), len(pts), counts)
figure(pts, Path(snakemake.output.fig).with_suffix(""),
       "E2.7: every claim of every Part-2 result (" + ", ".join(sorted(results)) + ") as one point, coloured by claim "
       "type; filled = target met, hollow = missed, shaded = informational, square = simulated outcome. The number "
       "above a point is its claim id within the result: `steptime audit E2.x:n` traces it to the raw bytes.")
