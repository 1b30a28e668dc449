"""notebooks/<name>.ipynb paired from its jupytext script, byte-identical on every build (thin)."""
import logging

from steptime_lab.reporting import pair_notebook

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
pair_notebook(snakemake.input.src, snakemake.output[0])
logging.info("paired %s -> %s", snakemake.input.src, snakemake.output[0])
