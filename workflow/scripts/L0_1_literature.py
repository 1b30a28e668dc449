"""L0.1: literature matrix of prior step-time predictors (cited data file config/literature.yaml)."""
import logging
from os.path import splitext

from steptime_lab.experiments import literature as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
lit = E.load(snakemake.input.lit)
doc = E.document(lit)
logging.info("L0.1: %d claims from %s", len(doc["claims"]), snakemake.input.lit)
write_result(snakemake.output.result, id="L0.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=rule_provenance(snakemake, script="workflow/scripts/L0_1_literature.py"))
E.plot(lit, splitext(snakemake.output.fig)[0],
       "L0.1: prior predictors: where the efficiency factor comes from, which GPUs each covers, and the "
       "accuracy it reports (as cited in config/literature.yaml; 'not reported' where no number is given).")
