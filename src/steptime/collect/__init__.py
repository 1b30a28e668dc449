"""Collectors, parsers and reductions for telemetry only a GPU can produce.

Each awaiting experiment has three parts:
  collector  runs on a GPU node (Slurm profile), writes raw/telemetry/<kind>/...csv
  parser     reads that CSV into a checked tidy table (DataError naming file/row/column)
  reduction  turns the tidy table into the numbers the experiment reports

Collectors import torch / pynvml lazily: they are not needed to parse or reduce.
"""
