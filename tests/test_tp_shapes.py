"""E1.29: the efficiency laws at the TP-split (per-rank) shapes (steptime_lab.experiments.tp_shapes)."""
import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments import tp_shapes as E


def test_split_shapes_divide_n_or_k_as_the_sharding_table_says():
    s = E.split_shapes(["llama-3-70b"])
    tp8 = {r.weight: (r.n, r.k) for r in s[s["tp"] == 8].itertuples()}
    assert tp8 == {"qkv_proj": (1280, 8192), "o_proj": (8192, 1024), "gate_up_proj": (7168, 8192),
                   "down_proj": (8192, 3584)}
    h = E.split_heads(["llama-3-70b", "llama-2-7b"])
    row = h[(h["model"] == "llama-3-70b") & (h["tp"] == 8)].iloc[0]
    assert (row["H"], row["Hkv"], row["d"]) == (8, 1, 128)  # 8 KV heads over 8 ranks: one each
    assert set(E.split_heads(["qwen3-14b"])["tp"]) == {1, 2, 4, 8}  # 40 heads: TP 8 divides them
    assert "phi-2" in E.dense_models() and not any("deepseek" in k for k in E.dense_models())


def test_only_cells_at_a_known_per_rank_shape_are_scored_and_skinny_ones_are_marked():
    shapes = E.split_shapes(["llama-3-8b"])
    gemm = pd.DataFrame({"gpu": "h100-sxm", "m": [16, 16, 16, 32768], "n": [4096, 4096, 4096, 4096],
                         "k": [512, 4096, 2048, 4096], "latency_ms": 0.1})
    x = E.aic_gemm_cells(gemm, shapes)
    # o_proj (n = hidden, k = 4096 / TP): TP 1 and TP 8 (k = 512); TP 2 (k = 2048); m > 16384 dropped
    assert sorted(zip(x["tp"], x["n"], x["k"])) == [(1, 4096, 4096), (2, 4096, 2048), (8, 4096, 512)]
    assert x.loc[x["tp"] == 8, "skinny"].all() and not x.loc[x["tp"] < 8, "skinny"].any()


def _pred(err_by_tp: dict, gpu="h100-sxm"):
    rows = []
    for tp, e in err_by_tp.items():
        rows.append(pd.DataFrame({"source": "aic", "gpu": gpu, "tp": tp, "err": np.full(4, e),
                                  "skinny": [True, False, False, False]}))
    return pd.concat(rows, ignore_index=True)


def test_document_scores_each_gpu_and_tp_against_its_architectures_target():
    targets = {"gemm_mape": {"default": 0.06, "blackwell": 0.09}, "attention_decode": 0.08, "attention_prefill": 0.1}
    gp = pd.concat([_pred({1: 0.05, 8: 0.12}), _pred({1: 0.05, 8: 0.08}, gpu="b200")], ignore_index=True)
    attn = pd.DataFrame({"gpu": "h100-sxm", "phase": ["decode"] * 2, "tp": [1, 8], "err": [0.02, -0.2],
                         "H": [64, 8], "Hkv": [8, 1], "d": [128, 128]})
    doc = E.document(gp, attn, targets)
    met = {(r["term"], r["gpu"], r["tp"]): r["mape"] <= r["target"] for r in doc["metrics"]["records"]}
    assert met == {("gemm", "b200", 1): True, ("gemm", "b200", 8): True, ("gemm", "h100-sxm", 1): True,
                   ("gemm", "h100-sxm", 8): False, ("attention_decode", "h100-sxm", 1): True,
                   ("attention_decode", "h100-sxm", 8): False}
    s = doc["metrics"]["summary"]["gemm:aic"]
    assert s["tp8_minus_tp1"]["h100-sxm"] == pytest.approx(0.07)
    assert s["missed_by"] == {"h100-sxm@tp8": pytest.approx(0.06)}
    assert doc["metrics"]["target_scored"] == 6 and doc["metrics"]["target_met"] == 4


