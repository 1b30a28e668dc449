"""The grey box shipped as data: the numpy tree evaluator equals the lab's fitted model, corrections are
bounded, the corrected terms sum to the total, `steptime predict --explain` says what it was fitted on."""
import json
import math

import numpy as np
import pytest

from steptime import greybox as PG
from steptime.calibration import ship_greybox
from steptime.cli import main
from steptime.errors import InputError
from steptime.specs import get_model
from steptime.step import Batch, layer_shapes, predict_step
from steptime_lab.experiments.transfer import greybox as G

from greybox_cells import default_constants as _defaults, gemm_cells  # tests/greybox_cells.py

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200")


@pytest.fixture(scope="module")
def shipped_gemm():
    """The shipped GEMM correction fitted by the lab on synthetic tables: physics 3x too fast at m = 1,
    right at m = 4096 (the bound, ln 2, must cut it)."""
    law = lambda m: 3.0 - 2.0 * np.log2(m) / 12.0  # noqa: E731
    grey = G.GreyBox("aic_gemm", gemm_cells(GPUS, lambda m, g: law(m)), _defaults, fast=True, seed=0)
    fitted, meta = G.fit_shipped(grey, ("gemm",))
    corr = G.shipped_corrections({"aic_gemm": grey})
    return grey, fitted["gemm"], meta["gemm"], corr


def test_tree_export_equals_sklearn():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 6))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2]
    est = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=15, random_state=0).fit(X, y)
    Xt = np.vstack([rng.normal(size=(300, 6)), X[:50]])
    ens = G.export_trees(est)
    np.testing.assert_allclose(ens.predict(Xt), est.predict(Xt), rtol=0, atol=1e-12)
    assert np.abs(ens.predict(Xt) - ens.baseline).max() > 0.1  # the trees do something


def test_numpy_evaluator_equals_the_lab_model_and_is_bounded(shipped_gemm, tmp_path):
    grey, tm, meta, corr = shipped_gemm
    assert meta["setting"] == "h=inf" and tm.est is not None  # the shape bias carries across GPUs
    assert meta["fitted_on"]["gpus"] == sorted(GPUS)
    path = tmp_path / "greybox.npz"
    corr.save(path)
    loaded = PG.Corrections.load(path)
    for g in ("h100-sxm", "l40s"):  # a GPU of the fit and one outside it
        cells = grey.cells[grey.cells["gpu"] == "a100-sxm"].drop(columns="gpu")
        F = G.term_features("aic_gemm", cells, g)["gemm"]
        np.testing.assert_allclose(loaded.log_correction("gemm", F), tm.log_correction(F), rtol=0, atol=1e-12)
    F = G.term_features("aic_gemm", grey.cells, "h100-sxm")["gemm"]
    lc = loaded.log_correction("gemm", F)
    assert np.all(np.abs(lc) <= math.log(2) + 1e-12)
    assert lc.max() == pytest.approx(math.log(2))  # a 3x residual is cut at the bound
    # an unknown or uncorrected model is the physics
    assert np.all(loaded.log_correction("attention", np.zeros((3, 16))) == 0)


def test_saved_corrections_are_byte_stable(shipped_gemm, tmp_path):
    corr = shipped_gemm[3]
    corr.save(tmp_path / "a.npz")
    corr.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_product_features_match_a_step_projection():
    mdl = get_model("llama-3.1-8b")
    n, k = layer_shapes(mdl, 2)["qkv_proj"]
    F = PG.gemm_features([512], [n], [k], "h100-sxm")
    assert F.shape == (1, 13)
    assert F[0, :3] == pytest.approx([9.0, math.log2(n), math.log2(k)])


def test_explain_terms_sum_and_only_learned_terms_move(shipped_gemm):
    corr = shipped_gemm[3]
    batch = Batch.parse(decode=["16x1024"], prefill=["1x512"])
    r = predict_step("llama-3.1-8b", "h100-sxm", batch)
    e = PG.explain(r, "llama-3.1-8b", "h100-sxm", batch, corrections=corr)
    rows = e["terms"]
    assert sum(x["corrected_ms"] for x in rows.values()) == pytest.approx(e["total_ms"], rel=1e-12)
    assert e["physics_total_ms"] == pytest.approx(r.total_ms)
    for t, x in rows.items():
        assert x["physics_ms"] == pytest.approx(r.terms_ms[t])
        assert 0.5 - 1e-12 <= x["factor"] <= 2.0 + 1e-12
        assert x["corrected_ms"] == pytest.approx(x["physics_ms"] * x["factor"])
        if t not in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            assert x["factor"] == 1.0, t  # only the GEMM model is in this file
    assert rows["gate_up_proj"]["factor"] > 1.2  # physics too fast at small m, corrected upward
    assert e["fitted_on"]["gemm"]["gpus"] == sorted(GPUS)


def test_ship_copies_a_checked_corrections_file(shipped_gemm, tmp_path):
    src = tmp_path / "src.npz"
    shipped_gemm[3].save(src)
    out = ship_greybox(src, tmp_path / "shipped.npz")
    assert out["models"] == ["gemm"] and (tmp_path / "shipped.npz").read_bytes() == src.read_bytes()
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(InputError, match="not a grey-box corrections file"):
        ship_greybox(bad, tmp_path / "x.npz")


def test_cli_explain_labels_the_grey_box(shipped_gemm, tmp_path, monkeypatch, capsys):
    path = tmp_path / "greybox.npz"
    shipped_gemm[3].save(path)
    monkeypatch.setattr(PG, "GREYBOX_FILE", path)
    argv = ["predict", "--model", "llama-3.1-8b", "--gpu", "l40s", "--decode", "8x512", "--explain"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "grey box" in out and "fitted on 4 GPUs" in out and "held out" in out and "physics only" in out
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    g = d["greybox"]
    # the JSON keeps 6 significant digits of each term and of the total, so their sum agrees to rounding
    assert sum(x["corrected_ms"] for x in g["terms"].values()) == pytest.approx(g["total_ms"], rel=1e-5)
    monkeypatch.setattr(PG, "GREYBOX_FILE", tmp_path / "missing.npz")
    assert main(argv) == 2
    assert "no shipped grey-box corrections" in capsys.readouterr().err


def test_the_shipped_corrections_are_the_settled_ones_and_fit_the_features():
    from pathlib import Path

    settled = Path(__file__).resolve().parents[1] / "results" / "calibration" / "greybox.npz"
    assert PG.GREYBOX_FILE.read_bytes() == settled.read_bytes()  # `steptime calibration ship` copied it
    corr = PG.Corrections.load()
    width = {"gemm": PG.gemm_features([8], [4096], [4096], "h100-sxm").shape[1],
             "attention": PG.attention_features([1], [8], [1], [1024], [32], [8], [128], "h100-sxm").shape[1]}
    for name, m in corr.meta["models"].items():
        assert m["n_features"] == width.get(name, 13), name
        assert m["setting"] in ("none", "h=inf")
        assert (name in corr.models) == (m["setting"] != "none")
