"""R2.1: design-time choices, each with the held-out metric under every alternative."""
import json
import sys

import pandas as pd

from steptime.experiments import attention as AX
from steptime.experiments import design
from steptime.experiments import gemm as GX
from steptime.results import provenance, write_result

p = snakemake.params
with open(snakemake.log[0], "w") as log:
    sys.stderr = log
    gemm_doc = json.load(open(snakemake.input.gemm_constants))
    docs = {k: json.load(open(getattr(snakemake.input, k))) for k in ("e1_11", "e1_3", "e1_13")}
    collected = design.collected_choices(docs["e1_11"], docs["e1_3"], docs["e1_13"], gemm_doc)
    df = GX.load_gemm(snakemake.input.gemm)
    warm = design.warm_start_check(df, gemm_doc, p.targets, seed=int(p.seed), n_per_gpu=int(p.gemm_n_per_gpu),
                                   max_nfev=int(p.gemm_max_nfev))
    print("warm start:", warm, file=log)
    gen, ctx = (pd.read_parquet(x) for x in snakemake.input.attention)  # generation (decode), context (prefill)
    cells = AX.tidy_cells(gen, ctx)
    weight = design.llm_weight_check(cells, gemm_doc, p.targets, seed=int(p.seed), n_sample=int(p.attn_n_sample),
                                     max_nfev=int(p.attn_max_nfev))
    print("attention LLM weight:", weight, file=log)
doc = design.document(collected, design.nested_rows(warm, weight), warm, weight, fast=bool(p.fast))
write_result(snakemake.output.result, id="R2.1", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=provenance([snakemake.input.gemm, *snakemake.input.attention, snakemake.input.gemm_constants,
                                    snakemake.input.e1_11, snakemake.input.e1_3, snakemake.input.e1_13],
                                   config={"fast": p.fast, "seed": p.seed, "targets": p.targets,
                                           "gemm_n_per_gpu": p.gemm_n_per_gpu, "gemm_max_nfev": p.gemm_max_nfev,
                                           "attn_n_sample": p.attn_n_sample, "attn_max_nfev": p.attn_max_nfev},
                                   rule="design_choices", script="workflow/scripts/design_choices.py"))
