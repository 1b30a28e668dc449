"""E1.29: the GEMM and attention terms at the TP-split (per-rank) shapes, held out by GPU."""
import json
import logging
from os.path import splitext

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments import attention as AX
from steptime_lab.experiments import tp_shapes as E
from steptime_lab.results import rule_provenance, write_result

constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants, passed down
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
with open(snakemake.input.gemm_constants) as fh:
    gemm_doc = json.load(fh)
with open(snakemake.input.e1_24) as fh:
    attn_doc = json.load(fh)
with open(snakemake.input.e1_23) as fh:
    unsplit = {g: v["steptime"] for g, v in json.load(fh)["metrics"]["summary_llm"].items()}
tps = tuple(snakemake.params.settings["tps"])
gemm = pd.read_parquet(snakemake.input.gemm)
gemm = gemm[gemm["dtype"].astype(str).isin(["bf16", "bfloat16"])]
shapes, heads = E.split_shapes(tps=tps), E.split_heads(tps=tps)
aic, notes = E.predict_gemm(E.aic_gemm_cells(gemm, shapes), gemm_doc, constants)
vcells = E.vidur_gemm_cells(pd.read_parquet(snakemake.input.vidur), sorted(gemm_doc["folds"]))
vraw, vnotes = E.predict_gemm(vcells, gemm_doc, constants)
factors = E.vidur_stack_factors(vraw)  # each GPU's from the other Vidur GPU's rows
vid, _ = E.predict_gemm(vcells, gemm_doc, constants, stack={g: d["factor"] for g, d in factors.items()})
cells = AX.tidy_cells(pd.read_parquet(snakemake.input.generation), pd.read_parquet(snakemake.input.context))
attn = E.predict_attention(E.attention_cells(cells, heads), gemm_doc, attn_doc, constants)
doc = E.document(pd.concat([aic, vid], ignore_index=True), attn, snakemake.params.targets, unsplit,
                 {**notes, **vnotes}, vidur_stack=E.vidur_stack_context(vraw, vid, factors))
logging.info("E1.29: %d GEMM cells (AIConfigurator), %d (Vidur), %d attention cells; %d of %d targets met",
             len(aic), len(vid), len(attn), doc["metrics"]["target_met"], doc["metrics"]["target_scored"])
prov = rule_provenance(snakemake, script="workflow/scripts/E1_29_tp_shapes.py")
write_result(snakemake.output.result, id="E1.29", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov)
E.plot(doc, splitext(snakemake.output.fig)[0],
       "E1.29: held-out MAPE at the per-rank (TP-split) shapes of the known dense models against TP, per GPU: "
       "GEMM (AIConfigurator, Vidur) and attention (decode, prefill); dotted: each GPU's target.")
