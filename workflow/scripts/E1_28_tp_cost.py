"""E1.28: per-GPU efficiency at TP 1/2/4/8, measured vs predicted, and the term that carries the loss (thin)."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import tp_cost
from steptime_lab.experiments import wallclock as W
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, *snakemake.input.settled)  # this run's settled constants, passed down
p = snakemake.params
fitted = snakemake.input.constants
steps = W.fpm_steps(pd.read_parquet(snakemake.input.fpm))
pred = pd.concat([W.predict_table(s, W.make_predictor(e, m, g, engine=e, fitted=fitted, constants=constants))
                  for (g, e, m), s in steps.groupby(["gpu", "engine", "model"], sort=True)]).loc[steps.index]
prompts = {(d, t): v for d, per in p.settings["prompt_tokens"].items() for t, v in per.items()}
silicon = pd.read_parquet(snakemake.input.silicon)
rows, _ = W.tpot_table(silicon=silicon, prompt_tokens=prompts)
release_of = dict(zip(silicon["id"].astype(str), silicon["engine_version"].astype(str)))  # each row's engine release
r = tp_cost.run(steps, pred, rows, fitted=fitted, kv_bucket=p.settings["kv_bucket"], constants=constants,
                release_of=release_of, mixed=p.settings["mixed"],  # silicon TPOT as E2.11 predicts it
                claim_form=p.settings["silicon_claim_form"])
doc = tp_cost.document(r, p.targets)
write_result(snakemake.output.result, id="E1.28", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=rule_provenance(snakemake, script="workflow/scripts/E1_28_tp_cost.py"), extra={"targets": p.targets})
logging.info("E1.28: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
tp_cost.plot(r, splitext(snakemake.output.fig)[0],
             "E1.28: per-GPU efficiency t(1) / (TP x t(TP)) on matched work, measured (solid) and predicted by the "
             "engine profile with its wall-clock readings (dashed), one line per engine; each predicted point names "
             "the term kind that carries most of the per-GPU time TP adds. Left: real vLLM engine steps "
             "(AIConfigurator FPM, sweep compositions matched across TP); right: AIConfigurator silicon TPOT "
             "(aggregated serving, same lengths and concurrency across TP; the TPOT as E2.11 predicts it, decode step plus "
             "the prefill it carries, at the running batch the engine held).")
