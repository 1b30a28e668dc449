"""Moving a table's values by whole ulps, for the tests of fits that must not hinge on the last digits of their
input (imported by tests/test_repro_fits.py; pytest puts tests/ on sys.path). Moved here from
steptime_lab.experiments.gemm.ablation in wave 38: only tests used it."""
import numpy as np


def shift_ulps(df, k: int, column: str = "latency_ms"):
    """A copy of `df` with every value of `column` moved by `k` ulps (k > 0 up, k < 0 down)."""
    if not isinstance(k, (int, np.integer)):
        raise TypeError(f"shift_ulps: k must be an integer number of ulps, got {k!r}")
    out = df.copy()
    y = out[column].to_numpy(float)
    for _ in range(abs(int(k))):
        y = np.nextafter(y, np.inf if k > 0 else -np.inf)
    out[column] = y
    return out
