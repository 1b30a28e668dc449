"""E3.2's all-to-all law: the per-token cost of the normal mode and the held-out GPU's three readings."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

H100_KEY = "h100-sxm"


def _law(tok_us=0.0):
    return {f"{m}:{p}": {"floor_us": 50.0, "bw_gbps": 200.0, "tok_us": tok_us if m == "ht" else 0.0}
            for m in ("ll", "ht") for p in ("dispatch", "combine")}


def _cells(law, gpu="b200", scale=None):
    """Synthetic DeepEP rows generated from `law` (a whole-curve `scale` per (mode, phase) on top)."""
    rows = [dict(gpu=gpu, backend={"ll": "deepep_ll", "ht": "deepep_ht"}[m], phase=p, ep_size=8, hidden_size=h,
                 topk=8, num_experts=256, num_tokens=T, latency_ms=1.0)
            for m, Ts in (("ll", (1, 16, 128, 256)), ("ht", (16, 512, 8192, 65536)))
            for p in ("dispatch", "combine") for h in (3072, 7168) for T in Ts]
    d = E.a2a_cells(pd.DataFrame(rows))
    d["latency_ms"] = E.a2a_predict(d, law) * d.apply(lambda r: (scale or {}).get(f"{r['mode']}:{r.phase}", 1.0), axis=1)
    return d


def test_per_token_term_is_recovered_and_independent_of_hidden():
    """A cost per token that does not grow with the hidden size: the fit finds it in the normal mode, and at a
    fixed byte count it adds tokens * c_tok."""
    truth = _law(tok_us=0.05)
    fit = E.a2a_fit(_cells(truth))
    assert fit["ht:dispatch"]["tok_us"] == pytest.approx(0.05, rel=0.02)
    assert fit["ll:dispatch"]["tok_us"] == 0.0  # not fitted for the low-latency mode (A2A_TOKEN_TERM)
    d = _cells(truth)
    ht = d[(d["mode"] == "ht") & (d.phase == "dispatch") & (d.num_tokens == 8192)]
    no_tok = E.a2a_predict(ht, _law(0.0))
    assert np.allclose(ht.latency_ms.to_numpy() - no_tok, 8192 * 0.05e-3)


def _law_ov(tok_us=0.0, floor_us=50.0, share=0.3, p=2.0):
    """_law with the low-latency mode's overlapped law (A2A_OVERLAP_MODES)."""
    law = _law(tok_us)
    for ph in ("dispatch", "combine"):
        law[f"ll:{ph}"] = {"floor_us": floor_us, "bw_share": share, "overlap_p": p, "tok_us": 0.0}
    return law


def test_readings_are_three_and_set_the_named_scales():
    """Three readings per GPU: low-latency dispatch and combine at their smallest cell, normal dispatch at its
    largest; each sets its own scale, and a GPU with twice the floor in one low-latency curve is recovered exactly."""
    law = _law_ov(0.05)
    d = _cells(law)
    d["latency_ms"] = E.a2a_predict(d, law, {"b200": {"s_floor:ll:combine": 2.0}})
    rd = E.a2a_readings(d, "b200")
    assert len(rd) == 3 and list(rd["scale"]) == ["s_floor:ll:dispatch", "s_floor:ll:combine", "s_slope:ht"]
    assert list(rd.num_tokens) == [1, 1, 65536]
    sc = E.a2a_scales(d, "b200", law)
    assert sc["s_floor:ll:combine"] == pytest.approx(2.0) and sc["s_floor:ll:dispatch"] == pytest.approx(1.0)
    assert sc["s_slope:ht"] == pytest.approx(1.0)
    assert np.allclose(E.a2a_predict(d, law, {"b200": sc}), d.latency_ms)


