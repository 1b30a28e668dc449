"""E1.24: attention held out per GPU; the shipped constants ride along for step_constants."""
import json
from os.path import splitext

from steptime import data
from steptime.data import write_parquet
from steptime.experiments import attention as E
from steptime.results import provenance, write_result
from steptime.calibration import use_settled

use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
cfg = snakemake.config
E.FIT_SAMPLE = 800 if cfg.get("fast", True) else 2500
cells = E.tidy_cells(data.load_aic_attention(kind="generation"), data.load_aic_attention(kind="context"))
gemm_doc = json.load(open(snakemake.input.gemm_constants))
r = E.run(cells, gemm_doc, seed=cfg["seed"], n_boot=cfg["bootstrap"])
doc = E.document(r, cells)
prov = provenance(list(snakemake.input.data) + [snakemake.input.gemm_constants], config={**cfg, "fit_sample": E.FIT_SAMPLE},
                  calibration=r["calibration"].to_dict(), rule="E1_24", script="workflow/scripts/E1_24.py")
write_result(snakemake.output.result, id="E1.24", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov,
             extra={"defaults_updates": E.defaults_updates(r["shipped"], cells)})
pred = r["pred"].drop(columns=["cell"])
write_parquet(pred, snakemake.output.pred)
E.plot_accuracy(r, splitext(snakemake.output.fig_acc)[0],
                "E1.24: held-out MAPE of attention per GPU on Llama-like configs (32/64 query heads, 8 KV heads, "
                "head dim 128): bare roofline, calibrated roofline with a floor (three attention deploy cells), steptime with "
                "its per-GPU constants from the GEMM's three readings, and the same with three attention cells instead. "
                "Dashed: target.")
E.plot_factors(r, splitext(snakemake.output.fig_fac)[0], "h100-sxm",
               "E1.24: decode attention on h100-sxm (held out): measured vs steptime and the calibrated roofline over "
               "KV length, and steptime's named branches (floor, per-unit cost, KV stream, L2 hit) at 64 requests.")
