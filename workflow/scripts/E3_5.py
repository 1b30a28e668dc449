"""E3.5: predicted decode tokens/s per GPU by tensor/expert-parallel layout on one node (simulated)."""
import logging
from os.path import splitext

import yaml

from steptime_lab.experiments import moe as E
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
from steptime.terms.moe import MoEConstants

s = dict(snakemake.params.settings)
mc = MoEConstants.from_doc(yaml.safe_load(open(snakemake.input.constants))["constants"])
df = E.ep_sweep(s["models"], s["gpus"], n_gpus=int(s["n_gpus"]), requests=int(s["requests"]),
                kv_len=int(s["kv_len"]), layouts=[tuple(x) for x in s["layouts"]], moe_constants=mc)
rows = df.where(df.notna(), None).to_dict("records")
best = {}
for (m, g), y in df.dropna(subset=["tok_s_per_gpu"]).groupby(["model", "gpu"]):
    b = y.loc[y["tok_s_per_gpu"].idxmax()]
    best[f"{m}/{g}"] = {"tp": int(b.tp), "ep": int(b.ep), "tok_s_per_gpu": round(float(b.tok_s_per_gpu), 1),
                        "limit": b["limit"]}
logging.info("E3.5: %d layouts predicted", len(df))
write_result(snakemake.output.result, id="E3.5", question=snakemake.params.question,
             metrics={"simulated": True, "best_layout": best, "rows": rows}, claims=[],
             provenance=rule_provenance(snakemake, script="workflow/scripts/E3_5.py"))
E.plot_ep(df, splitext(snakemake.output.fig)[0],
          "E3.5 (simulated): steptime's predicted decode tokens/s per GPU on one 8-GPU node, 256 concurrent "
          "decodes at KV 2048 spread over the attention data-parallel ranks, per tensor/expert-parallel layout; "
          "each bar names the term with the largest share of the step.")
