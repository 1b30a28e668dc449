"""R2.3: the vllm profile's engine constants from three wall-clock steps per (GPU, engine), the rest
held out; the gain over per-operator calibration and its price on the per-operator tables."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import attention as AX
from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
steps = W.fpm_steps(pd.read_parquet(snakemake.input.fpm))
attn = AX.tidy_cells(pd.read_parquet(snakemake.input.attn_gen), pd.read_parquet(snakemake.input.attn_ctx))
gemm = pd.read_parquet(snakemake.input.gemm)
allreduce = pd.read_parquet(snakemake.input.allreduce)
fits, per_ops = [], []
for (gpu, engine, model), s in steps.groupby(["gpu", "engine", "model"], sort=True):
    spec = W.FpmSpec(model=model, engine=engine, **p.settings["fit"])
    r = W.run_fpm(s, spec, n_boot=p.n_boot, seed=p.seed, constants=constants)
    tables = W.per_op_tables(gpu, gemm, attn, allreduce, constants=constants)
    fits.append(r)
    per_ops.append({"arm_B": W.per_op_cost(tables, r["fitted"], n_boot=p.n_boot, seed=p.seed),
                    "arm_C": W.per_op_cost(tables, r["fitted_block"], n_boot=p.n_boot, seed=p.seed)})
engine_doc = W.engine_constants_doc(fits, W.FpmSpec(model="", **p.settings["fit"]))
W.write_fitted_constants(snakemake.output.constants, engine_doc)
# the readings count of each claim comes from the cell records of the document just written (issue 19 item 8)
docs = [(r, R.wallclock_constants_document(r, p.targets, per_op, engine_doc), per_op) for r, per_op in zip(fits, per_ops)]
r, doc, per_op = docs[0]  # one (GPU, engine) holds FPM steps today; metrics list every one
metrics = {f"{x['engine']}@{x['gpu']}": d["metrics"] for x, d, _ in docs}
claims = [c for _, d, _ in docs for c in d["claims"]]
logging.info("R2.3: engine constants of %d (GPU, engine, model) sets written to %s", len(fits), snakemake.output.constants)
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/R2_3_wallclock_constants.py")
write_result(snakemake.output.result, id="R2.3", question=p.question, metrics=metrics, claims=claims,
             provenance=prov, extra={"targets": p.targets, "settings": p.settings})
logging.info("R2.3: %d claims, %d met", len(claims), sum(bool(c.get("met")) for c in claims))
R.plot_wallclock_constants(r, per_op, splitext(snakemake.output.fig)[0],
            f"R2.3: held-out step MAPE of {r['engine']}@{r['gpu']} per TP x phase with the shipped (per-operator "
            "calibrated) profile, the engine constants read from three wall-clock steps, and one kernel scale k "
            "(arm C); right: what k costs on the per-operator GEMM/attention tables.")
