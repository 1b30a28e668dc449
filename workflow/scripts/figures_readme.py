"""figures/README.md: every figure with its experiment, script, inputs and caption (thin)."""
from steptime.io import atomic_path
from steptime.reporting import figures_index, load_results

with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(figures_index(load_results(snakemake.input.results), snakemake.params.registry))
