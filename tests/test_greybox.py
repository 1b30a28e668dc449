"""The grey box (steptime_residual): per-term bounded corrections fitted on the other GPUs only."""
import math

import numpy as np
import pytest

from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.transfer import greybox as G

from greybox_cells import default_constants as _defaults, gemm_cells as _cells  # tests/greybox_cells.py

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "l40s")


def _mape(p, m):
    return float(np.mean(np.abs(p - m) / m))


def test_greybox_learns_a_shared_shape_bias_and_keeps_the_terms_summing():
    # physics is 30% slow at m = 1 and right at m = 4096, on every GPU
    law = lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0  # noqa: E731
    cells = _cells(GPUS, law)
    gb = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    r = gb.predict_terms(tc, "h200-sxm")
    meas = tc["latency_ms"].to_numpy()
    assert _mape(r["total"], meas) < 0.25 * _mape(r["physics"]["gemm"], meas)
    assert np.allclose(sum(r["terms"].values()), r["total"])
    assert np.allclose(r["terms"]["gemm"], r["physics"]["gemm"] * r["correction"]["gemm"])
    assert "h200-sxm" not in gb.fitted_on("h200-sxm")["gpus"]


def test_greybox_never_reads_the_target_and_stays_bounded():
    law = lambda m, g: np.full(len(m), 5.0 if g == "h200-sxm" else 1.0)  # noqa: E731
    cells = _cells(GPUS, law)
    gb = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    r = gb.predict_terms(tc, "h200-sxm")
    # the target's 5x is nowhere in the training GPUs: the correction stays near 1, within [1/2, 2]
    assert np.all(r["correction"]["gemm"] <= 2.0) and np.all(r["correction"]["gemm"] >= 0.5)
    assert np.allclose(r["correction"]["gemm"], 1.0, atol=0.05)
    # changing the target's measurements changes nothing
    c2 = cells.copy()
    c2.loc[c2["gpu"] == "h200-sxm", "latency_ms"] *= 3.0
    r2 = T.GreyBox("aic_gemm", c2, _defaults).predict_terms(tc, "h200-sxm")
    assert np.array_equal(r["total"], r2["total"])


def _term_data(F, b, m, reads=None):
    """fit_term's per-GPU record (no readings unless given)."""
    n = len(b)
    w = (np.ones(n), np.ones(n))
    r = reads or {"read_F": np.zeros((0, F.shape[1])), "read_base": np.zeros(0), "read_meas": np.zeros(0),
                  "read_work": (np.zeros(0), np.zeros(0))}
    return {"F": F, "base": b, "meas": m, "work": w, **r}


def test_fit_term_falls_back_to_physics_when_the_correction_does_not_carry():
    rng = np.random.default_rng(0)
    data = {}
    for i, g in enumerate(("a100-sxm", "h100-sxm", "b200", "l40s")):
        # each GPU its own unrelated offset, no feature tells them apart: nothing generalises across GPUs
        F = rng.normal(size=(300, 4))
        b = np.ones(300)
        data[g] = _term_data(F, b, b * (1.6 if i % 2 else 0.6))
    model, cv = G.fit_term(data, "h200-sxm", fast=True, seed=0)
    assert "none" in cv and model.est is None and model.name == "none"
    assert np.allclose(model.log_correction(rng.normal(size=(5, 4))), 0.0)


def test_fit_term_chooses_a_correction_that_carries_and_bounds_it():
    rng = np.random.default_rng(2)
    data = {}
    for g in ("a100-sxm", "h100-sxm", "b200", "l40s"):
        F = rng.uniform(-1, 1, size=(400, 2))
        b = np.ones(400)
        data[g] = _term_data(F, b, b * np.exp(0.4 * F[:, 0]))  # the same shape law on every GPU
    model, cv = G.fit_term(data, "h200-sxm", fast=True, seed=0)
    assert model.est is not None and cv[model.name] < cv["none"]
    grid = np.column_stack([np.linspace(-1, 1, 9), np.zeros(9)])
    assert np.allclose(model.log_correction(grid), 0.4 * grid[:, 0], atol=0.1)
    far = np.array([[50.0, 0.0], [-50.0, 0.0]])  # far outside: still within [1/2, 2]
    assert np.all(np.abs(model.log_correction(far)) <= G.BOUND + 1e-12)


def test_anchor_pins_the_nearest_reading_and_stays_bounded():
    work_cells = (np.array([1e6, 1e12]), np.array([1e9, 1e9]))
    work_read = (np.array([1e6, 1e12]), np.array([1e9, 1e9]))
    lc = np.array([0.3, -0.2])
    # the readings say the physics is exact there: the correction is undone at each reading
    out = G.anchor(lc, np.ones(2), np.ones(2), np.ones(2), lc, work_cells, work_read)
    assert np.allclose(out, 0.0)
    # a reading 3x off moves its neighbours, but never past the bound
    out = G.anchor(np.zeros(2), np.ones(2), np.array([3.0, 1.0]), np.ones(2), np.zeros(2), work_cells, work_read)
    assert np.isclose(out[0], G.BOUND) and np.isclose(out[1], 0.0)
    # no readings: unchanged
    assert np.array_equal(G.anchor(lc, np.ones(2), np.zeros(0), np.zeros(0), np.zeros(0), work_cells,
                                   (np.zeros(0), np.zeros(0))), lc)


