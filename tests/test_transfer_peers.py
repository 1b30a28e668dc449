"""E2.1's fair-ground peers: the ML leave-one-GPU-out model, the reading-corrected forest,
steptime fitted on the home GPU alone, and the full cell footprint the E2.5 ledger counts."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime_lab.experiments import calibration_cost as cc
from steptime_lab.experiments import gemm as GX
from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.ratios import gemm_work, roofline_s

ROOT = Path(__file__).resolve().parents[1]
GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "l40s", "b200")


def _gemm_cells(gpus, eff):
    """Toy GEMM cells whose latency is the datasheet roofline over a per-GPU efficiency."""
    m, n, k = np.meshgrid(2.0 ** np.arange(0, 13, 2), 2.0 ** np.arange(8, 15, 2), 2.0 ** np.arange(8, 15, 2))
    base = pd.DataFrame({"m": m.ravel(), "n": n.ravel(), "k": k.ravel()})
    out = []
    for g in gpus:
        d = base.copy()
        d["gpu"] = g
        f, b = gemm_work(d["m"], d["n"], d["k"])
        d["latency_ms"] = roofline_s(f, b, g) / eff[g] * 1e3
        d["tokens"] = d["m"]
        out.append(d)
    return pd.concat(out, ignore_index=True)


def test_ml_loo_never_sees_the_target_and_transfers_a_datasheet_law():
    """Latency = roofline / 0.7 on every GPU: trained without the target, the model predicts it."""
    cells = _gemm_cells(GPUS, {g: 0.7 for g in GPUS})
    ml = T.MLLeaveOneOut("aic_gemm", cells, fast=True, seed=0)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    pred = ml.predict(tc, "h200-sxm")
    assert "h200-sxm" not in ml.fitted_on("h200-sxm")["gpus"]
    assert ml.fitted_on("h200-sxm")["cells"] == int((cells["gpu"] != "h200-sxm").sum())
    assert np.median(np.abs(pred / tc["latency_ms"] - 1)) < 0.02


def test_ml_features_carry_the_datasheet_and_tolerate_missing_figures():
    cells = _gemm_cells(("b200",), {"b200": 1.0})  # B200 has no base clock in gpus.yaml
    X, roof = T.ml_features("aic_gemm", cells, "b200")
    assert X.shape[0] == len(cells) and np.isnan(X).any(axis=0).sum() == 1
    assert np.all(roof > 0)
    X2, _ = T.ml_features("aic_gemm", cells, "h100-sxm")
    assert not np.allclose(X[:, -8:-1][:, :2], X2[:, -8:-1][:, :2])  # peak and bandwidth differ


def test_reading_scale_takes_the_nearest_readings_ratio():
    # two readings: a compute-bound one 2x slower than predicted, a streaming one as predicted
    work_r = (np.array([1e12, 1e6]), np.array([1e8, 1e9]))
    s = T.reading_scale([1.0, 1.0], [2.0, 1.0], work_r, (np.array([5e11, 2e6]), np.array([2e8, 8e8])))
    assert s.tolist() == [2.0, 1.0]
    assert T.reading_scale([1.0, 1.0], [2.0, 0.5]) == pytest.approx(1.0)  # geometric mean
    assert T.reading_scale([], []) == 1.0


def test_records_carry_peers_and_what_each_was_fitted_on():
    eff = {"a100-sxm": 0.8, "h100-sxm": 0.6, "h200-sxm": 0.6}
    cells = _gemm_cells(tuple(eff), eff)
    bundle = T.fit_home("aic_gemm", cells, "a100-sxm", seed=0)
    ml = T.MLLeaveOneOut("aic_gemm", cells, fast=True, seed=0)
    reads = {"h100-sxm": [("h100-sxm", "gemm", 4096, 4096, 4096)]}
    recs = T.transfer_records("aic_gemm", cells, bundle, ["a100-sxm", "h100-sxm"], n_boot=20, ml=ml,
                              reading_ids=lambda t: reads.get(t, []))
    by = {(r["target_gpu"], r["predictor"]): r for r in recs}
    assert by[("h100-sxm", "ml_loo")]["fitted_on"]["gpus"] == ["a100-sxm", "h200-sxm"]
    assert by[("h100-sxm", "rf_spec_scaled")]["fitted_on"]["gpus"] == ["a100-sxm"]
    ro = by[("h100-sxm", "rf_spec_scaled_readings")]
    assert ro["fitted_on"]["target_readings"] == 1
    # the reading cell is kept out of every row's scoring: all rows score the same cells
    assert len({r["cells"] for r in recs if r["target_gpu"] == "h100-sxm"}) == 1
    assert ro["cells"] == int((cells["gpu"] == "h100-sxm").sum()) - 1
    assert ("a100-sxm", "steptime_home_only") not in by  # no home-only row without a HomeOnly


def test_home_only_fits_on_the_home_table_alone_and_keeps_the_targets_readings():
    """GEMM globals from the home GPU's table only; the target's per-GPU constants from its readings."""
    doc = json.loads((ROOT / "results/calibration/gemm_constants.json").read_text())
    home = _gemm_cells(("a100-sxm",), {"a100-sxm": 0.7})[["gpu", "m", "n", "k", "latency_ms"]]
    ho = T.HomeOnly(("gemm",), "a100-sxm", constants=Constants.default(), gemm_doc=doc, gemm_df=home, seed=0, gemm_n_per_gpu=60, gemm_max_nfev=5)
    c, cal = ho("h100-sxm")
    from steptime.specs import get_gpu

    g = get_gpu("h100-sxm")
    for name, value in ho.gemm_globals().items():
        if name not in GX.FAMILY_GLOBALS:
            assert c.get(name, g) == pytest.approx(value)
    # a home-only fit on a non-Hopper GPU has no Hopper cells: it applies no Hopper droop
    assert ho.gemm_globals()["hopper_clk_droop"] == 0.0 and c.get("clk_droop", g) == 0.0
    assert ho.readings("h100-sxm")["eta_active"] == pytest.approx(c.get("eta_active", g))
    cells = cal.used["home_only@h100-sxm"]
    assert len(cells) == 3 and all(x[0] == "h100-sxm" for x in cells)
    assert ho.fitted_on()["gemm"]["gpus"] == ["a100-sxm"]


def test_fit_footprint_counts_the_shared_fits():
    from steptime_lab.evaluate.held_out import fit_footprint

    doc = json.loads((ROOT / "results/calibration/gemm_constants.json").read_text())
    fp = fit_footprint("aic_gemm", "h100-sxm", gemm_doc=doc)
    others = [g for g in doc["folds"] if g != "h100-sxm"]
    assert fp["gemm"]["gpus"] == sorted(others)
    assert fp["total_cells"] == doc["settings"]["n_per_gpu"] * len(others) + 3 * len(others) + 3
    assert "h100-sxm" not in fp["gpus"]


def test_ledger_counts_every_cell_behind_a_target():
    fo = {"gemm": {"gpus": ["b200", "h200-sxm"], "cells": 4006}, "target_readings": 3, "total_cells": 4009,
          "gpus": ["b200", "h200-sxm"]}
    recs = [{"dataset": "aic_gemm", "home_gpu": "a100-sxm", "target_gpu": "h100-sxm", "predictor": "steptime",
             "mape_all": 0.1, "fitted_on": fo},
            {"dataset": "aic_gemm", "home_gpu": "a100-sxm", "target_gpu": "h100-sxm", "predictor": "rf_verbatim",
             "mape_all": 1.0, "fitted_on": {"gpus": ["a100-sxm"], "cells": 7000, "target_readings": 0}}]
    rows = {r["predictor"]: r for r in cc.ledger(recs, {}, 10, constants=Constants.default())}
    assert rows["steptime"]["cells_behind_one_gpu"] == 4009 and rows["steptime"]["gpus_fitted_on"] == 2
    assert rows["rf"]["cells_behind_one_gpu"] == 7000


def test_held_out_vidur_step_holds_out_the_knee_exponent():
    """light_p comes from the other Vidur GPUs: distorting the target's table leaves it unchanged."""
    from steptime_lab.experiments import light as LX
    from steptime_lab.experiments import step as SX
    from steptime.step import vidur_layer_ops

    rows = []
    for g, scale in (("a100-sxm", 1.1), ("h100-sxm", 1.2), ("a40", 3.0)):
        for t in (1, 8, 64, 512, 2048, 8192):
            for op, v in vidur_layer_ops("llama-2-7b", g, np.array([t])).items():
                # the target (a40): a much blunter knee, its small cells slowed more than its large ones
                lat = float(v[0]) * (scale * (1 + 4 / t) if g == "a40" else scale)
                rows.append(dict(gpu=g, model="llama-2-7b", tp=1, num_tokens=t, op=op, latency_ms=lat))
    cells = LX.tidy_cells(pd.DataFrame(rows))
    gpus = ["a100-sxm", "h100-sxm", "a40"]
    c, info = SX.held_out_constants(cells, "a40", gpus, constants=Constants.default())
    others = LX.fit_kernels(cells, ["a100-sxm", "h100-sxm"])["light_p"]
    with_target = LX.fit_kernels(cells, gpus)["light_p"]
    got = c.get("light_p")
    assert all(got[k] == pytest.approx(v) for k, v in others.items())
    assert any(abs(with_target[k] - v) > 1e-3 for k, v in others.items())


