"""GPU collectors: they measure on a GPU node and write raw/telemetry CSVs (and their parsers).

Each awaiting experiment has three parts:
  collector  runs on a GPU node (Slurm profile), writes raw/telemetry/<kind>/...csv
  parser     reads that CSV into a checked tidy table through steptime_lab.data.checks (read_csv,
             a pandera schema, run_schema: a DataError names the file, row and column)
  reduction  turns the tidy table into the numbers the experiment reports

Collectors import torch / pynvml lazily: they are not needed to parse or reduce. The body of every
awaiting experiment's Snakemake script is `steptime_lab.experiments.telemetry.report` (the lab).
"""