def test_low_latency_law_is_overlapped_and_scales_with_nvlink():
    """The low-latency law: a floor per GPU that the transfer hides under, the transfer at one share of each
    GPU's datasheet NVLink bandwidth (H100 450 GB/s, B200 900). The fit recovers the share, the overlap exponent
    and each GPU's floor; a floor scale read on a held-out GPU leaves its transfer at its own NVLink."""
    truth = {"h100-sxm": _law_ov(floor_us=40.0, share=0.3, p=2.5), "b200": _law_ov(floor_us=90.0, share=0.3, p=2.5)}
    d = pd.concat([_cells(law, g) for g, law in truth.items()], ignore_index=True)
    d = d[d["mode"] == "ll"].copy()
    d["latency_ms"] = np.concatenate([E.a2a_predict(d[d.gpu == g], law) for g, law in truth.items()])
    fit = E.a2a_fit(d)["ll:dispatch"]
    assert fit["bw_share"] == pytest.approx(0.3, rel=1e-3) and fit["overlap_p"] == pytest.approx(2.5, rel=1e-3)
    assert fit["floor_us"] == pytest.approx(np.sqrt(40.0 * 90.0), rel=1e-3)  # the GPUs' geometric mean
    # the bytes at 256 tokens cost twice the time on Hopper's links: its curve rises above its floor, B200's hides
    big = d[(d.num_tokens == 256) & (d.hidden_size == 7168) & (d.phase == "dispatch")]
    x = {g: float(big[big.gpu == g].a2a_bytes.iloc[0]) / (0.3 * M.a2a_link_gbps(g) * 1e9) * 1e3 for g in truth}
    assert x["h100-sxm"] == pytest.approx(2 * x["b200"])
    # a held-out GPU: the law from the other, its floor from its reading, its transfer from its NVLink
    full = E.a2a_fit(d)
    law = E.a2a_fit(d[d.gpu == "b200"])
    sc = E.a2a_scales(d, "h100-sxm", law)
    h = d[d.gpu == "h100-sxm"]
    assert np.allclose(E.a2a_predict(h, law, {"h100-sxm": sc}), h.latency_ms, rtol=1e-3)
    assert set(full) == {"ll:dispatch", "ll:combine"}


def test_product_a2a_time_prices_the_overlapped_law_as_the_lab():
    """terms.moe.a2a_time with a2a_bw_share / a2a_overlap_p / a2a_s_floor (moe_constants_doc's keys) is the lab's
    overlapped law, the GPU's NVLink read from its spec."""
    law = _law_ov(0.05, share=0.3, p=2.0)
    doc = E.moe_constants_doc(None, {"ship": law, "ship_laws": {}, "ship_scales": {"h100-sxm": {
        "s_floor:ll:dispatch": 1.5, "s_floor:ll:combine": 0.8, "s_slope:ht": 1.0}}})
    assert {"a2a_bw_share:ll:dispatch", "a2a_overlap_p:ll:combine"} <= set(doc["global"])
    assert "a2a_bw_gbps:ll:dispatch" not in doc["global"]
    mc = M.MoEConstants(values={k: c["value"] for k, c in doc["global"].items()},
                        per_gpu={g: {k: c["value"] for k, c in s.items()} for g, s in doc["gpu"].items()})
    for gpu in ("h100-sxm", "b200"):
        for T in (1, 64, 256):
            row = pd.DataFrame([dict(gpu=gpu, mode="ll", phase=p, num_tokens=T,
                                     a2a_bytes=float(M.a2a_bytes(T, 7168, 8, 8, "ll"))) for p in ("dispatch", "combine")])
            sc = {g: {k: c["value"] for k, c in s.items() if k.startswith("a2a_")} for g, s in doc["gpu"].items()}
            sc = {g: {k[len("a2a_"):]: v for k, v in s.items()} for g, s in sc.items()}
            lab = E.a2a_predict(row, law, sc).sum() * 1e-3
            assert float(M.a2a_time(T, 7168, 8, 8, gpu, mc, mode="ll")) == pytest.approx(lab, rel=1e-5)


def test_transfer_scale_is_bounded_when_a_reading_sits_at_the_floor():
    """A normal-mode reading at (or below) the predicted floor must not send the bandwidth to infinity."""
    law = _law(0.0)
    d = _cells(law)
    big = (d["mode"] == "ht") & (d.phase == "dispatch") & (d.num_tokens == 65536) & (d.hidden_size == 7168)
    d.loc[big, "latency_ms"] = 0.01  # under the 50 us floor
    sc = E.a2a_scales(d, "b200", law)
    assert 0 < sc["s_slope:ht"] < 1 and np.isfinite(sc["s_slope:ht"])


def test_product_a2a_time_matches_the_lab_law_with_per_gpu_scales():
    """terms.moe.a2a_time is the lab's law: s_curve * (floor + s_slope * (bytes/bw + c_tok T)) summed over
    dispatch and combine, with the GPU's scales applied and 1 for a GPU without readings."""
    vals = {}
    for key, p in _law(0.05).items():
        vals[f"a2a_floor_us:{key}"], vals[f"a2a_bw_gbps:{key}"] = p["floor_us"], p["bw_gbps"]
        vals[f"a2a_tok_us:{key}"] = p["tok_us"]
    mc = M.MoEConstants(values=vals, per_gpu={"g": {"a2a_s:ll:combine": 2.0, "a2a_s_slope:ht": 1.5}})
    for mode, T in (("ll", 64), ("ht", 4096)):
        row = pd.DataFrame([dict(gpu="g", mode=mode, phase=p, num_tokens=T,
                                 a2a_bytes=float(M.a2a_bytes(T, 7168, 8, 8, mode))) for p in ("dispatch", "combine")])
        lab = E.a2a_predict(row, _law(0.05), {"g": {"s:ll:combine": 2.0, "s_slope:ht": 1.5}}).sum() * 1e-3
        assert float(M.a2a_time(T, 7168, 8, 8, "g", mc, mode=mode)) == pytest.approx(lab, rel=1e-9)
        plain = E.a2a_predict(row, _law(0.05)).sum() * 1e-3
        assert float(M.a2a_time(T, 7168, 8, 8, "other", mc, mode=mode)) == pytest.approx(plain, rel=1e-9)
    assert float(M.a2a_time(64, 7168, 8, 1, "g", mc)) == 0.0


