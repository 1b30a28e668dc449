"""E1.1c: light kernels, launch floor + bytes over achieved bandwidth, held out per GPU."""
import json
import logging
from os.path import splitext

import pandas as pd

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime_lab.experiments import attention as AX
from steptime_lab.experiments import light as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
cells = E.tidy_cells(pd.read_parquet(snakemake.input.data))
logging.info("light-kernel cells: %d", len(cells))
with open(snakemake.input.gemm_constants) as fh:
    gemm_doc = json.load(fh)
scale = pd.read_parquet(snakemake.input.scale)  # AIConfigurator's vLLM quantize kernel (row floor)
r = E.run(cells, seed=P.seed, n_boot=P.n_boot, gemm_doc=gemm_doc, constants=constants)
# kv_write's bandwidth from AIConfigurator's vLLM prefill attention tables (their timed call includes the write)
att = AX.tidy_cells(pd.read_parquet(snakemake.input.generation), pd.read_parquet(snakemake.input.context))
r["kv_write"] = E.kv_write_doc(E.kv_write_slopes(att), constants)
doc = E.document(r, cells, P.targets)
# the row floor law of modern engines' one-CTA-per-row light kernels, on AIConfigurator's vLLM quantize kernel
rf = E.run_row_floor(scale, r["shipped"]["light_floor_us"]["rmsnorm"], constants=constants,
                     seed=P.seed, n_boot=P.n_boot)
rdoc = E.document_row_floor(rf, P.targets)
doc["metrics"]["row_floor"] = rdoc["metrics"]
doc["claims"] += rdoc["claims"]
updates = E.defaults_updates(r["shipped"], cells, kv_write=r["kv_write"]) + [E.row_floor_update(rf["shipped"], rf["cells"])]
prov = rule_provenance(snakemake, calibration=r["calibration"].to_dict(), script="workflow/scripts/E1_1c_light.py")
write_result(snakemake.output.result, id="E1.1c", question=P.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"defaults_updates": updates})
logging.info("E1.1c: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
E.plot(r, splitext(snakemake.output.fig)[0],
       "E1.1c: light-kernel time against bytes moved per GPU (Vidur operators); lines: held-out floor + "
       "bytes/achieved-bandwidth model. Vidur has no KV-cache-write operator.")
