"""Issue 14 collectors, parsers and reductions, without a GPU: plans, the restore-on-exit path,
and every reduction on the synthetic format fixtures (tests/fixtures/README.md)."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from steptime_collect import clock, dispatch, engine_kernels, gemm_sweep, power, safety, steptrace
from steptime_lab.experiments.host import learner as hostfloor
from steptime.errors import DataError
from steptime.calibration import Constants

FIX = Path(__file__).parent / "fixtures"


class FakeNvml:
    def __init__(self, power=350.0):
        self.power, self.locked, self.calls = power, None, []

    def get_power_limit_w(self):
        return self.power

    def set_power_limit_w(self, w):
        self.calls.append(("power", w))
        self.power = w

    def power_limit_range_w(self):
        return 100.0, 400.0

    def lock_clocks_mhz(self, mhz):
        self.calls.append(("lock", mhz))
        self.locked = mhz

    def reset_clocks(self):
        self.calls.append(("reset",))
        self.locked = None


# ---- plans ---------------------------------------------------------------------------------
def test_clock_plan_randomises_caps_per_repeat_and_covers_every_cell():
    plan = clock.clock_plan((1, 64, 4096), runs=4, caps=(575, 500, 450, 400), seed=3)
    assert len(plan) == 4 * 4 * 3
    cap_orders = []
    for run in range(4):
        cells = [c for c in plan if c["run"] == run]
        assert sorted((c["cap_w"], c["m"]) for c in cells) == sorted((c, m) for c in (575, 500, 450, 400)
                                                                      for m in (1, 64, 4096))
        assert [c["order"] for c in cells] == list(range(12))
        cap_orders.append(tuple(dict.fromkeys(c["cap_w"] for c in cells)))
    assert len(set(cap_orders)) > 1  # the cap order changes between repeats


def test_gemm_sweep_plans():
    ms = gemm_sweep.duty_ladder()
    assert ms[:16] == list(range(1, 17)) and ms[-1] == 16384 and len(ms) > 100 and ms == sorted(set(ms))
    cells = gemm_sweep.l2_ladder("h200-sxm")
    from steptime.specs import get_gpu

    xs = [2.0 * n * k / get_gpu("h200-sxm").l2_bytes for _, n, k in cells]
    assert min(xs) < 0.1 and max(xs) > 6 and all(m == 1 for m, _, _ in cells)
    order = gemm_sweep.run_order(cells, 2, seed=1)
    assert [c for r, _, c in order if r == 0] != [c for r, _, c in order if r == 1]
    with pytest.raises(DataError, match="unknown plan"):
        gemm_sweep.plan_cells("bogus", "h100-sxm")


# ---- safety: settings only with a flag, restored on every exit path ------------------------------
def test_settings_refused_without_flags_and_nothing_changed():
    b = FakeNvml()
    s = safety.GpuSettings(b)
    with pytest.raises(safety.SettingNotAllowed, match="--allow-set-power"):
        s.set_power_limit(300)
    with pytest.raises(safety.SettingNotAllowed, match="--allow-lock-clocks"):
        s.lock_clocks(1500)
    assert b.calls == []


def test_out_of_range_power_refused():
    s = safety.GpuSettings(FakeNvml(), allow_power=True)
    with pytest.raises(safety.SettingNotAllowed, match="outside this GPU's range"):
        s.set_power_limit(900)


def test_restore_on_exception_and_on_signal():
    b = FakeNvml(power=350.0)
    s = safety.GpuSettings(b, allow_power=True, allow_clocks=True)
    with pytest.raises(RuntimeError):
        with safety.guarded(s):
            s.set_power_limit(250)
            s.lock_clocks(1500)
            raise RuntimeError("collector crashed")
    assert b.power == 350.0 and b.locked is None
    b2 = FakeNvml(power=350.0)
    s2 = safety.GpuSettings(b2, allow_power=True)
    with pytest.raises(KeyboardInterrupt):
        with safety.guarded(s2):
            s2.set_power_limit(200)
            os.kill(os.getpid(), signal.SIGTERM)
    assert b2.power == 350.0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


@pytest.mark.parametrize("module", ["clock", "gemm_sweep", "dispatch", "steptrace", "engine_kernels", "ncu"])
def test_every_collector_has_help(module):
    r = subprocess.run([sys.executable, "-m", f"steptime_collect.{module}", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage" in r.stdout


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is not None, reason="torch installed here")
def test_collector_without_gpu_stops_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "steptime_collect.clock", "--out", str(tmp_path / "x.csv"), "--runs", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no GPU here" in r.stderr
    assert not (tmp_path / "x.csv").exists()


# ---- clock sweeps under caps and locks -------------------------------------------------------
@pytest.fixture(scope="module")
def caps():
    return clock.parse_clock_sweep(FIX / "clock_caps_small.csv")


def test_old_sweeps_parse_with_empty_cap_and_lock():
    df = clock.parse_clock_sweep(FIX / "clock_sweep_small.csv")
    assert df["cap_w"].isna().all() and df["locked_mhz"].isna().all()


def test_droop_has_intervals_and_attribution(caps):
    rows = power.droop(caps, "l40s", n_boot=200)
    assert [r["m"] for r in rows] == [64, 1024, 4096, 16384]
    big = rows[-1]
    assert 0.3 < big["droop"] < 0.4 and big["droop_ci"][0] <= big["droop"] <= big["droop_ci"][1]
    assert big["t_steptime_clock_ms"] > big["t_steptime_boost_ms"]


def test_lock_control(caps):
    r = power.lock_control(caps, "l40s")
    assert r["decline_locked"] < 0.05 < r["decline_free"]   # the decline vanishes under the lock
    assert r["lock_held"] < 0.01


def test_cap_chain(caps):
    r = power.cap_chain(caps, "l40s")
    assert r["caps_w"] == [250.0, 300.0, 350.0]
    big = [p for p in r["per_m"] if p["m"] == 16384][0]
    assert big["r_cap_clock"] > 0.95 and big["slope_mhz_per_w"] > 0 and big["penalty_low_cap"] > 0.1
    small = [p for p in r["per_m"] if p["m"] == 64][0]
    assert small["penalty_low_cap"] < big["penalty_low_cap"]
    cell = r["cells"][0]
    assert cell["clock_ci"][0] <= cell["clock_mhz"] <= cell["clock_ci"][1]
    assert r["r_clock_tflops_same_m"] > 0.9


def test_placement_beats_cap_blind_or_ties_and_never_beats_oracle(caps):
    r = power.placement(caps, "l40s", n_scenarios=6, jobs_per_scenario=5)
    for s in r["scenarios"]:
        ms = s["makespan_ms"]
        assert ms["oracle"] <= ms["steptime_fclk"] + 1e-12 and ms["oracle"] <= ms["cap_blind"] + 1e-12
    assert r["simulated"] is True and 0 <= r["oracle_matches"] <= 6


def test_cap_reductions_refuse_missing_settings():
    df = clock.parse_clock_sweep(FIX / "clock_sweep_small.csv")
    with pytest.raises(DataError, match="two or more power caps"):
        power.cap_chain(df, "h100-sxm")
    with pytest.raises(DataError, match="free-running and locked"):
        power.lock_control(df, "h100-sxm")


# ---- GEMM sweeps --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sweep():
    return gemm_sweep.parse_gemm_sweep(FIX / "gemm_sweep_small.csv")


def test_memory_law_fit_recovers_the_fixture_law(sweep):
    r = gemm_sweep.memory_law(sweep, "l40s")
    assert r["fit"]["eta_max"] == pytest.approx(0.9, rel=0.02) and r["fit"]["x_half"] == pytest.approx(0.5, rel=0.05)
    assert r["max_eta_in_l2"] > 1.0 and r["shipped_law_mape_x_ge_1"] >= 0


def test_duty_and_barrier(sweep):
    d = gemm_sweep.duty_law(sweep, "l40s")
    assert d["cells"] >= 3 and np.isfinite(d["duty_c_fit"]) and d["mape_fit"] <= 1.05 * d["mape_shipped"]
    b = gemm_sweep.barrier(sweep, "l40s")
    assert b["cells"] >= 2 and b["cv"] >= 0 and b["mean"] > 0


def test_gemm_sweep_bad_plan_row(tmp_path):
    lines = (FIX / "gemm_sweep_small.csv").read_text().splitlines()
    p = tmp_path / "bad.csv"
    p.write_text("\n".join(lines[:2] + [lines[2].replace(",duty,", ",dutty,")]))
    with pytest.raises(DataError, match=r"bad.csv: row 1 \(line 3\), column 'plan'"):
        gemm_sweep.parse_gemm_sweep(p)


# ---- cuBLASLt dispatch log ---------------------------------------------------------------------
def test_dispatch_log_parsed_into_tiles_and_clusters():
    df = dispatch.parse_dispatch_log(FIX / "cublaslt_small.log")
    assert list(df["m"]) == [1, 4096, 128] and list(df["n"]) == [4096, 6144, 4096] and list(df["k"]) == [4096, 4096, 14336]
    assert list(df["tile_m"]) == [64, 128, 64] and list(df["tile_n"]) == [128, 256, 64]
    assert list(df["cluster_m"]) == [1, 2, 1] and list(df["cluster_n"]) == [1, 1, 2]
    assert df["stage_k"].iloc[0] == 64 and df["a_type"].iloc[0] == "R_16BF"
    r = dispatch.tile_agreement(df, "h100-sxm")
    assert r["shapes"] == 3 and 0 <= r["tile_agreement"] <= 1 and "2x1" in r["clusters_seen"]


def test_dispatch_log_errors(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("nothing to see\n")
    with pytest.raises(DataError, match="no cuBLASLt trace lines"):
        dispatch.parse_dispatch_log(p)
    p.write_text("[cublasLt][1][Trace][cublasLtSSSMatmul] A=0X1 algo=[algoId=1]\n")
    with pytest.raises(DataError, match=r"line 1: trace line without a readable 'Adesc'"):
        dispatch.parse_dispatch_log(p)


# ---- engine kernels vs the law -----------------------------------------------------------------
def test_engine_kernels_classified_and_scored():
    df = engine_kernels.parse_engine_kernels(FIX / "engine_kernels_small.csv")
    assert list(df["cls"]) == ["gemm", "attention", "kv_write", "elementwise"]
    assert df["duration_ms"].iloc[0] == pytest.approx(0.1205) and df["dram_bytes"].iloc[0] == pytest.approx(210.5e6)
    r = engine_kernels.law_gap(df, "h100-sxm")
    assert set(r["per_class"]) == {"gemm", "attention", "kv_write", "elementwise"} and r["kernels"] == 4


def test_engine_kernels_bad_unit(tmp_path):
    lines = (FIX / "engine_kernels_small.csv").read_text().splitlines()
    p = tmp_path / "u.csv"
    p.write_text("\n".join([lines[0], lines[1].replace('"Mbyte","Mbyte"', '"furlong","Mbyte"')] + lines[2:]))
    with pytest.raises(DataError, match=r"u.csv: row 0 \(line 2\), column 'dram__bytes_read.sum': unknown unit"):
        engine_kernels.parse_engine_kernels(p)


# ---- step traces and the host-floor learner ----------------------------------------------------
def test_steptrace_schedule_and_rows():
    reqs = [(0.0, 100, 3), (0.0, 50, 1), (0.0, 5000, 2)]
    steps = list(steptrace.schedule(reqs, budget=256, max_seqs=8))
    first = steps[0]
    assert first[1] == [(100, 0), (50, 0)] and first[2] == [] and first[3] == [5000]
    total_decode = sum(len(s[2]) for s in steps)
    assert total_decode == (3 - 1) + (1 - 1) + (2 - 1)   # every output token after the first is a decode
    row = steptrace.step_row(7, [(100, 0)], [10, 20], [5], 3.5)
    assert dict(zip(steptrace.FPM_COLUMNS, row))["phase"] == "mixed"
    assert dict(zip(steptrace.FPM_COLUMNS, row))["mean_decode_kv_tokens"] == 15.0


def test_host_learner_arms():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 64, 400).astype(float)
    kern = 5 + 0.1 * n
    y = kern + 2.0 + 0.05 * (n - 1) + rng.normal(0, 0.05, len(n))
    r = hostfloor.host_learner(n, kern, y, static_ab=(3.0, 0.0))
    s = r["scores"]
    assert s["online_frozen"]["mae_ms"] < s["static"]["mae_ms"]
    assert s["oracle_static"]["mae_ms"] <= s["online_frozen"]["mae_ms"] + 1e-9
    assert r["constants"]["online_frozen"][0] == pytest.approx(2.0, abs=0.1)
    sh = hostfloor.shift_case({"n_requests": n[:200], "kernel_ms": kern[:200], "latency_ms": y[:200]},
                              {"n_requests": n[200:], "kernel_ms": kern[200:], "latency_ms": y[200:] + 1.0},
                              static_ab=(3.0, 0.0))
    assert sh["scores"]["online_adapt"]["mae_ms"] < sh["scores"]["online_frozen"]["mae_ms"]
    with pytest.raises(DataError, match="at least 10 steps"):
        hostfloor.host_learner(n[:5], kern[:5], y[:5], (1, 0))
    with pytest.raises(DataError, match="static arm has 3 finite values"):
        hostfloor.host_learner(n, kern, y, static_ab=np.ones(3))


# ---- E1.19 on the FPM layout: a tiny synthetic frame built here (not telemetry), one code path for both sources ----
def _tiny_fpm(n_steps=60, gpu="b300", model="qwen3-32b", tp=1):
    """A tidy-FPM-layout frame of decode steps: a 'sweep' segment, then a 'real' one (counter_id in time order);
    latency_ms is a placeholder, set by the tests from the kernel prediction plus a known host floor."""
    import pandas as pd

    rows = []
    for seg, start in (("sweep", 100), ("real", 1000)):
        for i in range(n_steps):
            n = 1 + (7 * i) % 32
            rows.append({"gpu": gpu, "model": model, "moe": False, "engine": "vllm", "engine_version": "0.20.1",
                         "tp": tp, "phase": "decode", "workload_segment": seg, "counter_id": start + i,
                         "ctx_tokens": 0, "ctx_requests": 0, "ctx_kv_tokens": 0, "decode_requests": n,
                         "decode_tokens": n, "decode_kv_tokens": n * (500 + 10 * i),
                         "mean_decode_kv_tokens": 500.0 + 10 * i, "latency_ms": 1.0, "over_token_budget": False})
    return pd.DataFrame(rows)


def _with_host(tidy, floors):
    """latency = the profile's predicted GPU part + a known floor a + b (N - 1) per segment (floors: seg -> (a, b))."""
    steps, _ = hostfloor.predict_host_floor(tidy, constants=Constants.default())
    k = steps.set_index("step")["kernel_ms"]
    out = tidy.copy()
    n = out["decode_requests"].to_numpy(float)
    a = out["workload_segment"].map(lambda s: floors[s][0]).to_numpy(float)
    b = out["workload_segment"].map(lambda s: floors[s][1]).to_numpy(float)
    out["latency_ms"] = k.loc[out["counter_id"]].to_numpy() + a + b * (n - 1)
    return out


