"""Settle the all-reduce (E1.25) and fp8 GEMM (E1.27) constants into results/calibration/comm.yaml
(never written into src/; `steptime calibration ship` ships them)."""
import json
import logging

from steptime.calibration import write_settled
from steptime.terms.comm import check_updates

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
updates = []
for path in (snakemake.input.e1_25, snakemake.input.e1_27):
    with open(path) as fh:
        ups = json.load(fh)["defaults_updates"]
    logging.info("%s: %d constants", path, len(ups))
    updates.extend(ups)
logging.info("%d all-reduce curves within their physics bounds", check_updates(updates))
write_settled(snakemake.output.settled, updates, settled_by="settle_comm_constants",
              inputs=[snakemake.input.e1_25, snakemake.input.e1_27])
logging.info("%d constants -> %s", len(updates), snakemake.output.settled)
