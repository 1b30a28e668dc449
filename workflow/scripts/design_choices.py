"""R2.1: design-time choices, each with the held-out metric under every alternative."""
import json
import logging

import pandas as pd

from steptime_lab.experiments import attention as AX
from steptime_lab.experiments import design
from steptime_lab.experiments import gemm as GX
from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
logging.captureWarnings(True)
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled GEMM constants (declared inputs), as E1.24, passed down
p = snakemake.params
gemm_doc = json.load(open(snakemake.input.gemm_constants))
docs = {k: json.load(open(getattr(snakemake.input, k))) for k in ("e1_11", "e1_3", "e1_13")}
collected = design.collected_choices(docs["e1_11"], docs["e1_3"], docs["e1_13"], gemm_doc,
                                     cluster_tie_band=float(p.cluster_tie_band))
df = GX.load_gemm(snakemake.input.gemm)
warm = design.warm_start_check(df, gemm_doc, p.targets, seed=int(p.seed), n_per_gpu=int(p.gemm_n_per_gpu),
                               max_nfev=int(p.gemm_max_nfev), constants=constants)
logging.info("warm start: %s", warm)
gen, ctx = (pd.read_parquet(x) for x in snakemake.input.attention)  # generation (decode), context (prefill)
cells = AX.tidy_cells(gen, ctx)
weight = design.llm_weight_check(cells, gemm_doc, p.targets, seed=int(p.seed), n_sample=int(p.attn_n_sample),
                                 max_nfev=int(p.attn_max_nfev), constants=constants)
logging.info("attention LLM weight: %s", weight)
doc = design.document(collected, design.nested_rows(warm, weight), warm, weight, fast=bool(p.fast))
write_result(snakemake.output.result, id="R2.1", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=rule_provenance(snakemake, script="workflow/scripts/design_choices.py"))
