"""The SM-rate light law (issue 19, waves 28 and 30): steptime.terms.light's law under the flat floor law, fitted and
scored by E1.1c through the product's light_time."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model
from steptime.terms import light as L
from steptime_lab.experiments import light as E

TRUE = {"floor_us": 5.0, "bytes_per_sm_cycle": 5.0, "p": 2.5}  # the floor in us (wave 31; E1.1c fits it so)
CAPS = {"a100-sxm": 0.88, "h100-sxm": 0.95, "a40": 0.82}
# add streams at DRAM (its SM rate far above it), as on Vidur's GPUs: its largest cell reads the DRAM cap
LAW = {"q": E.SM_RATE_Q, "kernels": {k: dict(TRUE, bytes_per_sm_cycle=100.0) if k == "add" else dict(TRUE)
                                     for k in E.KERNELS}}
M = get_model("llama-2-7b")


def _consts(cap=0.84, law=LAW):
    """The shipped constants with this law and one DRAM cap everywhere (the shipped per-GPU caps overridden too)."""
    C = Constants.default().with_overrides({"light_sm_rate": law, "light_dram_eta": cap})
    for g in CAPS:
        C = C.with_overrides({"light_dram_eta": cap}, scope=f"gpu.{g}")
    return C


def _cells(gpus=("a100-sxm", "h100-sxm", "a40")):
    """Vidur-shaped cells timed by the product's SM-rate law itself (TRUE constants, each GPU its own DRAM cap)."""
    rows = []
    for g in gpus:
        gp, C = get_gpu(g), _consts(CAPS[g])
        for op, kern in E.OPMAP.items():
            for T in (1, 4, 16, 64, 256, 1024, 4096, 16384):
                nb = float(L.light_bytes(kern, T, M, 1))
                t = L.light_time(kern, nb, gp, C, floor_law="flat")
                rows.append(dict(gpu=g, model="llama-2-7b", tp=1, num_tokens=T, op=op, latency_ms=float(t) * 1e3))
    return E.tidy_cells(pd.DataFrame(rows))


def test_product_law_is_the_sm_bound_on_hbm_and_the_dram_bound_on_gddr():
    """The mechanism: a large RMSNorm is SM-bound on H100 (time ~ bytes / (SMs f b)) and DRAM-bound on the A40; the
    floor is in microseconds (wave 31; kcycles of the boost clock in wave 30). Fails on the law shipped before wave 30
    (no light_sm_rate in the product)."""
    C = _consts()
    nb = float(L.light_bytes("rmsnorm", 16384, M, 1))
    for g, dram_bound in (("h100-sxm", False), ("a40", True)):
        gp = get_gpu(g)
        dram, sm = nb / (gp.mem_bw * 0.84), nb / float(L.sm_bytes_per_s(gp, TRUE["bytes_per_sm_cycle"]))
        assert (dram > sm) is dram_bound
        t = L.light_time("rmsnorm", nb, gp, C, floor_law="flat")
        assert t == pytest.approx(float(L.sm_rate_stream_s(nb, gp.mem_bw * 0.84, nb / sm, E.SM_RATE_Q)), rel=1e-3)
        assert t >= max(dram, sm)
    a100 = get_gpu("a100-sxm")
    assert L.light_time("rmsnorm", 0.0, a100, C, floor_law="flat") == pytest.approx(5e-6)
    assert L.light_time("rmsnorm", 0.0, get_gpu("h100-sxm"), C, floor_law="flat") == pytest.approx(5e-6)
    # a kernel the law does not list (kv_write), the row law and a pass outside an engine keep the old stream
    base = Constants.default()
    for kern, law in (("kv_write", "flat"), ("rmsnorm", "row"), ("rmsnorm", None)):
        rb = L.row_bytes("rmsnorm", M) if law == "row" else None
        assert L.light_time(kern, nb, a100, C, row_bytes=rb, floor_law=law) == \
            L.light_time(kern, nb, a100, base, row_bytes=rb, floor_law=law)
    # the step predictor prices a flat-law (vllm-v0) step with it
    from steptime.step import vidur_layer_ops
    new = vidur_layer_ops("llama-2-7b", "h100-sxm", [4096], constants=C)
    old = vidur_layer_ops("llama-2-7b", "h100-sxm", [4096], constants=base)
    assert new["input_layernorm"][0] == pytest.approx(L.light_time("rmsnorm", L.light_bytes("rmsnorm", 4096, M),
                                                                   get_gpu("h100-sxm"), C, floor_law="flat") * 1e3)
    assert new["input_layernorm"][0] != pytest.approx(old["input_layernorm"][0], rel=0.01)


