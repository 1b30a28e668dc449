"""E3.1's work for one engine (wildcard `engine`): its fused-MoE tables held out by GPU (experiments.moe.run on the
engine's own cells), written as a part the merge (E3_1_moe_kernel.py) documents with the other engines'."""
import logging
import time

import pandas as pd

from steptime_lab.experiments import moe as E
from steptime_lab.experiments.moe_parts import check_engine, write_part
from steptime_lab.results import rule_inputs

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
engine = check_engine(snakemake.wildcards.engine)
df = pd.read_parquet(snakemake.input.data)
t0 = time.perf_counter()
r = E.run(df, engine)
logging.info("E3.1: %s run %.1f s (wall)", engine, time.perf_counter() - t0)
write_part(snakemake.output.part, engine, r, rule_inputs(snakemake, exclude=()))