def test_peer_claims_state_wins_and_losses():
    from steptime_lab.experiments.transfer.document import peer_claims

    def rec(t, p, m):
        return {"dataset": "aic_gemm", "home_gpu": "a100-sxm", "target_gpu": t, "predictor": p, "mape_all": m}

    recs = [rec("h100-sxm", "steptime", 0.1), rec("h100-sxm", "ml_loo", 0.05),
            rec("b200", "steptime", 0.1), rec("b200", "ml_loo", 0.2),
            rec("h100-sxm", "steptime_home_only", 0.2), rec("h100-sxm", "rf_spec_scaled", 0.3)]
    cl = {c["claim"].split(":")[1].split("'s")[0].strip() + "|" + c["comparison"].split(" MAPE")[0]: c
          for c in peer_claims(recs)}
    ml = cl["steptime|ml_loo"]
    assert ml["met"] is False and "loses on h100-sxm" in ml["claim"] and ml["value"]["b200"] == 2.0
    assert cl["steptime_home_only|rf_spec_scaled"]["met"] is True


def test_design_rows_name_the_best_alternative_and_flag_a_shipped_loser():
    from steptime_lab.experiments import design

    r = design._row("x", 2, {2: 0.10, 4: 0.09}, metric="m", held_out=True, source="s")
    assert r["best_alternative"] == "4" and r["shipped_is_best"] is False
    assert r["shipped_minus_best"] == pytest.approx(0.01)
    doc = design.document([r], [], {"per_target": {}}, {"per_target": {}}, fast=True)
    assert doc["claims"][0]["met"] is False and "NOT the best" in doc["claims"][0]["claim"]
    nr = design.nested_rows({"per_target": {"h100-sxm": {"warm": 0.1, "cold": 0.2, "shipped_fold": 0.1}}},
                            {"per_target": {}, "settings": {"shipped_weight": 10.0}})
    assert nr[0]["alternatives"] == {"warm": 0.1, "cold": 0.2} and nr[0]["shipped_is_best"]


