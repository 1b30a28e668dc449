"""A synthetic DistServe coefficients table (OPT-13B on A100, TP 1) in the tidy layout of
results/data/distserve.parquet, shared by the serving tests. Made-up coefficients of the right
form (prefill a + b*tokens + c*tokens^2; decode per batch regime), not DistServe's numbers."""
import pandas as pd


def coefficients() -> pd.DataFrame:
    rows = []
    for phase, (a, b, c) in {"prefill": (18.0, 0.1, 7e-6), "decode_small_bs": (20.0, 6e-4, 0.04),
                             "decode_large_bs": (7.0, 6e-4, 0.16)}.items():
        rows.append({"gpu": "a100-sxm", "engine": "distserve", "model": "opt-13b", "model_source": "facebook/opt-13b",
                     "tp": 1, "phase": phase, "a_ms": a, "b_ms": b, "c_ms": c, "b_per": "", "c_per": "",
                     "bs_threshold": 95})
    return pd.DataFrame(rows)
