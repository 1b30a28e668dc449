"""E2.1: cross-GPU transfer of the home-profiled RF against steptime and its fair-ground peers."""
import json
import logging

import joblib
import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.evaluate.held_out import HeldOut, fit_footprint
from steptime_lab.experiments import attention as AX
from steptime_lab.experiments import gemm as GX
from steptime_lab.experiments import light as LX
from steptime_lab.experiments import transfer
from steptime_lab.peer_registry import LAB as peers
from steptime_lab.results import rule_provenance, write_result


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
inp = snakemake.input
tables = {name: pd.read_parquet(getattr(inp, name))
          for name in ("gemm", "attention_context", "attention_generation", "vidur_mlp")}
records, fits, cal_log = [], [], {}
cells = {ds: transfer.load_cells(ds, transfer.step_tps(P.fast, P.full_grid), tables=tables) for ds in transfer.DATASETS}
for ds, c in cells.items():
    logging.info("%s: %d cells", ds, len(c))
with open(inp.gemm_constants) as fh:
    gemm_doc = json.load(fh)
with open(inp.attention) as fh:
    attn_doc = json.load(fh)
attn_sample = int(attn_doc["provenance"]["config"].get("fit_sample", AX.FIT_SAMPLE))
vidur = tables["vidur_mlp"]
light_cells = LX.tidy_cells(vidur)
attn_cells = AX.tidy_cells(tables["attention_generation"], tables["attention_context"])
gemm_df = GX.load_gemm(inp.gemm)
vidur_gpus = transfer.TARGETS["vidur_step"]
hooks = {"vidur_step": HeldOut.for_dataset("vidur_step", vidur=vidur, light_gpus=vidur_gpus, gemm_doc=gemm_doc,
                                           base=constants),
         "aic_gemm": HeldOut.for_dataset("aic_gemm", gemm_doc=gemm_doc, base=constants),
         "aic_attention": HeldOut.for_dataset("aic_attention", attn_doc=attn_doc, base=constants)}
families = {"vidur_step": ("light", "gemm"), "aic_gemm": ("gemm",), "aic_attention": ("attention",)}
# the fair-ground peers from the lab's registry (the product's peers + the lab's)
ml = {ds: peers.make("ml_loo", ds, cells[ds], fast=P.fast, seed=P.seed, tuned=P.ml_tuned) for ds in transfer.DATASETS}
# ml_loo's fair best beside it in the fast job, on the tables where its cost allows (fast: false gives it everywhere)
ml_full = {ds: peers.make("ml_loo", ds, cells[ds], fast=False, seed=P.seed, tuned=True)
           for ds in P.settings.get("ml_tuned_full_tables", []) if P.fast}
attn_reads = {g: [tuple(c) for c in v["scoring_excludes"].values()]
              for g, v in attn_doc["metrics"]["per_gpu"].items()}
reading_ids = {"aic_attention": lambda t: attn_reads.get(t, []), "aic_gemm": lambda t: [],
               "vidur_step": lambda t: []}
# Vidur's measurement-stack factor on the Vidur step's physics arms, each held out as its arm allows (transfer.stack)
stack = {"vidur_step": transfer.VidurStack(vidur, vidur_gpus, gemm_doc, constants)}
grey = {ds: transfer.GreyBox(ds, cells[ds], hooks[ds], fast=P.fast, seed=P.seed, reading_ids=reading_ids[ds],
                             stack=stack.get(ds), cv_sizes=P.cv_sizes) for ds in transfer.DATASETS}
for path in inp.greybox:  # fitted once by the greybox_fit rule (E2.2 ranks with the same fits); adopted if they fit these data
    fitted = joblib.load(path)
    grey[fitted["settings"]["dataset"]].adopt(fitted)
gemm_fit = gemm_doc["settings"]
# fitted once and reused by the bundles that read the same: each home's GEMM globals (every dataset's
# steptime_home_only) and each target's home-independent predictions (the two homes of one dataset)
home_only_shared, target_memo = {}, {ds: {} for ds in transfer.DATASETS}
for path in inp.models:
    bundle = joblib.load(path)
    ds, home = bundle["dataset"], bundle["home_gpu"]
    logging.info("scoring %s (home %s) on %s", ds, home, transfer.TARGETS[ds])
    home_only = peers.make("steptime_home_only", families[ds], home, constants=constants, gemm_doc=gemm_doc,
                           gemm_df=gemm_df, attn_cells=attn_cells, light_cells=light_cells, seed=P.seed,
                           gemm_n_per_gpu=int(gemm_fit["n_per_gpu"]), gemm_max_nfev=int(gemm_fit["max_nfev"]),
                           attn_sample=attn_sample, shared=home_only_shared)
    records += transfer.transfer_records(
        ds, cells[ds], bundle, transfer.TARGETS[ds], n_boot=P.n_boot, seed=P.seed,
        constants_for=hooks.get(ds), cal_log=cal_log, home_only=home_only, ml=ml[ds], ml_full=ml_full.get(ds), reading_ids=reading_ids[ds],
        grey=grey[ds], memo=target_memo[ds], stack=stack.get(ds),
        steptime_fit=lambda t, ds=ds: fit_footprint(ds, t, gemm_doc=gemm_doc, attn_doc=attn_doc,
                                                    attn_cells=attn_cells, attn_sample=attn_sample,
                                                    light_cells=light_cells, light_gpus=vidur_gpus, seed=P.seed))
    fits.append(transfer.bundle_summary(bundle))
doc = transfer.transfer_document(records, fits, cells, fast=P.fast, full_grid=P.full_grid, targets=P.targets,
                             gap=transfer.profiler_gap(tables["vidur_mlp"], tables["gemm"]), ml_tuned=P.ml_tuned,
                             ml_full_tables=sorted(ml_full), cv_sizes=P.cv_sizes)
write_result(snakemake.output.result, id="E2.1", question=P.question, metrics=doc["metrics"],
             claims=doc["claims"], extra={"transfer": records},
             provenance=rule_provenance(snakemake, calibration=cal_log, exclude=("code", "models", "greybox"), script="workflow/scripts/E2_1_transfer.py"))
logging.info("E2.1: %d records, %d claims", len(records), len(doc["claims"]))
transfer.plot_transfer(records, stem(snakemake.output.figure), full_grid=P.full_grid)
