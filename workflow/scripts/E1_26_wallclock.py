"""E1.26: every FPM engine step predicted vs measured, per phase x TP, side by side: kernels, the engine
profile as shipped, the profile with R2.3's three wall-clock readings, and a bare roofline."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime.io import read_yaml

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
tidy = pd.read_parquet(snakemake.input.fpm)
steps = W.fpm_steps(tidy)
engine_doc = read_yaml(snakemake.input.constants)  # R2.3's fitted engine constants: the values and their readings
docs = []
for (gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
    spec = W.FpmSpec(model=model, engine=engine, **p.settings["fit"])
    r = W.run_fpm(s, spec, fitted_doc=engine_doc, n_boot=p.n_boot, seed=p.seed,
                  constants=constants)
    d = R.engine_step_document(r, p.targets)
    sp = W.repeat_spread(s, spec, p.targets, draws=p.settings["repeat_draws"], seed=p.seed, constants=constants)
    d["metrics"]["repeat_spread"] = sp
    d["claims"] += R.document_repeat_spread(sp, gpu, engine)
    docs.append((r, d))
r, doc = docs[0]
metrics = {f"{x['engine']}@{x['gpu']}": d["metrics"] for x, d in docs}
metrics["disclosed"] = R.ENGINE_STEP_DISCLOSED
metrics["moe_runs_skipped"] = {"steps": int(tidy["moe"].astype(bool).sum()),
                               "models": sorted(tidy.loc[tidy["moe"].astype(bool), "model"].unique().tolist()),
                               "why": "MoE: E3.4 scores the FPM MoE runs steptime can represent (this experiment is the dense step)"}
claims = [c for _, d in docs for c in d["claims"]]
# the readings each (GPU, engine) spends against the registry's max_readings, after every other claim (no id moves)
claims += [R.engine_step_readings_claim(x, p.targets, engine_doc) for x, _ in docs]
logging.info("E1.26: %d FPM steps in %d (GPU, engine, model) sets", len(steps), len(docs))
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_26_wallclock.py")
write_result(snakemake.output.result, id="E1.26", question=p.question, metrics=metrics, claims=claims,
             provenance=prov, extra={"targets": p.targets})
logging.info("E1.26: %d claims, %d met", len(claims), sum(bool(c.get("met")) for c in claims))
R.plot_engine_step(r, splitext(snakemake.output.fig)[0],
             f"E1.26: real vLLM engine steps ({r['model']}, {r['gpu']}, TP 1-8, AIConfigurator forward-pass metrics) "
             "held out from R2.3's three readings: predicted vs measured, MAPE per TP x phase for kernels / bare "
             "roofline / shipped profile / three wall-clock readings, signed error of decode steps vs batch, and the "
             "predicted share of each term.")