def test_fit_recovers_the_constants_and_predicts_the_held_out_gpu():
    c = _cells()
    fit = E.fit_sm_rate(c, {g: CAPS[g] for g in ("a100-sxm", "h100-sxm")})
    for k in E.KERNELS:
        assert fit["kernels"][k]["floor_us"] == pytest.approx(TRUE["floor_us"], rel=0.02)
        if k != "add":  # add's SM rate is not identified under the DRAM cap (fit > 30 B per SM-cycle)
            assert fit["kernels"][k]["bytes_per_sm_cycle"] == pytest.approx(TRUE["bytes_per_sm_cycle"], rel=0.02)
    assert fit["kernels"]["add"]["bytes_per_sm_cycle"] > 30
    a40 = c[c["gpu"] == "a40"]
    pred = E.predict_sm_rate(a40, "a40", E.sm_rate_constants(Constants.default(), "a40", fit, CAPS["a40"]))
    assert np.allclose(pred, a40["y_ms"].to_numpy(), rtol=0.02)
    # a wrong DRAM cap misprices the GDDR GPU, where the cap binds
    bad = E.predict_sm_rate(a40, "a40", E.sm_rate_constants(Constants.default(), "a40", fit, 0.4))
    big = a40["num_tokens"].to_numpy() >= 4096
    assert np.abs(bad / a40["y_ms"].to_numpy() - 1)[big].mean() > 0.3


def test_dram_reading_and_its_carrier():
    c = _cells()
    for g in CAPS:
        v, cell = E.dram_reading(c[c["gpu"] == g].reset_index(drop=True), g)
        assert cell[-1] == "add" and cell[-2] == 16384
        assert 0.9 * CAPS[g] < v <= CAPS[g] * 1.001  # the SM term and the floor keep it just under the cap
    readings = {"a100-sxm": {"eta_mem_max": 0.80}, "h100-sxm": {"eta_mem_max": 0.70}}
    own_h = E.dram_reading(c[c["gpu"] == "h100-sxm"].reset_index(drop=True), "h100-sxm")[0]
    eta, ratio = E.derived_dram_eta(c, "a100-sxm", ["h100-sxm", "a40"], readings)
    assert ratio == pytest.approx(own_h / 0.70) and eta == pytest.approx(ratio * 0.80)
    assert E.derived_dram_eta(c, "a40", ["a100-sxm", "h100-sxm"], readings) is None


def test_bad_input_is_a_clear_error():
    c = _cells(("a100-sxm",))
    with pytest.raises(ValueError, match="caps"):
        E.fit_sm_rate(c, {"a100-sxm": 0.0})
    with pytest.raises(ValueError, match="no light cells"):
        E.fit_sm_rate(c, {"b200": 0.8})
    fit = E.fit_sm_rate(c[c["kernel"] == "add"], {"a100-sxm": 0.88})
    with pytest.raises(ValueError, match="no constants for kernel"):
        E.predict_sm_rate(c, "a100-sxm", E.sm_rate_constants(Constants.default(), "a100-sxm", fit, 0.88))
    with pytest.raises(ValueError, match="no light_sm_rate"):
        E.predict_sm_rate(c, "a100-sxm", Constants.default().with_overrides({"light_sm_rate": None}))
    with pytest.raises(ValueError, match="no 'add' cell"):
        E.dram_reading(c[c["kernel"] != "add"].reset_index(drop=True), "a100-sxm")
    a100 = get_gpu("a100-sxm")
    with pytest.raises(ValueError, match="light_sm_rate must be"):
        L.light_time("add", 1e6, a100, _consts(law={"kernels": {}}), floor_law="flat")
    with pytest.raises(ValueError, match="needs bytes_per_sm_cycle"):
        L.light_time("add", 1e6, a100, _consts(law={"q": 2, "kernels": {"add": {"p": 2, "floor_us": 1.0}}}), floor_law="flat")
    with pytest.raises(ValueError, match="> 0"):
        L.light_time("add", 1e6, a100, _consts(cap=-1.0), floor_law="flat")
    with pytest.raises(ValueError, match="unknown light floor law"):
        L.light_time("add", 1e6, a100, _consts(), floor_law="sharp")


