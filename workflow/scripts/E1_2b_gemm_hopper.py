"""E1.2b: Hopper GEMM curves under the persistent cluster model (settled cluster size vs 16-CTA clusters)."""
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
out = E.cluster_cap_claims(E.cluster_cap_scores(df, doc, constants=constants))
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/E1_2b_gemm_hopper.py")
write_result(snakemake.output.result, id="E1.2b", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.staircase_figure(F.cluster_cap_panels(df, doc, constants=constants), splitext(snakemake.output.fig)[0],
                   "E1.2b: Hopper GEMM latency against m for LLM-shaped (n, k), measured (dots) and the held-out "
                   "persistent-grid model with the settled cluster size and with 16-CTA clusters (7 x 16 = 112 "
                   "CTAs); lower row: the factors of the settled model.")
