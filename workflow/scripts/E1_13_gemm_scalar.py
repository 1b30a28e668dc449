"""E1.13: the factor product as single source of truth vs one scalar efficiency per GPU."""
import logging
from os.path import splitext

from steptime.experiments import gemm as E
from steptime.experiments import gemm_figures as F
from steptime.results import provenance, write_result
from steptime.calibration import use_settled

use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
cfg = snakemake.config
df = E.load_gemm(snakemake.input.gemm)
doc = E.load_constants(snakemake.input.constants)
an = E.e1_13_analysis(df, doc)
# fast mode (the default main job): smaller refits for the ablation; fast: false runs the full-size ones
ab_kw = {"n_per_gpu": 500, "max_nfev": 20} if cfg.get("fast", True) else {"n_per_gpu": 2000, "max_nfev": 80}
ab = E.factor_ablation(df, doc["fixed"], seed=cfg["seed"], **ab_kw)
ab["settings"] = {"fast": bool(cfg.get("fast", True)), **ab_kw}
out = E.e1_13_document(an, ab)
prov = provenance([snakemake.input.gemm, snakemake.input.constants], config=cfg, calibration=doc["calibration"],
                  rule="E1_13", script="workflow/scripts/E1_13_gemm_scalar.py")
write_result(snakemake.output.result, id="E1.13", question=snakemake.params.question, metrics=out["metrics"],
             claims=out["claims"], provenance=prov)
F.scalar_figure(an, splitext(snakemake.output.fig)[0])
