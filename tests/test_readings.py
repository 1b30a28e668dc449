"""The reading count of DESIGN's contract (nine readings, three per family), counted from the
calibration records (defaults.yaml cell records, engine_constants.yaml wall-clock steps)."""
from steptime.calibration.readings import CONTRACT, PER_FAMILY, count_readings


# DESIGN's contract, stated here and not read from the module under test: checking the counts against the
# module's own PER_FAMILY let a drifted constant (4) pass a fourth reading (mutation review, wave 39)
CONTRACT_PER_FAMILY, CONTRACT_TOTAL = 3, 9


def test_shipped_records_spend_at_most_three_readings_per_family_and_nine_in_all():
    assert PER_FAMILY == CONTRACT_PER_FAMILY and f"{PER_FAMILY} GEMM" in CONTRACT
    counts = count_readings()
    assert len(counts) >= 9
    for g, c in counts.items():
        for fam in ("gemm", "nccl", "wallclock"):
            assert c[fam] <= CONTRACT_PER_FAMILY, (g, fam, c)
        assert all(n <= CONTRACT_PER_FAMILY for n in c["wallclock_engines"].values()), (g, c)
        assert c["total"] == c["gemm"] + c["nccl"] + c["wallclock"] <= CONTRACT_TOTAL
    full = [g for g, c in counts.items() if c["wallclock"]]
    assert full and all(counts[g]["total"] == CONTRACT_TOTAL for g in full)  # a GPU read in every family costs nine
    assert "nine readings" in CONTRACT and "three per family" in CONTRACT


def _doc(n_gemm):
    cells = [{"gpu": "h100-sxm", "table": "gemm", "cell": [i, 8, 8]} for i in range(n_gemm)]
    cells += [{"gpu": "h100-sxm", "table": "allreduce", "cell": ["nccl", 2, 512]}, {"sample": "shared fit"}]
    return {"constants": {"global": {}, "gpu": {"h100-sxm": {
        "c": {"value": 1, "provenance": "MEASURED", "source": "t", "cells": cells}}}}}


def test_count_catches_a_fourth_reading_and_counts_wall_clock_per_engine():
    eng = {"engines": {"vllm": {"h100-sxm": {"t": {"value": 1, "cells": [["h100-sxm", "vllm", 1, "decode", 1, 7]]}}}},
           "scales": {"vllm": {"h100-sxm": {"s": {"value": 1, "cells": [["h100-sxm", "vllm", 8, "decode", 1, 9]]}}},
                      "trtllm": {"h100-sxm": {"s": {"value": 1, "cells": [["h100-sxm", "trtllm", 1, "decode", 1, 3]]}}}}}
    c = count_readings(_doc(4), eng)["h100-sxm"]
    assert c["gemm"] == 4 and c["nccl"] == 1
    assert c["wallclock_engines"] == {"trtllm": 1, "vllm": 2} and c["wallclock"] == 2
    assert c["total"] == 7
    assert count_readings(_doc(3), {})["h100-sxm"]["wallclock"] == 0


def test_reading_gpu_seconds_time_each_read_cell_by_the_gpus_it_occupies_and_never_invent_a_time():
    import pandas as pd

    from steptime_lab.experiments.calibration_cost import reading_gpu_seconds

    doc = _doc(2)  # gemm cells (0,8,8), (1,8,8); nccl (nccl, 2, 512)
    eng = {"scales": {"vllm": {"h100-sxm": {"s": {"value": 1, "cells": [["h100-sxm", "vllm", 8, "decode", 1, 9],
                                                                       ["h100-sxm", "vllm", 1, "decode", 1, 4]]}}}}}
    gemm = pd.DataFrame({"gpu": "h100-sxm", "m": [0, 5], "n": 8, "k": 8, "latency_ms": [2.0, 99.0]})
    ar = pd.DataFrame({"gpu": "h100-sxm", "backend": ["nccl"], "num_gpus": [2], "message_bytes": [512],
                       "latency_ms": [0.5]})
    fpm = pd.DataFrame({"gpu": "h100-sxm", "tp": [8, 1], "counter_id": [9, 4], "latency_ms": [10.0, 20.0]})
    r = reading_gpu_seconds(doc, eng, gemm=gemm, allreduce=ar, fpm=fpm, repeats=5)["h100-sxm"]
    assert r["gemm"] == {"readings": 2, "gpu_seconds": 2.0e-3 * 5, "unmatched": 1}  # (1,8,8) has no row
    assert r["nccl"]["gpu_seconds"] == 0.5e-3 * 2 * 5
    assert abs(r["wallclock"]["gpu_seconds"] - (10.0e-3 * 8 + 20.0e-3 * 1) * 5) < 1e-12
    assert r["wallclock"]["readings"] == 2 and r["total_readings"] == 5