def test_skinny_by_side_separates_the_small_dimension_and_the_m_band():
    """The diagnosis of the skinny split shapes keeps the two sides apart: cells with a small n and cells with
    a small k are scored separately (they err with opposite signs on the AIConfigurator tables), per m band."""
    import pandas as pd
    from steptime_lab.experiments import tp_shapes as T

    rows = []
    for m in (1, 64, 1024):
        rows.append({"gpu": "h100-sxm", "source": "aic", "skinny": True, "m": m, "n": 768, "k": 4096, "err": -0.2})
        rows.append({"gpu": "h100-sxm", "source": "aic", "skinny": True, "m": m, "n": 4096, "k": 512, "err": 0.4})
        rows.append({"gpu": "h100-sxm", "source": "aic", "skinny": False, "m": m, "n": 4096, "k": 4096, "err": 9.0})
    out = T.skinny_by_side(pd.DataFrame(rows))
    got = {(d["side"], d["m_band"].startswith("m <=")): (d["bias"], d["cells"]) for d in out}
    assert got == {("small_n", True): (-0.2, 2), ("small_n", False): (-0.2, 1),
                   ("small_k", True): (0.4, 2), ("small_k", False): (0.4, 1)}
    assert {d["arch"] for d in out} == {"hopper"}



def test_attention_scores_use_e1_24s_held_out_kv_write_eta_never_the_shipped_one(repo_root):
    """E1.29's attention cells add the table's KV write at the eta E1.24 scored that GPU with (measured on the OTHER
    GPUs, attention.kv_write_fold), not the shipped median that includes the scored GPU's own slope."""
    import copy
    import json

    from steptime.calibration import Constants
    from steptime_lab.experiments import attention as AX

    attn = json.loads((repo_root / "results" / "E1_24.json").read_text())
    gemm = json.loads((repo_root / "results" / "calibration" / "gemm_constants.json").read_text())
    g = "h100-sxm"
    rec = attn["metrics"]["per_gpu"][g]
    assert 0 < rec[AX.KV_WRITE_ETA_KEY] != Constants.default().get("light_eta")["kv_write"]  # held out != shipped
    # a cell far past the L2 (its write streams cold, at the recorded eta; a small one is L2-resident, wave 28)
    cells = pd.DataFrame([{"gpu": g, "phase": "prefill", "b": 16, "s": 8192, "c": 0, "H": 64, "Hkv": 8, "d": 128,
                           "kv_dtype": "bf16", "y_ms": 1.0, "llm": True, "cell": [16, 8192, 0, 64, 8]}])
    doc = {"metrics": {"per_gpu": {g: copy.deepcopy(rec)}}}
    pred = {}
    for eta in (0.5, 2.0):
        doc["metrics"]["per_gpu"][g][AX.KV_WRITE_ETA_KEY] = eta
        pred[eta] = float(E.predict_attention(cells, gemm, doc, Constants.default())["pred_ms"].iloc[0])
    assert pred[0.5] > pred[2.0]  # a slower write (smaller eta) adds more time: the record's eta is the one used
    del doc["metrics"]["per_gpu"][g][AX.KV_WRITE_ETA_KEY]
    with pytest.raises(ValueError, match="no held-out KV-write eta"):
        E.predict_attention(cells, gemm, doc, Constants.default())


