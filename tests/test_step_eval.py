"""Whole-step evaluation (E1.1 family): Vidur's per-layer operator set from the same terms."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments import light as LX
from steptime_lab.experiments import step as E
from steptime.step import VIDUR_LAYER_OPS, predict_step, vidur_layer_ops, vidur_layer_time
from steptime.calibration import Constants


def test_layer_ops_are_vidurs_operator_set():
    ops = vidur_layer_ops("llama-2-7b", "a100-sxm", np.array([1, 512]))
    assert set(VIDUR_LAYER_OPS) <= set(ops) and "emb" in ops
    tot = vidur_layer_time("llama-2-7b", "a100-sxm", np.array([1, 512]))
    assert tot == pytest.approx(sum(ops[o] for o in VIDUR_LAYER_OPS))


def test_parallel_block_has_no_post_attention_norm_and_two_adds():
    ops = vidur_layer_ops("phi-2", "a100-sxm", np.array([64]))
    assert "post_attention_layernorm" not in ops
    seq = vidur_layer_ops("llama-2-7b", "a100-sxm", np.array([64]))
    assert ops["add"][0] > 0 and seq["add"][0] > 0


def test_layer_matches_the_step_terms_it_reuses():
    """The per-layer GEMMs equal the step's projection terms divided by the layer count."""
    p = predict_step("llama-2-7b", "h100-sxm", prefill=[(1, 512)])
    ops = vidur_layer_ops("llama-2-7b", "h100-sxm", np.array([512]))
    assert ops["attn_pre_proj"][0] * 32 == pytest.approx(p.terms_ms["qkv_proj"], rel=1e-9)
    assert ops["mlp_down_proj"][0] * 32 == pytest.approx(p.terms_ms["down_proj"], rel=1e-9)


def test_layer_time_monotone_in_tokens():
    t = vidur_layer_time("llama-2-70b", "a100-sxm", np.array([1, 64, 512, 4096]), tp=4)
    assert np.all(np.diff(t) > 0)


def _toy_vidur():
    rows = []
    for g in ("a100-sxm", "h100-sxm", "a40"):
        for T in (1, 8, 64, 512, 2048):
            ops = vidur_layer_ops("llama-2-7b", g, np.array([T]))
            for op, v in ops.items():
                rows.append(dict(gpu=g, model="llama-2-7b", tp=1, num_tokens=T, op=op, latency_ms=float(v[0]) * 1.1))
    return pd.DataFrame(rows)


def test_run_scores_splits_and_ladder_on_synthetic_tables():
    v = _toy_vidur()
    r = E.run(v, LX.tidy_cells(v), n_boot=20, constants=Constants.default())
    subs = {(x["gpu"], x["subset"]) for x in r["records"] if x["predictor"] == "steptime"}
    assert ("a100-sxm", "decode") in subs and ("a100-sxm", "prefill") in subs
    rungs = {x["rung"] for x in r["ladder"]}
    assert rungs == set(E.RUNGS)
    assert all(d["gpu"] in ("a100-sxm", "h100-sxm", "a40") for d in r["decomposition"])


def test_evaluate_families_registered():
    from steptime_lab.evaluate import FAMILIES

    for f in ("attention_decode", "attention_prefill", "light", "host", "step"):
        assert f in FAMILIES


def _toy_vidur_slow_gemm(slow: dict):
    """Toy Vidur rows whose GEMM ops run `slow[gpu]` times the shipped prediction (light ops as predicted)."""
    from steptime.step import VIDUR_GEMM

    rows = []
    for g in ("a100-sxm", "h100-sxm", "a40"):
        for tp in (1, 2):
            for T in (1, 8, 64, 1024, 2048, 4096):
                ops = vidur_layer_ops("llama-2-7b", g, np.array([T]), tp=tp)
                for op, v in ops.items():
                    f = slow[g] if op in VIDUR_GEMM else 1.0
                    rows.append(dict(gpu=g, model="llama-2-7b", tp=tp, num_tokens=T, op=op, latency_ms=float(v[0]) * f))
    return pd.DataFrame(rows)


