"""What the serving family shares: the label every simulated outcome carries and the request lengths drawn from a trace."""

from __future__ import annotations

import numpy as np
import pandas as pd


SIMULATED = "simulated (steptime serving simulator; no measured serving run)"


def trace_lengths(traces: pd.DataFrame, trace: str, n: int, seed: int):
    """`n` (prompt, output) pairs drawn without replacement from one trace of traces.parquet."""
    d = traces[traces["trace"].str.startswith(trace)]
    idx = np.random.default_rng(seed).choice(len(d), n, replace=False)
    return d["num_prefill_tokens"].to_numpy()[idx], d["num_decode_tokens"].to_numpy()[idx]
