"""E2.7: the Part-2 abstract figure (thin): one row per integrated system, its outcome read from the results."""
import logging
from pathlib import Path

from steptime_lab.experiments.abstract import points, summary, systems, table_figure
from steptime_lab.reporting import load_results
from steptime_lab.results import claim, rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
results = load_results(snakemake.input.results)
rows = systems(results, snakemake.params.settings["systems"])
pts = points(results, snakemake.params.claim_types)
counts = summary(pts)
claims = [claim(f"{r['system']}: steptime in place of {r['replaces']} ({r['claim']}): {r['outcome']}",
                {p["text"].split(":")[0]: p["numbers"] for p in r["parts"]} or "not measured here",
                "read from " + (", ".join(r["claims"]) or "no result"))
          for r in rows]
write_result(snakemake.output.result, id="E2.7", question=snakemake.params.question,
             metrics={"systems": rows, "counts": counts, "points": pts}, claims=claims,
             provenance=rule_provenance(snakemake, script="workflow/scripts/E2_7_abstract.py"),
             extra={"settings": snakemake.params.settings})
logging.info("E2.7: %d Part-2 results, %d systems; claims per type %s", len(results), len(rows), counts)
table_figure(rows, Path(snakemake.output.fig).with_suffix(""),
             "E2.7: one row per system steptime is integrated into: what it replaces there, the claim type (colour), "
             "and the outcome as numbers read from the result files named in brackets (the registry's E2.7 "
             "settings say which claims; `steptime audit E2.x:n` traces each to the raw bytes). Simulated outcomes "
             "are marked in the claim type.")
