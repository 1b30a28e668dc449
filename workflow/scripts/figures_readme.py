"""figures/README.md: every figure with its experiment, script, inputs and caption (thin)."""
import logging

from steptime.io import atomic_path
from steptime_lab.reporting import figures_index, load_results

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
results = load_results(snakemake.input.results)
logging.info("figures index from %d result files: %s", len(results), sorted(results))
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(figures_index(results, snakemake.params.registry))
logging.info("wrote %s", snakemake.output[0])