def test_ml_loo_tuned_picks_its_setting_on_the_training_gpus_only():
    cells = _cells(GPUS, lambda m, g: np.ones(len(m)))
    ml = T.MLLeaveOneOut("aic_gemm", cells, fast=True, seed=0, tuned=True)
    info = ml.fitted_on("b200")
    assert "b200" not in info["gpus"]
    assert info["tuning"] is not None and len(info["tuning"]["inner_cv_mape"]) == len(T.fair_ground.ML_GRID[True])
    assert info["settings"]["rows_per_gpu_cap"] == T.fair_ground.ML_TUNED_ROWS_PER_GPU[True]


def test_one_training_gpu_gives_no_correction():
    rng = np.random.default_rng(1)
    data = {"a100-sxm": _term_data(rng.normal(size=(50, 3)), np.ones(50), np.full(50, 1.3))}
    model, cv = G.fit_term(data, "h100-sxm")
    assert model.est is None and "note" in cv


def test_shared_greybox_sees_the_shape_only_and_gives_each_gpu_nearly_the_same_factor():
    # the residual depends on the shape only; a per-GPU fit noise is what the shared box must not add
    law = lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0  # noqa: E731
    cells = _cells(GPUS, law)
    shared = T.GreyBox("aic_gemm", cells, _defaults, shared=True)
    full = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "a100-sxm"].drop(columns="gpu").reset_index(drop=True)
    assert shared._features(tc, "b200")["gemm"].shape[1] == G.SHAPE_COLUMNS["aic_gemm"] == 3
    assert full._features(tc, "b200")["gemm"].shape[1] > 3
    f = {g: shared.predict_terms(tc, g)["correction"]["gemm"] for g in ("h100-sxm", "b200", "l40s")}
    spread = max(np.max(np.abs(np.log(f[a] / f[b]))) for a in f for b in f)
    assert spread < 0.05
    assert shared.fitted_on("b200")["shared"] and "b200" not in shared.fitted_on("b200")["gpus"]
    with pytest.raises(ValueError, match="shared"):
        T.GreyBox("vidur_step", cells, _defaults, shared=True)


def test_inner_fits_shared_across_targets_give_the_same_models_and_a_cache_is_adopted_only_on_its_own_data():
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0) * (1.1 if g == "l40s" else 1.0)  # noqa: E731
    cells = _cells(GPUS, law)
    memo = T.GreyBox("aic_gemm", cells, _defaults)
    doc = memo.fit_all()
    assert sorted(doc["fits"]) == sorted(GPUS) and memo._fits["gemm"]  # the unweighted inner fits were shared
    tc = cells[cells["gpu"] == "b200"].reset_index(drop=True)
    for g in ("h100-sxm", "b200"):  # each target fitted alone (no memo) gives the same setting and prediction
        alone = T.GreyBox("aic_gemm", cells, _defaults)
        gpus = sorted(x for x in GPUS if x != g)
        model, cv = G.fit_term({x: alone._training(x)["gemm"] for x in gpus}, g, shrinks=G.SHRINKS,
                                 anchors=G.ANCHORS, feature_sets=G.FEATURE_SETS)  # no memo: every inner fold afresh
        assert cv == doc["fits"][g][1]["nested_cv_mape"]["gemm"]
        F = alone._features(tc, g)["gemm"]
        assert np.array_equal(model.log_correction(F), doc["fits"][g][0]["gemm"].log_correction(F))
    # adopted by a box on the same data: the same predictions, no refit
    other = T.GreyBox("aic_gemm", cells, _defaults).adopt(doc)
    assert np.array_equal(other.predict(tc, "b200"), memo.predict(tc, "b200"))
    # refused on other data or other settings, with the reason named
    c2 = cells.copy()
    c2.loc[c2["gpu"] == "l40s", "latency_ms"] *= 1.01
    with pytest.raises(ValueError, match="other data"):
        T.GreyBox("aic_gemm", c2, _defaults).adopt(doc)
    with pytest.raises(ValueError, match="settings"):
        T.GreyBox("aic_gemm", cells, _defaults, seed=1).adopt(doc)


