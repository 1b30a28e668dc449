"""E1.12: which SM-fill paradigm each Blackwell GPU's GEMM curves follow."""
import logging
from os.path import splitext

from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import figures as F
from steptime_lab.results import rule_provenance, write_result
from steptime.calibration import DEFAULTS_FILE, Constants

constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
df = E.load_gemm(snakemake.input.gemm)
doc = E.load_constants(snakemake.input.constants)
scores = {g: E.paradigm_scores(df, doc, g, seed=snakemake.params.seed, constants=constants) for g in E.BLACKWELL}
out = E.paradigm_claims(scores)
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/E1_12_gemm_blackwell.py")
write_result(snakemake.output.result, id="E1.12", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.paradigm_figure(out["metrics"]["decision"], splitext(snakemake.output.fig)[0])
F.staircase_figure(F.paradigm_panels(df, doc, constants=constants), splitext(snakemake.output.curves)[0],
                   "E1.12: GEMM latency against m on each Blackwell GPU for n = 8192, k = 4096, measured (dots), the "
                   "held-out model with the paradigm fill_paradigm() assigns (solid) and with the other one (dashed); "
                   "lower row: the factors of the assigned model.")
