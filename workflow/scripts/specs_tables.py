"""Export the GPU and model tables (with each figure's source) as JSON."""
from dataclasses import asdict

from steptime.io import write_json
from steptime.specs import gpu_sources, gpu_table, model_table

gpus = {}
for key, g in gpu_table().items():
    row = {k: v for k, v in asdict(g).items() if k != "figures"}
    row["sources"] = {f: {"source": fig.source, "confidence": fig.confidence} for f, fig in g.figures.items()}
    gpus[key] = row
write_json(snakemake.output.gpus, {"sources": gpu_sources(), "gpus": gpus})
write_json(snakemake.output.models, {k: asdict(m) for k, m in model_table().items()})
