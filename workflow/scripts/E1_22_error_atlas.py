"""E1.22: error atlas over attention (tokens x KV) and the Vidur step (m x shape)."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import attention as A
from steptime_lab.experiments import step as S
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
attn = {"pred": pd.read_parquet(snakemake.input.attn)}
step = {"pred": pd.read_parquet(snakemake.input.step)}
doc = S.atlas_document(A.summarize_regions(A.atlas_regions(attn)), S.atlas_regions(step))
A.plot_atlas(attn, splitext(snakemake.output.fig_attn)[0],
             "E1.22: signed error (%) of held-out attention predictions, Llama-like config (32 q / 8 KV "
             "heads, d 128, bf16) per GPU: top decode (KV length x requests), bottom prefill (prompt x "
             "requests). Red: over-prediction.")
S.plot_atlas(step, splitext(snakemake.output.fig_step)[0],
             "E1.22: signed error (%) of the held-out Vidur per-layer step per GPU over tokens (m) "
             "and model x TP (shape). Red: over-prediction.")
logging.info("E1.22: error atlas over %d attention and %d step predictions", len(attn["pred"]), len(step["pred"]))
prov = rule_provenance(snakemake, script="workflow/scripts/E1_22_error_atlas.py")
write_result(snakemake.output.result, id="E1.22", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov)
