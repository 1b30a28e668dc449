"""All-reduce term (terms/comm.py) and E1.25 (experiments/comm.py): the law, the readings, held out."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime_lab.experiments import comm as E
from steptime.specs import get_gpu
from steptime.terms import comm as C

NCCL_SHAPE = {"a_ll": 0.4, "d_ll128_us": 8.0, "a_ll128": 0.8, "d_simple_us": 30.0}
CUSTOM_SHAPE = {"a_one": 0.5, "d_two_us": 6.0, "a_two": 0.8}


def test_law_is_monotone_floored_and_never_beats_its_bus_bandwidth():
    x = np.logspace(2, 9, 60)
    L, B = 10.0, 400e3  # us, bytes/us
    t = C.nccl_law(x, L, B, NCCL_SHAPE)
    assert np.all(np.diff(t) > 0)
    assert t[0] == pytest.approx(L, rel=0.05)
    assert np.all(t >= x / B)
    assert t[-1] == pytest.approx(L + NCCL_SHAPE["d_simple_us"] + x[-1] / B, rel=0.02)
    c = C.custom_law(x, 8, 5.0, B, CUSTOM_SHAPE, t)
    assert np.all(c <= t + 1e-9)  # the engine falls back to NCCL where NCCL is faster
    assert np.all(c >= np.minimum(5.0 + x / B, t) - 1e-9)
    assert c[0] < t[0]


def test_custom_law_switches_where_the_kernel_switches():
    """With the kernel's one-shot limit, the one-shot branch runs strictly below it and the two-shot branch
    (never slower than NCCL) from it on: the law jumps where vLLM's kernel jumps, as the measured tables do
    (B300 at 8 ranks: 9.4 us at 128 KiB, 26 us at 256 KiB)."""
    L, B, n = 7.0, 700e3, 8
    m = np.array([65536.0, 262143.0, 262144.0, 1048576.0])
    x = C.bus_bytes(m, n)
    tn = C.nccl_law(x, 26.0, B, NCCL_SHAPE)
    t = C.custom_law(x, n, L, B, CUSTOM_SHAPE, tn, 262144)
    one = L + m * (n - 1) / (CUSTOM_SHAPE["a_one"] * B)
    assert t[:2] == pytest.approx(one[:2])
    assert np.all(t[2:] <= tn[2:] + 1e-9) and np.all(t[2:] >= L + CUSTOM_SHAPE["d_two_us"] * 0.5)
    assert t[2] != pytest.approx(one[2])
    soft = C.custom_law(x, n, L, B, CUSTOM_SHAPE, tn)  # no switch stated: the soft minimum, below both branches
    assert np.all(soft <= np.maximum(t, one) + 1e-9)


def _synthetic(gpus=("h100-sxm", "h200-sxm", "b200", "b300"), bw_scale=None, custom_shape=None):
    rows = []
    sizes = [2 ** k for k in range(9, 30)]
    for i, g in enumerate(gpus):
        for n in (2, 4, 8):
            B = (300e3 + 50e3 * i) * (1 + 0.1 * np.log2(n)) * (bw_scale or {}).get(g, 1.0)
            LN = (6.0 + i) * n ** 0.5
            LC = 0.5 * LN
            for impl, ks in (("nccl", "NCCL"), ("custom", "vLLM_custom_graph")):
                m = np.array(sizes, dtype=float)
                x = C.bus_bytes(m, n)
                tn = C.nccl_law(x, LN, B, NCCL_SHAPE)
                t = tn if impl == "nccl" else C.custom_law(x, n, LC, B, custom_shape or CUSTOM_SHAPE, tn,
                                                                  E.one_shot_max(n))
                for mm, tt in zip(m, t):
                    rows.append({"gpu": g, "dtype": "bfloat16", "kernel_source": ks, "num_gpus": n,
                                 "message_bytes": int(mm), "latency_ms": tt / 1e3})
    return pd.DataFrame(rows)


def test_held_out_fit_recovers_a_law_that_generated_the_data():
    r = E.run(_synthetic(), ablation=False)
    doc = E.document(r)
    for rec in doc["metrics"]["records"]:
        assert rec["mape"] < 4.0, rec  # B(4) is interpolated between the two read degrees
    for g, v in r["per_gpu"].items():
        assert g not in v["donors"]


def test_readings_are_three_nccl_cells_outside_the_scored_range_and_disjoint():
    d, _ = E.tidy(_synthetic())
    for g in d["gpu"].unique():
        reads = E.readings(d, g)
        assert len(reads) <= 3
        assert all(not (E.SCORE_RANGE[0] <= r["message_bytes"] <= E.SCORE_RANGE[1]) for r in reads)
        scored = d[(d["gpu"] == g) & d["scored"]]
        assert not {r["cell"] for r in reads} & set(E.eval_cells(scored))
    # a leaking evaluation is refused
    from steptime.errors import CalibrationLeakError

    r = E.run(_synthetic(), ablation=False)
    with pytest.raises(CalibrationLeakError):
        r["calibration"].check_disjoint([E.readings(d, "b200")[0]["cell"]])


def test_pcie_custom_beyond_two_ranks_and_eager_rows_are_left_out_and_counted():
    df = _synthetic(("l40s", "rtx-pro-6000", "h100-sxm"))
    eager = df[df["kernel_source"] == "vLLM_custom_graph"].assign(kernel_source="vLLM_custom_eager")
    d, skipped = E.tidy(pd.concat([df, eager]))
    assert skipped["custom_pcie_above_2_gpus"] == 2 * 2 * 21
    assert skipped["eager_custom_rows"] == len(eager)
    assert not ((d["impl"] == "custom") & (d["link"] == "pcie") & (d["num_gpus"] > 2)).any()


def test_step_all_reduce_uses_the_shipped_curve_and_falls_back_to_the_ring_law():
    c = Constants.default()
    h100 = get_gpu("h100-sxm")
    x = np.array([64e3, 16e6])
    nc = C.allreduce_time(x, 8, h100, c, "nccl")
    cu = C.allreduce_time(x, 8, h100, c, "custom")
    ring = C.allreduce_time(x, 8, h100, c, "ring")
    assert np.all(nc > 0) and np.all(cu <= nc) and not np.allclose(nc, ring)
    assert np.all(C.allreduce_time(x, 1, h100, c, "nccl") == 0)
    a40 = get_gpu("a40")  # no measured all-reduce table: the datasheet ring law
    assert np.allclose(C.allreduce_time(x, 2, a40, c, "nccl"), C.ring_time(x, 2, a40, c))
    held = c.without_gpu("h100-sxm")
    assert np.allclose(C.allreduce_time(x, 8, h100, held, "nccl"), C.ring_time(x, 8, h100, held))
    with pytest.raises(ValueError, match="implementation"):
        C.allreduce_time(x, 2, h100, c, "pigeon")


def test_no_p2p_profile_prices_every_all_reduce_as_nccl_through_host_memory():
    """vllm-no-p2p (PCIe GPUs without peer-to-peer): one law at every size, t = floor + bus bytes / (eta x PCIe),
    which reproduces the two LLMServingSim RTX PRO 6000 readings it was taken from, with no custom kernel and no
    fusion; the default vllm profile is untouched (custom all-reduce, the P2P table of E1.25)."""
    from steptime.specs.engines import get_engine
    from steptime.step import predict_step
    eng, gpu = get_engine("vllm-no-p2p"), get_gpu("rtx-pro-6000")
    assert eng.allreduce_impl == "nccl_host" and not eng.fuses_norm(np.array([1e3, 1e6]), 2, gpu).any()
    t = C.engine_allreduce_time(np.array([10240.0, 20971520.0]), 2, gpu, eng) * 1e6
    assert t == pytest.approx([16.24, 1309.13], rel=1e-3)  # the readings (hardware.yaml, commit e08dc388)
    assert C.engine_allreduce_time(np.array([1e6]), 1, gpu, eng)[0] == 0.0
    # four ranks: the ring's bus bytes 2 (n - 1) / n x message
    t4 = C.host_path_time(np.array([4e6]), 4, gpu, eng)[0]
    assert t4 == pytest.approx(15.61e-6 + 1.5 * 4e6 / (0.2533 * 64e9), rel=1e-6)
    # slower than the peer-to-peer pricing at every size, and the step carries the difference only at TP > 1
    sizes = np.logspace(3, 8, 12)
    p2p = C.engine_allreduce_time(sizes, 2, gpu, get_engine("vllm"), Constants.default())
    assert np.all(C.engine_allreduce_time(sizes, 2, gpu, eng) > p2p)
    a = predict_step("qwen3-32b", "rtx-pro-6000", decode=[(64, 1000)], tp=2, engine="vllm-no-p2p")
    b = predict_step("qwen3-32b", "rtx-pro-6000", decode=[(64, 1000)], tp=2, engine="vllm")
    assert a.terms_ms["allreduce"] > 2 * b.terms_ms["allreduce"]
    one = [predict_step("llama-3.1-8b", "rtx-pro-6000", decode=[(64, 1000)], engine=e).total_ms
           for e in ("vllm", "vllm-no-p2p")]
    assert one[0] == one[1]


def test_nccl_host_profile_needs_its_law():
    from steptime.specs.engines import _parse_engine
    import yaml
    from steptime.specs.engines import ENGINE_FILE
    doc = yaml.safe_load(ENGINE_FILE.read_text())["engines"]["vllm-no-p2p"]
    doc = {**doc, "allreduce": {k: v for k, v in doc["allreduce"].items() if k != "host_path_eta"}}
    with pytest.raises(ValueError, match="host_path_floor_us and host_path_eta"):
        _parse_engine("broken", doc)


def test_floor_reading_degree_is_named_and_read_outside_the_scored_range():
    d, _ = E.tidy(_synthetic())
    for which, n in (("largest", 8), ("middle", 4), ("smallest", 2)):
        reads = E.readings(d, "b200", which)
        floor = [r for r in reads if r["what"] == "L"]
        assert len(reads) == 3 and len(floor) == 1 and floor[0]["n"] == n
        assert not E.SCORE_RANGE[0] <= floor[0]["message_bytes"] <= E.SCORE_RANGE[1]
    assert E.readings(d, "b200") == E.readings(d, "b200", "largest")  # the rule before, by default
    with pytest.raises(ValueError, match="floor degree"):
        E.readings(d, "b200", "median")


def test_floor_degree_is_chosen_without_the_held_out_gpus_cells():
    """choose_floor_degree judges the candidates on the other GPUs only: the held-out GPU's scored cells can be
    anything without moving the choice or its table, and a training GPU's cells do move the table."""
    df = _synthetic()
    d, _ = E.tidy(df)
    cp = E.curve_params(d)
    gpus = sorted(d["gpu"].unique())
    others = [o for o in gpus if o != "b300"]
    choice, table = E.choose_floor_degree(d, cp, "b300", others)
    assert choice in E.FLOOR_DEGREES and set(table) == set(E.FLOOR_DEGREES)
    assert table[choice] == min(table.values())
    scored = d["scored"] & (d["gpu"] == "b300")
    d2 = d.copy()
    d2.loc[scored, "t_us"] *= 3.0
    assert E.choose_floor_degree(d2, E.curve_params(d2), "b300", others) == (choice, table)
    d3 = d.copy()
    d3.loc[d3["scored"] & (d3["gpu"] == "h100-sxm") & (d3["num_gpus"] == 2), "t_us"] *= 1.5
    assert E.choose_floor_degree(d3, E.curve_params(d3), "b300", others)[1] != table
    with pytest.raises(ValueError, match="two other GPUs"):
        E.choose_floor_degree(d, cp, "b300", ["b200"])


