"""E1.21: prefill on wall clock across GPUs, where the sets hold isolated prefills (FPM prefill sweep on
B300; AIConfigurator silicon TTFT at concurrency 1); why ML.ENERGY cannot answer it."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
steps = W.fpm_steps(pd.read_parquet(snakemake.input.fpm))
v2, v3 = pd.read_parquet(snakemake.input.mlenergy_v2), pd.read_parquet(snakemake.input.mlenergy_v3)
sil = pd.read_parquet(snakemake.input.silicon)
fpm = []
for (gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
    spec = W.FpmSpec(model=model, engine=engine, **p.settings["fit"])
    fpm.append(W.run_fpm(s, spec, fitted_doc=snakemake.input.constants, n_boot=p.n_boot, seed=p.seed,
                         constants=constants))
iso_scores, iso_skipped = W.score_isolated_prefills(W.isolated_prefills(sil), n_boot=p.n_boot,
                                                    seed=p.seed, fitted=snakemake.input.constants,
                                                    constants=constants)
doc = R.prefill_document(fpm, iso_scores, iso_skipped, W.prefill_coverage(v2, v3, sil), p.targets)
logging.info("E1.21: %d FPM (GPU, engine, model) sets, %d isolated-prefill scores, %d skipped", len(fpm), len(iso_scores), len(iso_skipped))
prov = rule_provenance(snakemake, script="workflow/scripts/E1_21_prefill.py")
write_result(snakemake.output.result, id="E1.21", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=prov, extra={"targets": p.targets})
logging.info("E1.21: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
R.plot_prefill(doc, splitext(snakemake.output.fig)[0],
             "E1.21: wall-clock prefill MAPE per GPU, engine and TP where a set holds isolated prefills (B300 FPM "
             "prefill sweep; silicon TTFT at concurrency 1), by predictor; GPUs without such data are listed in "
             "metrics.coverage with the reason.")