def test_e1_19_fpm_path_recovers_a_known_host_floor_and_the_shift():
    tidy = _with_host(_tiny_fpm(), {"sweep": (1.0, 0.02), "real": (3.0, 0.05)})
    metrics, claims, steps = hostfloor.build(tidy, warmup=0.2, constants=Constants.default())
    run = metrics["per_run"]["b300/qwen3-32b/tp1"]
    st, sh = run["stationary"], run["shift"]
    # stationary: the frozen learner reads the real floor from the first 20% of its steps (noise-free here)
    assert st["deploy_boundary"] == 12 and st["steps"] == 60
    assert st["constants"]["online_frozen"] == pytest.approx([3.0, 0.05], abs=1e-6)
    assert st["scores"]["online_frozen"]["mae_ms"] < 1e-6 < st["scores"]["static"]["mae_ms"]
    # shift: trained on the sweep's floor, tested on the real one -> misses by the floor change; the oracle does not
    assert sh["train_segment"] == "sweep" and sh["test_segment"] == "real"
    assert sh["constants"]["online_frozen"] == pytest.approx([1.0, 0.02], abs=1e-6)
    assert sh["scores"]["online_frozen"]["bias_ms"] < -2.0
    assert sh["scores"]["oracle_static"]["mae_ms"] < 1e-6
    assert sh["scores"]["online_adapt"]["mae_ms"] < sh["scores"]["online_frozen"]["mae_ms"]
    # the static arm is the vllm profile as shipped (its step minus its own GPU part: its host part), with values
    # and provenance; a host time, so never negative (against the bare kernels it was, by the fusions' savings)
    held = steps[steps["segment"] == "real"].sort_values("step").iloc[12:]
    shipped_host = (held["static_ms"] - held["kernel_ms"]).mean()
    assert st["constants"]["static"]["per_step_mean_ms"] == pytest.approx(shipped_host)
    assert ((held["static_ms"] - held["kernel_ms"]) > 0).all()
    # the phase filter: no mixed step in this frame, so a mixed-only run has nothing to reduce
    with pytest.raises(DataError, match="no \\(gpu, model, tp\\) run"):
        hostfloor.score_runs(steps, phases=["mixed"])
    # ... and the shipped values carry provenance
    assert metrics["static_arm"]["values"]["b300"]["sched_a_ms"]["provenance"] in ("ASSUMED", "FITTED", "MEASURED")
    met = [c for c in claims if "frozen < static" == c["comparison"]]
    assert [c["met"] for c in met] == [True, True]
    assert claims[-1]["claim"].startswith("reported in round 1")


