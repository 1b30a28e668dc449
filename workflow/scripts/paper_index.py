"""figures/PAPER.md: every figure ID the round-1 reports name, its file or why not (thin)."""
import logging

from steptime.io import atomic_path, read_yaml
from steptime_lab.reporting import load_results, paper_index

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
mapping = read_yaml(snakemake.input.mapping)
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(paper_index(mapping, snakemake.params.registry, load_results(snakemake.input.results)))
logging.info("wrote %s (%d figures)", snakemake.output[0], len(mapping["figures"]))
