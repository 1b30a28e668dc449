"""E2.5 ledger: rows, coverage and accuracy per predictor from E2.1-style records."""
from steptime_lab.experiments import calibration_cost as cc
from steptime.calibration import Constants


def _rec(target, pred, mape):
    return {"dataset": "aic_gemm", "home_gpu": "a100-sxm", "target_gpu": target, "predictor": pred, "mape_all": mape}


def test_ledger_rows():
    recs = [_rec("a100-sxm", "rf_home", 0.05), _rec("a100-sxm", "steptime", 0.2),
            _rec("h100-sxm", "rf_verbatim", 1.0), _rec("h100-sxm", "rf_spec_scaled", 0.3),
            _rec("h100-sxm", "steptime", 0.15)]
    cal_log = {"aic_gemm|h100-sxm": {"target_cells": {"eta_active": [["h100-sxm", "gemm", "4096", "4096", "4096"]],
                                                      "host_a_ms": [["h100-sxm", "host", "x"]]}}}
    rows = cc.ledger(recs, {("aic_gemm", "a100-sxm"): {"profiled_rows": 9240, "train_rows": 7400}}, 10,
                     constants=Constants.default(), cal_log=cal_log)
    by = {r["predictor"]: r for r in rows}
    assert by["rf"]["gpus_covered"] == 1 and by["rf"]["rows_profiled_per_gpu"] == 9240
    assert by["rf"]["home_mape"] == 0.05 and by["rf"]["unseen_mape_mean"] == 1.0
    assert by["rf_spec_scaled"]["unseen_mape_mean"] == 0.3 and by["rf_spec_scaled"]["gpus_covered"] == 10
    # only the target's own GEMM cells count for the GEMM dataset (the host reading is another family's)
    assert by["steptime"]["gpus_covered"] == 10 and by["steptime"]["rows_profiled_per_gpu"] == 1
    assert by["steptime"]["train_rows"] == 0


def test_steptime_rows_counts_deploy_cells():
    r = cc.steptime_rows(Constants.default())
    assert r["max_deploy_cells_one_gpu"] == max(r["deploy_cells_per_gpu"].values(), default=0)


def test_deploy_cells_count_every_gpu_cell_but_host_rows():
    from steptime_lab.experiments.calibration_cost import deploy_cells_used

    gemm = [["h100-sxm", "gemm", "4096", "4096", "4096"], ["h100-sxm", "gemm", "1", "10240", "10240"],
            ["h100-sxm", "gemm", "1", "32", "32"]]
    log = {"aic_attention|h100-sxm": {"target_cells": {"attention_fold@h100-sxm": gemm,
                                                       "gpu.h100-sxm.eta_active": gemm[:1]}},
           "vidur_step|a100-sxm": {"target_cells": {"gemm_fold@a100-sxm": [["a100-sxm", "gemm", "1", "32", "32"]],
                                                    "gpu.a100-sxm.host_a_ms": [["a100-sxm", "host", "x", "1", "8"]]}}}
    used = deploy_cells_used(log)
    assert used == {"aic_attention": 3, "vidur_step": 1}
