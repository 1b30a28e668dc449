"""E2.2/E2.6 tie-aware ranking metrics."""
import numpy as np
import pytest

from steptime_lab.experiments import ranking as R


def test_predicted_tie_is_never_a_hit():
    meas = np.array([[3.0, 2.0, 1.0]])
    pred = np.array([[3.0, 1.0, 1.0]])  # GPUs 1 and 2 tied at the top
    s = R.rank_scores(pred, meas, ("a", "b", "c"))
    assert s["top1"] == 0.0 and s["top1_ties"] == 1
    assert s["pair_ties"] == 1 and s["pair_wrong"] == 0


def test_stable_sort_artifact_counts_tie_as_hit():
    meas = np.array([[1.0, 2.0]])
    pred = np.array([[5.0, 5.0]])
    s = R.rank_scores(pred, meas, ("a", "b"))
    assert s["top1_naive_stable_sort"] == 1.0 and s["top1"] == 0.0


def test_perfect_and_wrong_orders():
    meas = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    s = R.rank_scores(meas * 2, meas, ("a", "b", "c"))
    assert s["top1"] == 1.0 and s["pair_wrong"] == 0 and s["spearman_mean"] == pytest.approx(1.0)
    s = R.rank_scores(meas[:, ::-1], meas, ("a", "b", "c"))
    assert s["top1"] == 0.0 and s["top1_misses"] == 2 and s["spearman_mean"] == pytest.approx(-1.0)


def test_workload_components_are_model_shapes():
    wl = {"model": "llama-3-8b", "tp": 4, "phase": "decode", "batch": 16, "kv_len": 4096, "tokens": 16}
    gem, att = R.component_cells(wl)
    assert [g[0] for g in gem] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    assert gem[2][1:] == (16, 7168, 4096) and gem[3][1:] == (16, 4096, 3584)
    assert att["num_heads"] == 8 and att["num_kv_heads"] == 2 and att["kv_len"] == 4096


def test_clear_winner_counts_only_decided_workloads():
    meas = np.array([[1.0, 1.01, 3.0], [1.0, 2.0, 3.0]])  # first: winner within 2%, second: clear
    pred = np.array([[2.0, 1.0, 3.0], [1.0, 2.0, 3.0]])
    s = R.rank_scores(pred, meas, ("a", "b", "c"))
    assert s["workloads_clear_winner"] == 1 and s["top1_clear_winner"] == 1.0
    assert s["top1"] == 0.5 and s["top1_within_meas_band"] == 1.0


def test_regret_is_the_measured_cost_of_the_pick():
    meas = np.array([[1.0, 1.1, 2.0], [1.0, 1.5, 3.0]])
    pred = np.array([[1.0, 0.9, 2.0], [0.5, 0.9, 0.5]])  # wl 0 picks b (+10%); wl 1 ties a and c (worst: +200%)
    s = R.rank_scores(pred, meas, ("a", "b", "c"))
    assert s["top1_regret_max"] == pytest.approx(2.0)
    assert s["top1_regret_mean"] == pytest.approx((0.1 + 2.0) / 2)
    assert R.rank_scores(meas, meas, ("a", "b", "c"))["top1_regret_max"] == 0.0


def test_regret_distribution_of_the_wrong_picks():
    meas = np.array([[1.0, 1.01, 2.0], [1.0, 1.5, 3.0], [1.0, 2.0, 3.0]])
    pred = np.array([[1.0, 0.9, 2.0], [1.0, 0.9, 3.0], [1.0, 2.0, 3.0]])  # +1%, +50%, a hit
    d = R.rank_scores(pred, meas, ("a", "b", "c"))["top1_regret_wrong_picks"]
    assert d["n"] == 2 and d["within_2pct"] == 1 and d["within_5pct"] == 1 and d["over_5pct"] == 1
    assert d["max"] == pytest.approx(0.5)
    assert R.rank_scores(meas, meas, ("a", "b", "c"))["top1_regret_wrong_picks"] == {"n": 0}
