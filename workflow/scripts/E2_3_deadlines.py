"""E2.3: QLM-style deadline queue, steptime's waiting-time estimate vs a scalar one (simulated outcomes)."""
import logging

import pandas as pd

from steptime_lab.experiments import serving
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import write_experiment

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down

p = snakemake.params
s = dict(p.settings)
r = serving.deadline_queue_attainment(pd.read_parquet(snakemake.input.traces), model=s["model"], gpu=s["gpu"], trace=s["trace"],
                 n=s["requests"], rates=s["rates"], classes=s["classes"], budget=s["budget"], seed=s["seed"],
                 targets=dict(p.targets), constants=constants)
logging.info("E2.3: settings %s", s)
doc = serving.deadline_queue_claims(r)
write_experiment(snakemake, id="E2.3", doc=doc, script="workflow/scripts/E2_3_deadlines.py",
                 figure=lambda stem: serving.deadline_queue_figure(r, stem, (
    "E2.3 (simulated): TTFT SLO attainment against arrival rate for FCFS and for a QLM-style "
    "deadline queue (earliest deadline first; requests estimated to miss go to the back) with "
    "steptime's waiting-time estimate and with a scalar one (predicted prefill of a mean prompt "
    "per request ahead).")))
