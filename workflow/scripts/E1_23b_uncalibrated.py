"""E1.23b: held-out GEMM MAPE with and without each GPU's own deploy readings (the uncalibrated mode)."""
import logging
from os.path import splitext

from steptime_lab.experiments import gemm as E
from steptime_lab.experiments import uncalibrated as U
from steptime_lab.results import rule_provenance, write_result
from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
df = E.load_gemm(snakemake.input.gemm)
doc = E.load_constants(snakemake.input.constants)
r = U.score_datasheet_only(df, doc, n_boot=snakemake.params.n_boot, seed=snakemake.params.seed, constants=constants)
out = U.document(r, snakemake.params.targets)
prov = rule_provenance(snakemake, calibration=doc["calibration"], script="workflow/scripts/E1_23b_uncalibrated.py")
write_result(snakemake.output.result, id="E1.23b", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
U.plot(out, splitext(snakemake.output.fig)[0],
              "E1.23b: held-out GEMM MAPE on LLM-shaped cells per AIConfigurator GPU, with the GPU's three deploy "
              "readings (E1.23) and without them (uncalibrated: the other GPUs' median readings, the mode every GPU "
              "without readings is predicted in).")
