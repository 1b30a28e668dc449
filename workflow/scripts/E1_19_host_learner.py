"""E1.19: the host-floor learner (frozen at deploy) on real engine steps and collected step traces (thin)."""
import logging
from pathlib import Path

import pandas as pd

from steptime_lab.experiments.host.learner import build, plot
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
st = p.settings
metrics, claims, steps = build(pd.read_parquet(snakemake.input.fpm), list(snakemake.input.steptrace),
                               fitted=snakemake.input.constants, round1=p.round1,
                               constants=constants, **st)
write_result(snakemake.output.result, id="E1.19", question=p.question, metrics=metrics, claims=claims,
             provenance=rule_provenance(snakemake, script="workflow/scripts/E1_19_host_learner.py"))
logging.info("E1.19: runs %s, %d steps; %d claims, %d met", list(metrics["per_run"]), len(steps), len(claims),
             sum(bool(c.get("met")) for c in claims))
plot(metrics["per_run"], Path(snakemake.output.fig).with_suffix(""), steps=steps,
     caption=f"E1.19 on real vLLM steps ({', '.join(metrics['per_run'])}; phases {metrics['phases']}): held-out "
             "MAPE of the step per arm, (a) stationary (frozen after the first "
             f"{st['warmup']:.0%} of the '{st['stationary_segment']}' steps), (b) shift (trained on "
             f"'{st['shift_train']}', tested on '{st['shift_test']}'); oracle_static is a bound, online_adapt a "
             "diagnostic (hatched). (c) measured host floor vs N with the frozen and oracle S(N). Reported in "
             f"round 1 (other telemetry): {p.round1}.")