def test_vidur_stack_factor_of_a_gpu_is_fitted_on_the_other_vidur_gpus_rows_only():
    """The scored GPU's own Vidur rows set nothing: corrupting them leaves its factor; the other GPU's large-m rows
    (m >= VIDUR_STACK_MIN_M) set it, the small-m ones do not."""
    def rows(gpu, m, meas, pred):
        return pd.DataFrame({"gpu": gpu, "source": "vidur", "m": m, "latency_ms": meas, "pred_ms": pred})

    big, small = E.VIDUR_STACK_MIN_M, 16
    p = pd.concat([rows("a100-sxm", [big, 2 * big, small], [1.1, 2.2, 9.0], [1.0, 2.0, 1.0]),
                   rows("h100-sxm", [big, 4 * big, small], [1.3, 5.2, 0.1], [1.0, 4.0, 1.0])], ignore_index=True)
    f = E.vidur_stack_factors(p)
    assert f["a100-sxm"]["factor"] == pytest.approx(1.3) and f["a100-sxm"]["fitted_on"] == ["h100-sxm"]
    assert f["h100-sxm"]["factor"] == pytest.approx(1.1) and f["h100-sxm"]["cells"] == 2
    bad = p.copy()
    bad.loc[bad["gpu"] == "h100-sxm", "latency_ms"] *= 10  # the scored GPU's own rows
    assert E.vidur_stack_factors(bad)["h100-sxm"]["factor"] == pytest.approx(1.1)
    assert E.vidur_stack_factors(p[p["gpu"] == "h100-sxm"])["h100-sxm"] == {
        "factor": 1.0, "fitted_on": [], "cells": 0, "min_m": big}
    with pytest.raises(ValueError, match="needs the columns"):
        E.vidur_stack_factors(p.drop(columns="pred_ms"))


def test_the_stack_factor_slows_the_compute_branch_only(repo_root):
    """A stack factor f > 1 divides eta_active: a compute-bound cell's time grows by about f, a one-token
    (memory-bound) cell's barely moves; a bad factor is a clear error."""
    import json

    from steptime.calibration import Constants

    gemm = json.loads((repo_root / "results" / "calibration" / "gemm_constants.json").read_text())
    cells = pd.DataFrame({"gpu": "h100-sxm", "tp": 1, "m": [1, 8192], "n": 8192, "k": 8192, "latency_ms": 1.0,
                          "models": "x", "weight": "o_proj", "source": "vidur", "skinny": False})
    base, _ = E.predict_gemm(cells, gemm, Constants.default())
    slow, _ = E.predict_gemm(cells, gemm, Constants.default(), stack={"h100-sxm": 1.2})
    r = (slow["pred_ms"] / base["pred_ms"]).to_numpy()
    assert r[1] == pytest.approx(1.2, rel=0.03) and r[0] < 1.02
    with pytest.raises(ValueError, match="positive number"):
        E.predict_gemm(cells, gemm, Constants.default(), stack={"h100-sxm": 0.0})


def test_document_records_the_vidur_stack_context_with_and_without_the_factor():
    raw = pd.DataFrame({"gpu": "h100-sxm", "tp": [1, 1, 8], "m": [16, 4096, 4096], "err": [-0.02, -0.2, -0.1]})
    scaled = raw.assign(err=[-0.02, 0.0, 0.05])
    ctx = E.vidur_stack_context(raw, scaled, {"h100-sxm": {"factor": 1.13}})
    assert ctx["mape_without"] == {"h100-sxm@tp1": pytest.approx(0.11), "h100-sxm@tp8": pytest.approx(0.1)}
    assert ctx["mape_with"]["h100-sxm@tp1"] == pytest.approx(0.01)
    bands = ctx["signed_by_m_band_without"]["h100-sxm"]
    assert bands["m <= 64"]["cells"] == 1 and bands["m > 1024"]["bias"] == pytest.approx(-0.15)
    targets = {"gemm_mape": {"default": 0.06}, "attention_decode": 0.08, "attention_prefill": 0.1}
    attn = pd.DataFrame({"gpu": "h100-sxm", "phase": ["decode"], "tp": [1], "err": [0.0], "H": [8], "Hkv": [1],
                         "d": [128]})
    doc = E.document(_pred({1: 0.05}), attn, targets, vidur_stack=ctx)
    assert doc["metrics"]["vidur_stack"]["factors"] == {"h100-sxm": {"factor": 1.13}}
    assert sum("stack factor" in c["comparison"] for c in doc["claims"]) == 2
    assert "vidur_stack" not in E.document(_pred({1: 0.05}), attn, targets)["metrics"]


