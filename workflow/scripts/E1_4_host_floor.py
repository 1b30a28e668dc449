"""E1.4: host floor S(N) = a + b(N-1) and its parts, against the GPU work of a decode step."""
import logging
from os.path import splitext

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments.host import floor as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
x = E.tidy(pd.read_parquet(snakemake.input.data))
logging.info("host rows: %d", len(x))
r = E.run(x, seed=P.seed, n_boot=P.n_boot)
doc = E.document(r, x, constants=constants)
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_4_host_floor.py")
write_result(snakemake.output.result, id="E1.4", question=P.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"defaults_updates": E.defaults_updates(r["per_gpu"])})
logging.info("E1.4: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
E.plot(r, x, doc, splitext(snakemake.output.fig)[0],
       "E1.4: measured host time per engine step (Vidur, Sarathi-Serve) against batch size per model and TP, "
       "with the held-out S(N) + Ray + sampler lines; right: host time over predicted GPU work of the same decode step.")
