"""E3.4: mixture-of-experts models on the wall clock (token times per GPU x engine, a replayed MoE run, FPM MoE runs)."""
import logging
from os.path import splitext

import pandas as pd

from steptime.io import read_yaml
from steptime_lab.experiments import moe_wallclock as X
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants
from steptime.terms.moe import MoEConstants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs)
mc = MoEConstants.from_doc(read_yaml(snakemake.input.moe)["constants"])
p = snakemake.params
s = dict(p.settings)
prompts = {(d, t): v for d, per in s["prompt_tokens"].items() for t, v in per.items()}
model_map = {e["source"]: e["model"] for e in s["model_map"]}
configs = {e["source"]: f"{snakemake.input.model_configs}/{e['config']}" for e in s["model_configs"]}
checkpoints = {e["source"]: f"{snakemake.input.model_configs}/{e['config']}" for e in s["checkpoint_configs"]}
rows, skipped = X.token_rows(pd.read_parquet(snakemake.input.silicon), pd.read_parquet(snakemake.input.mlenergy_v3),
                             prompt_tokens=prompts, model_map=model_map, dtype_map=s["dtype_map"], configs=configs,
                             checkpoints=checkpoints)
tok = X.predict_tokens(rows, mixed=s["mixed"], fitted=snakemake.input.constants, constants=constants, moe_constants=mc,
                       n_boot=p.n_boot, seed=p.seed)
own = X.own_law_tokens(rows, "trtllm", mixed=s["mixed"], fitted=snakemake.input.constants, constants=constants,
                       moe_constants=mc, n_boot=p.n_boot, seed=p.seed)  # TRT-LLM's own laws, reported beside
rep = X.replay(pd.read_parquet(snakemake.input.requests), model_map=model_map, engine=s["engine"],
               constants=constants, moe_constants=mc, engine_by_gpu=s.get("engine_by_gpu"),
               disclosed=s.get("replay_disclosed"))
fpm = X.fpm_parts(s["fpm_runs"])
fpm_scores = X.score_fpm_moe(pd.read_parquet(snakemake.input.fpm_moe), fitted=snakemake.input.constants,
                             constants=constants, moe_constants=mc, n_boot=p.n_boot, seed=p.seed)
gdn = X.gdn_share("qwen3.6-35b-a3b", "b300", constants=constants, moe_constants=mc)
doc = X.document(tok, rep, fpm, skipped, p.targets, fpm_scores=fpm_scores, gdn=gdn, own_laws=own,
                 kernel_rule=X.kernel_list(rows, mc, "trtllm"))  # the list deciding the trtllm profile's field
from steptime_lab.experiments.wallclock import tokens as _T  # noqa: E402
doc["metrics"]["kv_capacity"] = {"note": _T.KV_CAP_NOTE, "rows_capped": int(tok["pred"]["kv_capped"].sum()),
                                 "rows": int(len(tok["pred"])),
                                 "groups": {f"{s['dataset']}|{s['gpu']}|{s['engine']}": s["kv_capped_rows"]
                                            for s in tok["scores"] if s["kv_capped_rows"]}}
logging.info("E3.4: %d token rows scored, %d replayed runs, %d claims (%d met of %d with a target)", len(tok["pred"]),
             len(rep["runs"]), len(doc["claims"]), doc["metrics"]["targets_met"], doc["metrics"]["targets_total"])
write_result(snakemake.output.result, id="E3.4", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=rule_provenance(snakemake, script="workflow/scripts/E3_4_moe_wallclock.py"),
             extra={"targets": p.targets, "settings": s})
X.plot(tok, rep, splitext(snakemake.output.fig)[0],
       "E3.4: left, MAPE of the predicted MoE token time per (dataset, GPU, engine) group (AIConfigurator silicon "
       "TPOT; ML.ENERGY v3 median inter-token latency), each row predicted as the decode and mixed steps the engine "
       "runs at its attention-TP / expert-parallel layout (red: above the 15% target); right, LLMServingSim's real "
       "vLLM 0.19 run of Qwen3-30B-A3B-Instruct-2507 (tp 1, dp 2, EP) against steptime.serve replaying it (simulated).",
       float(p.targets["tpot_mape_per_group"]))
