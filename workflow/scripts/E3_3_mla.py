"""E3.3: DeepSeek-V3's MLA attention module (AIConfigurator, vLLM) from steptime's MLA terms held out by GPU."""
import logging
from os.path import splitext

import pandas as pd
import yaml

from steptime_lab.experiments import moe as E
from steptime.io import atomic_path
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
r = E.run_mla(pd.read_parquet(snakemake.input.gen), pd.read_parquet(snakemake.input.ctx),
              pd.read_parquet(snakemake.input.bmm))
doc = E.document_mla(r, target_pct=float(snakemake.params.target_pct))
logging.info("E3.3: %d cells scored; %d of %d groups met", doc["metrics"]["cells_scored"], doc["metrics"]["met"],
             doc["metrics"]["groups"])
write_result(snakemake.output.result, id="E3.3", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=rule_provenance(snakemake, calibration={"readings": r["readings"]},
                                                              script="workflow/scripts/E3_3_mla.py"))
with atomic_path(snakemake.output.constants) as tmp:
    tmp.write_text(yaml.safe_dump(E.mla_constants_doc(r), sort_keys=False))
r["eval"]["sdtype"] = r["eval"]["kind"]
E.plot(r, splitext(snakemake.output.fig)[0],
       "E3.3: DeepSeek-V3 MLA attention module time (AIConfigurator, vLLM, bf16 GEMMs; decode = generation, "
       "weight-absorbed with the latent KV read once; prefill = context, not absorbed) measured vs steptime's MLA "
       "terms held out by GPU (MLA constants fitted on the other GPUs) plus the GPU's readings (module floor per "
       "path, an fp8-KV decode floor, the batch-cost scale from the decode floor cell, the prefill per-token scale); "
       "titles give the MAPE per phase.", kind="kernel")
