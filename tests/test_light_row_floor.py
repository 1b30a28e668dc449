"""The row floor law of modern engines' one-CTA-per-token-row light kernels (issue 19)."""
import numpy as np
import pandas as pd
import pytest

from steptime import predict_step
from steptime.calibration import Constants
from steptime.specs import get_gpu, get_model
from steptime.specs.engines import get_engine
from steptime.terms import light as L
from steptime_lab.experiments import light as E

B300 = get_gpu("b300")
QWEN = get_model("qwen3-32b")


def _law(c0=4.0, b=20.0):
    return Constants.default().with_overrides({"light_row_floor": {"c0_kcycles": c0, "bytes_per_cycle": b}})


def test_row_floor_is_cycles_plus_row_bytes_over_the_clock():
    c = _law(4.0, 20.0)
    f = B300.boost_mhz * 1e6
    assert L.row_floor(0.0, B300, c) == pytest.approx(4000.0 / f)
    assert L.row_floor(20000.0, B300, c) == pytest.approx((4000.0 + 1000.0) / f)


def test_shipped_constant_is_read_and_removing_it_fails():
    assert {"c0_kcycles", "bytes_per_cycle"} <= set(Constants.default().get("light_row_floor", B300)) <= {
        "c0_kcycles", "bytes_per_cycle", "host_c0_kcycles"}
    bad = Constants.default().with_overrides({"light_row_floor": {"c0": 4.0}})
    with pytest.raises(ValueError, match="light_row_floor"):
        L.row_floor(100.0, B300, bad)


def test_row_law_replaces_the_flat_floor_only_where_it_applies():
    c = Constants.default()
    flat = float(L.engine_light_time("rmsnorm", 1, QWEN, B300, 1, c, floor_law="flat"))
    row = float(L.engine_light_time("rmsnorm", 1, QWEN, B300, 1, c, floor_law="row"))
    assert flat == pytest.approx(float(L.light_time("rmsnorm", L.light_bytes("rmsnorm", 1, QWEN), B300, c,
                                                    floor_law="flat")))
    assert row < flat  # the Vidur-era 5.3 us floor against ~2.7 us on a modern kernel
    rb = L.row_bytes("rmsnorm", QWEN)
    assert row >= float(L.row_floor(rb, B300, c)) * (1 - 1e-9)
    # add and emb are not one CTA per row: no row floor under the row law (their flat floor and the bandwidth-scale
    # stream; since wave 30 the flat law prices them by the SM-rate law, so the two laws no longer agree on them)
    for k in ("add", "emb"):
        assert L.row_bytes(k, QWEN) is None
        assert float(L.engine_light_time(k, 4, QWEN, B300, 1, c, floor_law="row")) == \
            float(L.light_time(k, L.light_bytes(k, 4, QWEN), B300, c))
    # a wider row has a higher floor (act's row is the widest)
    assert float(L.engine_light_time("act", 1, QWEN, B300, 1, c, floor_law="row")) > row


def test_qk_norm_row_floor_is_per_head_row():
    c = _law(4.0, 20.0)
    t = float(L.qk_norm_time(1, QWEN, B300, 1, c, floor_law="row"))
    per = float(L.row_floor(2.0 * 3 * QWEN.head_dim, B300, c))
    assert t >= 2 * per * (1 - 1e-9)
    assert t < float(L.qk_norm_time(1, QWEN, B300, 1, c, floor_law="flat"))


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="floor law"):
        L.engine_light_time("rmsnorm", 1, QWEN, B300, floor_law="sarathi")
    with pytest.raises(ValueError, match="floor law"):
        L.qk_norm_time(1, QWEN, B300, floor_law="nope")
    with pytest.raises(ValueError, match="not one CTA per row"):
        L.light_time("add", 100.0, B300, row_bytes=10.0)
    with pytest.raises(ValueError, match="row bytes"):
        L.row_floor(-1.0, B300)
    with pytest.raises(ValueError, match="bytes_per_cycle > 0"):
        L.row_floor(1.0, B300, _law(4.0, 0.0))
    with pytest.raises(ValueError, match="unknown light kernel"):
        L.row_bytes("softmax", QWEN)


def test_engine_profiles_name_their_law():
    for e in ("vllm", "vllm-v1-sync", "vllm-v1-unfused", "vllm-no-p2p", "sglang", "trtllm"):
        assert get_engine(e).light_floor_law() == "row"
    for e in ("vllm-v0", "kernels"):  # Vidur's Sarathi-Serve era and the per-operator-table kernel sum
        assert get_engine(e).light_floor_law() == "flat"


def test_engine_yaml_rejects_an_unknown_law():
    from steptime.specs.engines import _parse_engine
    doc = {"host_terms": False, "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "ASSUMED",
                                                                               "source": "x"}},
           "light": {"floor_law": {"value": "sarathi", "provenance": "ASSUMED", "source": "x"}}}
    with pytest.raises(ValueError, match="light.floor_law"):
        _parse_engine("toy", doc)
    doc["light"] = {"floor": {"value": "row", "provenance": "ASSUMED", "source": "x"}}
    with pytest.raises(ValueError, match="unknown field light.floor"):
        _parse_engine("toy", doc)


