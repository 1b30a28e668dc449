"""An awaiting GPU-telemetry experiment (issue 14): collected files -> results/<ID>.json + figure (thin)."""
import logging

from steptime_lab.experiments.telemetry import report

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
logging.info("%s: reducing %s", snakemake.params.id, list(snakemake.input.telemetry))
metrics, claims = report(snakemake)
logging.info("%s: %d telemetry files; %d claims, %d met", snakemake.params.id, len(snakemake.input.telemetry),
             len(claims), sum(bool(c.get("met")) for c in claims))
