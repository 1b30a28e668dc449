"""E3.1's floor reading within its donors' range (issue 20, wave 41, helper wsread; DESIGN.md): a held-out GPU's
floor correction is clipped to the range of the floor readings its donors give in the inner leave-one-out."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime_lab.experiments import moe as E

LAW = {"bf16": dict(zip(E.PARAMS, (0.4, 0.8, 0.3, 20.0, 2.0, 1.0, 0.5, 16.0, 4.0)))}


def _grid(gpu: str) -> pd.DataFrame:
    h, i, k, n = E.READING_SHAPE
    grid = [(T, 1, ep) for ep in (1, 4, 8, 16) for T in (1, 2, 4, 16, 64, 256, 1024, 4096, 8192, 16384)]
    return pd.DataFrame({"gpu": gpu, "sdtype": "bf16", "distribution": "balanced", "family": "triton",
                         "hidden_size": h, "inter_size": i, "topk": k, "num_experts": n,
                         "moe_tp": [r[1] for r in grid], "moe_ep": [r[2] for r in grid],
                         "num_tokens": [r[0] for r in grid]})


def _cells(floors: dict) -> pd.DataFrame:
    """Each GPU's grid timed by one law with its own floor offset (us): {gpu: d_floor_us}."""
    d = pd.concat([_grid(g) for g in floors], ignore_index=True)
    d["latency_ms"] = E.predict(d, LAW, {g: {"d_floor_us": f} for g, f in floors.items()})
    return d


def test_gpu_scales_clip_the_floor_to_its_bounds_and_solve_the_others_with_it():
    """Three reading cells timed with a 7 us floor offset: bounded to (-2, 2) the floor reads 2 us, and the memory and
    compute readings are solved with that floor (their cells then predicted as measured less the floor's 5 us)."""
    d = _cells({"h100-sxm": 7.0})
    free, _ = E.gpu_scales(d, "h100-sxm", LAW)
    assert free["d_floor_us"] == pytest.approx(7.0, abs=0.1)
    sc, used = E.gpu_scales(d, "h100-sxm", LAW, floor_bounds=(-2.0, 2.0))
    assert sc["d_floor_us"] == 2.0 and len(used) == 3
    rd = E.reading_cells(d, "h100-sxm")
    mem = rd[rd.num_tokens == E.READINGS["memory"][0]]
    pred = E.predict(mem, LAW, {"h100-sxm": sc})
    assert pred[0] == pytest.approx(float(mem.latency_ms.iloc[0]), rel=1e-6)
    # a bound that holds the free reading changes nothing
    same, _ = E.gpu_scales(d, "h100-sxm", LAW, floor_bounds=(-10.0, 10.0))
    assert same == pytest.approx(free)


def test_clip_floor_and_its_bad_bounds():
    assert E.clip_floor(21.8, None) == 21.8
    assert E.clip_floor(21.8, (-6.0, 2.0)) == 2.0 and E.clip_floor(-9.0, (-6.0, 2.0)) == -6.0
    assert E.clip_floor(1.0, (-6.0, 2.0)) == 1.0
    with pytest.raises(ValueError, match="floor bounds"):
        E.clip_floor(1.0, (3.0, 2.0))
    with pytest.raises(ValueError, match="floor bounds"):
        E.clip_floor(1.0, (np.nan, 2.0))


def test_floor_reading_bounds_span_the_donors_and_clip_an_outlier_target():
    """Two donors timed with floors 2 us apart and a target 25 us slower at every cell: the donors' range is read
    in their inner leave-one-out (each on the law refitted without it), lies within a few us, and the target's floor
    reading is clipped to it; no floor cell, one donor or non-bf16 cells give None or an error."""
    donors = _cells({"h100-sxm": 1.0, "h200-sxm": -1.0})
    target = _cells({"b200": 25.0})
    choice = dict(E.READINGS)
    lo, hi = E.floor_reading_bounds(donors, donors, choice)
    assert lo <= hi and -5.0 < lo and hi < 5.0
    law = {"bf16": E.fit_dtype(donors, "bf16")}
    free, _ = E.gpu_scales(target, "b200", law, choice)
    assert free["d_floor_us"] > hi + 10.0
    sc, _ = E.gpu_scales(target, "b200", law, choice, floor_bounds=(lo, hi))
    assert sc["d_floor_us"] == pytest.approx(hi)
    assert E.floor_reading_bounds(donors, donors, {**choice, "floor": None}) is None
    one = donors[donors.gpu == "h100-sxm"]
    assert E.floor_reading_bounds(one, donors, choice) is None
    with pytest.raises(ValueError, match="bf16 cells only"):
        E.floor_reading_bounds(donors.assign(sdtype="fp8"), donors, choice)