def test_e1_19_reads_a_collected_steptrace_through_the_same_path(tmp_path):
    import pandas as pd

    tidy = _with_host(_tiny_fpm(gpu="h100-sxm"), {"sweep": (2.0, 0.0), "real": (2.0, 0.0)})
    real = tidy[tidy["workload_segment"] == "real"]
    path = tmp_path / "raw" / "telemetry" / "steptrace" / "h100-sxm" / "qwen3-32b.csv"
    path.parent.mkdir(parents=True)
    pd.DataFrame({c: (real[c] if c in real else 0) for c in steptrace.FPM_COLUMNS}).to_csv(path, index=False)
    metrics, _, _ = hostfloor.build(None, [path], warmup=0.2, constants=Constants.default())
    run = metrics["per_run"]["h100-sxm/qwen3-32b/tp1"]
    assert run["stationary"]["constants"]["online_frozen"] == pytest.approx([2.0, 0.0], abs=1e-6)
    assert "not_run" in run["shift"]  # a collected trace has one segment: no shift case
    both, _, _ = hostfloor.build(_with_host(_tiny_fpm(), {"sweep": (1.0, 0.0), "real": (1.0, 0.0)}), [path], constants=Constants.default())
    assert sorted(both["per_run"]) == ["b300/qwen3-32b/tp1", "h100-sxm/qwen3-32b/tp1"]
    good = pd.read_csv(path)
    # a collected trace gets the vendored runs' checks: an impossible step names its file, row and column
    bad = good.copy()
    bad.loc[3, "decode_tokens"] = bad.loc[3, "decode_requests"] + 1
    bad.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"qwen3-32b.csv: row 3 .*column 'decode_tokens'.*exactly one token"):
        hostfloor.build(None, [path], constants=Constants.default())
    good.assign(latency_ms=-good["latency_ms"]).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"qwen3-32b.csv: .*latency_ms"):
        hostfloor.build(None, [path], constants=Constants.default())
    good.drop(columns=["latency_ms"]).to_csv(path, index=False)
    with pytest.raises(DataError, match="lacks column"):
        hostfloor.build(None, [path], constants=Constants.default())
    with pytest.raises(DataError, match="unknown phase"):
        hostfloor.score_runs(pd.DataFrame({"phase": ["decode"]}), phases=["prefil"])


