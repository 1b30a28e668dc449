"""E2.13: the planner's serving simulation against measured frontiers, and its cost picks (simulated)."""
import logging

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments import planner
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs)

p = snakemake.params
s = dict(p.settings)
r = planner.held_out_plan(pd.read_parquet(snakemake.input.silicon), model=s["model"], gpu=s["gpu"], engine=s["engine"],
                  budget=s["budget"], per_concurrency=s["requests_per_concurrency"], min_requests=s["min_requests"],
                  slos_ms=s["slos_tpot_ms"], seed=s["seed"], cost={**s["cost"], "jobs": snakemake.threads},
                  targets=dict(p.targets), constants=constants, band=s.get("band"))
doc = planner.document(r)
prov = rule_provenance(snakemake, script="workflow/scripts/E2_13_planner.py")
write_result(snakemake.output.result, id="E2.13", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=prov)
logging.info("E2.13: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
planner.plot(r, str(snakemake.output.fig).rsplit(".", 1)[0],
                   "E2.13: Qwen3-32B on H100 (TensorRT-LLM, fp8), AIConfigurator's measured closed-loop points (o-) "
                   "and steptime's simulation of the same points with the H100 held out (x--); throughput per GPU "
                   "= concurrency x OSL / (TTFT + (OSL-1) TPOT) / TP on both sides.")
