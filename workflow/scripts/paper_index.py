"""figures/PAPER.md: every figure ID the round-1 reports name, its file or why not (thin)."""
import logging


from steptime.io import atomic_path, yaml_load
from steptime_lab.reporting import load_results, paper_index

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
with open(snakemake.input.mapping) as fh:
    mapping = yaml_load(fh)
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(paper_index(mapping, snakemake.params.registry, load_results(snakemake.input.results)))
logging.info("wrote %s (%d figures)", snakemake.output[0], len(mapping["figures"]))