# ---- the experiments end to end (reduction -> result metrics/claims -> figure) and the Slurm profile ----
FIXTURE_FOR = {"E1.3b": "gemm_sweep_small.csv", "E1.6": "clock_caps_small.csv", "E1.7": "clock_caps_small.csv",
               "E1.8": "clock_caps_small.csv", "E1.9": "clock_caps_small.csv", "E1.14": "gemm_sweep_small.csv",
               "E1.15": "gemm_sweep_small.csv", "E1.17": "engine_kernels_small.csv", "E2.8": "clock_caps_small.csv",
               "E1.5": "ncu_gemm_small.csv", "E1.10": "clock_sweep_small.csv"}


@pytest.mark.parametrize("eid", sorted(FIXTURE_FOR))
def test_every_telemetry_experiment_reduces_and_draws(eid, tmp_path):
    from steptime_lab.experiments.telemetry import build, figure

    gpu = "h100-sxm" if eid in ("E1.17", "E1.5", "E1.10") else "l40s"
    path = tmp_path / "raw" / "telemetry" / "x" / gpu / FIXTURE_FOR[eid]
    path.parent.mkdir(parents=True)
    path.write_bytes((FIX / FIXTURE_FOR[eid]).read_bytes())
    dispatch = []
    if eid == "E1.14":
        d = tmp_path / "raw" / "telemetry" / "dispatch" / gpu / "cublaslt.log"
        d.parent.mkdir(parents=True)
        d.write_bytes((FIX / "cublaslt_small.log").read_bytes())
        dispatch = [d]
    metrics, claims = build(eid, [path], n_boot=100, dispatch=dispatch)
    assert gpu in metrics["per_gpu"] and claims[-1]["claim"].startswith("reported in round 1")
    if eid == "E1.14":
        assert "dispatch" in metrics["per_gpu"][gpu]
    figure(eid, metrics, tmp_path / "fig")
    assert (tmp_path / "fig.png").stat().st_size > 0


