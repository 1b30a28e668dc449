"""E1.27: fp8 W8A8 projection GEMMs held out per GPU (datasheet fp8 peak, bf16 GEMM fold), per engine."""
import json
import logging

import pandas as pd

from steptime_lab.experiments import precision as E
from steptime_lab.results import write_experiment
from steptime.calibration import DEFAULTS_FILE, Constants

constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
with open(snakemake.input.gemm_constants) as fh:
    gemm_doc = json.load(fh)
fp8 = E.load_fp8(pd.read_parquet(snakemake.input.fp8))
bf16 = pd.read_parquet(snakemake.input.bf16)
bf16 = bf16[bf16["dtype"].astype(str).isin(["bf16", "bfloat16"])]
engines = pd.read_parquet(snakemake.input.engines)
r = E.run(fp8, bf16, gemm_doc, base=constants, seed=int(snakemake.params.seed), engines=engines)
doc = E.document(r, float(snakemake.params.target_pct))
logging.info("E1.27: %d vLLM fp8 GEMM cells, %d bf16 cells, %d other-engine rows", len(fp8), len(bf16),
             len(engines))
write_experiment(snakemake, id="E1.27", doc=doc, script="workflow/scripts/E1_27_fp8_gemm.py",
                 calibration=r["calibration"].to_dict(), extra={"defaults_updates": E.defaults_updates(r)},
                 figure=lambda stem: E.plot(r, stem,
       "E1.27: fp8 W8A8 GEMM per engine (vLLM CUTLASS scaled-mm, TensorRT-LLM, SGLang; AIConfigurator tables) held "
       "out per GPU: predicted against measured on LLM-shaped cells (left) and MAPE per engine against the bare fp8 "
       "roofline (right)."))