def test_run_scores_the_law_the_old_one_as_ablation_and_ships_it():
    c = _cells()
    kw = {"eta": 1.0, "gpus": [], "per_gpu": {}, "heldout_mape": 0.0}
    r = E.run(c, n_boot=10, constants=Constants.default())
    st = [x for x in r["records"] if x["predictor"] == "steptime" and x["subset"] in E.KERNELS]
    assert len(st) == 3 * len(E.KERNELS) and all(x["mape"] < 0.03 for x in st)
    assert {x["predictor"] for x in r["records"]} >= {"steptime", "bw_scale_law"}
    # every reading cell (the add cap, the norm deploy cell) is out of the scored cells
    for g in CAPS:
        assert r["calibration"].used[f"light_dram_eta[{g}]"]
        assert not {tuple(x) for x in r["calibration"].used[f"light_dram_eta[{g}]"]} & set(r["pred"]["cell"])
    r["kv_write"] = kw
    doc = E.document(r, c, {"mape": 0.1})
    ab = [x for x in doc["claims"] if "bw_scale_law" in x.get("claim", "")]
    assert len(ab) == 1 and ab[0].get("met") is None and set(ab[0]["value"]) == set(CAPS)
    ups = E.defaults_updates(r["shipped"], c, kv_write=kw)
    names = {(u["name"], u["scope"]) for u in ups}
    assert {("light_sm_rate", "global"), ("light_dram_eta", "global"), ("light_dram_eta", "gpu.a40")} <= names
    law = next(u for u in ups if u["name"] == "light_sm_rate")["value"]
    shipped = Constants.default().with_overrides({"light_sm_rate": law, "light_dram_eta": CAPS["a40"]})
    a40 = c[(c["gpu"] == "a40") & (c["num_tokens"] >= 256)]
    assert np.allclose(E.predict_sm_rate(a40, "a40", shipped), a40["y_ms"].to_numpy(), rtol=0.03)


def test_floor_in_us_is_the_same_seconds_on_every_gpu_and_kcycles_still_price():
    """Wave 31 (issue 19): a `floor_us` floor is the same wall time on A100 and H100; a `floor_kcycles` one (wave 30,
    the shipped defaults until re-settled) scales with 1 / boost clock; the fit recovers either from cells timed by
    it, and a cycle-floor fit on A100 + A40 prices H100's floor short when the floor is really in us (the miss the
    change fixes). Fails on the wave-30 code (no floor_us, no `floor` argument)."""
    a100, h100 = get_gpu("a100-sxm"), get_gpu("h100-sxm")
    kc = {"q": 2.0, "kernels": {"rmsnorm": {"floor_kcycles": 8.0, "bytes_per_sm_cycle": 5.0, "p": 2.5}}}
    Ck = _consts(law=kc)
    assert L.light_time("rmsnorm", 0.0, a100, Ck, floor_law="flat") == pytest.approx(8e3 / 1.41e9)
    assert L.light_time("rmsnorm", 0.0, h100, Ck, floor_law="flat") == pytest.approx(8e3 / 1.98e9)
    assert L.sm_rate_law("rmsnorm", h100, Ck)["floor_s"] == pytest.approx(8e3 / 1.98e9)
    c = _cells()
    fit_kc = E.fit_sm_rate(c[c["gpu"] != "h100-sxm"], {g: CAPS[g] for g in ("a100-sxm", "a40")}, floor="floor_kcycles")
    fit_us = E.fit_sm_rate(c[c["gpu"] != "h100-sxm"], {g: CAPS[g] for g in ("a100-sxm", "a40")})
    assert set(fit_us["kernels"]["rmsnorm"]) == {"floor_us", "bytes_per_sm_cycle", "p"}
    h = c[(c["gpu"] == "h100-sxm") & (c["num_tokens"] <= 4)]
    y = h["y_ms"].to_numpy()
    p_us = E.predict_sm_rate(h, "h100-sxm", E.sm_rate_constants(Constants.default(), "h100-sxm", fit_us, CAPS["h100-sxm"]))
    p_kc = E.predict_sm_rate(h, "h100-sxm", E.sm_rate_constants(Constants.default(), "h100-sxm", fit_kc, CAPS["h100-sxm"]))
    assert np.allclose(p_us, y, rtol=0.02)
    assert np.median(p_kc / y - 1) < -0.1  # the cycle floor, fitted on slower clocks, comes out short on H100


def test_floor_unit_bad_input_is_a_clear_error():
    a100 = get_gpu("a100-sxm")
    both = {"q": 2.0, "kernels": {"add": {"floor_us": 2.0, "floor_kcycles": 3.0, "bytes_per_sm_cycle": 5.0, "p": 2}}}
    with pytest.raises(ValueError, match="exactly one floor"):
        L.light_time("add", 1e6, a100, _consts(law=both), floor_law="flat")
    with pytest.raises(ValueError, match="unknown floor unit"):
        E.fit_sm_rate(_cells(("a100-sxm",)), {"a100-sxm": 0.88}, floor="floor_ms")
