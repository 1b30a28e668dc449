"""E1.25: the all-reduce term held out per GPU on AIConfigurator's NCCL and vLLM custom tables."""
import logging

import pandas as pd

from steptime_lab.experiments import comm as E
from steptime_lab.results import write_experiment

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
r = E.run(pd.read_parquet(snakemake.input.data))
doc = E.document(r, target_pct=float(snakemake.params.target_pct))
logging.info("E1.25: %d all-reduce readings", len(r["pred"]))
write_experiment(snakemake, id="E1.25", doc=doc, script="workflow/scripts/E1_25_allreduce.py",
                 calibration=r["calibration"].to_dict(), extra={"defaults_updates": E.defaults_updates(r)},
                 figure=lambda stem: E.plot(r, stem,
       "E1.25: all-reduce time per message size, measured (AIConfigurator: NCCL circles, vLLM custom all-reduce "
       "in CUDA graphs squares) and the held-out law (lines) per GPU and TP degree; titles give each "
       "implementation's held-out MAPE over 64 KiB-256 MiB."))
