"""E1.25: the all-reduce term held out per GPU on AIConfigurator's NCCL and vLLM custom tables."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import comm as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
r = E.run(pd.read_parquet(snakemake.input.data))
doc = E.document(r, target_pct=float(snakemake.params.target_pct))
logging.info("E1.25: %d all-reduce readings; %d claims, %d met", len(r["pred"]),
             len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_25_allreduce.py")
write_result(snakemake.output.result, id="E1.25", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"defaults_updates": E.defaults_updates(r)})
E.plot(r, splitext(snakemake.output.fig)[0],
       "E1.25: all-reduce time per message size, measured (AIConfigurator: NCCL circles, vLLM custom all-reduce "
       "in CUDA graphs squares) and the held-out law (lines) per GPU and TP degree; titles give each "
       "implementation's held-out MAPE over 64 KiB-256 MiB.")
