"""E2.5: calibration cost vs coverage ledger; wall seconds go to a separate timing file."""
import json

import joblib
import pandas as pd

from steptime_lab.experiments import calibration_cost as cc
from steptime_lab.experiments import transfer
from steptime.io import write_json
from steptime_lab.results import rule_provenance, write_result
from steptime.specs import gpu_keys
from steptime.calibration import DEFAULTS_FILE, Constants


def stem(path):
    """Figure path without its extension (plotting.save writes .png, .pdf and .caption.txt)."""
    return str(path).rsplit(".", 1)[0]


constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
P = snakemake.params
e21 = json.load(open(snakemake.input.e2_1))
metas, fit_s, speed, step_speed = {}, {}, {}, {}
for path in snakemake.input.models:
    b = joblib.load(path)
    metas[(b["dataset"], b["home_gpu"])] = {"profiled_rows": b["profiled_rows"], "train_rows": b["train_rows"]}
    for tag, s in b["fit_seconds"].items():
        fit_s[f"{b['dataset']}|{b['home_gpu']}|{tag}"] = s
    if b["dataset"] == "aic_gemm" and b["home_gpu"] == "a100-sxm":
        cells = transfer.load_cells("aic_gemm", tables={"gemm": snakemake.input.gemm})
        cells = cells[cells.gpu == "h100-sxm"]
        speed = cc.prediction_speed(b["models"]["rf"], cells, "h100-sxm")
        speed["rf_trees"] = int(b["models"]["rf"].estimator_.n_estimators)
    if b["dataset"] == "vidur_step" and b["home_gpu"] == "a100-sxm":
        cells = transfer.load_cells("vidur_step", transfer.step_tps(P.fast, P.full_grid),
                                    tables={"vidur_mlp": snakemake.input.vidur_mlp})
        step_speed = cc.step_prediction_speed(b, cells[cells.gpu == "h100-sxm"].reset_index(drop=True), "h100-sxm")
rows = cc.ledger(e21["transfer"], metas, len(gpu_keys()), constants=constants, cal_log=e21["provenance"]["calibration"])
settings = {"rf_grid": e21["metrics"]["settings"]["rf_grid"], "fast": bool(P.fast),
            "rows_profiled": "rows of the home GPU's table the profile holds (the fit used the 80% train split)",
            "steptime_rows": cc.steptime_rows(constants)}
settings["reading_repeats"] = P.reading_repeats
readings = cc.reading_gpu_seconds(
    Constants.load(DEFAULTS_FILE, *snakemake.input.readings_settled), snakemake.input.engine_constants,
    gemm=pd.read_parquet(snakemake.input.gemm), allreduce=pd.read_parquet(snakemake.input.allreduce),
    fpm=pd.read_parquet(snakemake.input.fpm), repeats=P.reading_repeats)
doc = cc.document(rows, settings, readings)
write_result(snakemake.output.result, id="E2.5", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=rule_provenance(snakemake, exclude=("code", "models"),
                                                                script="workflow/scripts/E2_5_calibration_cost.py"))
timing = {"note": ("wall seconds on this machine; NOT deterministic. fit_seconds: measured by rule rf_fit when "
                   "it built the cached models (results/cache/rf); prediction speeds and steptime's calibration "
                   "time: measured in this run of E2_5, side by side in one process"),
          "fit_seconds": fit_s, "steptime_calibrate_seconds": cc.calibrate_steptime_seconds(),
          "rf_grid": settings["rf_grid"],
          "prediction_speed": speed, "prediction_speed_step": step_speed,
          "speed_target_100x_met": {
              "gemm_batched": bool(speed and speed["speedup_batched"] >= 100),
              "gemm_single_call": bool(speed and speed["speedup_single_call"] >= 100),
              "step_batched": bool(step_speed and step_speed["speedup_batched"] >= 100),
              "step_single_call": bool(step_speed and step_speed["speedup_single_call"] >= 100)}}
write_json(snakemake.output.timing, timing)
with open(snakemake.log[0], "w") as log:
    print("prediction speed, steptime vs the RF's predict (this machine, this run):", file=log)
    print(json.dumps({"gemm": speed, "step": step_speed}, indent=1), file=log)
print(json.dumps({"gemm": speed, "step": step_speed}, indent=1))
cc.plot_ledger(rows, timing, stem(snakemake.output.figure))