def test_committed_e2_1_keeps_the_contract_per_target():
    """On the committed E2.1: every steptime row's shared fits exclude the target GPU, and the
    target's own cells that set a constant are at most three (host rows and all-reduce readings
    apart: the serving host's, and the interconnect's with its own budget of three, E1.25)."""
    doc = json.loads((ROOT / "results/E2_1.json").read_text())
    rows = [r for r in doc["transfer"] if r["predictor"] in ("steptime", "steptime_home_only")]
    assert rows
    for r in rows:
        fo = r["fitted_on"]
        fams = fo.get("families") or {k: v for k, v in fo.items() if isinstance(v, dict)}
        for fam in fams.values():
            assert r["target_gpu"] not in fam["gpus"], (r["dataset"], r["target_gpu"], fam)
        assert fo["target_readings"] <= 3
    for key, cal in doc["provenance"]["calibration"].items():
        own = {tuple(c) for cells in cal["target_cells"].values() for c in cells if c[1] not in ("host", "allreduce")}
        assert len(own) <= 3, (key, sorted(own))
        comm = {tuple(c) for cells in cal["target_cells"].values() for c in cells if c[1] == "allreduce"}
        assert len(comm) <= 3, (key, sorted(comm))


# ---------------------------------------------------------------- E2.1's speed-ups return what the direct path returns

