"""E1.13: the factor product as single source of truth vs one scalar efficiency per GPU."""
import logging

from steptime.experiments import gemm as E
from steptime.experiments import gemm_figures as F
from steptime.results import provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
cfg = snakemake.config
df = E.load_gemm(snakemake.input.gemm)
doc = E.load_constants(snakemake.input.constants)
an = E.e1_13_analysis(df, doc)
out = E.e1_13_document(an)
prov = provenance([snakemake.input.gemm, snakemake.input.constants], config=cfg, calibration=doc["calibration"],
                  rule="E1_13", script="workflow/scripts/E1_13_gemm_scalar.py")
write_result(snakemake.output.result, id="E1.13", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.scalar_figure(an, snakemake.params.fig)
