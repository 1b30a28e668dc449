"""Wave 41, helper docs11: a new user tries wave 41's features from the README and `--help` (DESIGN.md `A new
user tries wave 41's features`). Each test failed on main's code (54277bcb) before its fix: the README lost
`--moe-kernels` and the DeepSeek-V4 refusal in the wsmoe merge; the no-law refusal pointed only at Python;
`plan --help` spoke of an `--engine` plan does not take; `serve --dtype` refused `mxfp4_mxfp8`; serve's report
named whose laws priced the experts but not at which dtype; the new bounds were in no help text; `steptime models`
did not list the models it refuses by name; engines.yaml's trtllm `moe.kernels` text named no CLI route."""
import json
import re
from pathlib import Path

import pytest

from refusals import refuses, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _flat(text: str) -> str:
    return " ".join(text.split())  # argparse wraps lines: compare on single spaces


def _help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, argv)
    assert exc.value.code == 0
    return _flat(capsys.readouterr().out)


def _readme_moe_paragraph() -> str:
    text = _flat((ROOT / "README.md").read_text())
    i = text.index("Mixture-of-experts models")
    return text[i:text.index("read those results before relying on an MoE number", i)]


def test_readme_says_how_to_pick_the_moe_kernels_on_the_cli():
    par = _readme_moe_paragraph()
    assert "--moe-kernels trtllm" in par
    for cmd in ("`predict`", "`serve`", "`plan`"):
        assert cmd in par, cmd
    assert "`moe_kernels`" in par and "`moe_kernel_dtype`" in par  # the output names the law
    assert "dense model is refused" in par


def test_readme_names_the_models_refused_by_name():
    par = _readme_moe_paragraph()
    assert "DeepSeek-V4-Flash" in par and "-Pro" in par and "steptime models" in par


def test_readme_says_vllms_hopper_fp8_block_kernel_follows_ep():
    par = _readme_moe_paragraph()
    i = par.index("H100 / H200")
    assert "Triton at EP 1" in par[i:] and "CUTLASS at EP > 1" in par[i:]


def test_readme_states_the_new_bounds():
    text = _flat((ROOT / "README.md").read_text())
    assert "KV length at least 1" in text  # --decode 1x0 is refused
    i = text.index("`steptime serve` (library: `steptime.serve`)")
    para = text[i:text.index("Every number it prints is simulated", i)]
    assert "`--rate`" in para and "resolution" in para and "`--concurrency`" in para and "`--batch`" in para


def test_no_law_refusal_names_the_cli_option(capsys):
    line = refuses(capsys, ["predict", "--model", "gpt-oss-20b", "--gpu", "b200", "--dtype", "mxfp4_mxfp8",
                            "--decode", "8x1024"], "no fitted fused-MoE constants of vllm's kernels")
    assert "--moe-kernels trtllm" in line and "with_moe_kernels('trtllm')" in line


def test_the_hinted_option_prices_it(capsys):
    rc, out, _ = run_cli(capsys, ["predict", "--model", "gpt-oss-20b", "--gpu", "b200", "--dtype", "mxfp4_mxfp8",
                                  "--decode", "8x1024", "--moe-kernels", "trtllm", "--json"])
    assert rc == 0 and json.loads(out)["moe_kernel_dtype"] == "mxfp4_mxfp8"


def test_plan_help_says_the_option_covers_every_searched_engine(capsys):
    text = _help(capsys, ["plan", "--help"])
    i = text.index("--moe-kernels ENGINE whose")
    opt = text[i:]
    assert "--engines" in opt and "--engine profile's" not in opt


def test_serve_takes_every_moe_dtype_predict_takes(capsys):
    from steptime.moe_step import MOE_DTYPES

    text = _help(capsys, ["serve", "--help"])
    m = re.search(r"--dtype \{([^}]*)\}", text)
    assert m and set(m.group(1).split(",")) >= set(MOE_DTYPES), m and m.group(1)
    assert "predict --help" in text


def test_serve_names_the_kernel_dtype_that_priced_the_experts(capsys):
    argv = ["serve", "--model", "gpt-oss-20b", "--gpu", "b200", "--dtype", "mxfp4", "--moe-kernels", "trtllm",
            "--rate", "2", "--n", "8", "--isl", "64", "--osl", "4", "--no-progress"]
    rc, out, _ = run_cli(capsys, argv)
    assert rc == 0 and "priced with trtllm's fused-MoE laws at mxfp4_mxfp8" in out
    rc, out, _ = run_cli(capsys, argv + ["--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["moe_kernels"] == "trtllm" and doc["moe_kernel_dtype"] == "mxfp4_mxfp8"


def test_serve_and_plan_help_state_the_bounds(capsys):
    from steptime.serve.workload import MAX_RATE, MAX_WORKLOAD_REQUESTS
    from steptime.validation import MAX_REQUESTS

    rate, conc = f"{MAX_RATE:.3g}", f"{MAX_WORKLOAD_REQUESTS:.0e}"
    serve = _help(capsys, ["serve", "--help"])
    plan = _help(capsys, ["plan", "--help"])
    for text in (serve, plan):
        assert f"at most {rate}" in text and conc in text and "clock's resolution" in text
    assert f"{MAX_REQUESTS:,}" in serve  # --batch / --max-num-seqs: one step's limit


def test_predict_help_says_a_decode_reads_at_least_one_token(capsys):
    text = _help(capsys, ["predict", "--help"])
    assert "KV >= 1" in text and "--prefill 1x1" in text


def test_models_lists_the_models_refused_by_name(capsys):
    from steptime.specs.moe import unsupported_model_table

    rc, out, _ = run_cli(capsys, ["models"])
    assert rc == 0
    tail = out[out.index("known, not represented"):]
    for key in unsupported_model_table():
        assert key in tail, key


def test_trtllm_profile_source_names_the_cli_route():
    from steptime.specs.engines import engine_rows

    row = next(r for r in engine_rows() if r["scope"] == "engine.trtllm" and r["name"] == "moe_kernels")
    assert "--moe-kernels trtllm" in row["source"]