def test_truncated_boosting_predicts_what_a_shorter_fit_predicts():
    """Boosting never looks at max_iter before it stops: the first trees of a longer fit are the shorter
    fit, bit for bit, with early stopping off (small table) and on (> 10 000 rows)."""
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB

    from steptime_lab.experiments.transfer.fair_ground import truncated

    rng = np.random.default_rng(0)
    for n in (2000, 12000):
        X = rng.random((n, 4))
        y = np.sin(6 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)
        short = HGB(random_state=3, max_iter=25, max_leaf_nodes=15).fit(X, y)
        long = HGB(random_state=3, max_iter=70, max_leaf_nodes=15).fit(X, y)
        Xt = rng.random((300, 4))
        assert np.array_equal(truncated(long, 25).predict(Xt), short.predict(Xt))
        assert not np.array_equal(long.predict(Xt), short.predict(Xt))  # the cut matters
        assert truncated(long, 25).n_iter_ == short.n_iter_
        assert long.n_iter_ == len(long._predictors)  # the long model is left whole
    with pytest.raises(ValueError, match="n_iter"):
        truncated(long, 0)
    with pytest.raises(ValueError, match="fitted"):
        truncated(HGB(), 5)


def test_prefix_twins_group_settings_that_differ_only_in_iterations():
    from steptime_lab.experiments.transfer.fair_ground import ML_GRID, prefix_twins

    grid = ({"max_iter": 300, "learning_rate": 0.1}, {"max_iter": 800, "learning_rate": 0.1},
            {"max_iter": 300, "learning_rate": 0.05})
    assert prefix_twins(grid) == {1: [0, 1], 2: [2]}
    assert prefix_twins(ML_GRID[True]) == {0: [0], 1: [1]}
    assert all(len(v) == 2 for v in prefix_twins(ML_GRID[False]).values())


def test_tuning_with_shared_prefix_fits_scores_every_setting_as_its_own_fit(monkeypatch):
    """ml_loo's fair best: the inner-CV MAPE of every setting, each fitted on its own, equals what
    _tune reports with the twins' shared fits (bit for bit), and so does the chosen setting."""
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB

    from steptime_lab.experiments.transfer import fair_ground as FG

    grid = tuple({"max_iter": it, "learning_rate": lr, "max_leaf_nodes": 7} for it in (8, 20) for lr in (0.1, 0.3))
    monkeypatch.setitem(FG.ML_GRID, False, grid)
    eff = {"a100-sxm": 0.8, "h100-sxm": 0.6, "h200-sxm": 0.5}
    cells = _gemm_cells(tuple(eff), eff)
    ml = FG.MLLeaveOneOut("aic_gemm", cells, fast=False, seed=0, tuned=True)
    for target in eff:
        gpus = sorted(g for g in eff if g != target)
        X, y, _, grp = ml._train(gpus)
        want = {}
        for j, s in enumerate(grid):
            errs = []
            for held in np.unique(grp):
                te = grp == held
                r = np.abs(np.exp(HGB(random_state=0, **s).fit(X[~te], y[~te]).predict(X[te]) - y[te]) - 1.0)
                errs.append(float(np.mean(r)))
            want[str(j)] = round(float(np.mean(errs)), 5)
        info = ml.fitted_on(target)
        assert info["tuning"]["inner_cv_mape"] == want
        best = min(range(len(grid)), key=lambda j: want[str(j)])
        assert info["settings"]["max_iter"] == grid[best]["max_iter"]
    assert ml._inner == {}  # every shared inner fit was used twice, then dropped


