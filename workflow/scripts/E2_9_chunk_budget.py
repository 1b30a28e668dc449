"""E2.9: Sarathi chunk sizing for a TBT SLO on the serving simulator (simulated outcomes)."""
import logging

import pandas as pd

from steptime_lab.experiments import serving
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import write_experiment

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down

p = snakemake.params
s = dict(p.settings)
r = serving.chunk_sizing(pd.read_parquet(snakemake.input.traces), models=s["models"], gpus=s["gpus"], trace=s["trace"],
                 n=s["requests"], concurrency=s["concurrency"], grid=s["chunks"], slo_multiples=s["slo_multiples"],
                 statics=s["statics"], seed=s["seed"], targets=dict(p.targets),
                 constants=constants, band_gpus=s.get("band_gpus", ()))
logging.info("E2.9: settings %s", s)
doc = serving.chunk_sizing_claims(r)
write_experiment(snakemake, id="E2.9", doc=doc, script="workflow/scripts/E2_9_chunk_budget.py",
                 figure=lambda stem: serving.chunk_sizing_figure(r, stem, (
    "E2.9 (simulated): closed loop at the stated concurrency on Splitwise conversation lengths; "
    "each point one Sarathi chunk (p99 time between tokens vs output throughput); dashed lines "
    "the TBT SLOs (multiples of the predicted decode step); stars steptime's pick per SLO.")))
