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
