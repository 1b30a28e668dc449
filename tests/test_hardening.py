"""Issue 23, cases of the hostile-user pass: file edges and numbers outside the model.

One test per case; each failed (a traceback, a silent wrong answer, or a hang) before its fix.
CLI: one line on stderr, exit 2, and nothing written; API: a SteptimeError that is also a ValueError.
"""
import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from steptime import predict_step
from steptime.cli import main
from steptime.errors import (BatchError, GPUTypeError, InputError, ModelConfigError, ServeError)
from steptime.serve import Workload, from_table, policy, simulate_replicas, synthetic
from steptime.specs import get_gpu, gpu_sources, gpu_table, model_from_config
from refusals import clean, refuses  # tests/refusals.py: the one refusal shape
from steptime.terms import comm
from steptime.validation import F_CLK_MIN, MAX_TOKENS

MODEL = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
SERVE = ["serve", *MODEL, "--no-progress"]


# ---- serve --trace at file edges --------------------------------------------------------
def test_trace_empty_csv(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("")
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.csv")], "not a readable CSV trace")


def test_trace_string_token_columns(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("arrival,prompt_tokens,output_tokens\n0,abc,def\n1,x,y\n")
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.csv")], "column 'prompt_tokens' must hold numbers")


def test_trace_binary_file(tmp_path, capsys):
    (tmp_path / "t.csv").write_bytes(bytes(range(256)) * 8)
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.csv")], "not a readable CSV trace")


def test_trace_fake_parquet(tmp_path, capsys):
    (tmp_path / "t.parquet").write_text("not parquet\n")
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.parquet")], "not a readable parquet trace")


def test_trace_path_traversal_to_etc_passwd(tmp_path, capsys, monkeypatch):
    if not os.path.isfile("/etc/passwd"):
        pytest.skip("no /etc/passwd here")
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath("/etc/passwd", tmp_path)  # ../../etc/passwd
    refuses(capsys, [*SERVE, "--trace", rel], "--trace")


def test_trace_fifo_is_refused_not_read(tmp_path, capsys):
    os.mkfifo(tmp_path / "t.csv")
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.csv")], "a FIFO, not a regular file")


def test_trace_prompt_1e30_refused_before_the_int64_cast(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("arrival,prompt_tokens,output_tokens\n0,1e30,10\n")
    refuses(capsys, [*SERVE, "--trace", str(tmp_path / "t.csv")], "beyond any model's context")
    with pytest.raises(ServeError) as e:
        from_table(pd.DataFrame({"arrival": [0.0], "prompt_tokens": [1e30], "output_tokens": [10]}))
    clean(e)


# ---- serve outputs checked before the simulation ----------------------------------------
@pytest.mark.parametrize("flag,path,needle", [
    ("--csv", "/proc/x.csv", "cannot write there"),
    ("--csv", "/dev/full", "expected a .csv file name"),  # wave 37: serve's --csv asks for .csv, as plan's
    ("--fig", "/proc/x.png", "cannot write there"),
])
def test_unwritable_outputs_refused_before_the_run(capsys, monkeypatch, flag, path, needle):
    if not os.path.exists(os.path.dirname(path)) or (path == "/dev/full" and not os.path.exists(path)):
        pytest.skip(f"no {path} here")
    import steptime.serve.command as C

    def boom(a):  # the simulation must not start
        raise AssertionError("simulation ran before the output was checked")
    monkeypatch.setattr(C, "run_args", boom)
    refuses(capsys, [*SERVE, "--n", "5", flag, path], needle)


def test_csv_to_a_directory_refused(tmp_path, capsys):
    (tmp_path / "d.csv").mkdir()
    refuses(capsys, [*SERVE, "--n", "5", "--csv", str(tmp_path / "d.csv")], "is a directory")


def test_csv_to_a_device_behind_a_csv_name_refused(tmp_path, capsys):
    """The non-regular-file check /dev/full pinned before serve's --csv asked for a .csv name."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    (tmp_path / "full.csv").symlink_to("/dev/full")
    refuses(capsys, [*SERVE, "--n", "5", "--csv", str(tmp_path / "full.csv")], "not a regular file")


def test_fig_to_a_directory_refused(tmp_path, capsys):
    refuses(capsys, [*SERVE, "--n", "5", "--fig", str(tmp_path)], "is a directory; give a file name")


def test_fig_with_another_suffix_refused(tmp_path, capsys):
    refuses(capsys, [*SERVE, "--n", "5", "--fig", str(tmp_path / "out.txt")], "expected a .png file name")
    assert not list(tmp_path.iterdir())


def test_csv_and_fig_written_where_asked(tmp_path, capsys):
    csv, fig = tmp_path / "r.csv", tmp_path / "f.png"
    assert main([*SERVE, "--n", "20", "--rate", "5", "--csv", str(csv), "--fig", str(fig)]) == 0
    assert len(pd.read_csv(csv)) == 20 and fig.is_file() and fig.with_suffix(".pdf").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


# ---- calibration ship inputs ------------------------------------------------------------
def _ship_refuses(capsys, tmp_path, path, needle):
    defaults = tmp_path / "defaults.yaml"
    import steptime.calibration as cal

    before = cal.DEFAULTS_FILE.read_bytes()
    refuses(capsys, ["calibration", "ship", str(path)], needle)
    assert cal.DEFAULTS_FILE.read_bytes() == before and not defaults.exists()


def test_ship_etc_passwd(tmp_path, capsys):
    if not os.path.isfile("/etc/passwd"):
        pytest.skip("no /etc/passwd here")
    _ship_refuses(capsys, tmp_path, "/etc/passwd", "not a")


def test_ship_missing_file(tmp_path, capsys):
    _ship_refuses(capsys, tmp_path, tmp_path / "nope.yaml", "No such file")


def test_ship_binary_file(tmp_path, capsys):
    (tmp_path / "b.yaml").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    _ship_refuses(capsys, tmp_path, tmp_path / "b.yaml", "not a constants file")


def test_ship_yaml_python_tag(tmp_path, capsys):
    import steptime.calibration as cal

    # sealed, so the file reaches the YAML reader (wave 41: the seal is checked first, on the bytes then parsed)
    (tmp_path / "t.yaml").write_text(cal.seal_text('updates: !!python/object/apply:os.system ["touch PWNED"]\n'))
    _ship_refuses(capsys, tmp_path, tmp_path / "t.yaml", "YAML error")
    assert not (tmp_path / "PWNED").exists()


def test_ship_update_without_fields(tmp_path, capsys):
    import steptime.calibration as cal

    (tmp_path / "u.yaml").write_text(cal.seal_text("updates:\n- {scope: global, name: x}\n"))  # sealed: see above
    _ship_refuses(capsys, tmp_path, tmp_path / "u.yaml", "lacks value, provenance, source")


def test_ship_refuses_an_allreduce_curve_outside_physics(tmp_path, capsys):
    import steptime.calibration as cal

    (tmp_path / "c.yaml").write_text(cal.seal_text(
        "updates:\n- scope: gpu.l40s\n  name: allreduce_curve\n  provenance: FITTED\n  source: test\n"
        "  value: {nccl/8: {L_us: 22.6, B_gbps: 0.2, shape: {}}}\n"))
    _ship_refuses(capsys, tmp_path, tmp_path / "c.yaml", "bus bandwidth 0.2 GB/s at TP 8 is outside 0.32-32 GB/s")


def test_ship_refuses_a_one_shot_rate_that_is_not_a_positive_number(tmp_path, capsys):
    """The custom curve's optional one-shot rate (terms/comm.py r_one_gbps, wave 38) is a rate: 0, negative or
    not finite is refused at ship with a line naming it (a 0 would otherwise silently drop the term)."""
    import steptime.calibration as cal

    for bad in ("0", "-5.0", ".nan"):
        (tmp_path / "c.yaml").write_text(cal.seal_text(
            "updates:\n- scope: gpu.h100-sxm\n  name: allreduce_curve\n  provenance: FITTED\n  source: test\n"
            "  value: {custom/2: {L_us: 4.3, B_gbps: 320.0, shape: {a_one: 1.0, d_two_us: 5.0, a_two: 0.8, "
            "r_one_gbps: " + bad + "}}}\n"))
        _ship_refuses(capsys, tmp_path, tmp_path / "c.yaml", "one-shot rate r_one_gbps")


def test_ship_accepts_a_gpus_own_reading_under_the_donor_floor(tmp_path):
    """L40S's own TP 8 reading (1.447 GB/s, 0.045 of its link) is under ETA_BUS_MIN but over ETA_BUS_OWN_MIN: it
    ships (into a copy of defaults.yaml here, never the product's)."""
    import steptime.calibration as cal

    (tmp_path / "c.yaml").write_text(cal.seal_text(
        "updates:\n- scope: gpu.l40s\n  name: allreduce_curve\n  provenance: FITTED\n  source: test\n"
        "  value: {nccl/8: {L_us: 22.6, B_gbps: 1.447, shape: {}}}\n"))
    dest = tmp_path / "defaults.yaml"
    dest.write_bytes(cal.DEFAULTS_FILE.read_bytes())
    before = cal.DEFAULTS_FILE.read_bytes()
    cal.ship([tmp_path / "c.yaml"], path=dest)
    assert cal.DEFAULTS_FILE.read_bytes() == before
    assert "1.447" in dest.read_text()


# ---- model configs that are not regular files, or lack a shape ---------------------------
def test_model_dev_zero_refused_without_reading(capsys):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    refuses(capsys, ["predict", "--model", "/dev/zero", "--gpu", "h100-sxm", "--decode", "1x10"], "a device")


def test_model_fifo_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "config.json")
    refuses(capsys, ["predict", "--model", str(tmp_path / "config.json"), "--gpu", "h100-sxm", "--decode", "1x10"],
            "a FIFO")


def test_model_config_too_large(tmp_path):
    p = tmp_path / "config.json"
    with open(p, "wb") as fh:
        fh.truncate(5 << 20)
    with pytest.raises(ModelConfigError) as e:
        model_from_config(p)
    assert "above the limit" in clean(e)


LLAMA = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "vocab_size": 128256, "intermediate_size": 14336, "max_position_embeddings": 131072}


@pytest.mark.parametrize("how", ["null", "missing"])
def test_config_intermediate_size_null_or_missing_refused(tmp_path, how):
    cfg = dict(LLAMA)
    if how == "null":
        cfg["intermediate_size"] = None
    else:
        del cfg["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError) as e:
        model_from_config(tmp_path / "config.json")
    assert f"intermediate_size is {how}" in clean(e)


def test_gpt2_style_n_inner_null_keeps_its_meaning(tmp_path):
    cfg = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    cfg["n_inner"] = None
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_from_config(tmp_path / "config.json").intermediate_size == 4 * 4096


# ---- numbers that should be refused -----------------------------------------------------
@pytest.mark.parametrize("f", ["1e-320", "1e-300", str(F_CLK_MIN / 2)])
def test_f_clk_floor(capsys, f):
    refuses(capsys, ["predict", *MODEL, "--decode", "1x10", "--f-clk", f], "below")


def test_f_clk_at_the_floor_is_finite():
    r = predict_step("llama-3.1-8b", "h100-sxm", decode=[(1, 10)], f_clk=F_CLK_MIN)
    assert math.isfinite(r.total_ms)


def test_non_finite_total_refused(monkeypatch):
    from steptime.terms import host

    monkeypatch.setattr(host, "sampling_time", lambda N, *a, **k: np.full(len(N), np.inf))
    with pytest.raises(InputError) as e:
        predict_step("llama-3.1-8b", "h100-sxm", decode=[(1, 10)])
    assert "not finite (term sampling)" in clean(e)


@pytest.mark.parametrize("gpu,tp", [("h100-sxm", 16), ("b200", 64)])
def test_tp_beyond_gpus_per_node(capsys, gpu, tp):
    refuses(capsys, ["predict", "--model", "llama-3.1-70b", "--gpu", gpu, "--decode", "1x10", "--tp", str(tp)],
            "GPUs per node")


def test_tp_beyond_gpus_per_node_in_serve(capsys):
    refuses(capsys, [*SERVE, "--tp", "16", "--n", "3"], "GPUs per node")


def test_every_gpu_has_a_sourced_gpus_per_node():
    sources = gpu_sources()
    for key, g in gpu_table().items():
        assert isinstance(g.gpus_per_node, int) and g.gpus_per_node >= 1, key
        assert g.figures["gpus_per_node"].source in sources, key


def test_decode_kv_1e30_is_a_batch_error():
    with pytest.raises(BatchError) as e:
        predict_step("llama-3.1-8b", "h100-sxm", decode=[(1, 10**30)])
    assert "beyond any model's context" in clean(e)


def test_isl_beyond_int64(capsys):
    refuses(capsys, [*SERVE, "--isl", "99999999999999999999", "--n", "3"], "beyond any model's context")


def test_isl_range_beyond_int64(capsys):
    refuses(capsys, [*SERVE, "--isl", "1:99999999999999999999", "--n", "3"], "beyond any model's context")


def test_synthetic_length_beyond_tokens_api():
    with pytest.raises(ServeError) as e:
        synthetic(3, isl=10**30, osl=10)
    clean(e)


@pytest.mark.parametrize("gpu", [("a100-sxm",), {"h100-sxm"}, ["h100-sxm"]])
def test_gpu_of_the_wrong_type(gpu):
    with pytest.raises(GPUTypeError) as e:
        predict_step("llama-3.1-8b", gpu, decode=[(1, 10)])
    clean(e)
    assert isinstance(e.value, TypeError)


def test_rate_1e_300_refused_not_garbage(capsys):
    refuses(capsys, [*SERVE, "--rate", "1e-300", "--n", "50"], "beyond the simulator's horizon")


def test_rate_subnormal_refused(capsys):
    refuses(capsys, [*SERVE, "--rate", "1e-320", "--n", "50"], "Poisson arrival rate")


def test_n_beyond_limit_refused_before_allocation(capsys):
    refuses(capsys, [*SERVE, "--n", "99999999999"], "above the limit")


def test_budget_that_cannot_finish_in_time_refused_up_front(capsys):
    refuses(capsys, [*SERVE, "--max-num-batched-tokens", "1", "--max-num-seqs", "1", "--isl", "100000"],
            "engine iterations")


def test_unchunked_prompt_beyond_budget_refused_up_front(capsys):
    refuses(capsys, [*SERVE, "--policy", "disagg", "--max-num-batched-tokens", "256", "--max-num-seqs", "8",
                     "--isl", "1000", "--rate", "1", "--n", "3"], "could never be scheduled")


def test_progress_counts_simulated_steps(monkeypatch):
    from steptime.serve import sim

    shown = []
    monkeypatch.setattr(sim, "PROGRESS_STEPS", 500)
    monkeypatch.setattr(sim._Engine, "_show_steps", lambda self, s: (shown.append(s), setattr(self, "_tick", s + 500)))
    sim.simulate("llama-3.1-8b", "h100-sxm", synthetic(1, isl=2000, osl=2),
                 policy("vllm", max_num_batched_tokens=1, max_num_seqs=1), progress=True)
    assert shown and shown[0] == 500  # before any request finished


def test_no_nan_printed_for_a_missing_percentile(capsys):
    assert main([*SERVE, "--n", "5", "--osl", "1", "--isl", "64"]) == 0
    assert "nan" not in capsys.readouterr().out


# ---- --replicas R --concurrency C: C in flight in total ---------------------------------
def test_concurrency_is_total_across_replicas():
    wl = synthetic(24, isl=256, osl=64, concurrency=4)
    pol = policy("vllm")
    run = simulate_replicas("llama-3.1-8b", "h100-sxm", wl, pol, 2)
    d = run.requests.sort_values("arrival_s")
    t0 = d["arrival_s"].to_numpy()
    fin = d["finish_s"].to_numpy()
    # at any arrival, requests arrived and not finished (in flight) never exceed the total concurrency
    in_flight = [int(((t0 <= t) & (fin > t)).sum()) for t in np.unique(t0)]
    assert max(in_flight) == 4
    assert int((t0 == 0).sum()) == 4


def test_concurrency_below_replicas_uses_c_replicas():
    wl = synthetic(6, isl=128, osl=8, concurrency=1)
    run = simulate_replicas("llama-3.1-8b", "h100-sxm", wl, policy("vllm"), 3)
    assert int((run.requests["arrival_s"] == 0).sum()) == 1 and len(run.requests) == 6


def test_concurrency_help_says_total(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "in total" in capsys.readouterr().out


# ---- physics bounds on the fitted all-reduce constants ----------------------------------
def test_l40s_tp8_bus_bandwidth_is_out_of_bounds():
    why = comm.bound_violation(get_gpu("l40s"), 8, B_gbps=1.447)
    assert why and "1.45 GB/s" in why


@pytest.mark.parametrize("gpu,n,B", [("h200-sxm", 8, 459.89), ("l40s", 2, 20.11), ("rtx-pro-6000", 8, 24.68)])
def test_measured_bus_bandwidths_within_bounds(gpu, n, B):
    assert comm.bound_violation(get_gpu(gpu), n, B_gbps=B) is None


def test_pcie_bus_bandwidth_above_the_link_is_refused():
    assert comm.bound_violation(get_gpu("l40s"), 2, B_gbps=40.0)
    assert comm.bound_violation(get_gpu("l40s"), 2, B_gbps=40.0, eta_min=comm.ETA_BUS_OWN_MIN)


def test_own_reading_floor_is_looser_than_the_donor_floor():
    """L40S TP 8 (1.45 GB/s, 0.045 of its link): out of bounds as a shape donor (ETA_BUS_MIN), within them as the
    GPU's own reading (ETA_BUS_OWN_MIN), so a settled curve carrying it ships; under a hundredth it does not."""
    g = get_gpu("l40s")
    assert comm.ETA_BUS_OWN_MIN < comm.ETA_BUS_MIN
    assert comm.bound_violation(g, 8, B_gbps=1.447)
    assert comm.bound_violation(g, 8, B_gbps=1.447, eta_min=comm.ETA_BUS_OWN_MIN) is None
    curve = {"nccl/8": {"L_us": 30.0, "B_gbps": 1.447, "shape": {}}}
    comm.check_curve(g, curve)
    assert comm.check_updates([{"scope": "gpu.l40s", "name": "allreduce_curve", "value": curve}]) == 1
    with pytest.raises(InputError, match=r"l40s, nccl/8: bus bandwidth 0.2 GB/s at TP 8 is outside 0.32-32 GB/s"):
        comm.check_curve(g, {"nccl/8": {"L_us": 30.0, "B_gbps": 0.2, "shape": {}}})
    with pytest.raises(InputError, match="outside 0.32-32 GB/s"):
        comm.check_curve(g, {"nccl/2": {"L_us": 8.0, "B_gbps": 40.0, "shape": {}}})


@pytest.mark.parametrize("B", [0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_bus_bandwidth_is_refused_under_either_floor(B):
    g = get_gpu("l40s")
    for eta in (comm.ETA_BUS_MIN, comm.ETA_BUS_OWN_MIN):
        assert "is not a positive finite number" in comm.bound_violation(g, 8, B_gbps=B, eta_min=eta)
    with pytest.raises(InputError, match="allreduce_curve of l40s, nccl/8: bus bandwidth .* not a positive finite"):
        comm.check_curve(g, {"nccl/8": {"L_us": 30.0, "B_gbps": B, "shape": {}}})


def test_e1_25_keeps_the_gpus_own_slow_reading_and_ships_it():
    from steptime.io import find_root
    from steptime_lab.experiments import comm as E

    path = find_root() / "results" / "data" / "allreduce.parquet"
    if not path.is_file():
        pytest.skip("results/data/allreduce.parquet not built")
    r = E.run(pd.read_parquet(path), ablation=False)
    refused = [x for v in r["per_gpu"].values() for x in v["refused"]]
    assert refused == []  # L40S's TP 8 reading (1.45 GB/s) is its own: kept, not replaced
    assert r["per_gpu"]["l40s"]["params"]["nccl/8"]["B"] / 1e3 == pytest.approx(1.447, abs=0.01)
    for g, v in r["per_gpu"].items():
        for key, p in v["params"].items():
            assert comm.bound_violation(get_gpu(g), int(key.split("/")[1]), p["B"] / 1e3, p["L"],
                                        eta_min=comm.ETA_BUS_OWN_MIN) is None, (g, key)
    ups = E.defaults_updates(r)
    assert comm.check_updates(ups) == len(ups)


def test_settled_comm_file_within_bounds():
    from steptime.calibration import read_settled
    from steptime.io import find_root

    path = find_root() / "results" / "calibration" / "comm.yaml"
    comm.check_updates(read_settled(path)["updates"])


def test_workload_max_tokens_is_max_dim():
    assert MAX_TOKENS == 2**31 - 1
    with pytest.raises(ServeError):
        Workload(np.zeros(1), np.array([2.0**40]), np.array([1]))


# ---- collectors: one line each (python -m steptime_collect.X, exit 2) ----------------------
def _collector(module, argv, cwd, needle):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "STEPTIME_ROOT"}
    r = subprocess.run([sys.executable, "-m", f"steptime_collect.{module}", *argv], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and needle in r.stderr.strip().splitlines()[-1], r.stderr
    return r.stderr


def _no_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


def test_steptrace_outside_the_repository(tmp_path):
    _collector("steptrace", ["--model", "llama-3.1-8b", "--out", "o.csv", "--dry-run"], tmp_path,
               "or pass --traces-table")


def test_steptrace_bad_traces_table(tmp_path):
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "t.parquet")
    _collector("steptrace", ["--model", "llama-3.1-8b", "--out", "o.csv", "--dry-run", "--traces-table",
                             "t.parquet"], tmp_path, "not a traces table (no column trace, request_id, arrived_at_s, "
                                                     "num_prefill_tokens, num_decode_tokens)")


def test_steptrace_traces_table_not_parquet(tmp_path):
    (tmp_path / "t.parquet").write_text("not parquet")
    _collector("steptrace", ["--model", "llama-3.1-8b", "--out", "o.csv", "--dry-run", "--traces-table",
                             "t.parquet"], tmp_path, "not a parquet traces table")


def test_steptrace_traces_table_missing(tmp_path):
    _collector("steptrace", ["--model", "llama-3.1-8b", "--out", "o.csv", "--dry-run", "--traces-table",
                             "nope.parquet"], tmp_path, "No such file or directory")


@pytest.mark.skipif(not _no_cuda(), reason="this node has a CUDA GPU")
def test_ncu_without_a_gpu(tmp_path):
    _collector("ncu", ["--out", "x.csv"], tmp_path, "on a GPU node")


@pytest.mark.parametrize("argv,needle", [(["--shapes", "a,b"], "'a' in 'a,b' is not NxK (e.g. 4096x4096)"),
                                         (["--m", "x"], "'x' in 'x' is not a whole number")])
def test_ncu_bad_shapes_or_m(tmp_path, argv, needle):
    _collector("ncu", ["--out", "x.csv", *argv], tmp_path, needle)


@pytest.mark.skipif(not _no_cuda(), reason="this node has a CUDA GPU")
def test_gemm_bench_without_torch_or_gpu(tmp_path):
    _collector("gemm_bench", ["--m", "1", "--n", "16", "--k", "16"], tmp_path, "on a GPU node")
