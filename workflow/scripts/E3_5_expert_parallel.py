"""E3.5: predicted decode tokens/s per GPU against the expert-parallel degree on one node, and the limiting term (simulated)."""
import logging
from os.path import splitext

from steptime.io import read_yaml
from steptime.terms.moe import MoEConstants
from steptime_lab.experiments import moe as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")

s = dict(snakemake.params.settings)
mc = MoEConstants.from_doc(read_yaml(snakemake.input.constants)["constants"])
df = E.ep_sweep(s["models"], s["gpus"], n_gpus=int(s["n_gpus"]), requests=int(s["requests"]),
                kv_len=int(s["kv_len"]), layouts=E.ep_layouts(int(s["n_gpus"]), tuple(s["degrees"])), moe_constants=mc)
doc = E.document_ep(df)
logging.info("E3.5: %d layouts predicted, %d do not fit", len(df), doc["metrics"]["does_not_fit"])
write_result(snakemake.output.result, id="E3.5", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=rule_provenance(snakemake, script="workflow/scripts/E3_5_expert_parallel.py"))
E.plot_ep(df, splitext(snakemake.output.fig)[0],
          "E3.5 (simulated, no measured truth): steptime's predicted decode tokens/s per GPU on one 8-GPU node against "
          "the expert-parallel degree (1: experts sliced by tensor parallelism), one line per attention TP; 256 "
          "concurrent decodes at KV 2048 spread over the attention ranks; each point names the term with the largest "
          "share of the step; layouts whose weights and KV do not fit are left out.")
