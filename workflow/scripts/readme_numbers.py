"""results/README_numbers.md: the README's numbers block, from the result files (thin)."""
import logging

from steptime.io import atomic_path
from steptime_lab.reporting import load_results, readme_block

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
results = load_results(snakemake.input.results)
logging.info("README numbers block from %d result files: %s", len(results), sorted(results))
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(readme_block(results, snakemake.params.registry, [str(p) for p in snakemake.input.results]))
logging.info("wrote %s", snakemake.output[0])
