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
