"""E2.4: DistServe-style pool sizing from steptime vs DistServe's own fitted model (simulated outcomes)."""
import logging

import pandas as pd

from steptime_lab.experiments import serving
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import write_experiment

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down

p = snakemake.params
s = dict(p.settings)
inp = snakemake.input
r = serving.pool_sizing(pd.read_parquet(inp.traces), pd.read_parquet(inp.coefficients), pd.read_parquet(inp.max_tokens),
                 cases=s["cases"], gpu=s["gpu"], trace=s["trace"], n=s["requests"], seed=s["seed"],
                 attainment=s["attainment"], targets=dict(p.targets),
                 constants=constants)
logging.info("E2.4: settings %s", s)
doc = serving.pool_sizing_claims(r)
write_experiment(snakemake, id="E2.4", doc=doc, script="workflow/scripts/E2_4_pools.py",
                 figure=lambda stem: serving.pool_sizing_figure(r, stem, (
    "E2.4 (simulated): per-GPU goodput (largest Poisson rate per GPU with 90% of requests within "
    "both SLOs) of each prefill/decode placement, with steptime's step times and with DistServe's "
    "fitted latency model driving the same disaggregated simulator on the same requests.")))
