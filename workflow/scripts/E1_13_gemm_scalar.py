"""E1.13: the factor product as single source of truth vs one scalar efficiency per GPU."""
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
an = E.scalar_vs_factors(df, doc, constants=constants)
# the ablation's refit sizes are params (config sizes, fast or full set)
ab_kw = dict(snakemake.params.ablation)
ab = E.factor_ablation(df, doc["fixed"], constants=constants, seed=snakemake.params.seed, **ab_kw)
ab["settings"] = {"fast": bool(snakemake.params.fast), **ab_kw}
logging.info("factor ablation with %s", ab["settings"])
out = E.scalar_claims(an, ab)
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/E1_13_gemm_scalar.py")
write_result(snakemake.output.result, id="E1.13", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.scalar_figure(an, splitext(snakemake.output.fig)[0])
