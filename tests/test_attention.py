"""Attention term (E1.24): physics of the named factors, batching, and the calibration contract."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.errors import CalibrationLeakError
from steptime_lab.experiments import attention as E
from steptime.specs import get_gpu
from steptime.terms import attention as A

H100 = get_gpu("h100-sxm")


def cells(b, s, c, kvd="bf16"):
    b, s, c = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float), np.asarray(c, float))
    return A.attention_cells(b, s, c, 32, 8, 128, H100, kv_dtype=kvd, warm_l2=False)


def test_decode_grows_with_kv_and_batch_and_is_memory_bound():
    r = cells(16, 1, np.array([128, 1024, 8192, 65536]))
    assert np.all(np.diff(r["t"]) > 0)
    assert not r["compute_bound"].any()
    r2 = cells(np.array([1, 4, 16, 64]), 1, 4096)
    assert np.all(np.diff(r2["t"]) > 0)


def test_never_faster_than_the_floor_or_the_hbm_stream():
    fc = A.attention_constants(H100)
    r = cells(64, 1, 32768)
    assert r["t"][()] >= fc["attn_floor_us"] * 1e-6
    kv_bytes = 64 * 32769 * 2 * 8 * 128 * 2
    assert r["t"][()] >= kv_bytes / H100.mem_bw  # HBM speed of light (no warm L2 in a real step)


def test_prefill_compute_bound_and_causal_work_superlinear():
    r = cells(1, np.array([2048, 4096, 8192]), 0)
    assert r["compute_bound"].all()
    assert r["t"][2] / r["t"][1] > 2.5  # causal work is quadratic in prompt length


def test_fp8_cache_halves_the_decode_stream():
    a = A.attention_request_terms(1, 8192, 32, 8, 128, H100, kv_dtype="bf16")
    b = A.attention_request_terms(1, 8192, 32, 8, 128, H100, kv_dtype="fp8")
    assert b["bytes"] < 0.55 * a["bytes"]


def test_warm_l2_only_speeds_up_working_sets_that_fit():
    small = A.attention_cells(4, 1, 512, 32, 8, 128, H100, warm_l2=True)
    small_cold = A.attention_cells(4, 1, 512, 32, 8, 128, H100, warm_l2=False)
    big = A.attention_cells(64, 1, 65536, 32, 8, 128, H100, warm_l2=True)
    big_cold = A.attention_cells(64, 1, 65536, 32, 8, 128, H100, warm_l2=False)
    assert small["l2_hit"][()] > 0.5 > big["l2_hit"][()]
    assert big["t"][()] == pytest.approx(big_cold["t"][()], rel=0.05)
    fc = A.attention_constants(H100)
    if fc["attn_l2_bpc"] * H100.sms * H100.boost_mhz * 1e6 > H100.mem_bw * fc["attn_eta_mem"]:
        assert small["t"][()] < small_cold["t"][()]  # a faster L2 path helps only what fits


def test_grouped_batch_equals_cells_of_identical_requests():
    g = A.attention_time(np.ones(8), np.full(8, 2048.0), 32, 8, 128, H100, group=np.repeat([0, 1], 4), n_groups=2)
    c = cells(4, 1, 2048)
    assert g["t"][0] == pytest.approx(c["t"][()])
    assert g["t"][1] == pytest.approx(c["t"][()])


def test_unknown_kv_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="KV-cache dtype"):
        A.attention_request_terms(1, 10, 32, 8, 128, H100, kv_dtype="int3")


def test_kernel_lanes():
    assert A.kernel_lane("vllm_flash_attn_fa3") == "fa3"
    assert A.kernel_lane("vllm_flashinfer_trtllmdecode") == "trtllm"
    assert A.kernel_lane("vllm_flash_attn") == "fa2"


def _toy_cells(gpus=("h100-sxm", "h200-sxm")):
    rows = []
    for g in gpus:
        for b in (1, 8, 64):
            for kv in (2, 1024, 16384):
                for kvd in ("bfloat16",):
                    rows.append(dict(gpu=g, batch_size=b, isl=1, step=kv - 1, kv_len=kv, num_heads=32, num_kv_heads=8,
                                     head_dim=128, kv_cache_dtype=kvd, window_size=0, kernel_source="vllm_flash_attn_fa3",
                                     latency_ms=0.01 + b * kv * 4096 / 3e12 * 1e3))
    gen = pd.DataFrame(rows)
    ctx = []
    for g in gpus:
        for b in (1, 4):
            for s in (512, 4096):
                ctx.append(dict(gpu=g, batch_size=b, isl=s, num_heads=32, num_kv_heads=8, head_dim=128,
                                kv_cache_dtype="bfloat16", window_size=0, kernel_source="vllm_flash_attn_fa3",
                                latency_ms=0.01 + b * 4 * 32 * 128 * s * s / 2 / 6e14 * 1e3))
    return E.tidy_cells(gen, pd.DataFrame(ctx))


def test_deploy_cells_are_three_named_cells_excluded_from_scoring():
    c = _toy_cells()
    x = c[c["gpu"] == "h100-sxm"].reset_index(drop=True)
    dep = E.deploy_cells(x)
    assert set(dep) == {"attn_floor_us", "attn_eta_mem", "attn_eta_ceil"}
    assert x["phase"].iloc[dep["attn_eta_ceil"]] == "prefill"
    assert x["b"].iloc[dep["attn_floor_us"]] >= E.DEPLOY_BATCH_FLOOR
    assert x["c"].iloc[dep["attn_floor_us"]] == x[x["phase"] == "decode"]["c"].min()
    fc = E.calibrate_gpu(x, "h100-sxm", {k: v[0] for k, v in E.FIT_GLOBALS.items()}, constants=Constants.default())
    p = E.predict(x.iloc[list(dep.values())], "h100-sxm", fc, constants=Constants.default())["t"]
    assert p[0] == pytest.approx(x["y_ms"].iloc[dep["attn_floor_us"]], rel=1e-3)


def test_scoring_a_calibration_cell_is_refused():
    from steptime.calibration import Calibration

    cal = Calibration()
    cal.record("attn_floor_us[h100-sxm]", [("h100-sxm", "attention", "decode", 1, 1, 1, 32, 8, 128, "bf16")])
    with pytest.raises(CalibrationLeakError):
        cal.check_disjoint([("h100-sxm", "attention", "decode", 1, 1, 1, 32, 8, 128, "bf16")])


def test_step_attention_uses_cold_l2():
    from steptime.step import predict_step

    p = predict_step("llama-3.1-8b", "h100-sxm", decode=[(8, 512)])
    assert p.terms_ms["attn_decode"] > 0
    assert p.bound["attn_decode"] == "memory"


def test_per_gpu_constants_carried_from_gemm_readings():
    """A GPU's attention constants = ratio (fitted on other GPUs) x its GEMM readings; on the GPU
    the ratio was fitted on alone, they give back its own solved readings."""
    c = _toy_cells()
    fcg = {k: v[0] for k, v in E.FIT_GLOBALS.items()}
    readings = {"h100-sxm": {"kernel_floor_us": 2.5, "eta_mem_max": 0.8, "eta_active": 0.9},
                "h200-sxm": {"kernel_floor_us": 2.0, "eta_mem_max": 0.9, "eta_active": 0.8}}
    ratios = E.reading_ratios(c, ["h100-sxm"], fcg, readings, constants=Constants.default())
    own = E.calibrate_gpu(c[c["gpu"] == "h100-sxm"].reset_index(drop=True), "h100-sxm", fcg, constants=Constants.default())
    back = E.from_gemm_readings(fcg, ratios, readings["h100-sxm"])
    for a in E.READING_PAIRS:
        assert back[a] == pytest.approx(own[a])
    moved = E.from_gemm_readings(fcg, ratios, readings["h200-sxm"])
    assert moved["attn_floor_us"] == pytest.approx(own["attn_floor_us"] * 2.0 / 2.5)
    assert moved["attn_eta_ceil"] == pytest.approx(own["attn_eta_ceil"] * 0.8 / 0.9)
    with pytest.raises(ValueError, match="GEMM readings"):
        E.reading_ratios(c, ["h200-sxm"], fcg, {"h100-sxm": readings["h100-sxm"]}, constants=Constants.default())


def test_silicon_class_peers_share_the_kernel_family_and_the_sm_version():
    lanes = {"h100-sxm": "fa3", "h200-sxm": "fa3", "b200": "trtllm", "gb200": "trtllm", "b300": "trtllm",
             "a100-sxm": "fa2", "l40s": "fa2"}
    gpus = list(lanes)
    assert E.silicon_class_peers("b200", gpus, lanes) == ["gb200"]  # sm100; b300 is sm103
    assert E.silicon_class_peers("b300", gpus, lanes) == []
    assert E.silicon_class_peers("a100-sxm", gpus, lanes) == []  # l40s runs fa2 on sm89
    assert E.silicon_class_peers("h100-sxm", gpus, lanes) == []  # a one-SM-version lane: its lane ratio is the class's
    mixed = {**lanes, "a100-sxm": "fa3"}  # a lane spanning sm80 and sm90
    assert E.silicon_class_peers("h100-sxm", gpus, mixed) == ["h200-sxm"]
    assert E.silicon_class_peers("h100-sxm", gpus, {**mixed, "h200-sxm": "fa2"}) == []  # another kernel family


def test_class_carried_ceiling_is_the_peers_own_value_the_rest_ride_the_gemm_readings():
    """With a silicon-class peer, attn_eta_ceil is the peer's own solved value (the GPU's GEMM eta_active
    plays no part); floor and stream stay ratio x reading; without a peer the ceiling is carried as before."""
    c = _toy_cells()
    fcg = {k: v[0] for k, v in E.FIT_GLOBALS.items()}
    readings = {"h100-sxm": {"kernel_floor_us": 2.5, "eta_mem_max": 0.8, "eta_active": 0.9},
                "h200-sxm": {"kernel_floor_us": 2.0, "eta_mem_max": 0.9, "eta_active": 0.6}}
    own = E.own_constants(c, ["h100-sxm"], fcg, constants=Constants.default())["h100-sxm"]
    fc, ratios, cls = E.carried_constants(c, "h200-sxm", ["h100-sxm"], ["h100-sxm"], fcg, readings,
                                          constants=Constants.default())
    assert cls == {"attn_eta_ceil": pytest.approx(own["attn_eta_ceil"])}
    assert fc["attn_eta_ceil"] == pytest.approx(own["attn_eta_ceil"])
    assert fc["attn_floor_us"] == pytest.approx(own["attn_floor_us"] * 2.0 / 2.5)
    assert ratios == E.reading_ratios(c, ["h100-sxm"], fcg, readings, constants=Constants.default())
    fc0, _, cls0 = E.carried_constants(c, "h200-sxm", ["h100-sxm"], [], fcg, readings, constants=Constants.default())
    assert cls0 == {} and fc0["attn_eta_ceil"] == pytest.approx(own["attn_eta_ceil"] * 0.6 / 0.9)
    assert E.from_gemm_readings(fcg, ratios, readings["h200-sxm"], {"attn_eta_ceil": 1.2})["attn_eta_ceil"] == 1.0
    with pytest.raises(ValueError, match="class peers"):
        E.class_values({}, ["h100-sxm"])
    with pytest.raises(ValueError, match="no GEMM readings"):
        E.carried_constants(c, "b200", ["h100-sxm"], [], fcg, readings, constants=Constants.default())


def test_shipped_class_carried_ceiling_is_a_shared_fit_not_a_reading_of_the_gpu():
    from steptime.calibration import cell_record

    gcell = {"attn_floor_us": ["b200", "gemm", 1, 32, 32], "attn_eta_mem": ["b200", "gemm", 1, 16384, 16384],
             "attn_eta_ceil": ["b200", "gemm", 4096, 4096, 4096]}
    shipped = {"globals": {}, "lanes": {"trtllm": {}}, "lane_of": {"b200": "trtllm", "b300": "trtllm"},
               "per_gpu": {"b200": {"attn_floor_us": 8.0, "attn_eta_mem": 0.9, "attn_eta_ceil": 0.63},
                           "b300": {"attn_floor_us": 8.0, "attn_eta_mem": 0.9, "attn_eta_ceil": 0.70}},
               "reading_ratios": {"trtllm": {"attn_floor_us": 5.0, "attn_eta_mem": 1.1, "attn_eta_ceil": 0.86}},
               "gemm_cells": {"b200": gcell, "b300": {k: ["b300", *v[1:]] for k, v in gcell.items()}},
               "class_of": {"b200": ["b200", "gb200"]},
               "class_cells": {"b200": {"attn_eta_ceil": [("b200", "attention", "prefill", 1, 16384),
                                                          ("gb200", "attention", "prefill", 1, 16384)]}}}
    ups = {(u["scope"], u["name"]): u for u in E.defaults_updates(shipped, pd.DataFrame({"gpu": ["b200"]}))}
    ceil = ups[("gpu.b200", "attn_eta_ceil")]
    assert ceil["value"] == 0.63 and "b200, gb200" in ceil["source"]
    assert [set(cell_record(c)) for c in ceil["cells"]] == [{"sample"}]  # no reading of the GPU's own
    assert ups[("gpu.b200", "attn_floor_us")]["cells"] == [gcell["attn_floor_us"]]
    assert ups[("gpu.b300", "attn_eta_ceil")]["cells"] == [["b300", "gemm", 4096, 4096, 4096]]


def test_gemm_reading_cells_name_the_gemm_deploy_cells():
    doc = {"folds": {"h100-sxm": {"readings": {
        "eta_active": {"cell": ["h100-sxm", "gemm", 4096, 4096, 4096], "latency_ms": 0.2},
        "eta_mem_max": {"cell": ["h100-sxm", "gemm", 1, 16384, 16384], "latency_ms": 0.2},
        "kernel_floor_us": {"cell": ["h100-sxm", "gemm", 1, 32, 32], "latency_ms": 0.003}}}}}
    cells = E.gemm_reading_cells(doc, "h100-sxm")
    assert cells["attn_eta_ceil"] == ["h100-sxm", "gemm", 4096, 4096, 4096]
    assert cells["attn_floor_us"] == ["h100-sxm", "gemm", 1, 32, 32]
    assert len({tuple(v) for v in cells.values()}) == 3  # three readings per GPU, shared with the GEMM


def test_carried_efficiencies_never_pass_the_datasheet_peak():
    fcg = {k: v[0] for k, v in E.FIT_GLOBALS.items()}
    fc = E.from_gemm_readings(fcg, {"attn_floor_us": 4.0, "attn_eta_mem": 1.4, "attn_eta_ceil": 1.3},
                              {"kernel_floor_us": 2.0, "eta_mem_max": 0.9, "eta_active": 0.9})
    assert fc["attn_eta_mem"] == 1.0 and fc["attn_eta_ceil"] == 1.0 and fc["attn_floor_us"] == 8.0


def test_prefill_q_tile_follows_the_kernel_source():
    # FlashAttention-2 hdim 128 causal: 64-row tiles on sm86/sm89 (L40S), 128 elsewhere
    assert A.prefill_q_tile(get_gpu("l40s")) == 64.0
    assert A.prefill_q_tile(get_gpu("a100-sxm")) == 128.0
    assert A.prefill_q_tile(H100) == 128.0
    # Blackwell datacenter (sm100, sm103): two 128-row Q tiles per CTA (FlashAttention-4 q_stage 2)
    for g in ("b200", "gb200", "b300", "gb300"):
        assert A.prefill_q_tile(get_gpu(g)) == 256.0
    assert A.prefill_q_tile(get_gpu("rtx-pro-6000")) == 128.0  # sm120: FlashAttention-2's 128


def test_blackwell_prefill_fill_is_flat_until_its_256_row_ctas_pass_the_sms():
    # one 4,096-token request on B200 (148 SMs): 3..8 query heads launch <= 128 CTAs of 256 rows, so the
    # critical path (one CTA's key blocks) is the same; per query head the SM fill is worse with fewer heads
    g = get_gpu("b200")
    fc = A.attention_constants(g)
    t = [A.attention_cells(1, 4096, 0, h, 1, 128, g, fc=fc)["eta_fill"] for h in (3.0, 8.0, 64.0)]
    assert t[0] < t[1] < t[2] <= 1.0
    w256, l256 = A.prefill_tiles(4096.0, 0.0, 8.0, A.prefill_q_tile(g))
    w128, l128 = A.prefill_tiles(4096.0, 0.0, 8.0, 128.0)
    assert l256 == 16.0 and l128 == 32.0 and w256 / l256 < w128 / l128  # fewer, longer tiles


def test_prefill_tiles_count_causal_work_in_longest_tiles():
    work, longest = A.prefill_tiles(np.array([1.0, 128.0, 512.0, 512.0]), np.array([0.0, 0.0, 0.0, 256.0]), 4, 128.0)
    assert work[0] == 0.0 and longest[0] == 0.0  # a decode row has no query tiles
    assert work[1] == 4.0 and longest[1] == 1.0  # one tile per head, one key block each
    assert work[2] == 4 * (1 + 2 + 3 + 4) and longest[2] == 4.0  # causal: tile i sees i + 1 key blocks
    assert work[3] == 4 * (3 + 4 + 5 + 6) and longest[3] == 6.0  # cached context adds to every tile
    with pytest.raises(ValueError):
        A.prefill_tiles(16.0, 0.0, 4, 0.0)
    with pytest.raises(ValueError):
        A.prefill_tiles(-1.0, 0.0, 4, 128.0)


def test_prefill_fill_is_set_by_the_longest_request_in_a_batch():
    # same work, one long request + short ones fills worse than the work spread evenly (critical path)
    fc = A.attention_constants(H100)
    mixed = A.attention_time(np.array([4096.0, 512.0, 512.0]), np.zeros(3), 4, 1, 128, H100)
    ref = A.attention_request_terms(np.array([4096.0, 512.0, 512.0]), np.zeros(3), 4, 1, 128, H100, fc=fc)
    assert mixed["eta_fill"][0] == pytest.approx(
        (ref["work"].sum() / 32.0) / (ref["work"].sum() / 32.0 + fc["attn_fill_half"] * H100.sms))
    few = A.attention_cells(1, 2048, 0, 4, 1, 128, H100)["eta_fill"]
    many = A.attention_cells(64, 2048, 0, 4, 1, 128, H100)["eta_fill"]
    assert few < many <= 1.0


def test_table_kv_write_adds_to_prefill_cells_only():
    from steptime.calibration import Constants
    from steptime.terms import light as L
    C = Constants.default()
    t = E.table_kv_write_s(np.array([2.0, 2.0]), np.array([1.0, 1024.0]), 8, 128, "bf16", H100, C)
    assert t[0] == 0.0
    # the light kv_write law's stream: the same bandwidth as the step's kv_write term (one place for the fact)
    nb = 2 * 1024 * 2 * 8 * 128 * 4
    assert t[1] == pytest.approx(nb / (H100.mem_bw * C.get("light_bw_scale", H100) * C.get("light_eta", H100)["kv_write"]))
    assert t[1] == pytest.approx(float(L.kv_write_stream_s(nb, H100, C)))
    t8 = E.table_kv_write_s(2.0, 1024.0, 8, 128, "fp8", H100, C)
    assert t8 == pytest.approx(t[1] * 3 / 4)  # bf16 K/V in, fp8 into the cache
    with pytest.raises(ValueError):
        E.table_kv_write_s(2.0, 1024.0, 8, 128, "int3", H100, C)
    with pytest.raises(TypeError):
        E.table_kv_write_s(2.0, 1024.0, 8, 128, "bf16", H100, {"attn_eta_mem": 0.8})


def test_predict_takes_a_precomputed_kv_write_and_gives_the_same_cells():
    """The fits pass the table's KV write once (it does not depend on the fitted factors): predict with it equals
    predict computing it, and a wrong one shows."""
    import pandas as pd
    from steptime.calibration import Constants
    C = Constants.default()
    x = E._arrays(pd.DataFrame({"b": [2, 4], "s": [1024, 1], "c": [0, 512], "H": [32, 32], "Hkv": [8, 8],
                                "d": [128, 128], "kv_dtype": ["bf16", "bf16"], "y_ms": [1.0, 1.0],
                                "llm": [True, True]}))
    fc = {**C.get("attn_lane_factors")["fa3"], "attn_eta_ceil": 0.6, "attn_eta_mem": 0.8, "attn_floor_us": 5.0}
    kvw = E.kv_write_of(x, "h100-sxm", C)
    assert kvw[0] > 0 and kvw[1] == 0.0
    a = E.predict(x, "h100-sxm", fc, constants=C)
    b = E.predict(x, "h100-sxm", fc, constants=C, kv_write_s=kvw)
    assert np.array_equal(a["t"], b["t"]) and np.array_equal(a["t_kv_write"], b["t_kv_write"])
    c = E.predict(x, "h100-sxm", fc, constants=C, kv_write_s=2 * kvw)
    assert c["t"][0] > a["t"][0]


def test_warm_kv_write_is_the_cold_stream_out_of_l2_and_the_l2_rate_in_it():
    fc = {"attn_l2_bpc": 10.0}
    bw_l2 = A.l2_bandwidth(H100, fc)
    assert bw_l2 == pytest.approx(10.0 * H100.sms * A.boost_mhz(H100) * 1e6)
    cold, nb = np.array([2e-5, 2e-5, 2e-5]), np.array([1e6, 1e6, 1e6])
    w = E.warm_kv_write_s(cold, nb, np.array([0.0, 0.5, 1.0]), H100, fc)
    assert w[0] == pytest.approx(2e-5)  # nothing resident: the HBM stream
    assert w[2] == pytest.approx(1e6 / bw_l2)  # all resident: the attention term's L2 rate
    assert w[1] == pytest.approx(0.5 * 2e-5 + 0.5 * 1e6 / bw_l2)
    for bad in ((cold, -nb, 0.5), (-cold, nb, 0.5), (cold, nb, 1.5)):
        with pytest.raises(ValueError):
            E.warm_kv_write_s(*bad, H100, fc)


def test_predict_prices_the_replayed_tables_write_warm_by_the_cells_l2_hit():
    """A prefill cell whose working set fits the L2 pays its table KV write at the L2 rate (the collector replays
    the same tensors and slot mapping); one far past the L2 pays the cold stream; warm_l2=False keeps it cold."""
    C = Constants.default()
    x = E._arrays(pd.DataFrame({"b": [4, 256], "s": [128, 8192], "c": [0, 0], "H": [8, 8], "Hkv": [8, 8],
                                "d": [128, 128], "kv_dtype": ["bf16", "bf16"], "y_ms": [1.0, 1.0],
                                "llm": [False, False]}))
    fc = {**C.get("attn_lane_factors")["fa3"], "attn_eta_ceil": 0.6, "attn_eta_mem": 0.8, "attn_floor_us": 5.0,
          "attn_l2_x_c": 1.0, "attn_l2_sharp": 8.0, "attn_l2_bpc": 20.0}
    cold = E.kv_write_of(x, "h100-sxm", C) * 1e3
    warm = E.predict(x, "h100-sxm", fc, constants=C)
    assert warm["l2_hit"][0] > 0.99 and warm["l2_hit"][1] < 1e-3
    assert warm["t_kv_write"][0] < 0.5 * cold[0]
    assert warm["t_kv_write"][1] == pytest.approx(cold[1], rel=1e-3)
    off = E.predict(x, "h100-sxm", fc, constants=C, warm_l2=False)
    assert np.allclose(off["t_kv_write"], cold)


def test_kv_write_slopes_and_held_out_eta():
    import pandas as pd
    from steptime.calibration import Constants
    from steptime_lab.experiments import light as LX
    C = Constants.default()
    rows = []
    ns = {"h100-sxm": 0.5e-9, "a100-sxm": 1.0e-9}
    for g, per in ns.items():
        for b in (1.0, 4.0):
            for s in (128.0, 512.0, 1024.0):
                for hkv in (1.0, 2.0, 4.0, 8.0):
                    y = 0.05 + per * b * s * hkv * 1e3 + (7.0 if s < 256 else 0.0)  # short prefills are ignored
                    rows.append({"gpu": g, "phase": "prefill", "kv_dtype": "bf16", "d": 128.0, "b": b, "s": s,
                                 "H": 32.0, "Hkv": hkv, "y_ms": y})
                    rows.append({"gpu": g, "phase": "prefill", "kv_dtype": "fp8", "d": 128.0, "b": b, "s": s,
                                 "H": 32.0, "Hkv": hkv, "y_ms": 99.0 * hkv})  # fp8 caches do not measure the write
    cells = pd.DataFrame(rows)
    sl = LX.kv_write_slopes(cells)
    assert sl["h100-sxm"] == pytest.approx(0.5e-9) and sl["a100-sxm"] == pytest.approx(1.0e-9)
    # held out: A100's eta is H100's alone
    h = get_gpu("h100-sxm")
    want = 1024 / (0.5e-9 * h.mem_bw * C.get("light_bw_scale", h))
    assert LX.kv_write_eta(sl, ["h100-sxm"], C) == pytest.approx(want)
    fold = E.kv_write_fold(C, sl, "a100-sxm")
    assert fold.get("light_eta")["kv_write"] == pytest.approx(want)
    assert fold.get("light_eta")["rmsnorm"] == C.get("light_eta")["rmsnorm"]
    with pytest.raises(ValueError):
        LX.kv_write_eta(sl, ["b200"], C)
    with pytest.raises(ValueError):
        LX.kv_write_slopes(cells.drop(columns=["Hkv"]))
    with pytest.raises(ValueError):
        LX.kv_write_slopes(cells[cells["kv_dtype"] == "fp8"])


def test_with_kv_write_eta_replaces_one_eta_and_names_its_source():
    C = Constants.default()
    c = E.with_kv_write_eta(C, 2.5, "unit test fold")
    assert c.get("light_eta")["kv_write"] == 2.5
    assert {k: v for k, v in c.get("light_eta").items() if k != "kv_write"} == \
        {k: v for k, v in C.get("light_eta").items() if k != "kv_write"}
    assert C.get("light_eta")["kv_write"] != 2.5  # the input is not changed
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="kv_write eta"):
            E.with_kv_write_eta(C, bad, "bad")


A100 = get_gpu("a100-sxm")


def test_swap_copy_geometry_follows_the_fa2_reshape_rule():
    # the GQA query reshape is a view only with one request or one KV head (and no swap without GQA)
    b = np.array([1, 2, 4, 4, 4, 2048])
    hq = np.array([32, 32, 8, 8, 8, 8])
    hkv = np.array([8, 8, 1, 8, 2, 1])
    assert A.swap_copy(b, hq, hkv).tolist() == [False, True, False, False, True, False]
    with pytest.raises(ValueError, match="swap_copy"):
        A.swap_copy(2, 4, 8)


def test_fa2_copy_free_decode_has_the_lower_floor_and_other_lanes_none():
    fc = A.attention_constants(A100)
    assert fc["attn_swap_copy_rel"] > 0.0 == A.attention_constants(H100)["attn_swap_copy_rel"]
    one_kv = A.attention_cells(4, 1, 63, 8, 1, 128, A100)          # TP 8 of a 70B: one KV head per rank
    copy = A.attention_cells(4, 1, 63, 16, 2, 128, A100)            # two KV heads: the copy runs
    gap = copy["t_floor"][()] - one_kv["t_floor"][()]
    assert gap == pytest.approx(fc["attn_floor_us"] * 1e-6 * fc["attn_swap_copy_rel"])
    h_one = A.attention_cells(4, 1, 63, 8, 1, 128, H100)
    h_copy = A.attention_cells(4, 1, 63, 16, 2, 128, H100)
    assert h_one["t_floor"][()] == h_copy["t_floor"][()]
    pre = A.attention_cells(4, 512, 0, 8, 1, 128, A100)              # a prefill never gets the discount
    assert pre["t_floor"][()] == pytest.approx(fc["attn_floor_us"] * 1e-6 * fc["attn_prefill_floor_rel"])


def test_grouped_decode_floor_counts_requests_per_group():
    g = A.attention_time(np.ones(5), np.full(5, 64.0), 32, 8, 128, A100, group=np.array([0, 1, 1, 1, 1]), n_groups=2)
    assert g["t_floor"][0] < g["t_floor"][1]   # one request: a view; four: the copy
    assert g["t"][1] == pytest.approx(A.attention_cells(4, 1, 64, 32, 8, 128, A100)["t"][()])


def test_swap_copy_rel_is_measured_on_the_given_gpus_only():
    rows = []
    for b, hkv, y in [(1, 8, 0.7), (2, 8, 1.0), (4, 8, 1.0), (4, 1, 0.7), (2, 2, 1.0)]:
        rows.append({"gpu": "x", "phase": "decode", "kv_dtype": "bf16", "b": b, "s": 1, "c": 63, "H": 32 if hkv > 1 else 8,
                     "Hkv": hkv, "d": 128, "y_ms": y})
    cells_ = pd.DataFrame(rows)
    assert E.swap_copy_rel(cells_, ["x"]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="no GPU"):
        E.swap_copy_rel(cells_, ["y"])


def _split_cells(step: float) -> pd.DataFrame:
    """Decode cells of GPU 'x' at KV one and two tiles (128 tokens): two at <= 8 streams, two at 32-64 (a 4x step)."""
    rows = []
    for b, hkv in [(2, 1), (2, 4), (4, 8), (8, 8)]:
        for kv, y in [(128, 0.010), (256, 0.010 * ((1 + step) if b * hkv <= 8 else 5.0))]:
            rows.append({"gpu": "x", "phase": "decode", "kv_dtype": "bf16", "b": b, "s": 1, "c": kv - 1, "H": 8 * hkv,
                         "Hkv": hkv, "d": 128, "y_ms": y})
    return pd.DataFrame(rows)


def test_split_rel_is_the_step_at_one_more_tile_at_few_streams():
    cells_ = _split_cells(0.25)
    assert E.split_rel(cells_, ["x"], 128.0) == pytest.approx(0.25)   # the 32- and 64-stream cells are left out
    fixed = E.swap_fixed(cells_, ["x"], "fa3")
    assert fixed["attn_swap_copy_rel"] == 0.0 and fixed["attn_split_tile"] == 128.0
    assert fixed["attn_split_rel"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no GPU"):
        E.split_rel(cells_, ["x"], 512.0)
    with pytest.raises(ValueError, match="tile"):
        E.split_rel(cells_, ["x"], 0.0)


def test_split_kv_needs_few_streams_and_more_than_one_tile():
    fc = {"attn_split_tile": 128.0}
    b = np.array([1, 1, 1, 200, 4, 4])
    kv = np.array([128, 129, 4096, 4096, 200, 200])
    d = np.array([128, 128, 128, 128, 64, 256])
    # one tile: no split; past it at 8 streams: split; 1600 streams > SMs: none; d 64: tile 256 (200 tokens are one
    # tile: a KV length under 128 did not tell 256 from 128, and the d <= 64 doubling survived a mutation, wave 39);
    # d 256: tile 64
    assert A.split_kv(b, 8, kv, d, H100, fc).tolist() == [False, True, True, False, False, True]
    assert A.split_tile(np.array([64.0, 128.0, 256.0]), fc).tolist() == [256.0, 128.0, 64.0]
    with pytest.raises(ValueError, match="split_kv"):
        A.split_kv(1, 0, 10, 128, H100, fc)


def test_split_combine_raises_the_decode_floor_by_its_share():
    fc = {**A.attention_constants(H100), "attn_split_rel": 0.2, "attn_split_tile": 128.0}
    one = A.attention_cells(2, 1, 127, 32, 8, 128, H100, fc=fc)   # KV 128: one tile
    two = A.attention_cells(2, 1, 255, 32, 8, 128, H100, fc=fc)   # KV 256: split
    many = A.attention_cells(64, 1, 255, 32, 8, 128, H100, fc=fc)  # 512 streams: no split
    assert two["t_floor"][()] - one["t_floor"][()] == pytest.approx(0.2 * fc["attn_floor_us"] * 1e-6)
    assert many["t_floor"][()] == pytest.approx(one["t_floor"][()])
    # the grouped (step) path applies the same rule per group, on the mean KV
    g = A.attention_time(np.ones(4), np.array([127.0, 127.0, 255.0, 255.0]), 32, 8, 128, H100, constants=None,
                         group=np.array([0, 0, 1, 1]), n_groups=2)
    base = A.attention_constants(H100)
    if base["attn_split_rel"] > 0:
        assert g["t_floor"][1] > g["t_floor"][0]
    assert g["t"][1] == pytest.approx(A.attention_cells(2, 1, 255, 32, 8, 128, H100)["t"][()])


def test_constant_sets_from_before_the_split_combine_take_its_neutral_values():
    from pathlib import Path

    pinned = Path(__file__).parent / "fixtures" / "constants_58ad966"
    old = Constants.load(pinned / "defaults.yaml", pinned / "engine_constants.yaml")
    with pytest.raises(KeyError):
        old.get("attn_split_rel", A100)
    fc = A.attention_constants(A100, old)
    assert fc["attn_split_rel"] == 0.0 and fc["attn_split_tile"] == 128.0
    assert A._factor(Constants.default(), "attn_split_tile", A100) == 128.0   # the shipped global default
    with pytest.raises(KeyError):
        A._factor(old, "attn_no_such_factor", A100)


MIXED = ("h100-sxm", "b200", "l40s")  # three SM versions (prefill Q tiles 128 / 256 / 64), three clocks


def test_prefill_q_tile_of_a_per_row_stand_in_is_each_gpus_own():
    rows = E.GpuRows(MIXED, [2, 1, 3], Constants.default())
    want = np.repeat([A.prefill_q_tile(get_gpu(g)) for g in MIXED], [2, 1, 3])
    assert np.array_equal(A.prefill_q_tile(rows), want)
    assert sorted(set(want)) == [64.0, 128.0, 256.0]
    with pytest.raises(ValueError, match="row count"):
        E.GpuRows(MIXED, [2, 1], Constants.default())


def test_many_gpus_in_one_call_give_each_gpus_own_cells_exactly():
    """The fit evaluates every training GPU in one call (GpuRows): each row must equal the one-GPU call bit for bit."""
    c, con = _toy_cells(MIXED), Constants.default()
    fcg = {k: v[0] for k, v in E.FIT_GLOBALS.items()}
    parts, solo, subs, solo_fc = [], [], [], []
    for g in MIXED:
        x = c[c["gpu"] == g].reset_index(drop=True)
        fc = E.calibrate_gpu(x, g, fcg, constants=con)
        solo_fc.append(fc)
        parts.append(E._arrays(x))
        solo.append(E.predict(x, g, fc, constants=con)["t"])
        subs.append(E._arrays(E.deploy_frame(x)))
    sub = E._stack(subs)
    kvw = np.concatenate([E.kv_write_of(d, g, con) for d, g in zip(subs, MIXED)])
    solved = E._calibrate_rows(sub, list(MIXED), fcg, con, kvw)
    for i, fc in enumerate(solo_fc):
        assert all(solved[k][i] == fc[k] for k in E.READING_PAIRS)
    counts = [len(p["y_ms"]) for p in parts]
    x = E._stack(parts)
    fc = {**fcg, **{k: np.repeat(v, counts) for k, v in solved.items()}}
    kvw = np.concatenate([E.kv_write_of(p, g, con) for p, g in zip(parts, MIXED)])
    many = E._predict_rows(x, E.GpuRows(MIXED, counts, con), fc, con, kvw)
    assert np.array_equal(many, np.concatenate(solo))
    with pytest.raises(ValueError, match="three deploy cells"):
        E._calibrate_rows(sub, list(MIXED[:2]), fcg, con, kvw[:9])


def test_an_fp8_decode_stream_is_bounded_by_the_sm_side_fp8_read_rate():
    fc0 = {**A.attention_constants(H100), "attn_fp8_bpc": 0.0}  # uncapped (the shipped fa3 lane carries a cap)
    fc = {**fc0, "attn_fp8_bpc": 9.0}
    rate = 9.0 * H100.sms * H100.boost_mhz * 1e6
    assert A.fp8_read_bandwidth(H100, fc) == pytest.approx(rate)
    assert A.fp8_read_bandwidth(H100, {**fc, "attn_fp8_bpc": 0.0}) == 0.0
    b, c = np.array([64.0, 64.0, 1.0]), np.array([8191.0, 8191.0, 0.0])
    kvd = np.array(["fp8", "bf16", "fp8"])
    s = np.array([1.0, 1.0, 512.0])  # two decode cells (fp8, bf16) and an fp8 prefill
    for warm in (False, True):
        capped = A.attention_cells(b, s, c, 32, 8, 128, H100, kv_dtype=kvd, fc=fc, warm_l2=warm)
        free = A.attention_cells(b, s, c, 32, 8, 128, H100, kv_dtype=kvd, fc=fc0, warm_l2=warm)
        # the fp8 decode stream takes at least its bytes at the SM-side rate (slower than HBM here); bf16 and the
        # prefill cell are not touched
        assert capped["t_memory"][0] == pytest.approx(capped["bytes"][0] / rate)
        assert capped["t"][0] > free["t"][0] * 1.2
        assert capped["t"][1:] == pytest.approx(free["t"][1:], rel=1e-15)
    # a short fp8 read that HBM streams slower than the cap keeps its HBM time
    short = {**fc0, "attn_fp8_bpc": 1000.0}
    assert A.attention_cells(64, 1, 8191, 32, 8, 128, H100, kv_dtype="fp8", fc=short)["t"] == pytest.approx(
        A.attention_cells(64, 1, 8191, 32, 8, 128, H100, kv_dtype="fp8", fc=fc0)["t"])
    # the grouped (step) path and the decode fast path price the same bound as the cells
    con = Constants.default().with_overrides({"attn_fp8_bpc": 9.0, "attn_lane_factors": {}})
    fcc = A.attention_constants(H100, con)
    assert fcc["attn_fp8_bpc"] == 9.0
    cell = A.attention_cells(64, 1, 8191, 32, 8, 128, H100, con, kv_dtype="fp8", fc=fcc)["t"]
    fast = A.attention_time(np.ones(64), np.full(64, 8191.0), 32, 8, 128, H100, con, kv_dtype="fp8",
                            group=np.zeros(64, dtype=int), n_groups=1)["t"]
    general = A.attention_time(np.ones(64), np.full(64, 8191.0), 32, 8, 128, H100, con, kv_dtype="fp8")["t"]
    assert fast[0] == pytest.approx(float(cell), rel=1e-12) and general[0] == pytest.approx(float(cell), rel=1e-12)
    assert fast[0] * 0.8 > A.attention_time(np.ones(64), np.full(64, 8191.0), 32, 8, 128, H100,
                                            Constants.default().with_overrides({"attn_lane_factors": {}}),
                                            kv_dtype="fp8", group=np.zeros(64, dtype=int), n_groups=1)["t"][0]
    # a constant set without the factor prices as before (no cap)
    assert A.attention_constants(H100, Constants.default().with_overrides({"attn_lane_factors": {}}))[
        "attn_fp8_bpc"] == 0.0


def test_fp8_read_bpc_is_the_streamed_fp8_decode_rate_per_sm_and_clock():
    g = get_gpu("h200-sxm")
    per = g.sms * g.boost_mhz * 1e6
    rows = []
    for b, c, hkv in [(256, 8191, 8), (512, 4095, 8), (132, 16383, 1), (4, 127, 8), (8, 8191, 8)]:
        kv = b * (c + 1) * 2 * hkv * 128
        rows.append({"gpu": "h200-sxm", "phase": "decode", "kv_dtype": "fp8", "b": b, "s": 1, "c": c, "H": 8 * hkv,
                     "Hkv": hkv, "d": 128, "y_ms": kv / (9.0 * per) * 1e3})
        rows.append({**rows[-1], "kv_dtype": "bf16", "y_ms": 2 * kv / (15.0 * per) * 1e3})
    cells_ = pd.DataFrame(rows)
    cells_.loc[(cells_["b"] == 4) | (cells_["b"] == 8), "y_ms"] = 1.0  # short KV, and few streams: left out
    assert E.fp8_read_bpc(cells_, ["h200-sxm"]) == pytest.approx(9.0)
    with_split = pd.concat([cells_, _split_cells(0.25).assign(gpu="h200-sxm")], ignore_index=True)
    assert E.swap_fixed(with_split, ["h200-sxm"], "fa3")["attn_fp8_bpc"] == pytest.approx(9.0)
    # no fp8 decode cells on the training GPUs: no cap
    assert E.fp8_read_bpc(cells_[cells_["kv_dtype"] == "bf16"], ["h200-sxm"]) == 0.0
    # an fp8 stream at >= FP8_READ_HBM_REL of the bf16 byte rate is HBM-bound: no SM-side bound seen, no cap
    hbm = cells_.copy()
    bf = hbm["kv_dtype"] == "bf16"
    hbm.loc[bf, "y_ms"] = hbm.loc[bf, "y_ms"] * 15.0 / 9.5
    assert E.FP8_READ_HBM_REL * 9.5 < 9.0 and E.fp8_read_bpc(hbm, ["h200-sxm"]) == 0.0


def test_kv_write_fold_takes_its_donors_and_never_the_held_out_gpu():
    """The held-out GPU's table-write eta comes from the fold's donors (its lane's training GPUs) when given, else
    from every other GPU; the GPU itself is never a donor (wave 30, helper attnp)."""
    from steptime_lab.experiments import light as LX
    C = Constants.default()
    sl = {"a100-sxm": 0.70e-9, "h100-sxm": 0.46e-9, "h200-sxm": 0.38e-9, "b200": 0.30e-9}
    lane = E.kv_write_fold(C, sl, "h100-sxm", donors=["b200"])
    assert lane.get("light_eta")["kv_write"] == pytest.approx(LX.kv_write_eta(sl, ["b200"], C))
    every = E.kv_write_fold(C, sl, "h100-sxm")
    assert every.get("light_eta")["kv_write"] == pytest.approx(LX.kv_write_eta(sl, ["a100-sxm", "h200-sxm", "b200"], C))
    assert lane.get("light_eta")["kv_write"] != pytest.approx(every.get("light_eta")["kv_write"])
    assert E.lane_kv_write(C, sl, ["b200", "h200-sxm"]).get("light_eta")["kv_write"] == \
        pytest.approx(LX.kv_write_eta(sl, ["b200", "h200-sxm"], C))
    with pytest.raises(ValueError, match="own donors"):
        E.kv_write_fold(C, sl, "h100-sxm", donors=["h100-sxm", "h200-sxm"])
    with pytest.raises(ValueError, match="no donor"):
        E.lane_kv_write(C, sl, ["l40s"])


def test_e1_24_scores_each_gpu_with_its_lanes_kv_write_eta(repo_root):
    """E1.24 records, per held-out GPU, the table-write eta it scored with: measured on the fold's training GPUs
    (`fit_on`, the GPU's kernel lane), not on all eight other GPUs (fails on the wave-29 result)."""
    import json

    from steptime.calibration import DEFAULTS_FILE
    from steptime_lab.experiments import light as LX
    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    cells = E.tidy_cells(pd.read_parquet(repo_root / "results" / "data" / "attention_generation.parquet"),
                         pd.read_parquet(repo_root / "results" / "data" / "attention_context.parquet"))
    sl = LX.kv_write_slopes(cells)
    C = Constants.load(DEFAULTS_FILE, repo_root / "results" / "calibration" / "gemm.yaml")
    for g in ("b200", "h100-sxm", "a100-sxm"):
        rec = doc["metrics"]["per_gpu"][g]
        assert g not in rec["fit_on"]
        assert rec[E.KV_WRITE_ETA_KEY] == pytest.approx(LX.kv_write_eta(sl, rec["fit_on"], C), rel=1e-5)


def test_prefill_units_count_query_heads_where_the_lane_has_a_per_query_head_factor():
    """attn_pf_unit > 0: a prefill's work units are H_q ceil(s / 128) x the factor (FA2's grid is per query head);
    0 or absent (FA3's lane): H_kv ceil(s / 128), as before; decode rows always H_kv (fails on the old code)."""
    fc = A.attention_constants(H100)
    s, c = np.array([1.0, 300.0]), np.array([500.0, 0.0])
    old = A.attention_request_terms(s, c, 32, 8, 128, H100, fc={**fc, "attn_pf_unit": 0.0})
    new = A.attention_request_terms(s, c, 32, 8, 128, H100, fc={**fc, "attn_pf_unit": 0.4})
    assert old["units"].tolist() == [8.0, 8.0 * 3]
    assert new["units"] == pytest.approx([8.0, 32 * 0.4 * 3])
    assert A.prefill_unit_heads(32, 8, {}) == 8.0  # absent: the per-KV-head count
    with pytest.raises(ValueError, match="attn_pf_unit must be >= 0"):
        A.prefill_unit_heads(32, 8, {"attn_pf_unit": -1.0})
    # the cells and the grouped path price the new count
    t0 = A.attention_cells(1, 300, 0, 32, 8, 128, H100, fc={**fc, "attn_pf_unit": 0.0})["t_units"]
    t1 = A.attention_cells(1, 300, 0, 32, 8, 128, H100, fc={**fc, "attn_pf_unit": 0.4})["t_units"]
    assert float(t1) == pytest.approx(float(t0) * 32 * 0.4 / 8)


def test_the_serving_timer_prices_prefill_units_per_query_head_as_the_step_does():
    from steptime.serve import StepTimer

    base = Constants.default()
    lane = str(base.get("attn_lane", H100))
    lanes = {k: dict(v) for k, v in (base.get("attn_lane_factors", H100) or {}).items()}
    lanes.setdefault(lane, {})["attn_pf_unit"] = 2.0
    c = base.with_overrides({"attn_lane_factors": lanes})
    assert A.attention_constants(H100, c)["attn_pf_unit"] == 2.0
    t_new, t_old = StepTimer("llama-3.1-8b", "h100-sxm", constants=c), StepTimer("llama-3.1-8b", "h100-sxm")
    assert t_new.check() < 1e-12  # its prefill path agrees with predict_steps under the factor
    new, kv = [4096, 2048], [0, 1024]
    assert t_new.prefill_attention(new, kv) == pytest.approx(t_new._prefill_attention_ref(new, kv), rel=1e-12)
    assert t_new.prefill_attention(new, kv) > t_old.prefill_attention(new, kv)


def test_the_per_query_head_unit_factor_is_fitted_on_the_fa2_and_trtllm_lanes_only():
    assert "attn_pf_unit" in E.fit_factors("fa2") and "attn_pf_unit" in E.fit_factors("trtllm")
    assert "attn_pf_unit" not in E.fit_factors("fa3") and "attn_pf_unit" not in E.fit_factors(None)
    lanes = {"a100-sxm": "fa2", "l40s": "fa2", "h100-sxm": "fa3", "h200-sxm": "fa3"}
    assert E.fold_lane("a100-sxm", ["l40s"], lanes) == "fa2"
    assert E.fold_lane("a100-sxm", ["l40s", "h100-sxm"], lanes) is None  # a mixed fold keeps the old count
    with pytest.raises(ValueError, match="kernel lane name"):
        E.fit_factors(3)
    assert "attnq" in " ".join(E.DISCLOSED) and "after seeing" in E.PF_UNIT_DISCLOSED


def test_e1_24_fits_the_prefill_unit_factor_per_lane_held_out_and_leaves_fa3_on_kv_heads(repo_root):
    """Each fa2 / trtllm GPU is scored with an attn_pf_unit fitted on the other GPUs of its lane; the FA3 GPUs
    carry none (per-KV-head units); the shipped lane fits carry it for fa2 / trtllm only (fails on the old result)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    per_gpu = doc["metrics"]["per_gpu"]
    for g, rec in per_gpu.items():
        assert g not in rec["fit_on"]
        if rec["lane"] in E.PF_UNIT_LANES:
            assert rec["factors"]["attn_pf_unit"] > 0
            assert all(per_gpu[o]["lane"] == rec["lane"] for o in rec["fit_on"])
        else:
            assert "attn_pf_unit" not in rec["factors"]
    lanes = doc["metrics"]["shipped"]["lanes"]
    assert {k for k, v in lanes.items() if "attn_pf_unit" in v} == set(E.PF_UNIT_LANES) & set(lanes)
    assert "attn_pf_unit" not in doc["metrics"]["shipped"]["globals"]


def test_split_count_is_flash_attention_2s_num_splits_heuristic():
    """FlashAttention-2's split choice (flash_api.cpp num_splits_heuristic) on L40S (142 SMs, 284 slots): one
    request x one KV head splits into its KV blocks up to the 128 cap, eligible counts only (1,024 blocks: 114,
    the fewest whose blocks per split changes, within 0.85 of the best efficiency); a full batch: one."""
    l40s = get_gpu("l40s")
    fc = {"attn_split_tile": 128.0}
    c = np.array([127.0, 255.0, 2047.0, 8191.0, 16383.0, 131071.0])
    assert A.split_count(1, 8, 1, c, 128, l40s, fc).tolist() == [1.0, 2.0, 16.0, 64.0, 128.0, 114.0]
    assert float(A.split_count(256, 8, 1, 8191.0, 128, l40s, fc)) == 1.0  # 256 CTAs >= 0.8 x 284 slots
    assert float(A.split_count(16, 8, 1, 2047.0, 128, l40s, fc)) == 16.0  # eligible counts of 16 blocks: 16
    assert float(A.split_count(0, 8, 1, 2047.0, 128, l40s, fc)) == 1.0
    with pytest.raises(ValueError, match="split_count"):
        A.split_count(1, 1, 2, 100.0, 128, l40s, fc)


def test_attention_cells_takes_the_split_counts_a_fit_holds():
    """attention_cells(splits=...) (wave 33, helper speed3: E1.24's fit counts its sample's splits once): the counts
    split_count gives leave every output bit-identical; other counts are the ones priced (the argument is read)."""
    l40s = get_gpu("l40s")
    fc = {**A.attention_constants(l40s, Constants.default()), "attn_split_us": 3.0, "attn_split_tile": 128.0}
    b, c = np.array([1.0, 2.0, 4.0, 16.0]), np.array([2047.0, 8191.0, 16383.0, 131071.0])
    args = (b, 1.0, c, 32, 8, 128, l40s)
    counted = A.split_count(b, 32, 8, c, 128, l40s, fc)
    ref = A.attention_cells(*args, fc=fc)
    held = A.attention_cells(*args, fc=fc, splits=counted)
    for k, v in ref.items():
        assert np.array_equal(np.asarray(v), np.asarray(held[k]), equal_nan=True), k
    other = A.attention_cells(*args, fc=fc, splits=counted + 4.0)
    assert not np.array_equal(np.asarray(other["t"]), np.asarray(ref["t"]))


def test_decode_splits_is_the_one_split_count_rule():
    """attention.decode_splits (wave 32, helper tidy): None without a per-split cost or where every decode runs
    unswapped (the count is then never asked), else 1 where unswapped and the count elsewhere."""
    calls = []

    def count():
        calls.append(1)
        return np.array([4.0, 16.0, 2.0])

    unsw = np.array([True, False, False])
    assert A.decode_splits({"attn_split_us": 0.0}, unsw, count) is None
    assert A.decode_splits({}, unsw, count) is None
    assert A.decode_splits({"attn_split_us": 0.2}, True, count) is None
    assert A.decode_splits({"attn_split_us": 0.2}, np.ones(3, dtype=bool), count) is None and not calls
    assert A.decode_splits({"attn_split_us": 0.2}, unsw, count).tolist() == [1.0, 16.0, 2.0] and len(calls) == 1
    assert float(A.decode_splits({"attn_split_us": 0.2}, False, lambda: 8.0)) == 8.0


def _with_lane_factor(c, gpu, name, value):
    """`c` with the lane factor `name` of `gpu`'s attention lane set to `value`, in the scope the shipped lane
    table lives in (a lane factor wins over a plain constant of the same name)."""
    import copy

    lane = str(c.get("attn_lane", gpu))
    entry = c.lookup("attn_lane_factors", gpu)
    table = copy.deepcopy(dict(entry.value))
    table[lane] = {**table[lane], name: value}
    return c.with_overrides({"attn_lane_factors": table}, scope=entry.scope)


def test_a_split_kv_decode_pays_the_per_split_cost_and_a_prefill_does_not():
    l40s = get_gpu("l40s")
    c = Constants.default()
    # the per-split cost is shipped on the fa2 lane (wave 31): set it to 0 and to 0.2 us explicitly
    fc0 = {**A.attention_constants(l40s, c), "attn_split_us": 0.0}
    fc1 = {**fc0, "attn_split_us": 0.2}
    kv = np.array([127.0, 2047.0, 16383.0])
    t0 = A.attention_cells(1, 1, kv, 8, 1, 128, l40s, c, fc=fc0)["t"]
    t1 = A.attention_cells(1, 1, kv, 8, 1, 128, l40s, c, fc=fc1)["t"]
    assert (t1 - t0) == pytest.approx([0.0, 0.2e-6 * 16, 0.2e-6 * 128], abs=1e-15)
    p0 = A.attention_cells(1, 512, 4096.0, 8, 1, 128, l40s, c, fc=fc0)["t"]
    assert A.attention_cells(1, 512, 4096.0, 8, 1, 128, l40s, c, fc=fc1)["t"] == pytest.approx(p0, rel=1e-14)
    # the grouped step path (and its decode fast path) prices the same cost at the group's mean KV
    c0, cs = (_with_lane_factor(c, l40s, "attn_split_us", v) for v in (0.0, 0.2))
    assert A.attention_constants(l40s, c0)["attn_split_us"] == 0.0 and A.attention_constants(l40s, cs)["attn_split_us"] == 0.2
    g = A.attention_time(np.ones(1), kv[1:2], 8, 1, 128, l40s, c0, group=np.zeros(1, dtype=np.int64), n_groups=1)
    g1 = A.attention_time(np.ones(1), kv[1:2], 8, 1, 128, l40s, cs, group=np.zeros(1, dtype=np.int64), n_groups=1)
    assert float(g1["t"][0] - g["t"][0]) == pytest.approx(0.2e-6 * 16, rel=1e-9)
    with pytest.raises(ValueError, match="attn_split_us"):
        A.split_us_s(4, {"attn_split_us": -1.0})


def test_the_per_split_cost_is_fitted_on_the_fa2_lane_only_and_e1_24_scores_it_held_out(repo_root):
    """attn_split_us is a FlashAttention-2 factor: fitted on the fa2 lane's folds (each fa2 GPU's value from the
    other fa2 GPUs), absent elsewhere (fails on the wave-30 result, which has no per-split cost)."""
    import json

    assert "attn_split_us" in E.fit_factors("fa2")
    assert "attn_split_us" not in E.fit_factors("fa3") and "attn_split_us" not in E.fit_factors(None)
    assert "adaa" in E.SPLIT_US_DISCLOSED and E.SPLIT_US_DISCLOSED in E.DISCLOSED
    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    for g, rec in doc["metrics"]["per_gpu"].items():
        assert g not in rec["fit_on"]
        if rec["lane"] in E.SPLIT_US_LANES:
            assert rec["factors"]["attn_split_us"] > 0
            assert all(doc["metrics"]["per_gpu"][o]["lane"] == rec["lane"] for o in rec["fit_on"])
        else:
            assert "attn_split_us" not in rec["factors"]


def test_fit_without_fp8_cells_holds_the_fp8_multipliers_neutral():
    """A fit whose cells hold no fp8 cache (the fa2 lane's tables) cannot constrain attn_fp8_unit / attn_fp8_compute:
    they are held at 1.0, not left to drift to a bound (wave 31); a fit with fp8 cells still estimates them."""
    c = _toy_cells()
    fit = E.fit_globals(c, ["h100-sxm", "h200-sxm"], n_sample=40, max_nfev=2, constants=Constants.default())
    assert fit["attn_fp8_unit"] == E.FP8_NEUTRAL == 1.0 and fit["attn_fp8_compute"] == 1.0
    dup = c[c["phase"] == "decode"].copy()
    dup["kv_dtype"] = "fp8"
    dup["cell"] = dup["cell"].astype(str) + "/fp8"
    fp8 = pd.concat([c, dup], ignore_index=True)
    assert (fp8["kv_dtype"] == "fp8").any()
    est = E.fit_globals(fp8, ["h100-sxm", "h200-sxm"], n_sample=40, max_nfev=2, constants=Constants.default())
    assert est["attn_fp8_unit"] != 1.0  # estimated (from its 1.1 start) where fp8 cells exist


def test_an_unswapped_fa2_decode_runs_unsplit_streams_and_skips_the_output_copy():
    """FlashAttention-2 splits the KV only for a swapped GQA query (H_q > H_kv): an MHA decode streams each
    (request, KV head) in one CTA, pays no split-KV share and a lower floor (wave 31, helper ampa)."""
    # the GB/s law (attn_stream_clk 0): the shipped fa2 lane prices its stream in clocks since wave 37
    fc0 = {**A.attention_constants(A100), "attn_stream_gbs": 0.0, "attn_noswap_rel": 0.0, "attn_stream_clk": 0.0}
    fc = {**fc0, "attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1}
    b, c, hq = np.array([1.0, 1.0, 2.0, 512.0]), np.array([16383.0, 16383.0, 0.0, 4095.0]), np.array([8, 16, 8, 8])
    on = A.attention_cells(b, 1, c, hq, 8, 128, A100, fc=fc)
    off = A.attention_cells(b, 1, c, hq, 8, 128, A100, fc=fc0)
    one_stream = (16383 + 1) * 2 * 128 * 2 / 25e9  # one (request, KV head) stream's bytes at the stream rate
    assert on["t_memory"][0] == pytest.approx(on["bytes"][0] / (8 * 25e9)) == pytest.approx(one_stream, rel=1e-3)
    assert on["t"][0] > 4 * off["t"][0]  # the split GQA-priced stream was 6-8x too fast
    # the GQA cell (swapped) is untouched; the short MHA cell only loses the floor share
    assert on["t"][1] == pytest.approx(off["t"][1], rel=1e-15)
    assert on["t_floor"][2] == pytest.approx(off["t_floor"][2] * 0.9)
    # past the SMs the HBM stream is the slower bound: unchanged but for the floor
    assert on["t_memory"][3] == pytest.approx(off["t_memory"][3], rel=1e-15)
    # no split-KV share for the unswapped long cell (the GQA one pays it)
    assert A._decode_floor_rel(False, fc, True, True) == pytest.approx((1 - fc["attn_swap_copy_rel"]) * 0.9)
    assert A._decode_floor_rel(False, fc, True, False) > A._decode_floor_rel(False, fc, False, False)
    # off (0) on lanes without the path: False everywhere; bad factors refused
    assert not A.unswapped(8, 8, fc0).any() and A.unswapped(np.array([8, 16]), 8, fc).tolist() == [True, False]
    with pytest.raises(ValueError, match="attn_noswap_rel"):
        A.unswapped(8, 8, {**fc, "attn_noswap_rel": 1.0})
    # the grouped (step) path and the decode fast path price the same as the cells
    con = Constants.default().with_overrides({"attn_stream_gbs": 25.0, "attn_noswap_rel": 0.1,
                                              "attn_lane_factors": {}})
    fcc = A.attention_constants(A100, con)
    for n, kv in ((1, 16383.0), (4, 3000.0), (64, 100.0)):
        cell = float(A.attention_cells(n, 1, kv, 8, 8, 128, A100, con, fc=fcc)["t"])
        fast = A.attention_time(np.ones(n), np.full(n, kv), 8, 8, 128, A100, con, group=np.zeros(n, dtype=int),
                                n_groups=1)["t"][0]
        general = A.attention_time(np.ones(n), np.full(n, kv), 8, 8, 128, A100, con)["t"][0]
        assert fast == pytest.approx(cell, rel=1e-12) and general == pytest.approx(cell, rel=1e-12)


def _mha_cells(gpu, rate_gbs, floor_ms, gqa_ms):
    """MHA decode cells: a one-block floor, and long-KV cells that stream the blocks after the first at `rate_gbs`."""
    g = get_gpu(gpu)
    rows = []
    for b, c in [(1, 4095), (1, 16383), (4, 8191), (2, 0), (4, 127)]:
        t = floor_ms + ((c + 1) * 2 * 128 * 2 - 65536) / (rate_gbs * 1e9) * 1e3 if c >= 4095 else floor_ms
        rows.append({"gpu": gpu, "phase": "decode", "kv_dtype": "bf16", "b": b, "s": 1, "c": c, "H": 8, "Hkv": 8,
                     "d": 128, "y_ms": t})
    rows.append({**rows[-1], "b": 2 * g.sms, "c": 8191, "y_ms": 99.0})  # past the SMs: left out
    rows += [{**rows[0], "H": 16, "Hkv": 1, "b": 2, "c": 63, "y_ms": gqa_ms},  # copy-free GQA (one KV head)
             {**rows[0], "H": 16, "Hkv": 8, "b": 1, "c": 63, "y_ms": gqa_ms},  # copy-free GQA (one request)
             {**rows[0], "H": 16, "Hkv": 8, "b": 2, "c": 63, "y_ms": 2 * gqa_ms}]  # the copy: not a reference
    return pd.DataFrame(rows)


def _gbs_at(gpu, clk):
    """The unsplit stream's rate (GB/s) on `gpu` at attn_stream_clk `clk` (attention.stream_rate)."""
    return float(A.stream_rate(get_gpu(gpu), {"attn_stream_clk": clk})) / 1e9


def test_the_unswapped_stream_clocks_and_floor_share_are_measured_on_the_training_gpus():
    """attn_stream_clk is measured per GPU as the clocks per 64 KiB block beside the block's MMA and carried as the
    median over the training GPUs; the rate it gives back on each GPU is that GPU's measured rate (wave 37, fa2dec;
    fails before it: no `stream_clk`, and swap_fixed set attn_stream_gbs instead). The cells stream the blocks after
    the first beyond their one-block floor, and the clocks are read per block after the first (wave 37, fa2v; fails
    on fa2dec's reading per block of all the KV, which gives 1900 x (1 - 1/blocks) - MMA / blocks: ~1,800)."""
    x = pd.concat([_mha_cells("l40s", _gbs_at("l40s", 1900.0), 0.008, 0.010),
                   _mha_cells("rtx-pro-6000", _gbs_at("rtx-pro-6000", 2100.0), 0.009, 0.009)], ignore_index=True)
    assert E.stream_clk(x, ["l40s"]) == pytest.approx(1900.0, rel=1e-9)
    assert E.stream_clk(x, ["l40s", "rtx-pro-6000"]) == pytest.approx(2000.0, rel=1e-9)
    assert E.noswap_rel(x, ["l40s"]) == pytest.approx(0.2)
    assert E.noswap_rel(x, ["l40s", "rtx-pro-6000"]) == pytest.approx(0.1)
    assert E.stream_clk(x, ["a100-sxm"]) == 0.0 and E.noswap_rel(x, ["a100-sxm"]) == 0.0  # no cells: off
    fixed = E.swap_fixed(pd.concat([x, _split_cells(0.25).assign(gpu="l40s")], ignore_index=True), ["l40s"], "fa2")
    assert fixed["attn_stream_clk"] == pytest.approx(1900.0, rel=1e-9) and fixed["attn_noswap_rel"] == pytest.approx(0.2)
    assert fixed["attn_stream_gbs"] == 0.0  # replaced by the clocks: one fact
    # a lane without the query swap (FA3, TRT-LLM-gen) has no unswapped path
    other = E.swap_fixed(pd.concat([x, _split_cells(0.25).assign(gpu="l40s")], ignore_index=True), ["l40s"], "fa3")
    assert other["attn_stream_gbs"] == 0.0 and other["attn_stream_clk"] == 0.0 and other["attn_noswap_rel"] == 0.0
    # a stream no slower per block than its own MMA cannot be measured as clocks beside it
    fast = _mha_cells("l40s", 4.0 * _gbs_at("l40s", 1900.0), 0.008, 0.010)
    with pytest.raises(ValueError, match="not positive"):
        E.stream_clk(fast, ["l40s"])


def test_the_unswapped_stream_rate_is_the_split_kv_tiles_mma_plus_its_clocks():
    """stream_rate: one 64 KiB block per (64-row MMA at the datasheet's tensor rate per SM and clock + attn_stream_clk)
    SM clocks at boost; attn_stream_gbs where the clocks are 0; the clocks alone open the unswapped path (wave 37)."""
    a100, l40s = get_gpu("a100-sxm"), get_gpu("l40s")
    f = A100.boost_mhz * 1e6
    mma = 64 * 65536 / (a100.peak_flops / (a100.sms * f))  # ~2,047 clocks: A100's 2,049 FLOPs per SM per clock
    assert 2040 < mma < 2055
    assert float(A.stream_rate(a100, {"attn_stream_clk": 2000.0})) == pytest.approx(65536 * f / (mma + 2000.0))
    # the same clocks give L40S (half A100's tensor FLOPs per SM per clock, 1.8x its clock) a faster stream
    assert A.stream_rate(l40s, {"attn_stream_clk": 2000.0}) > A.stream_rate(a100, {"attn_stream_clk": 2000.0})
    assert A.stream_rate(a100, {"attn_stream_gbs": 25.0}) == pytest.approx(25e9)
    assert A.stream_rate(a100, {"attn_stream_gbs": 25.0, "attn_stream_clk": 2000.0}) != pytest.approx(25e9)
    with pytest.raises(ValueError, match="attn_stream_clk"):
        A.stream_rate(a100, {"attn_stream_clk": -1.0})
    fc0 = {**A.attention_constants(A100), "attn_stream_gbs": 0.0, "attn_stream_clk": 0.0, "attn_noswap_rel": 0.0}
    fc = {**fc0, "attn_stream_clk": 2000.0}
    assert A.unswapped(8, 8, fc) and not A.unswapped(8, 8, fc0) and not A.unswapped(16, 8, fc)
    with pytest.raises(ValueError, match="needs the GPU"):
        A.stream_read_time(np.zeros(1), np.ones(1), np.ones(1), fc)
    # a one-request MHA cell with a long KV reads its 8 streams at that rate, each after its first 64 KiB block (the
    # floor's: wave 37, fa2v; fails on fa2dec's first form, which charged every byte); per GPU row in a fit's
    # stand-in too
    on = A.attention_cells(1.0, 1, 16383.0, 8, 8, 128, A100, fc=fc)
    assert float(on["t_memory"]) == pytest.approx((float(on["bytes"]) - 8 * 65536) / (8 * A.stream_rate(a100, fc)),
                                                  rel=1e-12)
    rows = E.GpuRows(["a100-sxm", "l40s"], [1, 1], Constants.default())
    both = A.stream_rate(rows, fc)
    assert both.tolist() == pytest.approx([float(A.stream_rate(a100, fc)), float(A.stream_rate(l40s, fc))])


def test_the_unswapped_stream_on_the_clocks_law_charges_the_blocks_after_each_streams_first():
    """The floor (attn_noswap_rel, read from one-block cells) holds each stream's first 64 KiB block, so the clocks
    law's stream bound charges bytes - streams x STREAM_BLOCK_BYTES (clipped at 0); the GB/s law charges every byte,
    as it was measured (wave 37, fa2v; fails on fa2dec's first form, which charged the first block again)."""
    fc0 = {**A.attention_constants(A100), "attn_stream_gbs": 0.0, "attn_stream_clk": 0.0, "attn_noswap_rel": 0.1}
    fc = {**fc0, "attn_stream_clk": 2000.0}
    gbs = {**fc0, "attn_stream_gbs": 25.0}
    assert A.stream_first_bytes(fc) == A.STREAM_BLOCK_BYTES == 65536.0
    assert A.stream_first_bytes(gbs) == 0.0 and A.stream_first_bytes(fc0) == 0.0
    with pytest.raises(ValueError, match="attn_stream_clk"):
        A.stream_first_bytes({**fc, "attn_stream_clk": -1.0})
    rate = float(A.stream_rate(A100, fc))
    # 3 requests x 8 streams of 1,024 tokens (8 blocks of 128 keys at d 128): 7 blocks each are charged
    t = A.stream_read_time(np.zeros(1), np.array([3 * 8 * 8 * 65536.0]), np.array([24.0]), fc, A100)
    assert float(t[0]) == pytest.approx(7 * 65536.0 / rate, rel=1e-12)
    # one block or less per stream: nothing beyond the floor (the HBM stream, here 1 ns, stands)
    short = A.stream_read_time(np.array([1e-9]), np.array([24 * 65536.0, 24 * 1000.0]), np.array([24.0, 24.0]), fc,
                               A100)
    assert short.tolist() == [1e-9, 1e-9]
    assert float(A.stream_read_time(np.zeros(1), np.array([8 * 65536.0]), np.array([1.0]), gbs)[0]) == pytest.approx(
        8 * 65536.0 / 25e9, rel=1e-12)
    # the cells, the grouped (step) path and the decode fast path agree on it; one 128-token cell streams nothing
    con = Constants.default().with_overrides({"attn_stream_gbs": 0.0, "attn_stream_clk": 2000.0, "attn_noswap_rel": 0.1,
                                              "attn_lane_factors": {}})
    fcc = A.attention_constants(A100, con)
    for n, kv in ((1, 16383.0), (4, 3000.0), (8, 127.0), (64, 100.0)):
        cell = A.attention_cells(n, 1, kv, 8, 8, 128, A100, con, fc=fcc)
        fast = A.attention_time(np.ones(n), np.full(n, kv), 8, 8, 128, A100, con, group=np.zeros(n, dtype=int),
                                n_groups=1)["t"][0]
        general = A.attention_time(np.ones(n), np.full(n, kv), 8, 8, 128, A100, con)["t"][0]
        assert fast == pytest.approx(float(cell["t"]), rel=1e-12) and general == pytest.approx(float(cell["t"]), rel=1e-12)
        beyond = max(float(cell["bytes"]) - n * 8 * 65536.0, 0.0) / (n * 8 * rate)
        assert float(cell["t_memory"]) == pytest.approx(max(float(cell["bytes"]) / (A100.mem_bw * fcc["attn_eta_mem"]),
                                                            beyond), rel=1e-12)
    one = A.attention_cells(1, 1, 127.0, 8, 8, 128, A100, con, fc=fcc)
    assert float(one["t_memory"]) == pytest.approx(float(one["bytes"]) / (A100.mem_bw * fcc["attn_eta_mem"]), rel=1e-12)


def test_a_warm_l2_hit_is_never_priced_slower_than_the_hbm_stream_it_replaces():
    """The lane's L2 rate per SM and clock, carried to A100 from L40S / RTX PRO 6000, priced A100's L2 below its
    HBM stream; the warm-L2 branch now serves its hit share at max(L2 rate, BW eta_mem) (wave 31, helper ampa)."""
    fc = {**A.attention_constants(A100), "attn_l2_bpc": 6.8, "attn_l2_x_c": 1.0, "attn_l2_sharp": 40.0}
    hbm = A100.mem_bw * fc["attn_eta_mem"]
    assert A.l2_bandwidth(A100, fc) < hbm and A.l2_hit_bandwidth(A100, fc) == pytest.approx(hbm)
    fast = {**fc, "attn_l2_bpc": 60.0}
    assert A.l2_hit_bandwidth(A100, fast) == pytest.approx(A.l2_bandwidth(A100, fast)) and A.l2_bandwidth(A100, fast) > hbm
    # an L2-resident decode cell (x ~ 0.2) streams at the HBM rate, not the slower fitted L2 rate
    warm = A.attention_cells(8, 1, 1023, 64, 8, 128, A100, fc=fc, warm_l2=True)
    cold = A.attention_cells(8, 1, 1023, 64, 8, 128, A100, fc=fc, warm_l2=False)
    assert float(warm["l2_hit"]) > 0.99 and float(warm["t_memory"]) == pytest.approx(float(cold["t_memory"]))
    assert float(A.attention_cells(8, 1, 1023, 64, 8, 128, A100, fc=fast, warm_l2=True)["t_memory"]) < \
        float(cold["t_memory"])


def test_tidy_cells_ids_are_plain_python_and_lanes_follow_each_row():
    """tidy_cells' cell ids are tuples of plain Python values (calibration records compare and hash them) and the
    lane column is kernel_lane of each row's kernel, with two kernels in one table (speed2: mapped per kernel name)."""
    gen = pd.DataFrame([dict(gpu=g, batch_size=b, isl=1, step=1023, kv_len=1024, num_heads=32, num_kv_heads=8,
                             head_dim=128, kv_cache_dtype="bfloat16", window_size=0, kernel_source=k, latency_ms=0.02)
                        for g, k in (("h100-sxm", "vllm_flash_attn_fa3"), ("a100-sxm", "vllm_flash_attn"))
                        for b in (1, 8)])
    ctx = gen.assign(isl=512)
    c = E.tidy_cells(gen, ctx)
    assert c["lane"].tolist() == [A.kernel_lane(k) for k in c["kernel_source"].tolist()]
    assert set(c["lane"]) == {"fa2", "fa3"}
    for cell, row in zip(c["cell"], c.itertuples(index=False)):
        assert cell == E.cell_id((row.gpu, row.phase, row.b, row.s, row.c, row.H, row.Hkv, row.d, row.kv_dtype))
        assert all(type(v) in (str, int) for v in cell), cell


def test_the_fa2_prefill_softmax_costs_sm_clocks_per_score_element_beside_the_mma():
    """attn_exp_cyc adds flops_eff / (4 d) x cyc / (SMs x boost x f_clk) to a prefill's compute and nothing to a decode;
    absent or 0 it prices as before; negative is refused (issue 19 item 1, wave 34, helper a100p)."""
    fc0 = {**A.attention_constants(A100), "attn_exp_cyc": 0.0}
    fc = {**fc0, "attn_exp_cyc": 0.0625}
    s, c, hq, hkv, d = np.array([4096.0, 1.0]), np.array([0.0, 4095.0]), 32, 8, 128
    r0 = A.attention_request_terms(s, c, hq, hkv, d, A100, fc=fc0, f_clk=1.0)
    r1 = A.attention_request_terms(s, c, hq, hkv, d, A100, fc=fc, f_clk=1.0)
    per_clk = A100.sms * A.boost_mhz(A100) * 1e6
    extra = r0["flops_eff"][0] / (4 * d) * 0.0625 / per_clk
    assert r1["t_compute"][0] - r0["t_compute"][0] == pytest.approx(extra, rel=1e-12)
    assert r1["t_compute"][1] == r0["t_compute"][1] == 0.0  # decode: no compute branch
    fc_absent = {k: v for k, v in fc0.items() if k != "attn_exp_cyc"}
    assert A.attention_request_terms(s, c, hq, hkv, d, A100, fc=fc_absent, f_clk=1.0)["t_compute"] == pytest.approx(
        r0["t_compute"], rel=1e-15)
    assert float(A.exp_time(4.0, 1.0, A100, fc, 2.0)) == pytest.approx(0.0625 / per_clk / 2.0)
    with pytest.raises(ValueError, match="attn_exp_cyc"):
        A.exp_time(4.0, 1.0, A100, {"attn_exp_cyc": -1.0})


def _a100_lane_with(name, value):
    """The default constants with A100's attention lane factor `name` set to `value`, and with it set to 0."""
    base = Constants.default()
    lane = str(base.get("attn_lane", A100))
    lanes = {k: dict(v) for k, v in (base.get("attn_lane_factors", A100) or {}).items()}
    lanes.setdefault(lane, {})[name] = value
    zero = {k: dict(v) for k, v in lanes.items()}
    zero[lane][name] = 0.0
    return base.with_overrides({"attn_lane_factors": lanes}), base.with_overrides({"attn_lane_factors": zero})


def test_the_serving_timer_prices_the_fa2_prefill_softmax_as_the_step_does():
    from steptime.serve import StepTimer

    c, c0 = _a100_lane_with("attn_exp_cyc", 0.0625)
    assert A.attention_constants(A100, c)["attn_exp_cyc"] == 0.0625
    assert A.attention_constants(A100, c0)["attn_exp_cyc"] == 0.0  # the factor at 0: neutral
    t_new, t_old = StepTimer("llama-3.1-8b", "a100-sxm", constants=c), StepTimer("llama-3.1-8b", "a100-sxm", constants=c0)
    assert t_new.check() < 1e-12  # its prefill path agrees with predict_steps under the factor
    new, kv = [4096, 2048], [0, 1024]
    assert t_new.prefill_attention(new, kv) == pytest.approx(t_new._prefill_attention_ref(new, kv), rel=1e-12)
    assert t_new.prefill_attention(new, kv) > t_old.prefill_attention(new, kv)


def _exp_cells(gpu, icpt, slope, dims=(64, 128, 256)):
    """Long single-chunk prefill cells whose SM clocks per causal score element are icpt + slope d."""
    g = get_gpu(gpu)
    per = g.sms * A.boost_mhz(g) * 1e6
    rows = []
    for d in dims:
        for b, H, s in [(1, 64, 4096), (2, 32, 8192), (1, 32, 1024), (1, 8, 8192)]:  # last two: outside the window
            y = (icpt + slope * d) * b * H * s * (s + 1) / 2 / per * 1e3
            if s < E.EXP_MIN_S or b * H < E.EXP_MIN_ROWS:
                y *= 3.0  # would pull the line if it were read
            rows.append({"gpu": gpu, "phase": "prefill", "kv_dtype": "bf16", "b": b, "s": s, "c": 0, "H": H,
                         "Hkv": 8, "d": d, "y_ms": y})
    return pd.DataFrame(rows)


def test_the_softmax_clocks_per_element_are_measured_on_the_training_gpus_fa2_only():
    x = pd.concat([_exp_cells("l40s", 0.06, 0.008), _exp_cells("rtx-pro-6000", 0.08, 0.006),
                   _exp_cells("a100-sxm", 0.5, 0.003, dims=(128,))], ignore_index=True)
    assert E.exp_cyc(x, ["l40s"]) == pytest.approx(0.06)
    assert E.exp_cyc(x, ["l40s", "rtx-pro-6000"]) == pytest.approx(0.07)
    assert E.exp_cyc(x, ["a100-sxm", "l40s"]) == pytest.approx(0.06)  # one head dim: no intercept, not counted
    assert E.exp_cyc(x, ["a100-sxm"]) == 0.0
    mixed = pd.concat([x, _split_cells(0.25).assign(gpu="l40s")], ignore_index=True)
    assert E.swap_fixed(mixed, ["l40s"], "fa2")["attn_exp_cyc"] == pytest.approx(0.06)
    assert E.swap_fixed(mixed, ["l40s"], "fa3")["attn_exp_cyc"] == 0.0  # FA3 / TRT-LLM-gen overlap the softmax
    assert "a100p" in " ".join(E.DISCLOSED) and "after seeing" in E.EXP_DISCLOSED


def test_e1_24_scores_each_fa2_gpu_with_softmax_clocks_from_its_lane_siblings(repo_root):
    """A100 (head dim 128 only) is scored with the L40S / RTX PRO 6000 intercept, each GPU never with its own cells;
    the other lanes carry none (fails on the wave-33 result: no attn_exp_cyc)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    cells = E.tidy_cells(pd.read_parquet(repo_root / "results" / "data" / "attention_generation.parquet"),
                         pd.read_parquet(repo_root / "results" / "data" / "attention_context.parquet"))
    for g, rec in doc["metrics"]["per_gpu"].items():
        if rec["lane"] in E.EXP_LANES:
            assert rec["factors"]["attn_exp_cyc"] == pytest.approx(E.exp_cyc(cells, rec["fit_on"]), abs=1e-6)
            assert rec["factors"]["attn_exp_cyc"] > 0 and g not in rec["fit_on"]
        else:
            assert rec["factors"]["attn_exp_cyc"] == 0.0


def test_the_fa2_prefill_fill_is_capped_at_its_longest_cta():
    """attn_fill_tail > 0 caps Brent's fill at the critical path fill_tail x tiles / (fill_half x SMs): a few-CTA
    prefill is priced slower, a many-CTA one and every decode as before; 0 or absent prices as before; negative is
    refused (issue 19 item 1, wave 35, helper fa2fill)."""
    fc0 = {**A.attention_constants(A100), "attn_fill_tail": 0.0, "attn_fill_half": 0.2}
    fc = {**fc0, "attn_fill_tail": 0.62}
    tiles = np.array([0.0, 4.0, 40.0, 1e5])
    brent = np.divide(tiles, tiles + 0.2 * A100.sms, out=np.ones(4), where=tiles > 0)
    assert np.array_equal(A.fill_eta(tiles, A100.sms, fc0), brent)
    assert np.array_equal(A.fill_eta(tiles, A100.sms, {k: v for k, v in fc0.items() if k != "attn_fill_tail"}), brent)
    capped = A.fill_eta(tiles, A100.sms, fc)
    assert capped[0] == 1.0 and capped[3] == brent[3]  # no prefill; many tiles: Brent's bound binds
    assert capped[1] == pytest.approx(0.62 * 4.0 / (0.2 * A100.sms)) and capped[1] < brent[1]  # the longest CTA binds
    assert float(A.fill_eta(4.0, A100.sms, fc)) == pytest.approx(capped[1])  # floats too (the serving timer)
    # cells: one request x one head x 2k tokens slower, 64 requests x 32 heads x 8k tokens and a decode unchanged
    b, s, c, hq, hkv = np.array([1.0, 64.0, 8.0]), np.array([2048.0, 8192.0, 1.0]), np.array([0.0, 0.0, 2047.0]), \
        np.array([1.0, 32.0, 32.0]), np.array([1.0, 8.0, 8.0])
    t0 = A.attention_cells(b, s, c, hq, hkv, 128, A100, fc=fc0, f_clk=1.0)["t"]
    t1 = A.attention_cells(b, s, c, hq, hkv, 128, A100, fc=fc, f_clk=1.0)["t"]
    assert t1[0] > t0[0] * 1.05 and t1[1] == t0[1] and t1[2] == t0[2]
    with pytest.raises(ValueError, match="attn_fill_tail"):
        A.fill_eta(4.0, A100.sms, {**fc0, "attn_fill_tail": -0.1})


def test_the_serving_timer_caps_the_fa2_prefill_fill_as_the_step_does():
    from steptime.serve import StepTimer

    c, c0 = _a100_lane_with("attn_fill_tail", 0.62)
    assert A.attention_constants(A100, c)["attn_fill_tail"] == 0.62
    t_new, t_old = StepTimer("llama-3.1-8b", "a100-sxm", constants=c, tp=8), \
        StepTimer("llama-3.1-8b", "a100-sxm", constants=c0, tp=8)
    assert t_new.check() < 1e-12  # its prefill path agrees with predict_steps under the cap
    new, kv = [512], [0]  # one short prompt at 4 query heads a rank: few CTAs
    assert t_new.prefill_attention(new, kv) == pytest.approx(t_new._prefill_attention_ref(new, kv), rel=1e-12)
    assert t_new.prefill_attention(new, kv) > t_old.prefill_attention(new, kv)


def test_the_launch_order_tail_is_derived_and_set_on_the_fa2_lane_only():
    assert E.FILL_TAIL == round(E.launch_order_tail(), 2)
    assert 0.55 < E.launch_order_tail(64, 64) < 0.7  # 32 waves: most of the longest CTA still sticks out
    assert E.launch_order_tail(8, 1) > 0.95  # one head below a wave: the kernel is its longest CTA
    with pytest.raises(ValueError, match="launch_order_tail"):
        E.launch_order_tail(0, 4)
    x = _split_cells(0.25).assign(gpu="l40s")
    assert E.swap_fixed(x, ["l40s"], "fa2")["attn_fill_tail"] == E.FILL_TAIL
    assert E.swap_fixed(x, ["l40s"], "fa3")["attn_fill_tail"] == 0.0  # FA3 starts the longest tiles first
    assert "fa2fill" in " ".join(E.DISCLOSED) and "after seeing" in E.FILL_TAIL_DISCLOSED


def test_e1_24_caps_the_fa2_lanes_prefill_fill_only(repo_root):
    """Every fa2 GPU's fold carries the derived tail, the other lanes none (fails on the wave-34 result)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    for g, rec in doc["metrics"]["per_gpu"].items():
        want = E.FILL_TAIL if rec["lane"] in E.FILL_TAIL_LANES else 0.0
        assert rec["factors"]["attn_fill_tail"] == want, g


def test_fill_eta_scalar_path_is_the_array_path_to_the_bit():
    """The serving timer calls fill_eta with Python floats (a fast path): the same numbers as the array path,
    including no prefill (tiles 0), no cap (tail 0) and the cap binding; a negative tail is refused on both."""
    import numpy as np
    import pytest
    from steptime.terms.attention import fill_eta
    rng = np.random.default_rng(7)
    tiles = np.concatenate([[0.0, -1.0, 1e-9], rng.uniform(0.01, 500.0, 200)])
    for fc in ({"attn_fill_half": 0.1832, "attn_fill_tail": 0.62}, {"attn_fill_half": 0.18, "attn_fill_tail": 0.0},
               {"attn_fill_half": 0.25}, {"attn_fill_half": np.float64(0.3), "attn_fill_tail": np.float64(0.5)}):
        for sms in (108, 142):
            arr = fill_eta(tiles, sms, fc)
            one = [fill_eta(float(t), sms, fc) for t in tiles]
            assert all(isinstance(x, float) for x in one)
            assert np.array_equal(arr, np.array(one))
    with pytest.raises(ValueError, match="attn_fill_tail"):
        fill_eta(3.0, 108, {"attn_fill_half": 0.2, "attn_fill_tail": -0.1})
    with pytest.raises(ValueError, match="attn_fill_tail"):
        fill_eta(np.array([3.0, 4.0]), 108, {"attn_fill_half": 0.2, "attn_fill_tail": -0.1})
    with pytest.raises(ValueError, match="attn_fill_tail"):
        fill_eta(3.0, 108, {"attn_fill_half": 0.2, "attn_fill_tail": np.array([0.5, -0.1])})


def test_split_ctas_is_the_long_kv_limit_of_fa3s_split_under_vllm():
    """FlashAttention-3's varlen scheduler under vLLM's cap (16 splits) launches streams x min(16, ceil(SMs / (1.1
    streams))) CTAs at long KV; a lane without a per-CTA rate has no bound (None); bad input is refused."""
    h100 = get_gpu("h100-sxm")  # 132 SMs
    on = {"attn_cta_gbs": 100.0}
    assert A.CTA_SPLIT_MAX == 16 and A.CTA_SPLIT_MARGIN == 1.1
    got = A.split_ctas(np.array([0.0, 1.0, 2.0, 8.0, 64.0, 200.0]), h100, on)
    assert got.tolist() == [0.0, 16.0, 32.0, 8.0 * 15.0, 64.0 * 2.0, 200.0]
    assert A.split_ctas(4.0, h100, {}) is None and A.split_ctas(4.0, h100, {"attn_cta_gbs": 0.0}) is None
    with pytest.raises(ValueError, match="attn_cta_gbs"):
        A.split_ctas(4.0, h100, {"attn_cta_gbs": -1.0})
    with pytest.raises(ValueError, match="streams"):
        A.split_ctas(-1.0, h100, on)
    assert A.decode_ctas(np.array([1.0, 1.0]), np.array([True, False]), h100, on).tolist() == [16.0, 0.0]
    assert A.decode_ctas(1.0, True, h100, {}) is None


def test_a_few_stream_decode_reads_at_the_split_ctas_rate_and_other_batches_do_not():
    """With attn_cta_gbs a decode of one KV head x one request at long KV is bounded by 16 CTAs x the rate; a decode
    of many streams, a prefill and a lane without the factor price as before (bit for bit)."""
    gpu = get_gpu("h100-sxm")
    c = Constants.default()
    fc0 = A.attention_constants(gpu, c)
    fc = {**fc0, "attn_cta_gbs": 100.0}
    args = (np.array([1.0, 64.0, 1.0]), np.array([1.0, 1.0, 2048.0]), np.array([65535.0, 65535.0, 0.0]),
            np.array([8.0, 8.0, 8.0]), np.array([1.0, 8.0, 1.0]), 128.0, gpu, c)
    r0 = A.attention_cells(*args, fc=fc0)
    r1 = A.attention_cells(*args, fc=fc)
    nbytes = 65536.0 * 2 * 128 * 2 + 4 * 8 * 128
    assert float(r1["t_memory"][0]) == pytest.approx(max(float(r0["t_memory"][0]), nbytes / (16 * 100e9)), rel=1e-12)
    assert float(r1["t"][0]) > float(r0["t"][0])
    assert r1["t"][1] == r0["t"][1] and r1["t"][2] == r0["t"][2]  # 512 streams x 1 CTA each; a prefill
    # attention_time's groups (general path and decode fast path) price the same bound as the cells
    for n in (1, 300):
        kv = np.full(n, 65535.0 if n == 1 else 500.0)
        g = A.attention_time(np.ones(n), kv, 8, 1, 128, gpu, c.with_overrides({"attn_lane_factors": {
            "fa3": {**c.get("attn_lane_factors")["fa3"], "attn_cta_gbs": 100.0}}}), group=np.zeros(n, dtype=int),
            n_groups=1)
        cell = A.attention_cells(float(n), 1.0, float(kv[0]), 8.0, 1.0, 128.0, gpu, c,
                                 fc={**A.attention_constants(gpu, c), "attn_cta_gbs": 100.0})
        assert float(g["t"][0]) == pytest.approx(float(cell["t"]), rel=1e-12)


def test_the_split_cta_rate_is_measured_on_the_training_gpus_fa3_only():
    """attn_cta_gbs: one split-KV CTA's rate over the training GPUs' one-stream GQA decode cells at KV >= 16k
    (bytes / (16 CTAs x (y - floor))), their median; 0 on the FA2 and TRT-LLM-gen lanes and without such cells."""
    def cells(gpu, rate, floor_ms):
        rows = [{"gpu": gpu, "phase": "decode", "kv_dtype": "bf16", "b": 1, "s": 1, "c": c, "H": 8, "Hkv": 1, "d": 128,
                 "y_ms": floor_ms + ((c + 1) * 2 * 128 * 2 / (16 * rate * 1e9) * 1e3 if c >= 16384 else 0.0)}
                for c in (63, 127, 32767, 65535)]
        rows.append({**rows[-1], "b": 4, "y_ms": 99.0})  # four streams: not a one-stream cell
        rows.append({**rows[-1], "b": 1, "H": 1, "y_ms": 99.0})  # MHA: not split the same way
        return pd.DataFrame(rows)
    x = pd.concat([cells("h100-sxm", 90.0, 0.011), cells("h200-sxm", 110.0, 0.012)], ignore_index=True)
    assert E.cta_gbs(x, ["h100-sxm"]) == pytest.approx(90.0)
    assert E.cta_gbs(x, ["h100-sxm", "h200-sxm"]) == pytest.approx(100.0)
    assert E.cta_gbs(x, ["b200"]) == 0.0
    x = pd.concat([x, _split_cells(0.25).assign(gpu="h200-sxm")], ignore_index=True)  # swap_fixed's split share
    assert E.swap_fixed(x, ["h200-sxm"], "fa3")["attn_cta_gbs"] == pytest.approx(110.0)
    assert E.swap_fixed(x, ["h200-sxm"], "fa2")["attn_cta_gbs"] == 0.0
    assert E.CTA_GBS_LANES == ("fa3",)  # TRT-LLM-gen (and FA2) split by their own rules
    assert "attn_cta_gbs" not in E.fit_factors("fa3")  # measured, not fitted
    assert "dattn8" in E.CTA_GBS_DISCLOSED and E.CTA_GBS_DISCLOSED in E.DISCLOSED


def test_e1_24_bounds_the_fa3_lanes_split_ctas_held_out(repo_root):
    """E1.24's Hopper folds carry attn_cta_gbs measured on the other Hopper GPU; the other lanes carry none (fails on
    the wave-35 result, which has no per-CTA rate)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    for g, rec in doc["metrics"]["per_gpu"].items():
        if rec["lane"] in E.CTA_GBS_LANES:
            assert 50.0 < rec["factors"]["attn_cta_gbs"] < 200.0 and g not in rec["fit_on"]
        else:
            assert not rec["factors"].get("attn_cta_gbs", 0.0)


def test_e1_24_carries_the_fa2_unswapped_stream_clocks_held_out(repo_root):
    """E1.24's fa2 folds carry attn_stream_clk measured on the other two fa2 GPUs (1,700-2,300 clocks) and no
    attn_stream_gbs; the other lanes neither (fails on the wave-36 result, whose fa2 folds carry attn_stream_gbs)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    seen = 0
    for g, rec in doc["metrics"]["per_gpu"].items():
        fac = rec["factors"]
        assert not fac.get("attn_stream_gbs", 0.0)
        if rec["lane"] in A.SWAP_COPY_LANES:
            assert 1700.0 < fac["attn_stream_clk"] < 2300.0 and g not in rec["fit_on"]
            seen += 1
        else:
            assert not fac.get("attn_stream_clk", 0.0)
    assert seen == 3  # A100, L40S, RTX PRO 6000


def test_trtllm_split_count_fills_the_sms_per_kv_head_stream():
    """TRT-LLM-gen's CTAs per (request, KV head): min(ceil(KV / split tile), max(1, floor(SMs / (b H_kv)))) where the
    lane's attn_split_rule says so; FlashAttention-2's heuristic otherwise; an unknown rule is refused."""
    b200 = get_gpu("b200")  # 148 SMs
    fc = {"attn_split_tile": 256.0, "attn_split_rule": A.SPLIT_RULE_TRTLLM}
    b = np.array([1.0, 1.0, 1.0, 2.0, 8.0, 200.0, 0.0])
    c = np.array([65535.0, 8191.0, 100.0, 65535.0, 65535.0, 65535.0, 65535.0])
    got = A.split_count(b, 8.0, 1.0, c, 128.0, b200, fc)
    assert got.tolist() == [148.0, 32.0, 1.0, 74.0, 18.0, 1.0, 1.0]
    assert A.trtllm_split_count(1.0, 8.0, 65535.0, 128.0, b200, fc) == 18.0  # 8 KV heads: floor(148 / 8)
    # the lane's tile at every head dim (not FlashAttention-2's halving above 128)
    assert A.trtllm_split_count(1.0, 1.0, 4095.0, 256.0, b200, fc) == 16.0
    with pytest.raises(ValueError, match="head_dim"):
        A.trtllm_split_count(1.0, 1.0, 4095.0, 0.0, b200, fc)
    fa2 = A.split_count(b, 8.0, 1.0, c, 128.0, b200, {"attn_split_tile": 256.0})
    assert fa2.tolist() != got.tolist()
    with pytest.raises(ValueError, match="attn_split_rule"):
        A.split_count(1.0, 8.0, 1.0, 100.0, 128.0, b200, {"attn_split_rule": 2.0})
    # the lane's rule is set with its split tile, never fitted; trtllm's per-split cost is fitted on its lane
    assert E.SPLIT_RULE_BY_LANE == {"trtllm": A.SPLIT_RULE_TRTLLM} and "trtllm" in E.SPLIT_US_LANES
    assert "attn_split_us" in E.fit_factors("trtllm") and "attn_split_rule" not in E.fit_factors("trtllm")
    assert "dattn8" in E.TRTLLM_SPLIT_DISCLOSED and E.TRTLLM_SPLIT_DISCLOSED in E.DISCLOSED


def test_e1_24_prices_trtllm_splits_by_its_own_rule_held_out(repo_root):
    """E1.24's Blackwell folds carry attn_split_rule 1 (TRT-LLM-gen's count) and an attn_split_us fitted on the other
    Blackwell GPUs; the FA2 and FA3 folds keep FlashAttention-2's count (fails on the wave-35 result)."""
    import json

    doc = json.loads((repo_root / "results" / "E1_24.json").read_text())
    for g, rec in doc["metrics"]["per_gpu"].items():
        if rec["lane"] == "trtllm":
            assert rec["factors"]["attn_split_rule"] == A.SPLIT_RULE_TRTLLM
            assert 0.0 < rec["factors"]["attn_split_us"] < 1.0 and g not in rec["fit_on"]
        else:
            assert rec["factors"].get("attn_split_rule", 0.0) == 0.0


def test_split_count_tile_is_the_tile_the_lane_counts_its_splits_in():
    """The serving timer caches split counts by KV blocks: the blocks must be counted in the tile the lane's
    split_count uses (TRT-LLM-gen: attn_split_tile at every head dim; FlashAttention-2: split_tile's scaling),
    else a head-dim-64 model's timer drifts from the step (gpt-oss on B200 did, by 1.4e-3)."""
    import numpy as np
    from steptime.specs import get_gpu
    from steptime.terms.attention import SPLIT_RULE_TRTLLM, split_count, split_count_tile, split_tile
    g = get_gpu("b200")
    trt = {"attn_split_tile": 128.0, "attn_split_rule": SPLIT_RULE_TRTLLM}
    fa2 = {"attn_split_tile": 128.0, "attn_split_rule": 0.0}
    assert float(split_count_tile(64, trt)) == 128.0 and float(split_count_tile(64, fa2)) == float(split_tile(64, fa2))
    tile = float(split_count_tile(64, trt))
    for n in (1, 2, 3):
        for kv in (100.0, 300.0, 1000.0, 4000.0):
            blocks = max(1.0, np.ceil(kv / tile))  # the count is a function of the blocks in this tile
            assert float(split_count(n, 64, 8, kv, 64, g, trt)) == float(split_count(n, 64, 8, blocks * tile, 64, g, trt))
