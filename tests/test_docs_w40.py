"""Wave 40, helper docs10: a new user tries wave 40's features from the README and `--help` (DESIGN.md `A new
user tries wave 40's features`). Each test failed on main's code before its fix: `predict --help` and the README
did not name the `mxfp4_mxfp8` dtype nor say what `mxfp4` runs; the refusal of a dtype the engine's kernels have no
law for did not say whose kernels have one or how to select them; `calibration --help` did not mention the seal
line that `ship` requires."""
import re
from pathlib import Path

import pytest

from refusals import refuses, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, argv)
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare on single spaces


def _moe_dtypes():
    from steptime.moe_step import MOE_DTYPES

    # nvfp4 is spelt `fp4 = nvfp4` / `fp4 (NVFP4` in the texts: every other MoE dtype by its own name
    return [d for d in MOE_DTYPES if d != "nvfp4"]


def test_predict_help_names_every_moe_dtype_and_what_the_mxfp4_ones_run(capsys):
    text = _help(capsys, ["predict", "--help"])
    for d in _moe_dtypes():
        assert re.search(rf"(?<![\w]){re.escape(d)}(?![\w])", text), d
    assert "W4A16" in text and "W4A8" in text and "Blackwell" in text


def test_readme_names_every_moe_dtype():
    text = " ".join((ROOT / "README.md").read_text().split())
    i = text.index("`--dtype` names the expert weights' format")
    sentence = text[i:text.index("refused in one line", i)]
    for d in _moe_dtypes():
        assert f"`{d}`" in sentence, d
    assert "with_moe_kernels" in sentence


def test_plan_help_points_dtypes_at_predicts(capsys):
    text = _help(capsys, ["plan", "--help"])
    assert "expert weights" in text and "predict --dtype" in text


def test_calibration_help_mentions_the_seal_line(capsys):
    text = _help(capsys, ["calibration", "--help"])
    assert "# sha256 of every line above" in text and "moe.yaml" in text


def test_no_law_refusal_names_the_kernels_that_have_one(capsys):
    """mxfp4_mxfp8 has only TensorRT-LLM's laws, and every shipped profile reads vLLM's: the refusal says so and
    how to select TensorRT-LLM's from Python."""
    line = refuses(capsys, ["predict", "--model", "gpt-oss-20b", "--gpu", "b200", "--dtype", "mxfp4_mxfp8",
                            "--decode", "8x1024"], "no fitted fused-MoE constants of vllm's kernels")
    assert "trtllm's kernels have it" in line and "with_moe_kernels('trtllm')" in line


def test_the_hinted_route_prices_it():
    """Following the refusal's hint gives a prediction (the hint is not a dead end)."""
    import steptime
    from steptime.specs.engines import get_engine

    r = steptime.predict_step("gpt-oss-20b", "b200", decode=[(8, 1024)], dtype="mxfp4_mxfp8",
                              engine=get_engine("trtllm").with_moe_kernels("trtllm"))
    assert r.total_ms > 0 and r.terms_ms["moe_experts"] > 0


def test_no_hint_where_no_kernels_have_the_law():
    from steptime.moe_step import _other_kernels_hint
    from steptime.terms.moe import MoEConstants

    mc = MoEConstants.default()
    assert _other_kernels_hint(mc, "vllm", "no-such-dtype") == ""
    assert "trtllm" in _other_kernels_hint(mc, "vllm", "mxfp4_mxfp8")
