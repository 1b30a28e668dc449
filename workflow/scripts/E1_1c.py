"""E1.1c: light kernels, launch floor + bytes over achieved bandwidth, held out per GPU."""
import json
from os.path import splitext

from steptime import data
from steptime.experiments import light as E
from steptime.results import provenance, write_result
from steptime.calibration import use_settled

use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
cfg = snakemake.config
cells = E.tidy_cells(data.load_vidur_mlp())
gemm_doc = json.load(open(snakemake.input.gemm_constants))
r = E.run(cells, seed=cfg["seed"], n_boot=cfg["bootstrap"], gemm_doc=gemm_doc)
doc = E.document(r, cells)
prov = provenance([snakemake.input.data, snakemake.input.gemm_constants], config=cfg, calibration=r["calibration"].to_dict(), rule="E1_1c",
                  script="workflow/scripts/E1_1c.py")
write_result(snakemake.output.result, id="E1.1c", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"defaults_updates": E.defaults_updates(r["shipped"], cells)})
E.plot(r, splitext(snakemake.output.fig)[0],
       "E1.1c: light-kernel time against bytes moved per GPU (Vidur operators); lines: held-out floor + "
       "bytes/achieved-bandwidth model. Vidur has no KV-cache-write operator.")
