"""What a world-size-1 FPM row holds (issue 19, wave 31, helper ws1): the raw rows themselves, not a model.

Dynamo's InstrumentedScheduler (the FPM collector) records a row's latency as the interval between two consecutive
non-empty update_from_output calls of vLLM's engine core (schedule-to-output after an empty step), at every TP. At
world size 1 the engine thread itself launches step n + 1 before it collects step n's output, so a host wait inside
that launch (a device sync, the next eager step's preparation) lands in row n. These tests pin the signatures on the
vendored files so that a loader change (units, row order, layout selection) cannot silently produce them, and so that
E3.4's plain-reading tp 1 ep 1 dp 1 MAPEs (4.33 mixed, 13.2 context) stay traceable to the raw rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from steptime_lab.data.wallclock import load_fpm_moe_steps, load_fpm_steps

MOE_TP1 = "raw/wallclock/aic_fpm/qwen3.6-35b-a3b_tp1_ep1_dp1/fpm_metrics_phase.csv"
GRAPH_MAX_TOKENS = 512  # engines.yaml vllm launch.graph_max_tokens: larger steps run eagerly


def _eager(d: pd.DataFrame) -> np.ndarray:
    return ((d["phase"] != "decode") & (d["ctx_tokens"] + d["decode_requests"] > GRAPH_MAX_TOKENS)).to_numpy()


def test_moe_world_size_1_rows_are_the_raw_files_rows_in_ms(repo_root):
    """The tidy tp 1 ep 1 dp 1 rows are the raw file's rows, in its order and in ms (no unit or row-selection
    slip behind E3.4's 4.33 / 13.2 plain-reading MAPEs)."""
    raw = pd.read_csv(repo_root / MOE_TP1).sort_values("counter_id").reset_index(drop=True)
    t = load_fpm_moe_steps(root=repo_root)
    run = t[(t["tp"] == 1) & (t["ep"] == 1) & (t["dp"] == 1)].sort_values("counter_id").reset_index(drop=True)
    assert len(run) == len(raw) == 6576
    np.testing.assert_array_equal(run["counter_id"].to_numpy(), raw["counter_id"].to_numpy())
    np.testing.assert_array_equal(run["latency_ms"].to_numpy(float), raw["latency_ms"].to_numpy(float))
    assert (run["phase"].to_numpy() == raw["phase"].to_numpy()).all()
    # a decode step of this run is milliseconds, not seconds or microseconds
    assert 5.0 < run.loc[run["phase"] == "decode", "latency_ms"].median() < 15.0


def test_moe_world_size_1_sub_5ms_eager_rows_follow_the_row_that_holds_them(repo_root):
    """Every eager row of the world-size-1 MoE run recorded under 5 ms directly follows (consecutive counter id) a
    row of at least 35 ms (over 4x the run's median decode row, 8.5 ms): the engine collected the two outputs back
    to back, the first row holding both steps."""
    raw = pd.read_csv(repo_root / MOE_TP1).sort_values("counter_id").reset_index(drop=True)
    short = np.flatnonzero(_eager(raw) & (raw["latency_ms"].to_numpy() < 5.0))
    assert len(short) == 64 and short.min() > 0
    ids, lat = raw["counter_id"].to_numpy(), raw["latency_ms"].to_numpy()
    assert (ids[short] - ids[short - 1] == 1).all()
    assert (lat[short - 1] >= 35.0).all() and np.median(lat[raw["phase"].to_numpy() == "decode"]) < 9.0


def test_dense_tp1_row_before_an_eager_step_holds_its_host_wait(repo_root):
    """Qwen3-32B (B300, vLLM 0.20.1): a chat-segment decode row directly before an eager step is about 10 ms
    longer than the decode rows of the same batch at TP 1 (world size 1: the engine thread prepares the eager step
    before it collects the decode's output) and not at TP 2 (the worker prepares it; the output is collected
    independently). Two TP 1 eager rows of 8,192 tokens are recorded at about 12 ms, each right after a row that
    holds two steps (about 800 ms)."""
    df = load_fpm_steps(root=repo_root)
    excess = {}
    for tp in (1, 2):
        x = df[df["tp"] == tp].sort_values("counter_id").reset_index(drop=True)
        nxt = np.r_[np.diff(x["counter_id"].to_numpy()) == 1, False]
        before = nxt & np.r_[_eager(x)[1:], False]
        dec = ((x["phase"] == "decode") & (x["workload_segment"] == "real") & (x["decode_requests"] == 31)).to_numpy()
        excess[tp] = float(np.median(x.loc[dec & before, "latency_ms"]) - np.median(x.loc[dec & ~before, "latency_ms"]))
    assert excess[1] > 8.0 and abs(excess[2]) < 1.0, excess
    x = df[df["tp"] == 1].sort_values("counter_id").reset_index(drop=True)
    lat, ids = x["latency_ms"].to_numpy(), x["counter_id"].to_numpy()
    tiny = np.flatnonzero(_eager(x) & (lat < 20.0))
    assert ids[tiny].tolist() == [1105, 1397]
    assert (ids[tiny] - ids[tiny - 1] == 1).all() and (lat[tiny - 1] > 750.0).all()