# --------------------------------------------------------------------------- the donor rule (normal mode)
AIC_GPUS = ("b200", "b300", "gb200", "gb300", "h100-sxm", "h200-sxm")


def test_donors_are_the_gpus_of_the_same_family_and_nvlink_domain():
    """A held-out GPU's normal-mode law comes from the other GPUs of its architecture family and NVLink domain (an
    8-GPU HGX board, a 72-GPU NVL72 rack), else its family, else all others."""
    others = lambda g: [o for o in AIC_GPUS if o != g]  # noqa: E731
    assert E.a2a_donors("b200", others("b200")) == ["b300"]
    assert E.a2a_donors("gb200", others("gb200")) == ["gb300"]
    assert E.a2a_donors("h100-sxm", others("h100-sxm")) == ["h200-sxm"]
    assert E.a2a_donors("gb200", ["b200", "b300", "h100-sxm"]) == ["b200", "b300"]  # no NVL72 twin: the family
    assert E.a2a_donors("h100-sxm", ["b200", "gb200"]) == ["b200", "gb200"]  # no Hopper: every other GPU


def _law2(floor_us, bw_gbps, tok_us):
    return {f"{m}:{p}": {"floor_us": floor_us if m == "ht" else 50.0, "bw_gbps": bw_gbps if m == "ht" else 200.0,
                         "tok_us": tok_us if m == "ht" else 0.0} for m in ("ll", "ht") for p in ("dispatch", "combine")}


def test_held_out_law_takes_the_normal_mode_from_the_donors_and_the_low_latency_mode_from_all():
    """Two platforms whose normal-mode curves differ (per-token cost, bandwidth): the law a GPU is predicted with
    is the donors' fit for the normal mode, the pooled fit for the low-latency mode."""
    a, b = _law2(80.0, 450.0, 0.06), _law2(80.0, 900.0, 0.18)
    d = pd.concat([_cells(a, "h200-sxm"), _cells(b, "b200"), _cells(b, "b300")], ignore_index=True)
    law = E.a2a_law(d, ["h200-sxm"], ["h200-sxm", "b200", "b300"])
    for p in ("dispatch", "combine"):
        assert law[f"ht:{p}"]["bw_gbps"] == pytest.approx(450.0, rel=0.02)
        assert law[f"ht:{p}"]["tok_us"] == pytest.approx(0.06, rel=0.05)
        assert law[f"ll:{p}"] == E.a2a_fit(d)[f"ll:{p}"]
    h = d[(d.gpu == "h200-sxm") & (d["mode"] == "ht")]
    assert np.allclose(E.a2a_predict(h, law), h.latency_ms, rtol=0.02)


def test_shipped_gpu_law_overrides_the_global_one_in_the_product():
    """moe_constants_doc writes each GPU's platform law (normal mode) into its scope, and terms.moe.a2a_time
    prices that GPU with it; another GPU keeps the global law."""
    glob, own = _law(0.05), _law2(80.0, 450.0, 0.06)
    a2a = {"ship": glob, "ship_laws": {"g": {k: v for k, v in own.items() if k.startswith("ht")}},
           "ship_scales": {"g": {"s_slope:ht": 1.0}}}
    doc = E.moe_constants_doc(None, a2a)
    assert {k for k in doc["gpu"]["g"] if k.startswith("a2a_") and not k.startswith("a2a_s")} == {
        f"a2a_{c}:ht:{p}" for c in ("floor_us", "bw_gbps", "tok_us") for p in ("dispatch", "combine")}
    mc = M.MoEConstants(values={k: c["value"] for k, c in doc["global"].items()},
                        per_gpu={g: {k: c["value"] for k, c in s.items()} for g, s in doc["gpu"].items()})
    for gpu, law in (("g", {**glob, **own}), ("other", glob)):
        row = pd.DataFrame([dict(gpu=gpu, mode="ht", phase=p, num_tokens=4096,
                                 a2a_bytes=float(M.a2a_bytes(4096, 7168, 8, 8, "ht"))) for p in ("dispatch", "combine")])
        lab = E.a2a_predict(row, law).sum() * 1e-3
        assert float(M.a2a_time(4096, 7168, 8, 8, gpu, mc, mode="ht")) == pytest.approx(lab, rel=1e-6)


