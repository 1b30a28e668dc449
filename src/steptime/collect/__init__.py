"""Collectors, parsers and reductions for telemetry only a GPU can produce.

Each awaiting experiment has three parts:
  collector  runs on a GPU node (Slurm profile), writes raw/telemetry/<kind>/...csv
  parser     reads that CSV into a checked tidy table through steptime.data.checks (read_csv,
             a pandera schema, run_schema: a DataError names the file, row and column)
  reduction  turns the tidy table into the numbers the experiment reports

Collectors import torch / pynvml lazily: they are not needed to parse or reduce. The body of every
awaiting experiment's Snakemake script is `steptime.collect.experiments.report`.
"""