def test_a_design_built_again_is_fitted_once_and_the_fits_do_not_move(monkeypatch):
    # fit_term's `designs`: a fit keyed by its design's content (X, y, w, sizes, seed) is made once; a design that
    # differs in any of them is fitted afresh; without the memo every design is fitted, the same trees
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0) * (1.1 if g == "l40s" else 1.0)  # noqa: E731
    cells = _cells(GPUS, law)
    calls = []
    orig = G._fit_gbt

    def counting(X, y, w, size, seed):
        calls.append(G._design_key(X, y, w, size, seed))
        return orig(X, y, w, size, seed)

    monkeypatch.setattr(G, "_fit_gbt", counting)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    gpus = sorted(x for x in GPUS if x != "b200")
    data = {x: box._training(x)["gemm"] for x in gpus}
    designs = {}
    m1, cv1 = G.fit_term(data, "b200", designs=designs, feature_sets=G.FEATURE_SETS)
    n1 = len(calls)
    assert m1.est is not None and n1 == len(designs) == len(set(calls)) > len(gpus)  # each design once
    m2, cv2 = G.fit_term(data, "b200", designs=designs, feature_sets=G.FEATURE_SETS)  # the same designs again
    assert len(calls) == n1 and cv2 == cv1 and m2.est is m1.est and m2.name == m1.name  # nothing refitted
    calls.clear()
    m3, cv3 = G.fit_term(data, "b200", feature_sets=G.FEATURE_SETS)  # no memo: every design afresh
    assert len(calls) == n1 and cv3 == cv1 and m3.est is not m1.est
    tc = cells[cells["gpu"] == "b200"].reset_index(drop=True)
    F = box._features(tc, "b200")["gemm"]
    assert np.array_equal(m3.log_correction(F), m1.log_correction(F))
    # one GPU's measurements moved: the designs that hold it are fitted again, the others come from the memo
    d2 = dict(data, **{gpus[0]: dict(data[gpus[0]], meas=data[gpus[0]]["meas"] * 1.01)})
    calls.clear()
    before = set(designs)
    G.fit_term(d2, "b200", designs=designs, feature_sets=G.FEATURE_SETS)
    assert 0 < len(calls) < n1 and not set(calls) & before
    # the key reads every input of the fit
    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(40, 3)), rng.normal(size=40), np.ones(40)
    k = G._design_key(X, y, w, G.SIZES[True], 0)
    assert k == G._design_key(X.copy(), y.copy(), w.copy(), dict(G.SIZES[True]), 0)
    for other in (G._design_key(X[:, :2], y, w, G.SIZES[True], 0), G._design_key(X, y + 1e-12, w, G.SIZES[True], 0),
                  G._design_key(X, y, w * 2, G.SIZES[True], 0), G._design_key(X, y, w, G.SIZES[False], 0),
                  G._design_key(X, y, w, G.SIZES[True], 1), G._design_key(X.astype(np.float32), y, w, G.SIZES[True], 0),
                  G._design_key(X.reshape(20, 6), y, w, G.SIZES[True], 0)):
        assert other != k


def test_ml_loo_full_tuning_shares_each_inner_fit_between_its_two_targets_and_changes_nothing(monkeypatch):
    # a small grid keeps it quick; the sharing is what is tested: the same tuning tables and predictions
    monkeypatch.setitem(T.fair_ground.ML_GRID, False, ({"max_iter": 20, "max_leaf_nodes": 7},
                                                       {"max_iter": 40, "max_leaf_nodes": 15}))
    law = lambda m, g: 1.0 + (0.2 if g in ("l40s", "b200") else 0.0) * np.log2(m) / 12.0  # noqa: E731
    cells = _cells(GPUS[:4], law)
    shared = T.MLLeaveOneOut("aic_gemm", cells, fast=False, seed=0, tuned=True)
    tc = cells[cells["gpu"] == "a100-sxm"].reset_index(drop=True)
    shared.fit(GPUS[0])
    assert len(shared._inner) == 2 * 3  # 2 settings x 3 inner folds, each waiting for its second target
    for g in GPUS[:4]:
        alone = T.MLLeaveOneOut("aic_gemm", cells, fast=False, seed=0, tuned=True)  # nothing to share with
        assert shared.fitted_on(g)["tuning"] == alone.fitted_on(g)["tuning"]
        assert np.array_equal(shared.predict(tc, g), alone.predict(tc, g))
    assert not shared._inner  # every shared inner fit was used twice, then let go


