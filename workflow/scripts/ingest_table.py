"""Ingest one raw source into its tidy table: results/data/<table>.parquet (thin: steptime_lab.data does the work)."""
import logging
from pathlib import Path

from steptime_lab.data import tidy_table, write_parquet

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
name = snakemake.wildcards.table
logging.info("%s: %s; %d raw files", name, snakemake.params.about, len(snakemake.input.raw) - 1)
df = tidy_table(name, root=Path.cwd())
write_parquet(df, snakemake.output.table)
logging.info("%s: %d rows, %d columns -> %s", name, len(df), df.shape[1], snakemake.output.table)
if "gpu" in df.columns:
    for gpu, n in df.groupby("gpu").size().items():
        logging.info("  %-14s %8d rows", gpu, n)
