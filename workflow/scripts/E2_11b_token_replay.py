"""E2.11b: E2.11's token-time rows replayed through steptime.serve (closed loop at each row's
concurrency), beside E2.11's one-step approximation. Replay numbers are simulated."""
import json
import logging
from os.path import splitext

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments import replay as R
from steptime_lab.experiments import wallclock as W
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down

p, s = snakemake.params, snakemake.params.settings
prompts = {(d, t): v for d, per in p.prompt_tokens.items() for t, v in per.items()}
with open(snakemake.input.one_step) as fh:
    e2_11 = json.load(fh)
# ML.ENERGY v2 compared by the measure E2.11 compares (W.V2_STEADY_MEAN_NOTE; unrecorded: the leaderboard's Avg TPOT)
v2_measure = (e2_11["metrics"].get("v2_measure") or {}).get("measure", "mean_tpot_ms")
rows, skipped = R.replay_rows(mlenergy_v2=pd.read_parquet(snakemake.input.mlenergy_v2),
                              mlenergy_v3=pd.read_parquet(snakemake.input.mlenergy_v3),
                              silicon=pd.read_parquet(snakemake.input.silicon), prompt_tokens=prompts,
                              v2_measure=v2_measure)
rows = R.sample_rows(rows, int(s["per_group"]), seed=int(p.seed))
fitted = W.server_fitted(e2_11["metrics"], snakemake.input.constants)  # E2.11's held-out-by-GPU server laws
res = R.run_replay(rows, fitted=fitted, requests_per_slot=int(s["requests_per_slot"]),
                   min_requests=int(s["min_requests"]), seed=int(p.seed), constants=constants)
same = R.one_step_same_rows(rows, fitted=fitted, constants=constants)
table = R.side_by_side(R.scores(res["pred"], n_boot=int(p.bootstrap), seed=int(p.seed)), e2_11, same)
doc = R.document(table, skipped + res["skipped"], p.targets, n_rows=len(res["pred"]), per_group=int(s["per_group"]),
                 requests_per_slot=int(s["requests_per_slot"]))
logging.info("E2.11b: %d rows replayed (%d per group), %d skipped; %d claims, %d met", len(res["pred"]),
             int(s["per_group"]), len(skipped) + len(res["skipped"]), len(doc["claims"]),
             sum(bool(c.get("met")) for c in doc["claims"]))
prov = rule_provenance(snakemake, script="workflow/scripts/E2_11b_token_replay.py")
write_result(snakemake.output.result, id="E2.11b", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=prov, extra={"targets": p.targets, "settings": s})
R.plot(res["pred"], table, splitext(snakemake.output.fig)[0],
       "E2.11b: measured token time (ML.ENERGY v3 median inter-token latency, AIConfigurator silicon TPOT) and "
       "silicon TTFT against steptime.serve replaying each configuration as a closed loop at its concurrency "
       "(SIMULATED); middle: token-time MAPE per dataset x GPU x engine, replay beside E2.11's one decode step "
       "at the measured mean batch.")
