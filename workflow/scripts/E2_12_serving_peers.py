"""E2.12: serving peers side by side (AIConfigurator's silicon rows: measured vs steptime.serve vs AIC's
aggregated estimate; DistServe's fitted model vs steptime on the same simulated requests)."""
import json
import logging

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments import serving_peers
from steptime_lab.results import write_experiment
from steptime.serve import aic

aic.require()
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
s = dict(p.settings)
inp = snakemake.input
r = serving_peers.side_by_side(pd.read_parquet(inp.silicon), pd.read_parquet(inp.traces), pd.read_parquet(inp.coefficients),
                pd.read_parquet(inp.max_tokens), cases=s["cases"], budget=s["budget"],
                per_concurrency=s["requests_per_concurrency"], min_requests=s["min_requests"], seed=s["seed"],
                distserve_case=s["distserve"], targets=dict(p.targets),
                servingsim=(pd.read_parquet(inp.servingsim_requests), pd.read_parquet(inp.servingsim_timeseries)),
                servingsim_runs=s["servingsim_runs"], constants=constants)
doc = serving_peers.document(r)
logging.info("E2.12: aiconfigurator-core %s; settings %s", aic.version(), s)
with open(snakemake.output.timing, "w") as fh:
    json.dump(serving_peers.timing_document(r), fh, indent=1)
write_experiment(snakemake, id="E2.12", doc=doc, script="workflow/scripts/E2_12_serving_peers.py",
                 peers={"aiconfigurator-core": aic.version()}, figure=lambda stem: serving_peers.plot(r, stem,
                 "E2.12: mean TTFT and TPOT of AIConfigurator's silicon sample (Qwen3-32B on H100, aggregated "
                 "serving, closed loop) against steptime's serving simulator (datasheet + <=3 readings; simulated) "
                 "and AIConfigurator's own estimate (its per-operator tables for that GPU and engine)."))
