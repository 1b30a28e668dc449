"""E3.2: DeepEP expert-parallel all-to-all held out by GPU on AIConfigurator's vLLM and TensorRT-LLM moe_a2a tables."""
import logging
from os.path import splitext

import pandas as pd
import yaml

from steptime_lab.experiments import moe as E
from steptime.io import atomic_path
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
r = E.run_a2a_engines(pd.read_parquet(snakemake.input.data), pd.read_parquet(snakemake.input.trtllm))
doc = E.document_a2a(r, target_pct=float(snakemake.params.target_pct))
logging.info("E3.2: %d cells scored; %d of %d groups met", doc["metrics"]["cells_scored"], doc["metrics"]["met"],
             doc["metrics"]["groups"])
prov = rule_provenance(snakemake, calibration={g: v["readings"] for g, v in r["per_gpu"].items()},
                       script="workflow/scripts/E3_2_moe_a2a.py")
write_result(snakemake.output.result, id="E3.2", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov)
with atomic_path(snakemake.output.constants) as tmp:
    tmp.write_text(yaml.safe_dump(E.moe_constants_doc(None, r), sort_keys=True))
E.plot(r, splitext(snakemake.output.fig)[0],
       "E3.2: DeepEP all-to-all time per phase (AIConfigurator, vLLM, one node) measured vs predicted with the GPU "
       "held out (per mode and phase from the other GPUs: the normal mode floor + bytes/bandwidth + per-token cost from "
       "those of its architecture and NVLink domain, the low-latency mode a floor overlapped with the bytes over a "
       "share of the GPU's NVLink bandwidth; three readings of its own).",
       kind="a2a")
