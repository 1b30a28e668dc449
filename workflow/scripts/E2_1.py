"""E2.1: cross-GPU transfer of the home-profiled RF against steptime, on three datasets."""
import json

import joblib

from steptime import data
from steptime.evaluate.held_out import HeldOut
from steptime.experiments import transfer
from steptime.results import provenance, write_result
from steptime.calibration import use_settled


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
cfg = snakemake.config
fast = bool(cfg.get("fast", True))
full = bool(cfg["rf"]["full_grid"])
records, fits, cal_log = [], [], {}
cells = {ds: transfer.load_cells(ds, transfer.step_tps(fast, full)) for ds in transfer.DATASETS}
gemm_doc = json.load(open(snakemake.input.gemm_constants))
attn_doc = json.load(open(snakemake.input.attention))
vidur = data.load_vidur_mlp()
hooks = {"vidur_step": HeldOut.for_dataset("vidur_step", vidur=vidur,
                                           light_gpus=transfer.TARGETS["vidur_step"], gemm_doc=gemm_doc),
         "aic_gemm": HeldOut.for_dataset("aic_gemm", gemm_doc=gemm_doc),
         "aic_attention": HeldOut.for_dataset("aic_attention", attn_doc=attn_doc)}
for path in snakemake.input.models:
    bundle = joblib.load(path)
    ds = bundle["dataset"]
    records += transfer.transfer_records(ds, cells[ds], bundle, transfer.TARGETS[ds],
                                         n_boot=int(cfg["bootstrap"]), seed=int(cfg["seed"]),
                                         constants_for=hooks.get(ds), cal_log=cal_log)
    fits.append(transfer.bundle_summary(bundle))
doc = transfer.e2_1_document(records, fits, cells, fast=fast, full_grid=full,
                             gap=transfer.profiler_gap(vidur, data.load_aic_gemm()))
write_result(snakemake.output.result, id="E2.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], extra={"transfer": records},
             provenance=provenance(list(snakemake.input.data) + [snakemake.input.gemm_constants,
                                                                  snakemake.input.attention], config=cfg, calibration=cal_log,
                                   rule="E2_1", script="workflow/scripts/E2_1.py"))
transfer.plot_transfer(records, stem(snakemake.output.figure), full_grid=full)
