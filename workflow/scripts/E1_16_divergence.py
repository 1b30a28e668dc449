"""E1.16: the metric-divergence lesson, from R2.3's result (thin: reads it, computes nothing new)."""
import json
import logging
from os.path import splitext

from steptime_lab.experiments import divergence as D
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
p = snakemake.params
with open(snakemake.input.r2_3) as fh:
    r23 = json.load(fh)
doc = D.document(r23, p.targets)
write_result(snakemake.output.result, id="E1.16", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=rule_provenance(snakemake, script="workflow/scripts/E1_16_divergence.py"), extra={"targets": p.targets})
logging.info("E1.16: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
D.plot(doc["metrics"]["pairs"], splitext(snakemake.output.fig)[0],
       "E1.16: the same engine on the same GPU with two profiles: kernel constants calibrated on per-operator "
       "tables (shipped) and calibrated to three wall-clock steps (R2.3's arms B and C). Left (E1.16a): MAPE on "
       "the per-operator tables; right (E1.16b): held-out step MAPE on real engine steps per phase. Read from "
       "results/R2_3.json.")
