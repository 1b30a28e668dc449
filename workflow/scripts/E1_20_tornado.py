"""E1.20b: the per-term change in step MAPE (a tornado), read from E1.20's ladder (thin)."""
import json
import logging
from os.path import splitext

from steptime_lab.experiments import step as S

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
with open(snakemake.input.result) as fh:
    doc = json.load(fh)
rows = S.tornado(doc["metrics"]["ladder"], doc["metrics"]["rungs"])
logging.info("E1.20b: %d rung changes from %s", len(rows), snakemake.input.result)
S.plot_tornado(rows, splitext(snakemake.output.fig)[0],
               "E1.20b: the change in held-out step MAPE (percentage points) each rung of the E1.20 ablation ladder "
               "brings over the rung before it, per GPU, decode- and prefill-sized Vidur cells; read from "
               "results/E1_20.json (its ladder rows).")
