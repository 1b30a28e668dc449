"""One comparison for the tests that rebuild a committed result in a clean directory.

A rebuild on another machine or BLAS build may differ from the committed number in the last
rounded digit (results keep 6 significant digits) or at the level of round-off (a fitted parameter at
its bound of 0 reads 1e-16 on one machine and 1e-24 on another). Anything beyond that is a real
difference: a relative 1e-5 or an absolute 1e-12, and every string, boolean, key and list length
must match exactly. The comparison is the audit's own (`steptime audit --rerun`, steptime_lab.rerun).
"""
from steptime_lab.rerun import diff_values

FLOAT_NOISE = 1e-5


def assert_reproduced(old, new, what: str = "result") -> None:
    diffs = diff_values(old, new, FLOAT_NOISE)
    assert not diffs, f"{what}: {len(diffs)} value(s) differ beyond float noise: " + "; ".join(diffs[:10])