def test_step_uses_the_engine_law():
    r_row = predict_step("qwen3-32b", "b300", decode=[(1, 2048)], tp=1, engine="vllm")
    r_flat = predict_step("qwen3-32b", "b300", decode=[(1, 2048)], tp=1, engine="kernels")
    # the kernels profile keeps the flat floors: its rmsnorm term is the flat law's, vllm's the row law's
    L_ = QWEN.num_hidden_layers
    c = Constants.default()
    flat = float(L.engine_light_time("rmsnorm", 1, QWEN, B300, 1, c, floor_law="flat")) * 1e3
    # vllm also runs each residual add inside its RMSNorm kernel (fusion.add_rmsnorm): the fused launch's row floor
    row = float(L.add_rmsnorm_time(1, QWEN, B300, 1, c, floor_law="row")) * 1e3
    assert r_flat.terms_ms["rmsnorm"] == pytest.approx(2 * L_ * flat, rel=1e-6)
    assert r_row.terms_ms["rmsnorm"] == pytest.approx(2 * L_ * row, rel=1e-6)
    assert r_row.terms_ms["qk_norm"] == pytest.approx(
        L_ * float(L.qk_norm_time(1, QWEN, B300, 1, c, floor_law="row")) * 1e3, rel=1e-6)


def _toy_quantize(c0=4.0, b=20.0, gpus=("b200", "h100-sxm", "l40s"), grace_c0=None):
    rows = []
    for g in gpus:
        f = get_gpu(g).boost_mhz * 1e6
        c = grace_c0 if (grace_c0 is not None and getattr(get_gpu(g), "host_cpu", None) == "grace") else c0
        for m in (1, 8, 32, 64):
            for k in (256, 4096, 65536):
                rows.append(dict(gpu=g, m=m, k=k, latency_ms=(c * 1e3 + 3.0 * k / b) / f * 1e3))
    return pd.DataFrame(rows)


def test_row_floor_c0_per_host_cpu():
    """Wave 30: light_row_floor's host_c0_kcycles prices a Grace-hosted GPU's fixed cost; x86 GPUs keep c0_kcycles."""
    gb200, b200 = get_gpu("gb200"), get_gpu("b200")
    assert gb200.host_cpu == "grace" and get_gpu("gb300").host_cpu == "grace" and b200.host_cpu is None
    c = Constants.default().with_overrides({"light_row_floor": {"c0_kcycles": 4.0, "bytes_per_cycle": 20.0,
                                                                "host_c0_kcycles": {"grace": 5.0}}})
    assert L.row_floor(0.0, gb200, c) == pytest.approx(5000.0 / (gb200.boost_mhz * 1e6))
    assert L.row_floor(0.0, b200, c) == pytest.approx(4000.0 / (b200.boost_mhz * 1e6))
    assert L.row_floor(0.0, gb200, _law(4.0, 20.0)) == pytest.approx(4000.0 / (gb200.boost_mhz * 1e6))


def test_fit_recovers_a_c0_per_host_held_out():
    """Two Grace-hosted GPUs at a higher c0: the per-host fit recovers both c0s and each held-out GPU exactly (its
    host's c0 from the other Grace GPU); one c0 (the wave-22 law) cannot."""
    gpus = ("b200", "gb200", "gb300", "h100-sxm", "l40s")
    r = E.run_row_floor(_toy_quantize(gpus=gpus, grace_c0=5.0), flat_floor_us=5.0, n_boot=20)
    assert r["shipped"]["c0_kcycles"] == pytest.approx(4.0, rel=1e-3)
    assert r["shipped"]["host_c0_kcycles"]["grace"] == pytest.approx(5.0, rel=1e-3)
    by = {(x["gpu"], x["predictor"]): x["mape"] for x in r["records"]}
    for g in gpus:
        assert by[(g, "row_law")] < 1e-3, g
    assert by[("gb200", "row_law_one_c0")] > 0.05
    assert r["folds"]["gb200"]["host"] == "grace" and "gb200" not in r["folds"]["gb200"]["fit_on"]
    u = E.row_floor_update(r["shipped"], r["cells"])
    assert u["value"]["host_c0_kcycles"]["grace"] == pytest.approx(5.0, rel=1e-3)


def test_unknown_host_cpu_is_a_clear_error():
    from steptime.specs import _host_cpu
    with pytest.raises(ValueError, match="unknown host_cpu"):
        _host_cpu({"host_cpu": "epyc"}, "x")
    assert _host_cpu({}, "x") is None


def test_fit_recovers_a_synthetic_row_law_held_out():
    r = E.run_row_floor(_toy_quantize(), flat_floor_us=5.0, n_boot=20)
    assert r["shipped"]["c0_kcycles"] == pytest.approx(4.0, rel=1e-3)
    assert r["shipped"]["bytes_per_cycle"] == pytest.approx(20.0, rel=1e-3)
    law = [x for x in r["records"] if x["predictor"] == "row_law"]
    assert len(law) == 3 and all(x["mape"] < 1e-3 for x in law)
    for g, f in r["folds"].items():
        assert g not in f["fit_on"]
    assert all(n == 9 for n in r["cells"].values())  # m <= 32 only


def test_row_floor_cells_bad_input():
    with pytest.raises(ValueError, match="lacks columns"):
        E.row_floor_cells(pd.DataFrame({"gpu": ["b200"], "m": [1]}))
    with pytest.raises(ValueError, match="no quantize cells"):
        E.row_floor_cells(pd.DataFrame({"gpu": ["b200"], "m": [64], "k": [128], "latency_ms": [0.01]}))


def test_settled_entry_names_the_constant_and_provenance():
    u = E.row_floor_update({"c0_kcycles": 4.06621, "bytes_per_cycle": 20.93749}, {"b200": 396, "b300": 396})
    assert u["name"] == "light_row_floor" and u["provenance"] == "FITTED" and u["scope"] == "global"
    assert u["value"] == {"c0_kcycles": 4.0662, "bytes_per_cycle": 20.9375}
    assert "792 cells" in u["source"]
