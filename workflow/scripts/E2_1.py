"""E2.1: cross-GPU transfer of the home-profiled RF against steptime, on three datasets."""
import joblib

from steptime.experiments import transfer
from steptime.results import provenance, write_result

cfg = snakemake.config
fast = bool(cfg.get("fast", True))
full = bool(cfg["rf"]["full_grid"])
records, fits = [], []
cells = {ds: transfer.load_cells(ds, transfer.step_tps(fast, full)) for ds in transfer.DATASETS}
for path in snakemake.input.models:
    bundle = joblib.load(path)
    ds = bundle["dataset"]
    records += transfer.transfer_records(ds, cells[ds], bundle, transfer.TARGETS[ds],
                                         n_boot=int(cfg["bootstrap"]), seed=int(cfg["seed"]))
    fits.append(transfer.bundle_summary(bundle))
doc = transfer.e2_1_document(records, fits, cells, fast=fast, full_grid=full)
cal = transfer.steptime_calibration()
write_result(snakemake.output.result, id="E2.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], extra={"transfer": records},
             provenance=provenance(list(snakemake.input.data), config=cfg, calibration=cal.to_dict(),
                                   rule="E2_1", script="workflow/scripts/E2_1.py"))
transfer.plot_transfer(records, snakemake.params.figure, full_grid=full)