def test_shrunk_settings_are_candidates_and_scale_the_log_correction():
    assert G._parse(G._name(1.0, True, 0.5)) == (1.0, True, 0.5)
    assert G._parse(G._name(math.inf, False)) == (math.inf, False, 1.0)
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0)  # noqa: E731
    cells = _cells(GPUS, law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    gpus = sorted(x for x in GPUS if x != "b200")
    data = {x: box._training(x)["gemm"] for x in gpus}
    model, cv = G.fit_term(data, "b200", shrinks=(1.0, 0.5))
    assert any("*0.5" in k for k in cv) and "none" in cv
    full = G._TermModel(model.est, False, "h=inf", 1.0)
    half = G._TermModel(model.est, False, "h=inf*0.5", 0.5)
    F = box._features(cells[cells["gpu"] == "b200"].reset_index(drop=True), "b200")["gemm"]
    raw = model.est.predict(F)
    ok = np.abs(raw) < G.BOUND
    assert np.allclose(half.log_correction(F)[ok], 0.5 * full.log_correction(F)[ok])


def test_half_strength_anchor_is_a_candidate_named_and_applied_at_half():
    # names: the full anchor keeps its old name; half strength is '+readings*0.5'
    assert G._name(1.0, True) == "h=1+readings" and G._name(math.inf, 1.0, 0.5) == "h=inf*0.5+readings"
    assert G._name(1.0, 0.5) == "h=1+readings*0.5"
    assert G._parse("h=1*0.5+readings*0.5") == (1.0, 0.5, 0.5)
    assert G._parse("h=inf+readings") == (math.inf, True, 1.0) and G._parse("h=2") == (2.0, False, 1.0)
    # a reading 3x off moves its neighbour by half its log ratio at strength 1/2 (still bounded)
    work_cells = (np.array([1e6, 1e12]), np.array([1e9, 1e9]))
    out = G.anchor(np.zeros(2), np.ones(2), np.array([3.0, 1.0]), np.ones(2), np.zeros(2), work_cells, work_cells, 0.5)
    assert np.isclose(out[0], 0.5 * math.log(3.0)) and np.isclose(out[1], 0.0)
    # the nested CV scores every anchor strength it is given, beside the unanchored settings
    rng = np.random.default_rng(3)
    data = {}
    for g in ("a100-sxm", "h100-sxm", "b200", "l40s"):
        F = rng.uniform(-1, 1, size=(300, 2))
        b = np.ones(300)
        rF = rng.uniform(-1, 1, size=(3, 2))
        reads = {"read_F": rF, "read_base": np.ones(3), "read_meas": np.exp(0.4 * rF[:, 0]),
                 "read_work": (np.full(3, 1e9), np.full(3, 1e6))}
        data[g] = _term_data(F, b, b * np.exp(0.4 * F[:, 0]), reads)
    model, cv = G.fit_term(data, "h200-sxm", anchors=(1.0, 0.5))
    assert {"h=inf", "h=inf+readings", "h=inf+readings*0.5", "none"} <= set(cv)
    _, cv1 = G.fit_term(data, "h200-sxm")  # the default: the full anchor only
    assert not any(k.endswith("*0.5") and "+readings" in k for k in cv1)
    assert model.anchor_strength == G._parse(model.name)[1]
    # the grey box records the strengths it tries; a cache fitted with other ones is refused
    cells = _cells(GPUS, lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    assert box.settings()["anchors"] == list(G.ANCHORS) == [1.0, 0.5]
    doc = T.GreyBox("aic_gemm", cells, _defaults, anchors=(1.0,)).fit_all(["b200"])
    with pytest.raises(ValueError, match="settings"):
        box.adopt(doc)


def test_shape_feature_set_drops_the_datasheet_columns_and_is_a_cv_candidate():
    """'shape': the trees see the term's features less the trailing datasheet columns (the same correction on
    every GPU at one normalised shape); the nested CV weighs it beside 'all', its name says so, a model fitted
    on it predicts from the full feature matrix, and the cache settings record the feature sets."""
    law = lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0  # noqa: E731  (one shape law on every GPU)
    cells = _cells(GPUS, law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    assert box.settings()["feature_sets"] == list(G.FEATURE_SETS) == ["all", "shape"]
    assert T.GreyBox("aic_gemm", cells, _defaults, shared=True).settings()["feature_sets"] == ["all"]
    models, info = box.fit("b200")
    cv = info["nested_cv_mape"]["gemm"]
    assert any(k.startswith("shape:") for k in cv) and any(k.startswith("h=") for k in cv)
    name = "shape:h=1*0.5+readings*0.5"
    assert G._parse(name) == (1.0, 0.5, 0.5) and G._feature_set(name) == "shape" and G._feature_set("h=1") == "all"
    F = box._features(cells[cells["gpu"] == "b200"].reset_index(drop=True), "b200")["gemm"]
    assert G._cols("shape", F.shape[1]) == F.shape[1] - G.N_DATASHEET and G._cols("all", F.shape[1]) is None
    m = models["gemm"]
    assert m.log_correction(F).shape == (len(F),)
    if m.name.startswith("shape:"):
        assert m.cols == F.shape[1] - G.N_DATASHEET and m.est.n_features_in_ == m.cols
    with pytest.raises(ValueError, match="feature set"):
        G._cols("nope", F.shape[1])


def test_log_efficiency_and_term_rooflines():
    from steptime_lab.experiments.ratios import roofline_s

    assert np.allclose(G.log_efficiency([2.0, 3.0, 0.0, 1.0], [1.0, 3.0, 1.0, 0.0]), [math.log(2.0), 0.0, 0.0, 0.0])
    cells = _cells(("h100-sxm",), lambda m, g: np.ones(len(m)))
    r = G.term_rooflines("aic_gemm", cells, "h100-sxm")
    m, n, k = (cells[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    assert set(r) == {"gemm"}
    assert np.allclose(r["gemm"], roofline_s(2 * m * n * k, 2 * (m * k + k * n + m * n), "h100-sxm") * 1e3)


def test_term_references_try_the_roofline_on_the_steps_gemm_operators_only():
    both = ("physics", "roofline")
    assert G.references_for("vidur_step") == ("physics", "roofline", "level")
    assert G.references_for("aic_gemm") == ("physics",)
    assert G.term_references("vidur_step", "mlp_up_proj", both) == both
    assert G.term_references("vidur_step", "input_layernorm", both) == ("physics",)
    assert G.term_references("aic_gemm", "gemm", both) == both  # a table REFERENCE_TERMS does not name: every term
    # the level-free labels are a residual's shape (no roofline): tried on every term, the light operators too
    three = ("physics", "roofline", "level")
    assert G.term_references("vidur_step", "input_layernorm", three) == ("physics", "level")
    assert G.term_references("vidur_step", "mlp_up_proj", three) == three


def test_gpu_levels_are_each_gpus_mean_clipped_residual_per_kernel():
    b = np.ones(6)
    m = np.exp(np.array([0.1, 0.3, -0.2, -0.4, 2.0, 2.0]))  # the last two clip to +ln 2
    d = {"base": b, "meas": m, "work": (np.ones(6), np.ones(6), np.array(["p", "p", "d", "d", "x", "x"]))}
    assert np.allclose(G.gpu_levels(d), [0.2, 0.2, -0.3, -0.3, math.log(2), math.log(2)])
    d1 = {"base": b, "meas": m, "work": (np.ones(6), np.ones(6))}  # no kernel label: one level
    assert np.allclose(G.gpu_levels(d1), np.mean(np.clip(np.log(m), -math.log(2), math.log(2))))
    with pytest.raises(ValueError, match="kernel labels"):
        G.gpu_levels({"base": b, "meas": m, "work": (np.ones(6), np.ones(6), np.array(["p"]))})


def test_level_reference_learns_the_shape_and_leaves_each_gpus_level_to_the_physics():
    # a shared shape (0.3 x the feature) on top of a GPU-level offset that no feature carries; the held-out GPU's
    # physics is at its level (offset 0): the residual's trees hand it the training GPUs' mean level, the
    # level-free trees only the shape
    rng = np.random.default_rng(5)
    data, lev = {}, {"a100-sxm": 0.25, "h100-sxm": -0.15, "b200": 0.3, "l40s": -0.1, "h200-sxm": 0.0}
    for g, off in lev.items():
        F = rng.uniform(-1, 1, size=(400, 2))
        b = np.ones(400)
        data[g] = _term_data(F, b, b * np.exp(0.3 * F[:, 0] + off))
    target = data.pop("h200-sxm")
    # the design's labels are the clipped residual less the GPU's own level
    X, y, w = G._design(data, sorted(data), "h200-sxm", math.inf, None, 0, None, "level")
    for i, g in enumerate(sorted(data)):
        yi = y[i * 400:(i + 1) * 400]
        assert abs(yi.mean()) < 1e-9 and np.allclose(yi, 0.3 * data[g]["F"][:, 0] - (0.3 * data[g]["F"][:, 0]).mean())
    phys, _ = G.fit_term(data, "h200-sxm", references=("physics",))
    lvl, cv = G.fit_term(data, "h200-sxm", references=("physics", "level"))
    assert lvl.reference == "level" and lvl.name.startswith("lvl:") and G._reference(lvl.name) == "level"
    assert cv[lvl.name] < min(v for k, v in cv.items() if not k.startswith("lvl:"))
    m_lvl = _mape(target["base"] * np.exp(lvl.log_correction(target["F"])), target["meas"])
    m_phys = _mape(target["base"] * np.exp(phys.log_correction(target["F"])), target["meas"])
    assert m_lvl < 0.03 < m_phys
    with pytest.raises(ValueError, match="unknown reference"):
        G._design(data, sorted(data), "h200-sxm", math.inf, None, 0, None, "bogus")


def test_roofline_reference_carries_an_efficiency_that_the_residual_does_not():
    # every GPU runs the term at the same efficiency against its roofline (measured = roofline x e^0.3), but
    # the physics is off by a GPU-level offset (its own efficiency): the residual does not carry, the efficiency does
    rng = np.random.default_rng(3)
    data, eff = {}, {"a100-sxm": 0.0, "h100-sxm": 0.2, "b200": -0.1, "l40s": 0.1, "h200-sxm": 0.25}
    for g, e in eff.items():
        F = rng.uniform(-1, 1, size=(400, 2))
        roof = np.exp(rng.uniform(-2, 2, 400))
        b, meas = roof * np.exp(e), roof * np.exp(0.3)
        data[g] = dict(_term_data(F, b, meas), off=G.log_efficiency(b, roof))
    target = data.pop("h200-sxm")
    phys, _ = G.fit_term(data, "h200-sxm", references=("physics",))
    both, cv = G.fit_term(data, "h200-sxm", references=("physics", "roofline"))
    assert both.reference == "roofline" and both.name.startswith("roof:") and G._reference(both.name) == "roofline"
    assert cv[both.name] < min(v for k, v in cv.items() if not k.startswith("roof:"))

    def mape(model):
        lc = model.log_correction(target["F"], target["off"])
        return _mape(target["base"] * np.exp(lc), target["meas"])

    assert mape(both) < 0.02 < mape(phys)
    # the roofline reference needs the cells' log(steptime / roofline); an unknown reference is refused
    with pytest.raises(ValueError, match="log\\(steptime / roofline\\)"):
        both.log_correction(target["F"])
    with pytest.raises(ValueError, match="unknown reference"):
        G._TermModel(reference="bogus")


def test_setting_names_carry_the_reference_and_feature_set():
    name = G._name(1.0, 0.5, 0.5, "shape", "roofline")
    assert name == "roof:shape:h=1*0.5+readings*0.5"
    assert G._parse(name) == (1.0, 0.5, 0.5) and G._feature_set(name) == "shape" and G._reference(name) == "roofline"
    assert G._feature_set("roof:h=inf") == "all" and G._reference("shape:h=inf") == "physics"
    assert G._name(math.inf, 0.0, 1.0, "all", "roofline") == "roof:h=inf"
    name = G._name(1.0, 0.5, 1.0, "shape", "level")
    assert name == "lvl:shape:h=1+readings*0.5"
    assert G._parse(name) == (1.0, 0.5, 1.0) and G._feature_set(name) == "shape" and G._reference(name) == "level"


def test_greybox_refuses_an_unknown_reference():
    cells = _cells(GPUS, lambda m, g: np.ones(len(m)))
    with pytest.raises(ValueError, match="unknown grey-box references"):
        T.GreyBox("aic_gemm", cells, _defaults, references=("efficiency",))
    assert T.GreyBox("aic_gemm", cells, _defaults).settings()["references"] == ["physics"]


def test_anchor_reads_only_readings_of_the_cells_own_kernel():
    # two readings: a decode one right beside the cell in (FLOPs, bytes), a prefill one far away
    work_read = (np.array([1e9, 1e15]), np.array([1e8, 1e10]), np.array(["decode", "prefill"]))
    meas_read = np.array([2.0, 0.5])  # decode reading 2x slow, prefill reading 2x fast
    cells = (np.array([1e9, 1e9]), np.array([1e8, 1e8]), np.array(["prefill", "decode"]))
    out = G.anchor(np.zeros(2), np.ones(2), meas_read, np.ones(2), np.zeros(2), cells, work_read)
    # the prefill cell reads the prefill reading although the decode one is nearer; the decode cell its own
    assert np.isclose(out[0], math.log(0.5)) and np.isclose(out[1], math.log(2.0))
    # without labels: the nearest reading, whatever its kernel (both cells read the decode reading)
    out = G.anchor(np.zeros(2), np.ones(2), meas_read, np.ones(2), np.zeros(2), cells[:2], work_read[:2])
    assert np.allclose(out, math.log(2.0))
    # a kernel with no reading falls back to every reading
    lone = (np.array([1e9]), np.array([1e8]), np.array(["other"]))
    assert np.isclose(G.anchor(np.zeros(1), np.ones(1), meas_read, np.ones(2), np.zeros(2), lone, work_read)[0],
                      math.log(2.0))
    # labels that do not match the readings are refused
    with pytest.raises(ValueError, match="kernel labels"):
        G.anchor(np.zeros(2), np.ones(2), meas_read, np.ones(2), np.zeros(2), cells, work_read[:2] + (np.array(["x"]),))


def test_attention_work_carries_the_phase_as_kernel_label_and_the_cache_records_it():
    import pandas as pd

    assert G.ANCHOR_KERNEL == {"aic_attention": "phase"}
    cells = pd.DataFrame({"phase": ["prefill", "decode"], "batch_size": [1, 8], "new_tokens": [512, 1],
                          "kv_len": [0, 1024], "num_heads": [32, 32], "num_kv_heads": [8, 8], "head_dim": [128, 128]})
    wk = G._work("aic_attention", cells)
    assert len(wk) == 3 and list(wk[2]) == ["prefill", "decode"]
    gemm = _cells(GPUS, lambda m, g: np.ones(len(m)))
    assert len(G._work("aic_gemm", gemm)) == 2
    assert T.GreyBox("aic_gemm", gemm, _defaults).settings()["anchor_kernel"] is None


def test_readings_are_computed_once_per_gpu_and_predictions_do_not_move(monkeypatch):
    """speed2: `_readings(gpu)` is kept per GPU (fits and every prediction read the same): a second prediction
    reads no reading mask again and gives the same numbers, bit for bit, as a fresh grey box."""
    law = lambda m, g: 1.3 - 0.3 * np.log2(m) / 12.0  # noqa: E731
    cells = _cells(GPUS, law)
    gb = T.GreyBox("aic_gemm", cells, _defaults)
    tc = cells[cells["gpu"] == "h200-sxm"].reset_index(drop=True)
    r1 = gb.predict_terms(tc, "h200-sxm")
    assert gb._readings("h200-sxm") is gb._readings("h200-sxm")
    calls = []
    monkeypatch.setattr(G.GreyBox, "reading_mask", lambda self, c, g: calls.append(g) or np.zeros(len(c), bool))
    r2 = gb.predict_terms(tc, "h200-sxm")
    assert calls == []
    assert np.array_equal(r1["total"], r2["total"])
    monkeypatch.undo()
    r3 = T.GreyBox("aic_gemm", cells, _defaults).predict_terms(tc, "h200-sxm")
    assert np.array_equal(r1["total"], r3["total"])


NINE = ("a100-sxm", "l40s", "rtx-pro-6000", "h100-sxm", "h200-sxm", "b200", "gb200", "b300", "gb300")


def test_twins_are_the_gpus_the_datasheet_coordinates_cannot_tell_apart():
    assert G.twins("b200", NINE) == ("gb200", "b300", "gb300")
    assert G.twins("gb300", NINE) == ("b200", "gb200", "b300")
    for g in ("a100-sxm", "l40s", "rtx-pro-6000", "h100-sxm", "h200-sxm"):  # H100 / H200 are 0.73 apart
        assert G.twins(g, NINE) == ()


def test_a_targets_twins_leave_its_training_set_and_every_inner_fold_with_it(monkeypatch):
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0) * (1.2 if g == "b300" else 1.0)  # noqa: E731
    gpus = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "b300", "l40s")
    cells = _cells(gpus, law)
    on = T.GreyBox("aic_gemm", cells, _defaults, leave_twins_out=True)
    info = on.fitted_on("b200")
    assert "b300" not in info["gpus"] and "b200" not in info["gpus"] and info["twins_left_out"] == ["b300"]
    assert on.settings()["leave_twins_out"] == G.TWIN_DISTANCE
    off = T.GreyBox("aic_gemm", cells, _defaults)  # the pipeline's default: off (candidate 1 not kept)
    assert "b300" in off.fitted_on("b200")["gpus"] and "leave_twins_out" not in off.settings()
    with pytest.raises(ValueError, match="settings"):  # a cache fitted one way is not adopted the other
        T.GreyBox("aic_gemm", cells, _defaults).adopt(on.fit_all())
    # inner folds: a held-out GPU's twins leave that fold's training set
    seen = []
    real = G._design

    def spy(data, inner, held, *a, **k):
        seen.append((held, tuple(inner)))
        return real(data, inner, held, *a, **k)

    monkeypatch.setattr(G, "_design", spy)
    fresh = T.GreyBox("aic_gemm", cells, _defaults, leave_twins_out=True)
    fresh.fit("h100-sxm")  # training a100, h200, b200, b300, l40s: b200 and b300 are twins
    folds = {h: inner for h, inner in seen if h in ("b200", "b300")}
    assert folds and "b300" not in folds.get("b200", ()) and "b200" not in folds.get("b300", ())
    assert any(h == "a100-sxm" and "b200" in inner and "b300" in inner for h, inner in seen)


# ---------------------------------------------------------------- reading features (issue 24, wave 40, helper grey10)

_READ_CELLS = ((1, 1024, 1024), (64, 4096, 4096))  # with the calibration's 4096^3 cell: three readings per GPU


def _read_ids(gpu):
    return [(gpu, "gemm", m, n, k) for m, n, k in _READ_CELLS]


def _reading_cells():
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0) * (1.2 if g == "b300" else 1.0)  # noqa: E731
    return _cells(("a100-sxm", "h100-sxm", "h200-sxm", "b200", "b300", "l40s"), law)


def test_reading_features_are_the_gpus_own_three_readings_efficiency_and_nothing_else():
    """Each GPU's reading features are log(measured / datasheet roofline) at its own three reading cells, ordered by
    work; they do not move when any other cell of that GPU, any other GPU's readings or the physics constants
    change, and they move when one of its readings does."""
    cells = _reading_cells()
    box = T.GreyBox("aic_gemm", cells, _defaults, reading_ids=_read_ids, reading_features=True)
    sub = cells[cells["gpu"] == "b300"].reset_index(drop=True)
    rd = sub[box.reading_mask(sub, "b300")].reset_index(drop=True)
    assert len(rd) == G.N_READINGS
    roof = G.term_rooflines("aic_gemm", rd, "b300")["gemm"]
    want = np.sort(np.log(rd["latency_ms"].to_numpy() / roof)[np.argsort(rd["m"].to_numpy() * rd["n"] * rd["k"])])
    got = box.reading_features_of("b300")
    assert got.shape == (3,) and np.allclose(np.sort(got), want)
    # every cell of b300 but its readings, every other GPU's readings, and the physics constants changed: same features
    other = cells.copy()
    mask = np.zeros(len(other), dtype=bool)
    mask[other.index[other["gpu"] == "b300"][~box.reading_mask(sub, "b300")]] = True
    other.loc[mask, "latency_ms"] *= 1.7
    other.loc[other["gpu"] != "b300", "latency_ms"] *= 0.6

    def no_physics(gpu):  # the readings' calibration only: any use of the physics constants would fail
        return None, _defaults(gpu)[1]

    for constants_for in (_defaults, no_physics):
        again = T.GreyBox("aic_gemm", other, constants_for, reading_ids=_read_ids, reading_features=True)
        assert np.array_equal(again.reading_features_of("b300"), got)
    # one of its readings moved: its features move (by that reading's log factor, in that reading's slot)
    moved = cells.copy()
    moved.loc[(moved["gpu"] == "b300") & (moved["m"] == 1) & (moved["n"] == 1024) & (moved["k"] == 1024),
              "latency_ms"] *= 2.0
    diff = T.GreyBox("aic_gemm", moved, _defaults, reading_ids=_read_ids,
                     reading_features=True).reading_features_of("b300") - got
    assert np.allclose(np.sort(diff), [0.0, 0.0, np.log(2.0)])


def test_reading_features_ride_on_every_cell_and_the_held_out_gpus_other_cells_never_enter_its_fit():
    """With the option on every cell of a GPU carries its own reading features as trailing columns (in training
    records, readings and predictions); "reads" is a nested-CV candidate; a target's fitted models do not move when
    its non-reading cells change (its other cells never enter), and its prediction reads its own features."""
    cells = _reading_cells()
    box = T.GreyBox("aic_gemm", cells, _defaults, reading_ids=_read_ids, reading_features=True)
    assert box.feature_sets == ("all", "shape", "reads") and box.settings()["reading_features"] == G.N_READINGS
    sub = cells[cells["gpu"] == "b200"].reset_index(drop=True)
    F = box._features(sub, "b200")["gemm"]
    base = G.term_features("aic_gemm", sub, "b200")["gemm"]
    assert F.shape[1] == base.shape[1] + 3 and np.array_equal(F[:, :-3], base)
    assert np.array_equal(F[:, -3:], np.broadcast_to(box.reading_features_of("b200"), (len(F), 3)))
    rec = box._training("h100-sxm")["gemm"]
    assert rec["n_reads"] == 3 and np.array_equal(rec["F"][:, -3:][0], box.reading_features_of("h100-sxm"))
    assert np.array_equal(rec["read_F"][:, -3:][0], box.reading_features_of("h100-sxm"))
    models, info = box.fit("b200")
    cv = info["nested_cv_mape"]["gemm"]
    assert any(k.startswith("reads:") for k in cv) and any(k.startswith("shape:") for k in cv)
    assert set(info["reading_features"]) == {"b200", *info["gpus"]}
    m = models["gemm"]
    if m.est is not None:
        want = {"reads": F.shape[1], "all": F.shape[1] - 3, "shape": F.shape[1] - 3 - G.N_DATASHEET}
        assert m.est.n_features_in_ == want[G._feature_set(m.name)]
    # the target's non-reading cells changed: the same models, the same predictions on the same cells
    other = cells.copy()
    idx = other.index[other["gpu"] == "b200"][~box.reading_mask(sub, "b200")]
    other.loc[idx, "latency_ms"] *= 1.5
    again = T.GreyBox("aic_gemm", other, _defaults, reading_ids=_read_ids, reading_features=True)
    assert again.fitted_on("b200")["setting"] == info["setting"]
    assert np.array_equal(again.predict(sub, "b200"), box.predict(sub, "b200"))
    # the target's reading features are read in prediction: other readings, another prediction
    moved = cells.copy()
    moved.loc[(moved["gpu"] == "b200") & (moved["m"] == 64) & (moved["n"] == 4096) & (moved["k"] == 4096),
              "latency_ms"] *= 3.0
    third = T.GreyBox("aic_gemm", moved, _defaults, reading_ids=_read_ids, reading_features=True, feature_sets=())
    assert third.feature_sets == ("reads",)
    plain = T.GreyBox("aic_gemm", cells, _defaults, reading_ids=_read_ids, reading_features=True, feature_sets=())
    fm = plain.fit("b200")[0]["gemm"]
    if fm.est is not None:  # the reads-only fit, target readings moved: the target's own features differ
        f1 = plain._features(sub, "b200")["gemm"]
        f2 = third._features(sub, "b200")["gemm"]
        assert not np.array_equal(f1[:, -3:], f2[:, -3:]) and np.array_equal(f1[:, :-3], f2[:, :-3])


def test_reading_features_are_off_by_default_and_refused_where_a_table_has_no_readings_of_its_own():
    cells = _reading_cells()
    off = T.GreyBox("aic_gemm", cells, _defaults, reading_ids=_read_ids)
    assert G.READING_FEATURE_TABLES == () and not off.reading_features  # not adopted (DESIGN.md, grey10)
    assert "reading_features" not in off.settings() and off.feature_sets == G.FEATURE_SETS
    F = off._features(cells[cells["gpu"] == "b200"].reset_index(drop=True), "b200")["gemm"]
    assert F.shape[1] == G.term_features("aic_gemm", cells[cells["gpu"] == "b200"], "b200")["gemm"].shape[1]
    assert "n_reads" in off._training("b200")["gemm"] and off._training("b200")["gemm"]["n_reads"] == 0
    assert not T.GreyBox("aic_gemm", cells, _defaults, shared=True).reading_features
    with pytest.raises(ValueError, match="shared"):
        T.GreyBox("aic_gemm", cells, _defaults, shared=True, reading_features=True)
    with pytest.raises(ValueError, match="own readings"):
        T.GreyBox("vidur_step", cells, _defaults, reading_features=True)
    with pytest.raises(ValueError, match="reads"):
        T.GreyBox("aic_gemm", cells, _defaults, feature_sets=("all", "reads"))
    with pytest.raises(ValueError, match="True, False or None"):
        T.GreyBox("aic_gemm", cells, _defaults, reading_features="yes")
    with pytest.raises(ValueError, match="expected 3"):  # the synthetic grid holds one calibration reading only
        T.GreyBox("aic_gemm", cells, _defaults, reading_features=True).reading_features_of("b200")
    with pytest.raises(ValueError, match="settings"):  # a cache fitted one way is not adopted the other
        off.adopt(T.GreyBox("aic_gemm", cells, _defaults, reading_ids=_read_ids, reading_features=True).fit_all(["b200"]))
    assert G._cols("all", 20, 3) == 17 and G._cols("shape", 20, 3) == 17 - G.N_DATASHEET and G._cols("reads", 20, 3) is None
    with pytest.raises(ValueError, match="reads"):
        G._cols("reads", 20)
