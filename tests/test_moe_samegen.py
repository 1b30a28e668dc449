"""E3.1 (issue 20, wave 42, helper nearmiss): a kernel family's law for a held-out GPU is fitted on the other GPUs of its
compute-capability generation (sm_version // 10) where at least two of them ran the family, else on every other GPU's
cells of it, as before."""
from __future__ import annotations

import pandas as pd
import pytest

from steptime_lab.experiments import moe as E


def _rows(gpus, family="triton", dt="bf16"):
    return pd.DataFrame([{"gpu": g, "sdtype": dt, "family": family, "num_tokens": t} for g in gpus for t in (1, 64)])


def test_sm_major_groups_the_generations():
    assert [E.sm_major(g) for g in ("a100-sxm", "l40s", "h100-sxm", "b200", "b300", "gb300", "rtx-pro-6000")] == \
        [8, 8, 9, 10, 10, 10, 12]


def test_a_family_law_from_its_own_generation_where_two_donors_ran_it():
    rows = _rows(["a100-sxm", "h100-sxm", "h200-sxm", "l40s", "rtx-pro-6000", "b300", "gb200", "gb300", "b200"])
    t, what = E.training_cells(rows, "b200", "bf16", "triton", rows)
    assert sorted(t.gpu.unique()) == ["b300", "gb200", "gb300"]
    assert "sm 10x only" in what and what.startswith("triton on b300, gb200, gb300")
    # the same without `rows` (the winners-only path)
    t, _ = E.training_cells(rows, "gb300", "bf16", "triton")
    assert sorted(t.gpu.unique()) == ["b200", "b300", "gb200"]


def test_fewer_than_two_donors_of_the_generation_keep_every_gpu():
    rows = _rows(["a100-sxm", "h200-sxm", "l40s", "b200", "b300", "rtx-pro-6000", "h100-sxm"])
    # H100: one sm 9x donor (H200) -> every other GPU, text as before
    t, what = E.training_cells(rows, "h100-sxm", "bf16", "triton", rows)
    assert t.gpu.nunique() == 6 and what == f"triton on {E._gpus(t)} (every cell of the family)"
    # RTX PRO 6000 (sm 120): no donor of its generation
    t, _ = E.training_cells(rows, "rtx-pro-6000", "bf16", "triton", rows)
    assert t.gpu.nunique() == 6
    # donors all of the generation already: nothing left out, text unchanged
    tw = _rows(["b300", "gb200", "gb300", "b200"], family="trtllm")
    t, what = E.training_cells(tw, "b200", "bf16", "trtllm", tw)
    assert t.gpu.nunique() == 3 and "sm 10x" not in what


def test_the_switch_restores_every_donor(monkeypatch):
    rows = _rows(["h100-sxm", "b300", "gb200", "gb300", "b200"])
    monkeypatch.setattr(E, "SAME_GENERATION", False)
    t, what = E.training_cells(rows, "b200", "bf16", "triton", rows)
    assert t.gpu.nunique() == 4 and "sm 10x" not in what
    s, restricted = E.same_generation(rows[rows.gpu != "b200"], "b200", on=True)
    assert restricted and sorted(s.gpu.unique()) == ["b300", "gb200", "gb300"]


def test_an_unknown_gpu_is_refused_by_name():
    rows = _rows(["b300", "gb200", "no-such-gpu"])
    with pytest.raises(Exception, match="no-such-gpu"):
        E.same_generation(rows, "b200", on=True)
