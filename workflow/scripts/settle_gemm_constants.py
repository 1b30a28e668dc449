"""Settle the GEMM constants: leave-one-GPU-out fits + deploy readings -> gemm_constants.json, defaults.yaml."""
import json
import logging

from steptime.calibration import update_defaults
from steptime.experiments import gemm as E
from steptime.io import write_json

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
cfg = snakemake.config
df = E.load_gemm(snakemake.input.gemm)
with open(snakemake.input.e1_11) as fh:
    cluster = json.load(fh)["decision"]["cluster_size"]
with open(snakemake.input.e1_3) as fh:
    law = json.load(fh)["decision"]["law"]
doc = E.settle(df, seed=cfg["seed"], fixed={"hopper_cluster_size": cluster, **E.SHIPPED_FIXED})
doc["decisions"] = {"cluster_size": {"value": cluster, "from": "results/E1_11.json"},
                    "memory_law": {"value": law, "from": "results/E1_3.json"}}
write_json(snakemake.output.constants, doc)
updates = E.defaults_updates(doc) + E.decision_updates(cluster, law)
E.locked_update_defaults(updates, update_defaults)
pruned = E.locked_update_defaults(None, lambda _: E.prune_gpu_readings())
write_json(snakemake.output.stamp, {"written": sorted({f"{u['scope']}:{u['name']}" for u in updates}),
                                    "removed": pruned,
                                    "from": [str(p) for p in (snakemake.input.gemm, snakemake.input.e1_11,
                                                              snakemake.input.e1_3)]})
logging.info("settled: %s", doc["all"])
