"""E1.3: memory efficiency as one law, in working set over L2 ('x') or in bytes read ('bytes')."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import figures as F
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
df = E.load_gemm(snakemake.input.gemm)
sm = pd.read_parquet(snakemake.input.scale)
tab = E.memory_table(df, sm)
study = {kind: E.memory_law_study(tab, kind) for kind in ("gemm", "scale_matrix")}
doc = E.memory_law_claims(study, E.l2_resident_summary(df), E.stream_l2_summary(sm), snakemake.params.targets)
prov = rule_provenance(snakemake, calibration=doc.pop("calibration"), script="workflow/scripts/E1_3_gemm_memory.py")
write_result(snakemake.output.result, id="E1.3", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"decision": doc["decision"]})
F.memory_law_figure(tab, study, splitext(snakemake.output.fig)[0])
logging.info("E1.3 decision: %s", doc["decision"])