def test_held_out_run_records_the_floor_degree_it_read():
    r = E.run(_synthetic(), ablation=False)
    for g, v in r["per_gpu"].items():
        assert v["floor_degree"] in E.FLOOR_DEGREES
        floor = [x for x in v["readings"] if x["what"] == "L"]
        assert floor[0]["n"] == E._degree(sorted({2, 4, 8}), v["floor_degree"])


def test_held_out_mape_scores_one_gpu_per_implementation_from_the_others():
    """On tables the law generated, one GPU held out from the others is predicted within a few %, per
    implementation; its own cells moved by a factor show up in its score."""
    d, _ = E.tidy(_synthetic())
    cp = E.curve_params(d)
    others = ["b300", "h100-sxm", "h200-sxm"]
    m = E.held_out_mape(d, cp, "b200", others)
    assert set(m) == {"nccl", "custom"} and all(v < 4.0 for v in m.values())
    d2 = d.copy()
    d2.loc[d2["scored"] & (d2["gpu"] == "b200") & (d2["impl"] == "nccl"), "t_us"] *= 1.5
    m2 = E.held_out_mape(d2, E.curve_params(d2), "b200", others)
    assert m2["nccl"] > 20.0 and m2["custom"] == pytest.approx(m["custom"])


def test_shape_memo_fits_each_donor_set_once_and_changes_nothing(monkeypatch):
    """shapes_of remembers a fit by its set of GPUs (any order); the floor-degree choice with the memo equals the
    choice without it, and fits fewer times."""
    d, _ = E.tidy(_synthetic())
    cp = E.curve_params(d)
    gpus = sorted(d["gpu"].unique())
    others = [o for o in gpus if o != "b300"]
    calls = []
    real = E.fit_shapes
    monkeypatch.setattr(E, "fit_shapes", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain = E.choose_floor_degree(d, cp, "b300", others)
    n_plain = len(calls)
    memo: dict = {}
    assert E.choose_floor_degree(d, cp, "b300", others, memo) == plain
    assert len(calls) - n_plain < n_plain
    assert E.shapes_of(d, cp, list(reversed(others)), memo) is E.shapes_of(d, cp, others, memo)


def test_the_run_ships_the_fold_that_scoring_uses():
    """run and held_out_mape share one fold: the parameters run records for a GPU are fold's at its floor degree."""
    r = E.run(_synthetic(), ablation=False)
    d, cp = r["data"], r["curve_params"]
    gpus = sorted(d["gpu"].unique())
    for g, v in r["per_gpu"].items():
        f = E.fold(d, cp, g, [o for o in gpus if o != g], v["floor_degree"])
        assert {f"{i}/{n}": p for (i, n), p in sorted(f["params"].items())} == v["params"]
        assert f["reads"] == v["readings"] and f["refused"] == v["refused"]
        assert set(f["params"]) <= set(f["shapes"])


def _pcie_synthetic():
    """_synthetic with two PCIe GPUs at PCIe speeds (times x 20); L40S at 8 ranks 10x slower again (bus bandwidth
    under the bounds' tenth of its link: the host-staged regime)."""
    df = _synthetic(("h100-sxm", "h200-sxm", "b200", "l40s", "rtx-pro-6000"))
    pcie = df["gpu"].isin(["l40s", "rtx-pro-6000"])
    df.loc[pcie, "latency_ms"] *= 20.0
    df.loc[(df["gpu"] == "l40s") & (df["num_gpus"] == 8), "latency_ms"] *= 10.0
    return df


def test_a_donor_table_outside_the_bounds_donates_no_shape():
    """L40S-like NCCL at 8 ranks under a tenth of its link (host-staged) is out of regime: the PCIe GPU held out
    against it takes that degree's shape from all other GPUs' tables in regime, and the out-of-regime cells can be
    anything without moving its shapes."""
    d, _ = E.tidy(_pcie_synthetic())
    cp = E.curve_params(d)
    assert not E.in_regime(cp, "l40s", "nccl", 8)
    assert E.in_regime(cp, "l40s", "nccl", 4) and E.in_regime(cp, "rtx-pro-6000", "nccl", 8)
    others = ["b200", "h100-sxm", "h200-sxm", "l40s"]
    f = E.fold(d, cp, "rtx-pro-6000", others)
    assert E.shape_donors("rtx-pro-6000", others) == ["l40s"]
    assert f["shape_fallback"] == ["nccl/8"]
    assert f["shapes"][("nccl", 8)] == E.fit_shapes(d, cp, ["b200", "h100-sxm", "h200-sxm"])[("nccl", 8)]
    assert set(f["params"]) <= set(f["shapes"])
    d2 = d.copy()
    d2.loc[d2["scored"] & (d2["gpu"] == "l40s") & (d2["num_gpus"] == 8), "t_us"] *= 3.0
    f2 = E.fold(d2, E.curve_params(d2), "rtx-pro-6000", others)
    assert f2["shapes"] == f["shapes"]
    # an in-regime donor is used as before: its own degree-4 shape, not all others'
    assert f["shapes"][("nccl", 4)] == E.fit_shapes(d, cp, ["l40s"])[("nccl", 4)]


def test_own_reading_under_the_donor_floor_is_kept_and_priced_but_not_donated():
    """A GPU's own NCCL reading under ETA_BUS_MIN (0.1) of its link but over ETA_BUS_OWN_MIN (0.01) measures its host
    (L40S-like TP 8, 0.09 of its PCIe link here): held out, it is kept (not replaced by the datasheet transfer) and
    priced; as a donor the same table still gives no shape (in_regime). Under ETA_BUS_OWN_MIN it is refused."""
    d, _ = E.tidy(_pcie_synthetic())
    cp = E.curve_params(d)
    link = get_gpu("l40s").link_bw / 1e9
    B8 = cp[("l40s", "nccl", 8)]["B"] / 1e3
    assert C.ETA_BUS_OWN_MIN * link < B8 < C.ETA_BUS_MIN * link
    f = E.fold(d, cp, "l40s", ["b200", "h100-sxm", "h200-sxm", "rtx-pro-6000"])
    assert not [x for x in f["refused"] if x["what"] == "B"]
    assert f["params"][("nccl", 8)]["B"] / 1e3 == pytest.approx(B8)
    x = d[(d["gpu"] == "l40s") & d["scored"] & (d["num_gpus"] == 8)].reset_index(drop=True)
    t = E.predict_rows(x, f["params"], f["shapes"])
    assert np.all(np.isfinite(t)) and t[-1] / x["t_us"].iloc[-1] > 0.9  # the largest scored message: its own B
    assert not E.in_regime(cp, "l40s", "nccl", 8)  # the same table donates nothing
    # under the own floor (another 10x slower: 0.009 of the link) the reading is refused and replaced
    df = _pcie_synthetic()
    df.loc[(df["gpu"] == "l40s") & (df["num_gpus"] == 8), "latency_ms"] *= 10.0
    d3, _ = E.tidy(df)
    cp3 = E.curve_params(d3)
    f3 = E.fold(d3, cp3, "l40s", ["b200", "h100-sxm", "h200-sxm", "rtx-pro-6000"])
    refused = [x for x in f3["refused"] if x["what"] == "B"]
    assert [x["n"] for x in refused] == [8] and "0.01-1 x l40s" in refused[0]["why"]
    assert f3["params"][("nccl", 8)]["B"] / 1e3 > C.ETA_BUS_OWN_MIN * link


def test_custom_rows_from_the_engines_buffer_size_are_priced_as_nccl():
    """vLLM's custom all-reduce takes a message only below its buffer (should_custom_ar: inp_size < max_size) and
    hands the rest to NCCL; on the architectures the profile's per-TP table does not list (A100, L40S, RTX PRO 6000)
    that is the plain 8 MiB, and E1.25 prices those custom rows with the GPU's NCCL law (A100's measured custom rows
    equal its NCCL rows from 8 MiB on). A listed architecture keeps the custom law at every size."""
    mib8 = float(E.get_engine("vllm").get("max_bytes"))
    assert E.custom_max("a100-sxm", 2) == E.custom_max("rtx-pro-6000", 2) == E.custom_max("l40s", 2) == mib8
    assert E.custom_max("h100-sxm", 2) == np.inf and E.custom_max("b200", 8) == np.inf
    n, m = 2, np.array([4 * 2.0 ** 20, mib8, 64 * 2.0 ** 20])
    rows = pd.DataFrame({"gpu": "a100-sxm", "impl": "custom", "num_gpus": n, "x": C.bus_bytes(m, n)})
    params = {("custom", n): {"L": 6.0, "B": 190e3}, ("nccl", n): {"L": 9.0, "B": 190e3}}
    shapes = {("custom", n): CUSTOM_SHAPE, ("nccl", n): NCCL_SHAPE}
    t = E.predict_rows(rows, params, shapes)
    tn = C.nccl_law(rows["x"].to_numpy(), 9.0, 190e3, NCCL_SHAPE)
    tc = C.custom_law(rows["x"].to_numpy(), n, 6.0, 190e3, CUSTOM_SHAPE, tn, E.one_shot_max(n))
    assert t[0] == pytest.approx(tc[0]) and tc[0] != pytest.approx(tn[0])
    assert t[1:] == pytest.approx(tn[1:])  # 8 MiB itself is NCCL's
    h = E.predict_rows(rows.assign(gpu="h100-sxm"), params, shapes)
    assert h == pytest.approx(tc)


def test_held_out_fit_recovers_custom_rows_that_fall_back_to_nccl():
    """Data made by the law with the engine's fallback (A100's custom rows are NCCL's from 8 MiB on): every GPU's
    held-out score recovers it, A100's custom rows included (scored with its NCCL law from 8 MiB)."""
    fast = {"a_one": 1.5, "d_two_us": 6.0, "a_two": 1.5}  # a custom kernel well ahead of NCCL at every size
    df = _synthetic(("h100-sxm", "h200-sxm", "b200", "a100-sxm"), bw_scale={"a100-sxm": 0.4},  # within its link
                    custom_shape=fast)
    big = (df["gpu"] == "a100-sxm") & (df["kernel_source"] == "vLLM_custom_graph") & (df["message_bytes"] >= 2 ** 23)
    nccl = df[(df["gpu"] == "a100-sxm") & (df["kernel_source"] == "NCCL")].set_index(["num_gpus", "message_bytes"])
    df.loc[big, "latency_ms"] = [nccl.loc[(n, m), "latency_ms"] for n, m in
                                 zip(df.loc[big, "num_gpus"], df.loc[big, "message_bytes"])]
    doc = E.document(E.run(df, ablation=False))
    rec = {(r["gpu"], r["impl"]): r for r in doc["metrics"]["records"]}
    assert rec[("a100-sxm", "custom")]["mape"] < 4.0, rec[("a100-sxm", "custom")]


def test_one_shot_branch_pays_the_kernels_own_rate_beside_the_link():
    """vLLM's one-shot kernel keeps a fixed grid's loads in flight (36 blocks x 512 threads x 16 B of the message per
    round, loaded from all n ranks at once), so besides the link's (n - 1) S / (a_one B) it moves the message S at no
    more than a rate R_one of its own (shape key r_one_gbps), the same at every n. A curve without the key prices
    as before (no such bound)."""
    L, B = 5.0, 200e3
    tn_big = np.full(3, 1e9)  # NCCL never faster here: the one-shot branch itself
    for n in (2, 8):
        m = np.array([65536.0, 1048576.0, 4194304.0])
        m = m[m < (E.one_shot_max(n) or np.inf)] if E.one_shot_max(n) else m
        x = C.bus_bytes(m, n)
        old = C.custom_law(x, n, L, B, CUSTOM_SHAPE, tn_big[:len(m)], E.one_shot_max(n))
        new = C.custom_law(x, n, L, B, {**CUSTOM_SHAPE, "r_one_gbps": 250.0}, tn_big[:len(m)], E.one_shot_max(n))
        one = L + m * (n - 1) / (CUSTOM_SHAPE["a_one"] * B)
        if E.one_shot_max(n):  # below the switch: exactly the one-shot branch
            assert old == pytest.approx(one)
            assert new == pytest.approx(one + m / 250e3)  # S / R_one, bytes / (bytes per us), whatever n
        else:  # 2 ranks: the soft minimum of the branches, slower by about the rate term where one-shot wins
            assert np.all(new > old)
    assert "r_one_gbps" in C.SHAPE_KEYS["custom"] and C.unpack("custom", [0.5, 6.0, 0.8]) == CUSTOM_SHAPE


def test_held_out_fit_recovers_a_one_shot_rate_that_the_link_does_not_set():
    """Data where the one-shot kernel runs at its own rate (R_one = 200 GB/s on every GPU, the link term small), and
    the GPUs' bus bandwidths differ 2.5x (A100 at 0.4 x): priced relative to the bus bandwidth alone, A100's one-shot
    rows would take the donors' rate x 0.4; the fitted R_one carries over, and A100's held-out custom rows are
    recovered. Fails on the law before wave 38 (no r_one_gbps to fit)."""
    kernel = {"a_one": 1.9, "d_two_us": 6.0, "a_two": 0.8, "r_one_gbps": 200.0}
    df = _synthetic(("h100-sxm", "h200-sxm", "b200", "a100-sxm"), bw_scale={"a100-sxm": 0.4}, custom_shape=kernel)
    r = E.run(df, ablation=False)
    rec = {(x["gpu"], x["impl"]): x for x in E.document(r)["metrics"]["records"]}
    assert rec[("a100-sxm", "custom")]["mape"] < 4.0, rec[("a100-sxm", "custom")]
    assert r["per_gpu"]["a100-sxm"]["shapes"]["custom/2"]["r_one_gbps"] == pytest.approx(200.0, rel=0.15)


def test_the_step_all_reduces_the_bf16_hidden_state_of_every_token_of_the_step(monkeypatch):
    """The message a TP step all-reduces is T x hidden_size bf16 values (2 bytes each) summed over the step's
    requests. Halving it survived every test but the bit-for-bit dense fixture (mutation review, wave 39)."""
    from steptime import step as S
    from steptime.specs import get_model

    seen = []
    real = C.engine_allreduce_time

    def spy(nbytes, tp, *a, **k):
        seen.append((np.asarray(nbytes, dtype=float).copy(), tp))
        return real(nbytes, tp, *a, **k)

    monkeypatch.setattr(S.comm, "engine_allreduce_time", spy)
    m, g = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    sid, new, kv = np.array([0, 1, 1]), np.array([1, 1, 512]), np.array([100, 4000, 0])
    S.predict_steps(m, g, sid, new, kv, 2, tp=2)
    assert seen and all(tp == 2 for _, tp in seen)
    np.testing.assert_array_equal(seen[-1][0], 2.0 * np.array([1.0, 513.0]) * m.hidden_size)
