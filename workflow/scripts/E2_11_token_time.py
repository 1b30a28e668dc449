"""E2.11: token time across GPUs and engines (ML.ENERGY v2/v3, AIConfigurator silicon), each predicted
as one decode step at the measured mean batch plus amortised prefill (an approximation of a schedule)."""
import logging
from os.path import splitext

import pandas as pd

from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.results import rule_provenance, write_result

from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
p = snakemake.params
prompts = {(d, t): v for d, per in p.settings["prompt_tokens"].items() for t, v in per.items()}
tables = dict(mlenergy_v2=pd.read_parquet(snakemake.input.mlenergy_v2),
              mlenergy_v3=pd.read_parquet(snakemake.input.mlenergy_v3), silicon=pd.read_parquet(snakemake.input.silicon))
# ML.ENERGY v3 and v2 compared by their steady-state mean time per token (W.V3_STEADY_MEAN_NOTE,
# W.V2_STEADY_MEAN_NOTE); the leaderboards' own measures beside them below
rows, skipped = W.tpot_table(**tables, prompt_tokens=prompts, v3_measure=p.settings["mlenergy_v3_measure"],
                             v2_measure=p.settings["mlenergy_v2_measure"])
# the synchronous engines' server laws (engines.yaml host.server_*: vLLM V0 and V1 before 0.14), each GPU's
# fitted on the other GPUs' rows of the same engine (W.SERVER_NOTE)
server = W.fit_server_hosts(rows, fitted=snakemake.input.constants, constants=constants, mixed=p.settings["mixed"])
fitted = server["fitted"]
res = W.run_tpot(rows, n_boot=p.n_boot, seed=p.seed, fitted=fitted, constants=constants)
mixed = W.run_tpot(rows, n_boot=p.n_boot, seed=p.seed, fitted=fitted, variant="mixed",
                   mixed=p.settings["mixed"], constants=constants)
sens = W.prompt_sensitivity(rows, prompts, p.settings["prompt_scale"], fitted=fitted, constants=constants)
doc = R.token_time_document(res, skipped + res["skipped"], p.targets, sens, mixed=mixed, server=server,
                            v3_measure=p.settings["mlenergy_v3_measure"], v2_measure=p.settings["mlenergy_v2_measure"])
ttft = W.run_ttft(rows, token_budget=p.settings["mixed"]["token_budget"], mem_util=p.settings["ttft"]["mem_util"],
                  fitted=fitted, constants=constants, n_boot=p.n_boot, seed=p.seed)
tdoc = R.document_ttft(ttft, p.targets, min_rows=p.settings["ttft"]["min_rows"],
                      disclosed=doc["metrics"].get("disclosed"))
doc["claims"] += tdoc["claims"]
doc["metrics"].update(tdoc["metrics"])
doc["metrics"]["server_host"] = {k: server[k] for k in ("note", "engines")}
doc["metrics"]["silicon_consistency"] = W.silicon_consistency(res["pred"])  # a data check, moves no claim
# the same kind of check on ML.ENERGY v3's measured-batch rows, with the mixed variant (W.LEADERBOARD_CONSISTENCY_NOTE)
doc["metrics"]["leaderboard_consistency"] = W.leaderboard_consistency(mixed["pred"], tables["mlenergy_v3"])
doc["metrics"]["v3_measure"] = {"measure": p.settings["mlenergy_v3_measure"], "note": W.V3_STEADY_MEAN_NOTE,
                                "disclosed": p.settings.get("mlenergy_v3_measure_disclosed")}
doc["metrics"]["v2_measure"] = {"measure": p.settings["mlenergy_v2_measure"], "note": W.V2_STEADY_MEAN_NOTE,
                                "disclosed": p.settings.get("mlenergy_v2_measure_disclosed")}
doc["metrics"]["v2_mean_tpot"] = W.v2_mean_tpot_scores(tables["mlenergy_v2"], prompts, fitted=fitted, constants=constants,
                                                       mixed=p.settings["mixed"], n_boot=p.n_boot, seed=p.seed)
doc["metrics"]["v3_median_itl"] = W.v3_median_scores(tables["mlenergy_v3"], prompts, fitted=fitted, constants=constants,
                                                     mixed=p.settings["mixed"], n_boot=p.n_boot, seed=p.seed)
doc["metrics"]["kv_capacity"] = {"note": W.KV_CAP_NOTE, **{v: {"rows_capped": int(r["pred"]["kv_capped"].sum()),
                                                             "rows": int(len(r["pred"])),
                                                             "groups": {f"{s['dataset']}|{s['gpu']}|{s['engine']}": s["kv_capped_rows"]
                                                                        for s in r["scores"] if s["subset"] == "tpot" and s["kv_capped_rows"]}}
                                                         for v, r in (("naive", res), ("mixed", mixed))}}
# rows measured below the time to read their bf16 KV cache and weights once (W.KV_WEIGHT_BOUND_NOTE): context, moves no claim
doc["metrics"]["kv_read_bound"] = W.token_kv_bound({"naive": res["pred"], "mixed": mixed["pred"]})
logging.info("E2.11: %d token-time rows scored, %d skipped", len(res["pred"]), len(skipped) + len(res["skipped"]))
prov = rule_provenance(snakemake, script="workflow/scripts/E2_11_token_time.py")
write_result(snakemake.output.result, id="E2.11", question=p.question, metrics=doc["metrics"], claims=doc["claims"],
             provenance=prov, extra={"targets": p.targets, "settings": p.settings})
logging.info("E2.11: %d claims, %d met", len(doc["claims"]), sum(bool(c.get("met")) for c in doc["claims"]))
R.plot_token_time(res, splitext(snakemake.output.fig)[0],
             "E2.11: measured token time (ML.ENERGY v2 mean TPOT, v3 steady-state mean time per token, AIConfigurator "
             "silicon TPOT) against one decode step at the measured mean batch plus the amortised prefill of "
             "arriving requests (an approximation of a schedule); right: MAPE per dataset x GPU x engine, naive "
             "(that approximation) beside mixed (the decode and mixed steps the engine runs).",
             mixed=mixed, target=p.targets["tpot_mape"])
