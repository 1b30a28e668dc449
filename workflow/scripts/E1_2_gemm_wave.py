"""E1.2: tile ladder + last-wave tail on Ampere/Ada (A100, L40S) and Vidur's A40 GEMM operators."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import figures as F
from steptime_lab.results import rule_provenance, write_result
from steptime.calibration import DEFAULTS_FILE, Constants

constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
df = E.load_gemm(snakemake.input.gemm)
doc = E.load_constants(snakemake.input.constants)
vc = E.vidur_gemm_cells(pd.read_parquet(snakemake.input.vidur), "a40")
an = E.wave_fill_scores(df, doc, vc, constants=constants)
out = E.wave_fill_claims(an)
cal = {g: a.pop("calibration") for g, a in out["metrics"].items()}
prov = rule_provenance(snakemake, calibration=cal, script="workflow/scripts/E1_2_gemm_wave.py")
write_result(snakemake.output.result, id="E1.2", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.staircase_figure(F.wave_fill_panels(df, doc, vc, constants=constants), splitext(snakemake.output.fig)[0],
                   "E1.2: GEMM latency against m for one LLM-shaped (n, k) per GPU (A100, L40S from AIConfigurator; "
                   "A40 from Vidur's mlp_up_proj), measured (dots), held-out model with and without the SM-fill factor; "
                   "lower row: the factors of the full model.")
