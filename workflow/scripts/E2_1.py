"""E2.1: cross-GPU transfer of the home-profiled RF against steptime and its fair-ground peers."""
import json

import joblib

from steptime import data
from steptime.evaluate.held_out import HeldOut, fit_footprint
from steptime.experiments import attention as AX
from steptime.experiments import gemm as GX
from steptime.experiments import light as LX
from steptime.experiments import transfer
from steptime.results import provenance, write_result


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


cfg = snakemake.config
fast = bool(cfg.get("fast", True))
full = bool(cfg["rf"]["full_grid"])
seed = int(cfg["seed"])
records, fits, cal_log = [], [], {}
cells = {ds: transfer.load_cells(ds, transfer.step_tps(fast, full)) for ds in transfer.DATASETS}
gemm_doc = json.load(open(snakemake.input.gemm_constants))
attn_doc = json.load(open(snakemake.input.attention))
attn_sample = int(attn_doc["provenance"]["config"].get("fit_sample", AX.FIT_SAMPLE))
vidur = data.load_vidur_mlp()
light_cells = LX.tidy_cells(vidur)
attn_cells = AX.tidy_cells(data.load_aic_attention(kind="generation"), data.load_aic_attention(kind="context"))
gemm_df = GX.load_gemm(next(p for p in snakemake.input.data if p.endswith("gemm.parquet")))
vidur_gpus = transfer.TARGETS["vidur_step"]
hooks = {"vidur_step": HeldOut.for_dataset("vidur_step", vidur=vidur, light_gpus=vidur_gpus, gemm_doc=gemm_doc),
         "aic_gemm": HeldOut.for_dataset("aic_gemm", gemm_doc=gemm_doc),
         "aic_attention": HeldOut.for_dataset("aic_attention", attn_doc=attn_doc)}
families = {"vidur_step": ("light", "gemm"), "aic_gemm": ("gemm",), "aic_attention": ("attention",)}
ml = {ds: transfer.MLLeaveOneOut(ds, cells[ds], fast=fast, seed=seed) for ds in transfer.DATASETS}
attn_reads = {g: [tuple(c) for c in v["scoring_excludes"].values()]
              for g, v in attn_doc["metrics"]["per_gpu"].items()}
reading_ids = {"aic_attention": lambda t: attn_reads.get(t, []), "aic_gemm": lambda t: [],
               "vidur_step": lambda t: []}
gemm_fit = gemm_doc["settings"]
for path in snakemake.input.models:
    bundle = joblib.load(path)
    ds, home = bundle["dataset"], bundle["home_gpu"]
    home_only = transfer.HomeOnly(families[ds], home, gemm_doc=gemm_doc, gemm_df=gemm_df, attn_cells=attn_cells,
                                  light_cells=light_cells, seed=seed, gemm_n_per_gpu=int(gemm_fit["n_per_gpu"]),
                                  gemm_max_nfev=int(gemm_fit["max_nfev"]), attn_sample=attn_sample)
    records += transfer.transfer_records(
        ds, cells[ds], bundle, transfer.TARGETS[ds], n_boot=int(cfg["bootstrap"]), seed=seed,
        constants_for=hooks.get(ds), cal_log=cal_log, home_only=home_only, ml=ml[ds], reading_ids=reading_ids[ds],
        steptime_fit=lambda t, ds=ds: fit_footprint(ds, t, gemm_doc=gemm_doc, attn_doc=attn_doc,
                                                    attn_cells=attn_cells, attn_sample=attn_sample,
                                                    light_cells=light_cells, light_gpus=vidur_gpus, seed=seed))
    fits.append(transfer.bundle_summary(bundle))
doc = transfer.e2_1_document(records, fits, cells, fast=fast, full_grid=full,
                             gap=transfer.profiler_gap(vidur, data.load_aic_gemm()))
write_result(snakemake.output.result, id="E2.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], extra={"transfer": records},
             provenance=provenance(list(snakemake.input.data) + [snakemake.input.gemm_constants,
                                                                  snakemake.input.attention], config=cfg, calibration=cal_log,
                                   rule="E2_1", script="workflow/scripts/E2_1.py"))
transfer.plot_transfer(records, stem(snakemake.output.figure), full_grid=full)
