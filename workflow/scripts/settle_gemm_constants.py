"""Settle the GEMM constants: leave-one-GPU-out fits + deploy readings -> gemm_constants.json (the
folds) and gemm.yaml (the settled constants downstream rules load; never written into src/)."""
import json
import logging

from steptime.calibration import DEFAULTS_FILE, Constants, write_settled
from steptime_lab.experiments import gemm as E
from steptime.io import write_json

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE)  # the shipped constants file (a code input), passed down
df = E.load_gemm(snakemake.input.gemm)
logging.info("GEMM table: %d rows, %d GPUs", len(df), df["gpu"].nunique())
with open(snakemake.input.e1_11) as fh:
    cluster = json.load(fh)["decision"]["cluster_size"]
with open(snakemake.input.e1_3) as fh:
    law = json.load(fh)["decision"]["law"]
logging.info("decisions: Hopper cluster size %s (E1.11), memory law %s (E1.3)", cluster, law)
doc = E.settle(df, seed=snakemake.params.seed, fixed={"hopper_cluster_size": cluster, **E.SHIPPED_FIXED},
               constants=constants, jobs=snakemake.params.fold_jobs)
doc["decisions"] = {"cluster_size": {"value": cluster, "from": "results/E1_11.json"},
                    "memory_law": {"value": law, "from": "results/E1_3.json"}}
write_json(snakemake.output.constants, doc)
updates = E.defaults_updates(doc) + E.decision_updates(cluster, law)
write_settled(snakemake.output.settled, updates, settled_by="settle_gemm_constants",
              inputs=[snakemake.input.gemm, snakemake.input.e1_11, snakemake.input.e1_3])
logging.info("settled globals (all-GPU fit): %s", doc["all"])
logging.info("%d constants -> %s", len(updates), snakemake.output.settled)
