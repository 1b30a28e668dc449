"""E1.11: the Hopper grid cap from GPC geometry, and which cluster size the latency tables support."""
import logging
from os.path import splitext

from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import figures as F
from steptime_lab.results import rule_provenance, write_result
from steptime.calibration import DEFAULTS_FILE, Constants

constants = Constants.load(DEFAULTS_FILE)  # the shipped constants file (a code input), passed down

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
df = E.load_gemm(snakemake.input.gemm)
comp = E.cluster_comparison(df, E.CLUSTER_SIZES, E.HOPPER, seed=snakemake.params.seed, constants=constants)
doc = E.cluster_size_decision(df, comp)
cal = E.calibration_record({g: E.deploy_readings(df, g) for g in E.HOPPER}).to_dict()
prov = rule_provenance(snakemake, calibration=cal, script="workflow/scripts/E1_11_gemm_cluster.py")
write_result(snakemake.output.result, id="E1.11", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"decision": doc["decision"]})
F.cluster_figure(doc, splitext(snakemake.output.fig)[0])
logging.info("E1.11 decision: %s", doc["decision"])
