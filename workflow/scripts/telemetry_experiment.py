"""An awaiting GPU-telemetry experiment (issue 14): collected files -> results/<ID>.json + figure (thin)."""
from pathlib import Path

from steptime.collect.experiments import build, figure
from steptime.results import provenance, write_result

p = snakemake.params
metrics, claims = build(p.id, list(snakemake.input.telemetry), n_boot=p.bootstrap, seed=p.seed,
                        dispatch=list(snakemake.input.get("dispatch", [])))
write_result(snakemake.output.result, id=p.id, question=p.question, metrics=metrics, claims=claims,
             provenance=provenance(list(snakemake.input.telemetry) + list(snakemake.input.get("dispatch", [])),
                                   config={"seed": p.seed, "bootstrap": p.bootstrap}, rule=snakemake.rule,
                                   script="workflow/scripts/telemetry_experiment.py"))
figure(p.id, metrics, Path(snakemake.output.fig).with_suffix(""))
