"""E3.1: the fused-MoE kernel term held out by GPU and dtype on AIConfigurator's vLLM MoE tables."""
import logging
from os.path import splitext

import pandas as pd
import yaml

from steptime_lab.experiments import moe as E
from steptime.io import atomic_path
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
r = E.run(pd.read_parquet(snakemake.input.data))
doc = E.document(r, target_pct=float(snakemake.params.target_pct))
logging.info("E3.1: %d cells scored; %d of %d groups met", doc["metrics"]["cells_scored"], doc["metrics"]["met"],
             doc["metrics"]["groups"])
cal = [c for cells in r["readings"].values() for c in cells]
prov = rule_provenance(snakemake, calibration={"readings": cal, "fits": r["fits"]}, script="workflow/scripts/E3_1_moe_kernel.py")
write_result(snakemake.output.result, id="E3.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov)
with atomic_path(snakemake.output.constants) as tmp:
    tmp.write_text(yaml.safe_dump(E.moe_constants_doc(r), sort_keys=True))
E.plot(r, splitext(snakemake.output.fig)[0],
       "E3.1: fused-MoE kernel time (AIConfigurator, vLLM, balanced routing, the listed models' shapes, every "
       "moe_tp/moe_ep) measured vs predicted with the GPU held out (the law of its kernel family per dtype from the "
       "other GPUs, three bf16 readings of its own; collector regime: weight sets that fit L2 stay there); titles "
       "give the MAPE per dtype.", kind="kernel")
