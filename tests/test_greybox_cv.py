"""The grey box's nested-CV tree sizes (config `sizes: greybox_cv`, build time, wave 37): the CV's fits take them,
the final fit keeps `SIZES[fast]`; None is the grey box as before; bad sizes are refused by name."""
import numpy as np
import pytest

from steptime_lab.experiments import transfer as T
from steptime_lab.experiments.transfer import greybox as G

from greybox_cells import default_constants as _defaults, gemm_cells as _cells  # tests/greybox_cells.py

GPUS = ("a100-sxm", "h100-sxm", "h200-sxm", "b200", "l40s")
CV = {"max_iter": 60, "learning_rate": 0.2}


def _data():
    law = lambda m, g: (1.3 - 0.3 * np.log2(m) / 12.0) * (1.1 if g == "l40s" else 1.0)  # noqa: E731
    cells = _cells(GPUS, law)
    box = T.GreyBox("aic_gemm", cells, _defaults)
    return cells, {x: box._training(x)["gemm"] for x in sorted(x for x in GPUS if x != "b200")}


def test_the_cv_fits_take_the_cv_sizes_and_the_final_fit_keeps_its_own(monkeypatch):
    cells, data = _data()
    sizes = []
    orig = G._fit_gbt

    def recording(X, y, w, size, seed):
        sizes.append(dict(size))
        return orig(X, y, w, size, seed)

    monkeypatch.setattr(G, "_fit_gbt", recording)
    m0, cv0 = G.fit_term(data, "b200", feature_sets=G.FEATURE_SETS)  # as before: every fit SIZES[True]
    assert m0.est is not None and all(s == G.SIZES[True] for s in sizes)
    n0 = len(sizes)
    sizes.clear()
    m1, cv1 = G.fit_term(data, "b200", feature_sets=G.FEATURE_SETS, cv_size=CV)
    assert len(sizes) == n0 and m1.est is not None
    assert all(s == dict(G.SIZES[True], **CV) for s in sizes[:-1])  # the nested CV's fits
    assert sizes[-1] == G.SIZES[True]  # the final fit
    assert m1.est.max_iter == G.SIZES[True]["max_iter"] and m1.est.learning_rate == G.SIZES[True]["learning_rate"]
    assert cv1 != cv0  # the CV's scores are those of the smaller fits
    # None: bit for bit the grey box without the argument
    m2, cv2 = G.fit_term(data, "b200", feature_sets=G.FEATURE_SETS, cv_size=None)
    tc = cells[cells["gpu"] == "b200"].reset_index(drop=True)
    F = T.GreyBox("aic_gemm", cells, _defaults)._features(tc, "b200")["gemm"]
    assert cv2 == cv0 and m2.name == m0.name and np.array_equal(m2.log_correction(F), m0.log_correction(F))
    # the same setting chosen: the same final trees whatever the CV's sizes
    if m1.name == m0.name:
        assert np.array_equal(m1.log_correction(F), m0.log_correction(F))


def test_the_greybox_records_its_cv_sizes_and_a_cache_is_adopted_only_with_the_same():
    cells, _ = _data()
    plain, small = T.GreyBox("aic_gemm", cells, _defaults), T.GreyBox("aic_gemm", cells, _defaults, cv_sizes=CV)
    assert "cv_sizes" not in plain.settings() and small.settings()["cv_sizes"] == CV
    _, info = small.fit("b200")
    assert info["cv_sizes"] == CV and info["sizes"] == G.SIZES[True]
    assert "cv_sizes" not in plain.fit("b200")[1]
    doc = {"settings": small.settings(), "fingerprint": small.fingerprint(), "fits": {}}
    with pytest.raises(ValueError, match="cv_sizes"):  # a cache fitted with other CV sizes is refused
        plain.adopt(doc)
    T.GreyBox("aic_gemm", cells, _defaults, cv_sizes=dict(CV)).adopt(doc)


@pytest.mark.parametrize("bad, word", [({}, "non-empty"), ([60], "mapping"), ({"max_iter": 0}, "max_iter"),
                                       ({"max_iter": 2.5}, "max_iter"), ({"max_iter": True}, "max_iter"),
                                       ({"learning_rate": 0}, "learning_rate"), ({"learning_rate": 1.5}, "learning_rate"),
                                       ({"learning_rate": "0.2"}, "learning_rate"), ({"max_leaf_nodes": 7}, "max_leaf_nodes")])
def test_bad_cv_sizes_are_refused_by_name(bad, word):
    with pytest.raises(ValueError, match=word):
        G.cv_sizes(bad)
    cells, _ = _data()
    with pytest.raises(ValueError, match=word):
        T.GreyBox("aic_gemm", cells, _defaults, cv_sizes=bad)