# --------------------------------------------------------------------------- the low-latency law's shape (wave 18)
def test_link_bw_is_the_share_of_the_gpu_link_at_exponent_one_and_flatter_below():
    """a2a_link_bw: share * link at link_exp 1; at link_exp 0 every GPU gets share * the reference link; between,
    a link twice as fast buys 2^link_exp; bad input is a clear error."""
    assert M.a2a_link_bw(450.0, 0.3) == pytest.approx(0.3 * 450e9)
    assert M.a2a_link_bw(450.0, 0.3, 0.0) == pytest.approx(0.3 * M.A2A_LINK_REF_GBPS * 1e9)
    assert M.a2a_link_bw(900.0, 0.3, 0.6) / M.a2a_link_bw(450.0, 0.3, 0.6) == pytest.approx(2 ** 0.6)
    with pytest.raises(ValueError, match="must be > 0"):
        M.a2a_link_bw(0.0, 0.3)
    with pytest.raises(ValueError, match="must be > 0"):
        M.a2a_link_bw(450.0, 0.0)


def test_floor_shape_relaxes_from_one_plus_excess_to_one():
    """a2a_floor_shape: 1 + a T0 / (T + T0): 1 + a / (1 + 1/T0) at one token, 1 + a/2 at T0, -> 1 for many
    tokens; 1 everywhere without an excess; a non-positive token scale is a clear error."""
    f = M.a2a_floor_shape(np.array([1.0, 8.0, 1e6]), 0.4, 8.0)
    assert f[0] == pytest.approx(1 + 0.4 * 8 / 9) and f[1] == pytest.approx(1.2)
    assert f[2] == pytest.approx(1.0, abs=1e-5)
    assert np.all(M.a2a_floor_shape(np.array([1.0, 64.0])) == 1.0)
    with pytest.raises(ValueError, match="excess_tokens"):
        M.a2a_floor_shape(1.0, 0.2, 0.0)


