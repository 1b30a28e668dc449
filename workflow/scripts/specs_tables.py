"""Export the GPU and model tables (with each figure's source) as JSON."""
import logging
from dataclasses import asdict

from steptime.io import write_json
from steptime.specs import gpu_sources, gpu_table, model_table

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
gpus = {}
for key, g in gpu_table().items():
    row = {k: v for k, v in asdict(g).items() if k != "figures"}
    row["sources"] = {f: {"source": fig.source, "confidence": fig.confidence} for f, fig in g.figures.items()}
    gpus[key] = row
write_json(snakemake.output.gpus, {"sources": gpu_sources(), "gpus": gpus})
write_json(snakemake.output.models, {k: asdict(m) for k, m in model_table().items()})
logging.info("specs: %d GPUs, %d models", len(gpus), len(model_table()))
