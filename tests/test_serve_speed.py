"""The serving simulator's per-step shortcuts (wave 35, helper speed5): each answers exactly what the numpy call
it replaces answers."""

import numpy as np
import pytest

from steptime.serve import StepTimer
from steptime.serve.timer import _ndim


@pytest.mark.parametrize("x", [3, 3.0, -0.0, True, False, np.float64(2.5), np.int64(4), np.bool_(True), np.array(3.0),
                               np.zeros(0), np.zeros(3), np.zeros((2, 3)), [1, 2], [[1.0], [2.0]], (1,), [], None])
def test_ndim_is_numpys_ndim(x):
    assert _ndim(x) == np.ndim(x)
    assert type(_ndim(x)) is int


def test_the_decode_floor_takes_the_same_path_for_python_numbers_numpy_scalars_and_arrays():
    """_dfloor_n / _split_us / _dmem_n branch on the dimension of their arguments: a Python number, a numpy scalar
    and a one-element array give the same floor (the split-KV combine and the per-split cost included)."""
    from steptime.calibration import Constants

    c0 = Constants.default()
    lanes = {k: {**v, "attn_split_us": 0.2} for k, v in c0.get("attn_lane_factors").items()}
    t = StepTimer("llama-3.1-8b", "l40s", constants=c0.with_overrides({"attn_lane_factors": lanes,
                                                                        "attn_split_us": 0.2}))
    assert t._dsplit_us and t._dsplit
    for n, kv in ((1, 2047.0), (3, 90000.0), (40, 400.0)):
        plain = t._dfloor_n(n, kv)
        assert isinstance(plain, float)
        assert t._dfloor_n(np.int64(n), np.float64(kv)) == plain
        assert t._dfloor_n(n, np.array([kv]))[0] == plain
        assert t._split_us(n, kv) == t._split_us(np.array([float(n)]), np.array([kv]))[0]
        assert t._dmem_n(n) == np.ravel(t._dmem_n(np.array([float(n)])))[0]  # an array where the stream bounds it
