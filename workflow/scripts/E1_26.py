"""E1.26: every FPM engine step predicted vs measured, per phase x TP, side by side: kernels, the engine
profile as shipped, the profile with R2.3's three wall-clock readings, and a bare roofline."""
from os.path import splitext

import pandas as pd

from steptime.experiments import wallclock as W
from steptime.experiments import wallclock_report as R
from steptime.results import provenance, write_result

cfg, p = snakemake.config, snakemake.params
tidy = pd.read_parquet(snakemake.input.fpm)
steps = W.fpm_steps(tidy)
docs = []
for (gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
    spec = W.FpmSpec(model=model, engine=engine, **p.settings["fit"])
    r = W.run_fpm(s, spec, fitted_doc=snakemake.input.constants, n_boot=cfg["bootstrap"], seed=cfg["seed"])
    docs.append((r, R.document_e1_26(r, p.targets)))
r, doc = docs[0]
metrics = {f"{x['engine']}@{x['gpu']}": d["metrics"] for x, d in docs}
metrics["moe_runs_skipped"] = {"steps": int(tidy["moe"].astype(bool).sum()),
                               "models": sorted(tidy.loc[tidy["moe"].astype(bool), "model"].unique().tolist()),
                               "why": "MoE not supported yet"}
claims = [c for _, d in docs for c in d["claims"]]
prov = provenance(list(snakemake.input), config=cfg, calibration=r["calibration"].to_dict(), rule="E1_26",
                  script="workflow/scripts/E1_26.py")
write_result(snakemake.output.result, id="E1.26", question=p.question, metrics=metrics, claims=claims,
             provenance=prov, extra={"targets": p.targets})
R.plot_e1_26(r, splitext(snakemake.output.fig)[0],
             f"E1.26: real vLLM engine steps ({r['model']}, {r['gpu']}, TP 1-8, AIConfigurator forward-pass metrics) "
             "held out from R2.3's three readings: predicted vs measured, MAPE per TP x phase for kernels / bare "
             "roofline / shipped profile / three wall-clock readings, signed error of decode steps vs batch, and the "
             "predicted share of each term.")