def test_eta_rule_reads_the_gemm_offset_and_drops_its_rows():
    """A Vidur table whose GEMMs are uniformly 1.15x slower than the law: the rule-read eta_active
    falls by that factor (the compute-bound cells), the reading rows leave the scores, and the
    prefill score beats the AIConfigurator-read protocol's."""
    from steptime.specs import get_gpu

    C = Constants.default()
    v = _toy_vidur_slow_gemm({"a100-sxm": 1.15, "h100-sxm": 1.15, "a40": 1.15})
    w = E.wide_cells(v)
    cands = E.eta_rule_candidates(w, ["a100-sxm", "h100-sxm"])
    assert cands[0] == (next(iter(E.VIDUR_GEMM)), 1024) and {T for _, T in cands} == {1024, 2048, 4096}
    eta, cells = E.read_eta_active(w, "a100-sxm", ("mlp_up_proj", 4096), C)
    assert len(cells) == 2 and all(c[4] == 4096 and c[5] == "mlp_up_proj" for c in cells)
    assert eta == pytest.approx(C.get("eta_active", get_gpu("a100-sxm")) / 1.15, rel=0.03)
    lc = LX.tidy_cells(v)
    new = E.run(v, lc, n_boot=20, constants=C, gemm_reading="vidur_rule")
    old = E.run(v, lc, n_boot=20, constants=C, gemm_reading="aic")
    info = new["per_gpu"]["h100-sxm"]["eta_active_rule"]
    assert info["chosen_on"] == ["a100-sxm", "a40"] and info["n_candidates"] == 12 and info["cells_measured_ms"] > 0
    used = new["calibration"].to_dict()["eta_active[h100-sxm]"]["cells"]
    assert len(used) == 2
    scored = new["pred"]
    assert not ((scored["gpu"] == "h100-sxm") & (scored["num_tokens"] == info["tokens"])).any()
    mape = {(r["gpu"], r["subset"], p): r["mape"] for p, rr in (("new", new), ("old", old)) for r in rr["records"]
            if r.get("scope") is None and r["predictor"] == "steptime"}
    for g in ("a100-sxm", "h100-sxm", "a40"):
        assert mape[(g, "prefill", "new")] < mape[(g, "prefill", "old")]
    doc = E.document(old, "E1.1", {"decode": 0.05, "prefill": 0.06}, alternative=new)
    assert "after seeing the scores" in doc["metrics"]["disclosed"]
    before = doc["metrics"]["vidur_rule_protocol"]["per_gpu"]["h100-sxm"]["eta_active_rule"]["eta_active_before"]
    assert before == old["per_gpu"]["h100-sxm"]["eta_active"] != info["eta_active"]
    assert before == pytest.approx(E.fold_constants(E.held_out_constants(lc, "h100-sxm", ["a100-sxm", "a40", "h100-sxm"],
                                                                         None, C)[0], "h100-sxm", None)[0]
                                   .get("eta_active", get_gpu("h100-sxm")))
    ctx = [c for c in doc["claims"] if c["claim"].startswith("beyond the three-reading contract")]
    assert len(ctx) == 2 and all(c.get("met") is None for c in ctx)
    # the cells read are counted from the rule's records (two per GPU here), not typed (the text said "21-29")
    assert all("(median of 2 cells by a rule" in c["claim"] for c in ctx)
    for sub in ("decode", "prefill"):  # the scored claims are the contract's protocol, not the rule's
        c = next(c for c in doc["claims"] if c["claim"] == f"h100-sxm: held-out MAPE of the per-layer step, {sub}-sized cells")
        assert c["value"] == pytest.approx(mape[("h100-sxm", sub, "old")], abs=1e-4)
    with pytest.raises(ValueError, match="gemm_reading"):
        E.run(v, lc, n_boot=20, constants=C, gemm_reading="vidur")


def test_select_eta_rule_reads_only_the_training_gpus():
    """The rule chosen for a GPU does not change when that GPU's own table is corrupted."""
    C = Constants.default()
    v = _toy_vidur_slow_gemm({"a100-sxm": 1.1, "h100-sxm": 1.2, "a40": 1.15})
    w = E.wide_cells(v)
    lc = LX.tidy_cells(v)
    rule, table = E.select_eta_rule(w, lc, ["a100-sxm", "a40"], None, C)
    bad = v.copy()
    bad.loc[bad["gpu"] == "h100-sxm", "latency_ms"] *= np.where(bad.loc[bad["gpu"] == "h100-sxm", "num_tokens"] == 2048, 5.0, 0.2)
    rule2, table2 = E.select_eta_rule(E.wide_cells(bad), LX.tidy_cells(bad), ["a100-sxm", "a40"], None, C)
    assert rule == rule2 and [t["score"] for t in table] == [t["score"] for t in table2]
    assert table[[(t["op"], t["tokens"]) for t in table].index(rule)]["score"] == min(t["score"] for t in table)
    with pytest.raises(ValueError, match="two training GPUs"):
        E.select_eta_rule(w, lc, ["a40"], None, C)


def test_stack_factor_fitted_on_the_other_gpus_and_slows_the_compute_branch():
    """Vidur's stack factor (wave 32, e11h): read off the other GPUs' GEMM rows at m >= VIDUR_STACK_MIN_M, untouched
    by the scored GPU's own table, and it slows the compute-bound cells (prefill) while leaving decode nearly as is."""
    from steptime_lab.regimes import VIDUR_STACK_MIN_M

    C = Constants.default()
    v = _toy_vidur_slow_gemm({"a100-sxm": 1.15, "h100-sxm": 1.15, "a40": 1.15})
    w, lc = E.wide_cells(v), LX.tidy_cells(v)
    gpus = ["a100-sxm", "a40", "h100-sxm"]
    f = E.stack_factor(w, "h100-sxm", gpus, None, C)
    assert f["fitted_on"] == ["a100-sxm", "a40"] and f["min_m"] == VIDUR_STACK_MIN_M and f["cells"] > 0
    assert f["factor"] == pytest.approx(1.15, rel=0.01)
    bad = v.copy()
    bad.loc[bad["gpu"] == "h100-sxm", "latency_ms"] *= 3.0  # the scored GPU's rows set nothing
    assert E.stack_factor(E.wide_cells(bad), "h100-sxm", gpus, None, C)["factor"] == f["factor"]
    assert E.stack_factor(w, "h100-sxm", ["h100-sxm"], None, C)["factor"] == 1.0  # no other GPU: no correction
    new = E.run(v, lc, n_boot=20, constants=C, stack=True)
    old = E.run(v, lc, n_boot=20, constants=C)
    assert new["per_gpu"]["h100-sxm"]["vidur_stack"]["factor"] == f["factor"]
    mape = {(r["gpu"], r["subset"], p): r["mape"] for p, rr in (("new", new), ("old", old)) for r in rr["records"]
            if r.get("scope") is None and r["predictor"] == "steptime"}
    for g in gpus:
        assert mape[(g, "prefill", "new")] < mape[(g, "prefill", "old")] / 2
    doc = E.document(new, "E1.1", {"decode": 0.05, "prefill": 0.06})
    assert "stack" in doc["metrics"]["disclosed_stack"]
    with pytest.raises(ValueError, match="positive"):
        E.with_stack(C, "h100-sxm", 0.0)
