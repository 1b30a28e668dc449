"""E1.22's error atlas: the bad regions are scored apart from the figure (atlas_regions), and the figure only draws."""
import numpy as np
import pandas as pd

from steptime.step import VIDUR_LAYER_OPS
from steptime_lab.experiments import attention as A, step as S


def _step_pred():
    rows = []
    for model, off in (("m-good", 0.0), ("m-bad", 2.0)):  # m-bad: the first op over-predicted by 2 ms a cell
        for t in (16, 20, 64, 100):
            r = {"gpu": "g1", "model": model, "tp": 1, "num_tokens": t}
            for op in VIDUR_LAYER_OPS:
                r[op] = 1.0
                r[f"pred_{op}"] = 1.0 + (off if op == VIDUR_LAYER_OPS[0] else 0.0)
            r["layer_ms"] = float(sum(r[op] for op in VIDUR_LAYER_OPS))
            r["pred_ms"] = float(sum(r[f"pred_{op}"] for op in VIDUR_LAYER_OPS))
            rows.append(r)
    return {"pred": pd.DataFrame(rows)}


def test_step_atlas_flags_only_the_bad_shape_with_its_dominant_operator(tmp_path):
    r = _step_pred()
    err = 2.0 / len(VIDUR_LAYER_OPS)
    regions = S.atlas_regions(r)
    assert err > 0.10 and {x["shape"] for x in regions} == {"m-bad tp1"}
    assert sorted(x["tokens_bin"] for x in regions) == [16, 64]  # power-of-two bins of 16, 20 and 64, 100
    assert all(x["dominant_op"] == VIDUR_LAYER_OPS[0] and x["cells"] == 2 for x in regions)
    assert np.isclose(regions[0]["median_signed_error"], round(err, 4))
    assert S.plot_atlas(r, tmp_path / "atlas") is None and (tmp_path / "atlas.png").is_file()
    doc = S.atlas_document([], regions)
    assert doc["metrics"]["step_bad_regions"] == regions
    assert doc["claims"][0]["value"] == {"op": VIDUR_LAYER_OPS[0], "regions": 2, "bad_regions": 2}


def test_attention_atlas_keeps_llama_like_cells_and_names_the_branch(tmp_path):
    base = {"gpu": "g1", "H": 32, "Hkv": 8, "d": 128, "kv_dtype": "bf16", "y_ms": 1.0, "l2_hit": 0.0,
            "t_floor": 0.0, "t_units": 0.0, "t_memory": 1.0, "t_compute": 0.1}
    rows = [{**base, "phase": "decode", "b": 1, "c": 1024, "s": 1, "pred_steptime": 1.3},     # bad, stream
            {**base, "phase": "decode", "b": 2, "c": 1024, "s": 1, "pred_steptime": 1.05},    # within 10%
            {**base, "phase": "prefill", "b": 1, "c": 0, "s": 512, "pred_steptime": 0.8,
             "t_memory": 0.1, "t_compute": 1.0},                                              # bad, compute
            {**base, "H": 64, "phase": "decode", "b": 1, "c": 1024, "s": 1, "pred_steptime": 2.0}]  # not Llama-like
    r = {"pred": pd.DataFrame(rows)}
    regions = A.atlas_regions(r)
    assert [(x["phase"], x["tokens"], x["dominant_branch"]) for x in regions] == [("decode", 1024, "stream"),
                                                                                ("prefill", 512, "compute")]
    assert [x["sign"] for x in A.summarize_regions(regions)] == ["over", "under"]
    assert A.plot_atlas(r, tmp_path / "atlas") is None and (tmp_path / "atlas.png").is_file()