def test_records_memo_returns_what_the_direct_path_returns():
    """The two homes of one dataset share each target's home-independent work through `memo`: the
    records are the same as without it."""
    eff = {"a100-sxm": 0.8, "h100-sxm": 0.6, "h200-sxm": 0.6}
    cells = _gemm_cells(tuple(eff), eff)
    reads = {"h200-sxm": [("h200-sxm", "gemm", 4096, 4096, 4096)]}
    from steptime.calibration import Calibration

    c0, held = Constants.default(), {}
    out = {}
    for use_memo in (False, True):
        memo = {} if use_memo else None
        ml = T.MLLeaveOneOut("aic_gemm", cells, fast=True, seed=0)
        recs = []
        for home in ("a100-sxm", "h100-sxm"):
            bundle = T.fit_home("aic_gemm", cells, home, seed=0)
            recs += T.transfer_records("aic_gemm", cells, bundle, list(eff), n_boot=20, ml=ml, memo=memo,
                                       constants_for=lambda t: held.setdefault(t, (c0, Calibration.from_constants(c0))),
                                       reading_ids=lambda t: reads.get(t, []), steptime_fit=lambda t: {"gpus": [t]})
        out[use_memo] = recs
        if use_memo:  # one entry per (target, cells): the home's test split and the full table of each GPU
            assert sum(len(v) for k, v in memo.items() if k != "draws") == 5
            assert memo["draws"]  # the bootstrap's resample counts, kept for the next same-sized scoring
    assert json.dumps(out[True], sort_keys=True) == json.dumps(out[False], sort_keys=True)


def test_home_only_shared_fits_the_homes_gemm_globals_once():
    doc = json.loads((ROOT / "results/calibration/gemm_constants.json").read_text())
    home = _gemm_cells(("a100-sxm",), {"a100-sxm": 0.7})[["gpu", "m", "n", "k", "latency_ms"]]
    kw = dict(constants=Constants.default(), gemm_doc=doc, gemm_df=home, seed=0, gemm_n_per_gpu=60, gemm_max_nfev=5)
    alone = T.HomeOnly(("gemm",), "a100-sxm", **kw)
    shared = {}
    first = T.HomeOnly(("gemm",), "a100-sxm", shared=shared, **kw)
    second = T.HomeOnly(("gemm", "attention"), "a100-sxm", shared=shared, **kw)
    assert first.gemm_globals() == alone.gemm_globals()
    assert second.gemm_globals() is first.gemm_globals()  # fitted once
    assert second.readings("h100-sxm") == alone.readings("h100-sxm")
    c1, c0 = first("h100-sxm")[0], alone("h100-sxm")[0]
    from steptime.specs import get_gpu

    g = get_gpu("h100-sxm")
    assert all(c1.get(n, g) == c0.get(n, g) for n in alone.gemm_globals() if n not in GX.FAMILY_GLOBALS)
    other = T.HomeOnly(("gemm",), "a100-sxm", shared=shared, **dict(kw, seed=1))
    assert other._gemm_key() != first._gemm_key()  # another seed never shares


def test_bootstrap_counts_kept_in_draws_give_the_same_intervals(monkeypatch):
    """The resample counts depend on (cells, n_boot, seed) alone: kept (in a small unsigned type) and
    reused, they give the very intervals a fresh draw gives, bit for bit, and the cache stays in budget."""
    from steptime_lab.experiments.transfer import scoring as S

    rng = np.random.default_rng(1)
    draws = {}
    for n in (7, 500, 4001, 500):
        errs = {"a": rng.random(n), "b": rng.random(n) * 2}
        want = S._ci_paired(errs, 300, 5)
        assert S._ci_paired(errs, 300, 5, draws=draws) == want
        assert S._ci_paired(errs, 300, 5, draws=draws) == want  # from the cache
    assert set(draws) == {(7, 300, 5), (500, 300, 5), (4001, 300, 5)}
    assert all(a.dtype == np.uint8 for v in draws.values() for a in v)
    monkeypatch.setattr(S, "DRAWS_BUDGET_BYTES", 1)
    S._ci_paired({"a": rng.random(9)}, 300, 5, draws=draws)
    assert list(draws) == [(9, 300, 5)]  # over budget: only the newest kept
    meas = rng.random(60) + 0.5
    preds = {"x": meas * 1.1, "y": meas * 0.8}
    tokens = rng.integers(1, 4096, 60)
    assert S.score_many(preds, meas, tokens, n_boot=200, draws={}) == S.score_many(preds, meas, tokens, n_boot=200)
