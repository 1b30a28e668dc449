"""E2.2 / E2.6: rank GPUs per workload from predictions vs measured tables, tie-aware."""
import json

import joblib

from steptime import data
from steptime.evaluate.held_out import HeldOut
from steptime.experiments import ranking, transfer
from steptime.results import provenance, write_result
from steptime.calibration import use_settled


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
cfg = snakemake.config
g, a, wls, meas = ranking.ranking_inputs(data.load_aic_gemm(), data.load_aic_attention(kind="context"),
                                         data.load_aic_attention(kind="generation"))
gb, ab = joblib.load(snakemake.input.gemm_rf), joblib.load(snakemake.input.attn_rf)
hook = HeldOut.for_dataset("ranking", gemm_doc=json.load(open(snakemake.input.gemm_constants)),
                           attn_doc=json.load(open(snakemake.input.attention)))
res = ranking.run(g, a, wls, meas, gb, ab, constants_for=hook)
cal_log = {f"ranking|{gpu}": transfer.calibration_summary(hook(gpu)[1], gpu) for gpu in ranking.GPUS}
prov = provenance(list(snakemake.input.data) + [snakemake.input.gemm_constants, snakemake.input.attention],
                  config=cfg, calibration=cal_log, rule="E2_2", script="workflow/scripts/E2_2.py")
d2 = ranking.e2_2_document(res, wls, meas, gb["home_gpu"])
write_result(snakemake.output.e2_2, id="E2.2", question=snakemake.params.q2, metrics=d2["metrics"],
             claims=d2["claims"], provenance=prov)
d6 = ranking.e2_6_document(res)
write_result(snakemake.output.e2_6, id="E2.6", question=snakemake.params.q6, metrics=d6["metrics"],
             claims=d6["claims"], provenance=prov)
ranking.plot_ranking(res, stem(snakemake.output.fig2))
ranking.plot_ties(res, stem(snakemake.output.fig6))
