"""E2.10: replay LLMServingSim's real vLLM 0.19 runs through steptime.serve; per-request TTFT/TPOT/e2e."""
import logging

import pandas as pd

from steptime_lab.experiments import serving
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import write_experiment

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down

p = snakemake.params
s = dict(p.settings)
r = serving.replay_runs(pd.read_parquet(snakemake.input.requests), targets=dict(p.targets), engine=s["engine"],
                  peer=pd.read_parquet(snakemake.input.llmservingsim), constants=constants,
                  engine_by_gpu=s.get("engine_by_gpu"), disclosed=s.get("disclosed"))
logging.info("E2.10: settings %s", s)
doc = serving.replay_claims(r)
write_experiment(snakemake, id="E2.10", doc=doc, script="workflow/scripts/E2_10_replay.py",
                 figure=lambda stem: serving.replay_figure(r, stem, (
    "E2.10: per-request TTFT, TPOT and end-to-end latency of LLMServingSim's real vLLM 0.19 runs "
    "(300 ShareGPT requests each, measured) against steptime.serve replaying the same arrivals "
    "and lengths (simulated), one row per run; the MoE run is not replayed.")))
