"""Collectors, parsers and reductions for telemetry only a GPU can produce.

Each awaiting experiment has three parts:
  collector  runs on a GPU node (Slurm profile), writes raw/telemetry/<kind>/...csv
  parser     reads that CSV into a checked tidy table through steptime.data.checks (read_csv,
             a pandera schema, run_schema: a DataError names the file, row and column)
  reduction  turns the tidy table into the numbers the experiment reports

Collectors import torch / pynvml lazily: they are not needed to parse or reduce. `report` is the body of
an awaiting experiment's Snakemake script: reduce every collected GPU, draw the figure, write the result.
"""


def report(smk, paths, reduce, figure, *, id: str, question: str, script: str) -> dict:
    """Build an awaiting experiment's outputs once its telemetry exists (the body of its Snakemake script).

    `paths`: collected files laid out raw/telemetry/<kind>/<gpu>/<file>.csv (the GPU is the folder name);
    `reduce(path, gpu)` -> that GPU's rows; `figure(per_gpu, stem)` draws and saves the figure at the stem of
    `smk.output.fig`; the result {'per_gpu': ...} goes to `smk.output.result` with provenance from what the
    rule declared (`results.rule_provenance`: its inputs, its params as the config, the rule, `script`).
    `smk` is the script's `snakemake` object (or anything with those attributes). Returns the per-GPU rows.
    """
    from pathlib import Path

    from steptime.results import rule_provenance, write_result

    per_gpu = {}
    for path in paths:
        gpu = Path(path).parent.name
        per_gpu[gpu] = reduce(path, gpu)
    figure(per_gpu, Path(smk.output.fig).with_suffix(""))
    write_result(smk.output.result, id=id, question=question, metrics={"per_gpu": per_gpu}, claims=[],
                 provenance=rule_provenance(smk, script=script))
    return per_gpu
