"""Settle the attention, light-kernel and host constants E1.24, E1.1c and E1.4 found into
results/calibration/step.yaml (never written into src/; `steptime calibration ship` ships them)."""
import json
import logging

from steptime.calibration import write_settled

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
updates = []
for path in (snakemake.input.e1_24, snakemake.input.e1_1c, snakemake.input.e1_4):
    with open(path) as fh:
        ups = json.load(fh)["defaults_updates"]
    logging.info("%s: %d constants", path, len(ups))
    updates.extend(ups)
write_settled(snakemake.output.settled, updates, settled_by="settle_step_constants",
              inputs=[snakemake.input.e1_24, snakemake.input.e1_1c, snakemake.input.e1_4])
logging.info("%d constants -> %s", len(updates), snakemake.output.settled)
