"""An awaiting GPU-telemetry experiment (issue 14): collected files -> results/<ID>.json + figure (thin)."""
import logging
from pathlib import Path

from steptime.collect.experiments import build, figure
from steptime.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
p = snakemake.params
logging.info("%s: reducing %s", p.id, list(snakemake.input.telemetry))
metrics, claims = build(p.id, list(snakemake.input.telemetry), n_boot=p.bootstrap, seed=p.seed,
                        dispatch=list(snakemake.input.get("dispatch", [])))
write_result(snakemake.output.result, id=p.id, question=p.question, metrics=metrics, claims=claims,
             provenance=rule_provenance(snakemake, script="workflow/scripts/telemetry_experiment.py"))
logging.info("%s: %d telemetry files; %d claims, %d met", p.id, len(snakemake.input.telemetry), len(claims),
             sum(bool(c.get("met")) for c in claims))
figure(p.id, metrics, Path(snakemake.output.fig).with_suffix(""))
