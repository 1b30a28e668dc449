"""results/README_numbers.md: the README's numbers block, from the result files (thin)."""
from steptime.io import atomic_path
from steptime.reporting import load_results, readme_block

with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(readme_block(load_results(snakemake.input.results), snakemake.params.registry))
