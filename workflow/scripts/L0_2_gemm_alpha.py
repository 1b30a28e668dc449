"""L0.2: the implied-alpha ledger, both branches, before and after the factor model."""
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
an = E.implied_alpha_ledger(df, doc, constants=constants)
out = E.implied_alpha_claims(an)
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/L0_2_gemm_alpha.py")
write_result(snakemake.output.result, id="L0.2", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.alpha_figure(an, splitext(snakemake.output.fig)[0])
