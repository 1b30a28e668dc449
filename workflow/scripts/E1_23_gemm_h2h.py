"""E1.23: held-out steptime vs the peers' roofline formulas on the same GEMM cells."""
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
recs, preds = E.evaluate_records(df, doc, n_boot=snakemake.params.n_boot, seed=snakemake.params.seed, constants=constants)
out = E.head_to_head_claims(recs, snakemake.params.targets, E.reading_sensitivity(df, doc, constants=constants))
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/E1_23_gemm_h2h.py")
write_result(snakemake.output.result, id="E1.23", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.head_to_head_figure(recs, splitext(snakemake.output.fig)[0])
F.error_atlas_figure(E.ape_table(preds), splitext(snakemake.output.atlas)[0])