def test_skinny_matched_excess_compares_a_skinny_cell_with_same_m_same_bytes_neighbours_only():
    """A skinny cell erring like the non-skinny cells of its working set has no excess (the memory law's miss, not the
    split's); one erring apart has it. Neighbours at another m, or whose bytes are beyond the ratio, are not used."""
    from steptime.terms.gemm import gemm_bytes

    def row(m, n, k, err, skinny):
        return {"gpu": "l40s", "source": "aic", "tp": 8, "m": m, "n": n, "k": k, "skinny": skinny,
                "latency_ms": 0.01, "pred_ms": 0.01 * np.exp(err)}

    # 768 x 4096 and 3072 x 1024 move nearly the same bytes (the same weight); 4096 x 512 within 1.5x; 16384^2 ~80x more
    assert gemm_bytes(16, 768, 4096) / gemm_bytes(16, 3072, 1024) == pytest.approx(1.0, abs=0.01)
    assert 1 < gemm_bytes(16, 3072, 1024) / gemm_bytes(16, 4096, 512) < E.MATCH_BYTES_RATIO
    rows = [row(16, 768, 4096, -0.3, True), row(16, 3072, 1024, -0.3, False), row(16, 16384, 16384, 0.5, False),
            row(64, 768, 4096, -0.4, True), row(64, 3072, 1024, 0.1, False),
            row(512, 768, 4096, 0.2, True), row(1024, 3072, 1024, -0.5, False),  # no neighbour at m = 512
            row(16, 4096, 512, 0.2, True)]  # 4 MB against 6 MB: within 1.5x of 3072 x 1024
    out = E.skinny_matched_excess(pd.DataFrame(rows))
    got = {(d["side"], d["m_band"].startswith("m <=")): d for d in out}
    small_n = got[("small_n", True)]
    assert small_n["cells"] == 2 and small_n["matched"] == 2
    assert small_n["excess_log"] == pytest.approx(np.median([0.0, -0.5]))
    assert small_n["signed_log"] == pytest.approx(-0.35)
    assert got[("small_n", False)]["matched"] == 0 and got[("small_n", False)]["excess_log"] is None
    assert got[("small_k", True)]["excess_log"] == pytest.approx(0.5)
    assert E.skinny_matched_excess(pd.DataFrame(rows).drop(columns="pred_ms")) == []


def test_monotone_floor_is_zero_on_a_table_rising_in_m_and_counts_a_kernel_switchs_step_down():
    from steptime_lab.experiments.tp_shapes import _nondecreasing

    assert list(_nondecreasing(np.array([1.0, 3.0, 2.0, 4.0]), np.ones(4))) == [1.0, 2.5, 2.5, 4.0]
    assert list(_nondecreasing(np.array([2.0, 1.0]), np.array([3.0, 1.0]))) == [1.75, 1.75]
    ms = [1, 2, 4, 8, 16, 32]
    rising = [8.8, 9.0, 9.1, 9.3, 9.5, 9.7]
    stepped = [8.8, 12.5, 12.5, 12.6, 13.3, 9.7]  # A100 768 x 4096: a slower kernel at m = 2-16
    rows = [{"source": "aic", "gpu": "a100-sxm", "tp": 8, "m": m, "n": n, "k": k, "skinny": n < 1024,
             "latency_ms": t / 1e3, "pred_ms": 9.0 / 1e3}
            for n, k, ts in ((3072, 1024, rising), (768, 4096, stepped)) for m, t in zip(ms, ts)]
    x = pd.DataFrame(rows)
    out = E.monotone_floor(x)["aic:a100-sxm@tp8"]
    assert out["cells"] == 12 and out["skinny_cells"] == 6
    assert out["skinny_floor"] > 0.05  # no non-decreasing fit follows the step down at m = 32
    only_rising = E.monotone_floor(x[x["n"] == 3072])["aic:a100-sxm@tp8"]
    assert only_rising["floor"] == 0.0 and only_rising["skinny_floor"] is None
    law = np.mean(np.abs(9.0 / np.array(rising + stepped) - 1))
    assert out["law"] == pytest.approx(law, abs=1e-4)