def test_registry_lists_every_issue14_experiment_as_awaiting_with_a_command():
    import yaml

    reg = yaml.safe_load((Path(__file__).parents[1] / "config" / "experiments.yaml").read_text())["experiments"]
    for eid in ("E1.3b", "E1.6", "E1.7", "E1.8", "E1.9", "E1.14", "E1.15", "E1.17", "E2.8"):
        e = reg[eid]
        assert e["status"] == "awaiting" and e["raw"][0].startswith("raw/telemetry/")
        assert e["raw"][0] in e["collect"] and "profiles/pace" in e["collect"]
    # E1.19 is built on the vendored FPM steps; the steptrace collection stays documented for new telemetry
    e = reg["E1.19"]
    assert e["status"] == "built" and any(p.startswith("raw/wallclock/aic_fpm/") for p in e["raw"])
    assert "raw/telemetry/steptrace/" in e["collect"] and "profiles/pace" in e["collect"]


def test_every_collect_command_pastes_into_a_shell_as_written():
    """`steptime status` and figures/PAPER.md print each registry `collect` command for a GPU user to paste: it must be
    one shell line (a note only as a trailing # comment, never in parentheses the shell would choke on) naming the
    Slurm profile that exists and only raw/telemetry targets."""
    import shlex

    import yaml

    root = Path(__file__).parents[1]
    for reg_file in (root / "config" / "experiments.yaml", root / ".test" / "config" / "experiments.yaml"):
        reg = yaml.safe_load(reg_file.read_text())["experiments"]
        commands = {eid: e["collect"] for eid, e in reg.items() if e.get("collect")}
        assert commands, reg_file
        for eid, cmd in commands.items():
            words = shlex.split(cmd, comments=True)
            assert words[:3] == ["snakemake", "--profile", "profiles/pace"], (eid, cmd)
            assert (root / words[2] / "config.yaml").is_file(), (eid, cmd)
            assert len(words) > 3 and all(w.startswith("raw/telemetry/") for w in words[3:]), (eid, cmd)


