import json
import subprocess
import sys

import pytest

from steptime.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_predict_table(capsys):
    rc, out, err = run(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--decode", "32x1024",
                       "--prefill", "1x2048")
    assert rc == 0 and err == ""
    assert "gate_up_proj" in out and "total" in out and "compute" in out


def test_predict_json_sums(capsys):
    rc, out, _ = run(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--decode", "8x512", "--json")
    d = json.loads(out)
    assert rc == 0
    assert abs(sum(d["terms_ms"].values()) - d["total_ms"]) < 1e-4 * d["total_ms"]


@pytest.mark.parametrize("argv,needle", [
    (["--model", "llama-3.1-8b", "--gpu", "h10", "--decode", "1x10"], "closest: h20, a10, h800"),
    (["--model", "llama-3.1-7b", "--gpu", "h100", "--decode", "1x10"], "unknown model"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--decode", "32by1024"], "malformed"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--prefill", "1x0"], ">= 1"),
    (["--model", "llama-3-8b", "--gpu", "h100", "--decode", "1x9000"], "maximum"),
    (["--model", "llama-3-70b", "--gpu", "l40s", "--decode", "64x4096"], "GB over"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, "predict", *argv)
    assert rc == 2
    assert needle in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_predict_without_a_batch_prices_the_default_and_says_so(capsys):
    """Issue 20's own command (no --decode/--prefill) prints a breakdown of one stated default step, named MoE terms
    summing to the total; the API keeps refusing an empty batch."""
    from steptime.errors import SteptimeError
    from steptime.step import Batch, predict_step

    rc, out, err = run(capsys, "predict", "--model", "gpt-oss-120b", "--gpu", "b200", "--ep", "8", "--tp", "8",
                       "--dtype", "fp4", "--json")
    assert rc == 0 and "no batch given" in err and "--decode 1x1024" in err
    d = json.loads(out)
    assert d["requests"] == 1 and d["tokens"] == 1 and d["terms_ms"]["moe_experts"] > 0
    assert sum(d["terms_ms"].values()) == pytest.approx(d["total_ms"], rel=1e-5)  # JSON rounds each figure
    same = predict_step("gpt-oss-120b", "b200", Batch.parse(decode=["1x1024"]), tp=8, ep=8, dtype="fp4")
    assert d["total_ms"] == pytest.approx(same.total_ms, rel=1e-5)
    rc, out, err = run(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100")
    assert rc == 0 and "1 request, 1 new token\n" in out and "moe_experts" not in out
    with pytest.raises(SteptimeError, match="empty batch"):
        predict_step("llama-3.1-8b", "h100-sxm", Batch.parse(decode=[], prefill=[]))


def test_gpus_and_models(capsys):
    rc, out, _ = run(capsys, "gpus")
    assert rc == 0 and "h200-sxm" in out and "rtx-pro-6000" in out
    rc, out, _ = run(capsys, "gpus", "--json", "--sources")
    d = json.loads(out)
    assert d["h100-sxm"]["sms"] == 132 and "source" in d["h100-sxm"]["sources"]["mem_bw_gbps"]
    rc, out, _ = run(capsys, "models", "--json")
    assert json.loads(out)["llama-3.1-8b"]["num_key_value_heads"] == 8


def test_console_script_entry_point():
    r = subprocess.run([sys.executable, "-m", "steptime", "predict", "--model", "phi-2", "--gpu", "a40",
                        "--decode", "4x128", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["gpu"] == "a40"


def test_bench_quick_json(capsys):
    rc, out, _ = run(capsys, "bench", "--quick", "--json")
    d = json.loads(out)
    assert rc == 0
    for key in ("gemm_cells_per_s", "gemm_speedup", "steps_per_s", "steps_speedup", "import_s", "serve_steps_per_s",
                "serve_speedup", "gemm_cells_per_cpu_s", "gemm_python_cells_per_cpu_s", "gemm_speedup_cpu",
                "steps_per_cpu_s", "steps_python_per_cpu_s", "steps_speedup_cpu", "gemm_cpu_s", "steps_cpu_s"):
        assert d[key] > 0
    # the same run's plain path gives the ratio; the load average says how busy the machine was
    assert d["gemm_speedup_cpu"] == pytest.approx(d["gemm_cells_per_cpu_s"] / d["gemm_python_cells_per_cpu_s"], rel=1e-3, abs=0.06)  # printed to 0.1
    assert d["steps_speedup_cpu"] == pytest.approx(d["steps_per_cpu_s"] / d["steps_python_per_cpu_s"], rel=1e-3, abs=0.06)
    assert d["load_before"]["cpus"] >= 1 and d["load_after"]["load_1min"] >= 0


def test_status_lists_awaiting(capsys):
    rc, out, _ = run(capsys, "status")
    assert rc == 0 and "awaiting" in out


# wave 37 (helper docs7): what a new user following the README sees


def test_constants_columns_never_run_together(capsys):
    # a long scope (engine.vllm-v1-unfused, engine.vllm.gpu.b300) or name used to run into the next column
    rc, out, _ = run(capsys, "constants")
    _, js, _ = run(capsys, "constants", "--json")
    rows = json.loads(js)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == len(rows)
    assert [ln.split()[:3] for ln in lines] == [[r["scope"], r["name"], r["provenance"]] for r in rows]


def test_models_key_column_holds_the_longest_key(capsys):
    rc, out, _ = run(capsys, "models")
    _, js, _ = run(capsys, "models", "--json")
    # wave 41 (docs11): the models refused by name follow in a block of their own, not in --json's model table
    out, refused = out.split("\n\nknown, not represented")
    assert "deepseek-v4-flash" in refused
    keys = {ln.split()[0] for ln in out.splitlines() if ln.strip() and not ln.startswith(("key", "mixture"))}
    assert rc == 0 and keys == set(json.loads(js)) and "qwen3-coder-480b-a35b" in keys
    dense, moe = out.split("\nmixture of experts")
    for block in (dense.splitlines(), moe.splitlines()[1:]):  # every row as wide as its header: columns line up
        assert {len(ln) for ln in block if ln.strip()} == {len(block[0])}


def test_explain_header_names_ep_and_says_uncalibrated(capsys):
    rc, out, _ = run(capsys, "predict", "--model", "gpt-oss-120b", "--gpu", "b200", "--ep", "8", "--dtype", "mxfp4",
                     "--decode", "64x2048", "--explain")
    assert rc == 0 and out.splitlines()[0].startswith("gpt-oss-120b on b200 (tp=1, ep=8, engine vllm, mxfp4)")
    assert "not corrected here (a mixture-of-experts model, mxfp4 weights)" in out
    rc, out, _ = run(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "l4", "--decode", "8x1024", "--explain")
    assert rc == 0 and "note: l4 is uncalibrated" in out and "not corrected here" not in out


def test_evaluate_help_names_every_family(capsys):
    from steptime_lab.evaluate import FAMILIES

    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(f in out for f in FAMILIES) and "wallclock" in FAMILIES