def test_overlap_fit_recovers_the_link_exponent_and_the_floor_excess():
    """Synthetic low-latency cells on a Hopper and a Blackwell GPU from a law with a link exponent of 0.6 and a
    small-batch floor excess (0.3 over 16 tokens): the fit recovers both, and a held-out GPU's 1-token reading
    sets its floor so that its whole curve is predicted."""
    law = {"floor_us": 60.0, "bw_share": 0.3, "overlap_p": 2.0, "link_exp": 0.6, "floor_excess": 0.3,
           "floor_excess_tokens": 16.0, "tok_us": 0.0}
    rows = [dict(gpu=g, backend="deepep_ll", phase=p, ep_size=8, hidden_size=h, topk=8, num_experts=256,
                 num_tokens=T, latency_ms=1.0)
            for g in ("h100-sxm", "b200", "b300") for p in ("dispatch", "combine") for h in (3072, 7168)
            for T in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    d = E.a2a_cells(pd.DataFrame(rows))
    d["latency_ms"] = E.a2a_predict(d, {"ll:dispatch": law, "ll:combine": law},
                                    {"b300": {"s_floor:ll:dispatch": 1.5, "s_floor:ll:combine": 1.5}})
    fit = E.a2a_fit(d[d.gpu != "b300"])["ll:dispatch"]
    for k in ("bw_share", "overlap_p", "link_exp", "floor_excess", "floor_excess_tokens"):
        assert fit[k] == pytest.approx(law[k], rel=2e-2), k
    full = {"ll:dispatch": fit, "ll:combine": E.a2a_fit(d[d.gpu != "b300"])["ll:combine"]}
    sc = E.a2a_scales(d, "b300", full)
    b = d[d.gpu == "b300"]
    assert np.allclose(E.a2a_predict(b, full, {"b300": sc}), b.latency_ms, rtol=2e-2)


def test_product_a2a_time_prices_the_link_exponent_and_floor_excess_as_the_lab():
    """moe_constants_doc writes a2a_link_exp / a2a_floor_excess / a2a_floor_excess_tokens, and terms.moe.a2a_time
    with them is the lab's law."""
    law = _law_ov(0.05, share=0.3, p=2.0)
    for ph in ("dispatch", "combine"):
        law[f"ll:{ph}"].update(link_exp=0.5, floor_excess=0.4 if ph == "combine" else 0.0, floor_excess_tokens=12.0)
    doc = E.moe_constants_doc(None, {"ship": law, "ship_laws": {}, "ship_scales": {}})
    keys = {"a2a_link_exp:ll:dispatch", "a2a_floor_excess:ll:combine", "a2a_floor_excess_tokens:ll:combine"}
    assert keys <= set(doc["global"])
    mc = M.MoEConstants(values={k: c["value"] for k, c in doc["global"].items()}, per_gpu={})
    for gpu in ("h100-sxm", "b200"):
        for T in (1, 16, 256):
            row = pd.DataFrame([dict(gpu=gpu, mode="ll", phase=p, num_tokens=T,
                                     a2a_bytes=float(M.a2a_bytes(T, 7168, 8, 8, "ll"))) for p in ("dispatch", "combine")])
            lab = E.a2a_predict(row, law).sum() * 1e-3
            assert float(M.a2a_time(T, 7168, 8, 8, gpu, mc, mode="ll")) == pytest.approx(lab, rel=1e-5)


def test_normal_mode_reading_is_relative_to_the_law_gpus_at_the_same_cell():
    """A departure of the reading's cell that every GPU shares (here its time 0.8x the law's on all three) is not
    charged to the held-out GPU: relative to the law's GPUs (A2A_RELATIVE_READINGS) its transfer scale is its own
    (2.0), where the absolute reading gives about 1.6; the low-latency floor readings are not made relative."""
    law = _law_ov(0.05)
    d = pd.concat([_cells(law, g) for g in ("b200", "b300", "gb200")], ignore_index=True)
    d["latency_ms"] = E.a2a_predict(d, law, {"b200": {"s_slope:ht": 2.0, "s_floor:ll:dispatch": 1.5}})
    cell = (d["mode"] == "ht") & (d.phase == "dispatch") & (d.hidden_size == 7168) & (d.num_tokens == 65536)
    d.loc[cell, "latency_ms"] *= 0.8
    ab = E.a2a_scales(d, "b200", law)
    rel = E.a2a_scales(d, "b200", law, ref_gpus=["b300", "gb200"])
    assert ab["s_slope:ht"] == pytest.approx(1.6, rel=2e-3)
    assert rel["s_slope:ht"] == pytest.approx(2.0, rel=2e-3)
    assert rel["s_floor:ll:dispatch"] == ab["s_floor:ll:dispatch"] == pytest.approx(1.5, rel=1e-6)
    with pytest.raises(ValueError, match="ref_gpus"):
        E.a2a_scales(d, "b200", law, ref_gpus=[])


def test_token_scatter_is_zero_on_a_power_law_and_sees_one_slow_cell():
    """a2a_token_scatter: a curve y = a T^b (geometric token steps) lies on its neighbours' geometric mean, so its
    scatter is 0; one cell run in a slow state (2x) shows as |1/2 - 1| at that cell and |sqrt(2) - 1| at each of
    its two neighbours, averaged over the interior cells of its (gpu, mode) only."""
    T = [1, 2, 4, 8, 16, 32]
    rows = [dict(gpu=g, mode="ll", phase="dispatch", hidden_size=7168, topk=8, num_experts=256, num_tokens=t,
                 latency_ms=0.05 * t ** 0.3) for g in ("b200", "h100-sxm") for t in T]
    d = pd.DataFrame(rows)
    sc = E.a2a_token_scatter(d).set_index("gpu")
    assert sc.loc["b200", "scatter"] == pytest.approx(0.0, abs=1e-12) and sc.loc["b200", "n"] == 4
    slow = (d.gpu == "h100-sxm") & (d.num_tokens == 4)
    d.loc[slow, "latency_ms"] *= 2.0
    sc = E.a2a_token_scatter(d).set_index("gpu")
    assert sc.loc["h100-sxm", "scatter"] == pytest.approx((0.5 + 2 * (np.sqrt(2.0) - 1.0)) / 4)
    assert sc.loc["b200", "scatter"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="lack column"):
        E.a2a_token_scatter(d.drop(columns="phase"))
    d.loc[slow, "latency_ms"] = 0.0
    with pytest.raises(ValueError, match="non-positive"):
        E.a2a_token_scatter(d)


def test_e3_2_metrics_report_the_token_scatter_per_gpu_and_mode():
    """document_a2a carries a2a_token_scatter per gpu/mode for each engine (a diagnostic beside the scores)."""
    law = _law_ov(0.05)
    d = pd.concat([_cells(law, g) for g in ("b200", "h100-sxm")], ignore_index=True)
    r = E.run_a2a_engines(d.drop(columns=["mode", "a2a_bytes"]))
    doc = E.document_a2a(r, target_pct=12.0)
    assert set(doc["metrics"]["token_scatter_pct"]) == {f"{g}/{m}" for g in ("b200", "h100-sxm") for m in ("ll", "ht")}
    assert all(np.isfinite(v) for v in doc["metrics"]["token_scatter_pct"].values())


def _deepseek_router_ranks(ep, n_tokens=20000, E_=256, k=8, n_group=8, topk_group=4, seed=0):
    """Monte Carlo of TensorRT-LLM's DeepSeekV3 router on random logits (sigmoid scores, a group's score the sum of
    its two best, top topk_group groups, top-k inside them; zero correction bias, as the collector runs it): the
    mean number of distinct remote ranks a token reaches, experts in contiguous blocks over the ep ranks."""
    rng = np.random.default_rng(seed)
    x = 1.0 / (1.0 + np.exp(-rng.standard_normal((n_tokens, E_))))
    grp = x.reshape(n_tokens, n_group, E_ // n_group)
    gscore = np.sort(grp, axis=2)[:, :, -2:].sum(axis=2)
    keep = np.zeros((n_tokens, n_group), dtype=bool)
    np.put_along_axis(keep, np.argsort(-gscore, axis=1)[:, :topk_group], True, axis=1)
    x = np.where(np.repeat(keep, E_ // n_group, axis=1), x, -1.0)
    top = np.argsort(-x, axis=1)[:, :k]
    hit = np.zeros((n_tokens, ep), dtype=bool)
    np.put_along_axis(hit, top // (E_ // ep), True, axis=1)
    return float((hit.sum(axis=1)[:, None] - hit).mean())  # per source rank: the distinct ranks other than it


def test_ht_remote_ranks_uniform_is_the_old_formula_and_grouped_follows_the_router():
    """Uniform routing keeps (ep-1)(1-(1-1/ep)^k); DeepSeek-V3's group-limited router (n_group 8, topk_group 4)
    sends a token to the ranks of its chosen groups: 3.5 of 7 remote ranks at EP 8, 2.357 of 3 at EP 4, within 2%
    of a simulation of the router at EP 2-64 (the ranks-nested-in-groups branch above EP 8), which meets
    the groups-nested-in-ranks branch at ep = n_group."""
    for ep in (2, 4, 8, 16):
        assert M.a2a_ht_remote_ranks(8, ep) == pytest.approx((ep - 1) * (1 - (1 - 1 / ep) ** 8), rel=1e-12)
        assert M.a2a_ht_remote_ranks(8, ep, 8, 8) == pytest.approx(M.a2a_ht_remote_ranks(8, ep), rel=1e-12)
    assert M.a2a_ht_remote_ranks(8, 8, 8, 4) == pytest.approx(3.5, rel=1e-12)
    assert M.a2a_ht_remote_ranks(8, 4, 8, 4) == pytest.approx(3 * (1 - 15 / 70), rel=1e-12)
    for ep in (2, 4, 8, 16, 32, 64):
        assert M.a2a_ht_remote_ranks(8, ep, 8, 4) == pytest.approx(_deepseek_router_ranks(ep), rel=0.02), ep
    # the spread branch at ep = n_group (both branches apply there, r = 1): (tg / g) (1 - 0) = tg / g
    assert (8 - 1) * (4 / 8) * (1 - (1 - 1 / 1) * (1 - 1 / 4) ** 4) == pytest.approx(M.a2a_ht_remote_ranks(8, 8, 8, 4))
    v = M.a2a_ht_remote_ranks(8, np.array([2.0, 4.0, 8.0, 16.0]), 8, 4)
    assert np.all(np.diff(v) > 0) and np.all(v < M.a2a_ht_remote_ranks(8, np.array([2.0, 4.0, 8.0, 16.0])) + 1e-12)


def test_ht_remote_ranks_refuses_what_it_does_not_model():
    with pytest.raises(ValueError, match="topk_group <= n_group"):
        M.a2a_ht_remote_ranks(8, 8, 4, 8)
    with pytest.raises(ValueError, match="whole numbers"):
        M.a2a_ht_remote_ranks(8, 8, 8.0, 4)
    with pytest.raises(ValueError, match="top-k >= topk_group"):
        M.a2a_ht_remote_ranks(2, 8, 8, 4)
    with pytest.raises(ValueError, match="divide one another"):
        M.a2a_ht_remote_ranks(8, 6, 8, 4)


def test_grouped_routing_moves_only_the_normal_modes_bytes_and_time():
    """a2a_bytes: the low-latency mode sends a copy per (token, expert) whatever the router; the normal mode's
    bytes follow a2a_ht_remote_ranks. a2a_time passes the model's groups to both (a transfer-only law: the time
    moves by the ranks' ratio)."""
    assert M.a2a_bytes(128, 7168, 8, 8, "ll", 8, 4) == M.a2a_bytes(128, 7168, 8, 8, "ll")
    r = M.a2a_ht_remote_ranks(8, 8, 8, 4) / M.a2a_ht_remote_ranks(8, 8)
    assert M.a2a_bytes(128, 7168, 8, 8, "ht", 8, 4) == pytest.approx(r * M.a2a_bytes(128, 7168, 8, 8, "ht"), rel=1e-12)
    mc = M.MoEConstants({**{f"a2a_floor_us:{m}:{p}": 0.0 for m in ("ll", "ht") for p in ("dispatch", "combine")},
                         **{f"a2a_bw_gbps:{m}:{p}": 300.0 for m in ("ll", "ht") for p in ("dispatch", "combine")}})
    for T in (16.0, 4096.0):
        plain = float(M.a2a_time(T, 7168, 8, 8, "b200", mc, mode="ht"))
        assert float(M.a2a_time(T, 7168, 8, 8, "b200", mc, mode="ht", n_group=8, topk_group=4)) == \
            pytest.approx(r * plain, rel=1e-12)
        assert float(M.a2a_time(T, 7168, 8, 8, "b200", mc, mode="ll", n_group=8, topk_group=4)) == \
            pytest.approx(float(M.a2a_time(T, 7168, 8, 8, "b200", mc, mode="ll")), rel=1e-12)


def test_a2a_cells_group_limits_only_a_grouped_models_shape_under_the_model_router():
    """E3.2: with the model's router (TensorRT-LLM's collector) DeepSeek-V3's shape (a2a_shape_groups: n_group 8,
    topk_group 4) moves its normal-mode bytes; Kimi-K2's (ungrouped) and every low-latency row do not; under the
    uniform router (vLLM's collector) nothing moves."""
    assert E.a2a_shape_groups()[(7168, 8, 256)] == (8, 4) and (7168, 8, 384) not in E.a2a_shape_groups()
    assert E.A2A_MODEL_ROUTING == {"vllm": False, "trtllm": True}
    rows = [dict(gpu="b200", backend=b, phase="dispatch", ep_size=ep, hidden_size=7168, topk=8, num_experts=E_,
                 num_tokens=64, latency_ms=1.0)
            for b in ("deepep_ll", "deepep_ht") for E_ in (256, 384) for ep in (4, 8)]
    plain, model = E.a2a_cells(pd.DataFrame(rows)), E.a2a_cells(pd.DataFrame(rows), model_routing=True)
    ratio = (model.set_index(["mode", "num_experts", "ep_size"]).a2a_bytes
             / plain.set_index(["mode", "num_experts", "ep_size"]).a2a_bytes)
    for (mode, E_, ep), v in ratio.items():
        want = M.a2a_ht_remote_ranks(8, ep, 8, 4) / M.a2a_ht_remote_ranks(8, ep) if (mode, E_) == ("ht", 256) else 1.0
        assert v == pytest.approx(want, rel=1e-12), (mode, E_, ep)


def test_a2a_shape_groups_refuses_a_shape_two_routers_share(monkeypatch):
    """Two listed models with one all-to-all shape (hidden, top-k, experts) and different group-limited routing
    cannot both be right for that shape's rows: an error names them."""
    from types import SimpleNamespace

    def m(ng, tg):
        return SimpleNamespace(hidden_size=7168, num_experts_per_tok=8, num_experts=256, n_group=ng, topk_group=tg)
    monkeypatch.setattr(E, "moe_model_table", lambda: {"a": m(8, 4), "b": m(1, 1)})
    with pytest.raises(ValueError, match="'a' and 'b' share the shape"):
        E.a2a_shape_groups()
    monkeypatch.setattr(E, "moe_model_table", lambda: {"a": m(8, 4), "b": m(8, 4)})
    assert E.a2a_shape_groups() == {(7168, 8, 256): (8, 4)}


# --------------------------------------------------------------------------- the normal mode's floor / transfer overlap
def _law_ht_p(p=2.0):
    """_law_ov with the normal mode's floor and transfer overlapped at `p` (A2A_FLOOR_OVERLAP_MODES)."""
    law = _law_ov(0.05)
    for ph in ("dispatch", "combine"):
        law[f"ht:{ph}"] = {"floor_us": 300.0, "bw_gbps": 400.0, "tok_us": 0.05, "overlap_p": p}
    return law


def test_normal_mode_fit_recovers_the_floor_transfer_overlap():
    """Cells made with the normal mode's floor overlapped with its transfer at p = 2: the fit finds p (and the
    floor, bandwidth and per-token cost); cells made additively give p at its lower bound 1 (the sum)."""
    fit = E.a2a_fit(_cells(_law_ht_p(2.0)))
    assert fit["ht:dispatch"]["overlap_p"] == pytest.approx(2.0, rel=0.02)
    assert fit["ht:dispatch"]["floor_us"] == pytest.approx(300.0, rel=0.02)
    assert fit["ht:dispatch"]["bw_gbps"] == pytest.approx(400.0, rel=0.05)
    assert fit["ht:combine"]["overlap_p"] == pytest.approx(2.0, rel=0.02)
    assert E.a2a_fit(_cells(_law(0.05)))["ht:dispatch"]["overlap_p"] == pytest.approx(1.0, abs=0.02)
    d = _cells(_law_ht_p(2.0))
    ht = d[d["mode"] == "ht"]
    summed = E.a2a_predict(ht, {k: {**v, "overlap_p": 1.0} for k, v in _law_ht_p(2.0).items()})
    assert np.all(ht.latency_ms.to_numpy() < summed)  # the overlap hides part of the floor


def test_transfer_reading_solves_the_overlapped_normal_mode():
    """The normal-mode transfer reading under p != 1 solves measured = (F^p + (s X)^p)^(1/p): a GPU whose transfer
    is 1.3x the law's is recovered exactly and every normal-mode cell is then predicted exactly."""
    law = _law_ht_p(2.0)
    d = _cells(law)
    ht = d[(d["mode"] == "ht") & (d.phase == "dispatch")]
    f, x = E._a2a_parts(ht, law["ht:dispatch"])
    assert np.allclose(E.a2a_predict(ht, law), np.hypot(f, x), rtol=1e-12)  # p = 2: (F^2 + X^2)^(1/2)
    d["latency_ms"] = E.a2a_predict(d, law, {"b200": {"s_slope:ht": 1.3}})
    sc = E.a2a_scales(d, "b200", law)
    assert sc["s_slope:ht"] == pytest.approx(1.3, rel=1e-9)
    assert np.allclose(E.a2a_predict(d, law, {"b200": sc}), d.latency_ms, rtol=1e-9)


def test_product_a2a_time_prices_the_normal_mode_overlap_as_the_lab():
    """terms.moe.a2a_time reads a2a_overlap_p:ht:<phase> for the additive law as the lab's a2a_predict does; absent,
    it adds floor and transfer (the law before)."""
    law = _law_ht_p(2.0)
    vals = {}
    for key, p in law.items():
        if key.startswith("ht"):
            vals.update({f"a2a_floor_us:{key}": p["floor_us"], f"a2a_bw_gbps:{key}": p["bw_gbps"],
                         f"a2a_tok_us:{key}": p["tok_us"], f"a2a_overlap_p:{key}": p["overlap_p"]})
    mc = M.MoEConstants(values=vals, per_gpu={"g": {"a2a_s_slope:ht": 1.5}})
    add = M.MoEConstants(values={k: v for k, v in vals.items() if "overlap_p" not in k}, per_gpu={})
    for T in (16, 1024, 65536):
        row = pd.DataFrame([dict(gpu="g", mode="ht", phase=p, num_tokens=T,
                                 a2a_bytes=float(M.a2a_bytes(T, 7168, 8, 8, "ht"))) for p in ("dispatch", "combine")])
        lab = E.a2a_predict(row, law, {"g": {"s_slope:ht": 1.5}}).sum() * 1e-3
        assert float(M.a2a_time(T, 7168, 8, 8, "g", mc, mode="ht")) == pytest.approx(lab, rel=1e-9)
        summed = E.a2a_predict(row, {k: {**v, "overlap_p": 1.0} for k, v in law.items()}).sum() * 1e-3
        assert float(M.a2a_time(T, 7168, 8, 8, "other", add, mode="ht")) == pytest.approx(summed, rel=1e-9)
        assert float(M.a2a_time(T, 7168, 8, 8, "other", mc, mode="ht")) < summed


def test_normal_mode_fit_is_robust_to_one_slow_cell():
    """One normal-mode cell in a slow state (36x its law, as vLLM's GB200 dispatch at hidden 3072, 512 tokens): the
    fit (soft L1 in log time, A2A_ROBUST_SCALE) still recovers the floor and bandwidth the other cells follow; a
    squared loss sent the bandwidth off by orders of magnitude."""
    law = _law_ht_p(2.0)
    d = _cells(law)
    slow = (d["mode"] == "ht") & (d.phase == "dispatch") & (d.hidden_size == 3072) & (d.num_tokens == 512)
    assert slow.sum() == 1
    d.loc[slow, "latency_ms"] *= 36.0
    fit = E.a2a_fit(d)
    assert fit["ht:dispatch"]["floor_us"] == pytest.approx(300.0, rel=0.05)
    assert fit["ht:dispatch"]["bw_gbps"] == pytest.approx(400.0, rel=0.05)
    rest = d[(d["mode"] == "ht") & (d.phase == "dispatch") & ~slow]
    assert np.allclose(E.a2a_predict(rest, fit), rest.latency_ms, rtol=0.05)