@pytest.mark.slow
def test_pace_profile_dry_runs_every_collection_target(monkeypatch):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    import yaml

    root = Path(__file__).parents[1]
    reg = yaml.safe_load((root / "config" / "experiments.yaml").read_text())["experiments"]
    # every documented collection: awaiting entries, and built ones that take more telemetry (E1.19's steptrace)
    targets = sorted({t for e in reg.values() if e.get("status") == "awaiting" or e.get("collect")
                      for t in e.get("collect", "").split() if t.startswith("raw/telemetry/")})
    assert len(targets) >= 12
    env = dict(os.environ, STEPTIME_SLURM_ACCOUNT="acct", STEPTIME_SLURM_PARTITION="cpu",
               STEPTIME_SLURM_GPU_PARTITION="gpu")
    r = subprocess.run(["snakemake", "--profile", "profiles/pace", "-n", *targets], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for rule in ("collect_cap_sweep", "collect_lock_control", "collect_gemm_sweep", "collect_dispatch_log",
                 "collect_engine_kernels", "collect_steptrace", "collect_maxq_sweep", "collect_clock_sweep"):
        assert rule in r.stdout


def _collection_targets(reg):
    """Every raw/telemetry file a registry `collect` command names (the awaiting experiments and E1.19's steptrace)."""
    return sorted({t for e in reg.values() if e.get("collect") for t in e["collect"].split()
                   if t.startswith("raw/telemetry/")})


@pytest.mark.slow
def test_pace_profile_submits_every_collection_rule(tmp_path):
    """A dry run never submits, so it cannot see what sbatch would get: submit for real through stand-in Slurm
    commands (sbatch records its arguments; sacct reports the job failed, so Snakemake stops at once; the first
    status check 15 s after the start and `--jobs 100` over the profile's 16, so every ready job is submitted before
    any failure is seen, whatever the machine's load: on a loaded CI machine a 1 s wait once let only 10 of 11
    collection jobs reach sbatch). Every
    collection job must reach sbatch (the executor plugin refuses a `--gres` in slurm_extra at submission, which
    every collection rule had until wave 38) and ask for one GPU of its configured model on the GPU partition."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    import shutil

    import yaml

    root = Path(__file__).parents[1]
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "config", "workflow", "profiles", "raw"):
        (shutil.copytree if (root / name).is_dir() else shutil.copy)(root / name, work / name)
    shutil.copytree(root / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    reg = yaml.safe_load((root / "config" / "experiments.yaml").read_text())["experiments"]
    gpus = yaml.safe_load((root / "config" / "collect.yaml").read_text())["gpus"]
    targets = _collection_targets(reg)
    fake, log = tmp_path / "bin", tmp_path / "sbatch_calls"
    log.mkdir()
    fake.mkdir()
    # one file per sbatch call: submissions running at once cannot interleave their lines in a shared log
    scripts = {"sbatch": f'f=$(mktemp -p {log} call.XXXXXX)\necho "$@" > "$f"\necho 4242', "sacct": 'echo "4242|FAILED"',
               "sacctmgr": "echo acct", "sshare": "echo acct", "squeue": "true", "scancel": "true", "sinfo": "true"}
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/bash\n{body}\n")
        (fake / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", STEPTIME_SLURM_ACCOUNT="acct",
               STEPTIME_SLURM_PARTITION="cpuq", STEPTIME_SLURM_GPU_PARTITION="gpuq")
    r = subprocess.run(["snakemake", "--profile", "profiles/pace", "--slurm-init-seconds-before-status-checks", "15",
                        "--latency-wait", "1", "--keep-going", "--jobs", "100", *targets], cwd=work, env=env, capture_output=True,
                       text=True, timeout=600)
    out = r.stdout + r.stderr
    assert "not allowed in the 'slurm_extra'" not in out, out[-3000:]
    calls = [f.read_text().split("--wrap")[0] for f in sorted(log.glob("call.*"))]
    collect = [c for c in calls if "--comment rule_collect_" in c]
    # the step-trace collector waits for its CPU input (the traces table), which the stand-in sacct fails
    assert len(collect) == len([t for t in targets if "/steptrace/" not in t]), out[-3000:]
    for call in collect:
        # the job's comment names its wildcards, the GPU first (rule_<name>_wildcards_<gpu>[_<dataset>])
        gpu = next(g for g in gpus if f"_wildcards_{g} " in call or f"_wildcards_{g}_" in call)
        assert f"--gpus={gpus[gpu]['gres']}:1" in call and "--gres" not in call, call
        assert " -p gpuq " in call and " -A acct " in call and " --exclusive " in call, call
    for call in set(calls) - set(collect):  # a reduction or a table: the CPU partition, no GPU
        assert " -p cpuq " in call and " -A acct " in call and "--gpus" not in call, call


def test_e1_6_collects_the_max_q_card_its_question_names():
    """E1.6 asks how far a Blackwell Max-Q card's clock droops below its boost; its raw file, and the collect command
    a user pastes, must target the Max-Q spec entry (300 W, 2,288 MHz boost), which config/collect.yaml can submit.
    Until wave 39 both named `rtx-pro-6000`, the 600 W Server Edition: the job went to that card, and the reduction
    would have measured the droop against the Server Edition's 2,617 MHz boost."""
    import shlex

    import yaml

    from steptime.specs import get_gpu

    root = Path(__file__).parents[1]
    e = yaml.safe_load((root / "config" / "experiments.yaml").read_text())["experiments"]["E1.6"]
    assert "Max-Q" in e["question"]
    collect_gpus = yaml.safe_load((root / "config" / "collect.yaml").read_text())["gpus"]
    targets = [w for w in shlex.split(e["collect"], comments=True) if w.startswith("raw/telemetry/")]
    assert targets == e["raw"]
    for t in targets:
        gpu = Path(t).parent.name
        assert gpu in collect_gpus, t
        assert "Max-Q" in get_gpu(gpu).name and get_gpu(gpu).key == gpu, (t, get_gpu(gpu).name)
