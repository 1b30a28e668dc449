"""Wave 42, helper docs12: a new user tries wave 42's features from the README and `--help` (DESIGN.md `A new
user tries wave 42's features`). Each test failed on main's code (7d9fb3a8) before its fix: the README named only
`--moe-kernels trtllm` as reaching the all-GPU MoE law (the default vLLM laws reach it on A100, MI300X and RTX PRO 6000
fp8_block too) and did not say what `moe_kernel_family` is; the `host` term's row did not mention the idle
attention-DP ranks' fitted wait; the README did not say a fitted engine-constants file passed from Python needs its
seal, nor that `serve` and `plan` refuse the Gated DeltaNet hybrids; `--moe-kernels`' help did not mention the
uncovered-GPU flag; E3.4's FPM step claims said "the one constant fitted on these runs" where three are. The
default-law flag test and the refusal half of the hybrid test guard behaviour main already had."""
import pandas as pd
import pytest

from refusals import run_cli
from test_docs_w41 import ROOT, _flat, _help, _readme_moe_paragraph


def test_readme_names_the_cases_the_all_gpu_law_prices():
    from steptime.moe_step import moe_law

    par = _readme_moe_paragraph()
    i = par.index("`moe_kernel_family` is")
    text = par[i:]
    # the README's examples, each checked against the shipped tables
    for kernels, gpu, dtype, family in (("vllm", "b200", "bf16", "trtllm"), ("vllm", "h100-sxm", "bf16", "triton"),
                                        ("vllm", "a100-sxm", "bf16", None), ("vllm", "mi300x", "bf16", None),
                                        ("vllm", "rtx-pro-6000", "fp8_block", None),
                                        ("trtllm", "l40s", "fp8_block", None), ("trtllm", "l40s", "mxfp4", None)):
        assert moe_law(kernels, dtype, gpu)[1] == family, (kernels, gpu, dtype)
    assert "`trtllm` on B200" in text and "`triton` on H100 bf16" in text
    assert "default vLLM laws too" in text
    for name in ("A100", "MI300X", "RTX PRO 6000 fp8_block", "L40S fp8_block and mxfp4"):
        assert name in text, name


def test_readme_host_term_names_the_idle_dp_wait():
    import numpy as np

    from steptime.specs.engines import get_engine
    from steptime.terms import host

    text = _flat((ROOT / "README.md").read_text())
    i = text.index("| `host`, `sampling` |")
    row = text[i:text.index("Which operators tensor parallelism splits", i)]
    assert "`launch.dp_idle_rank_share`" in row and "FITTED" in row and "`--ep` above `--tp`" in row
    # what the row says holds: at dp 2 a hybrid's step with a prefill waits, a decode-only step does not
    w = host.dp_idle_rank_time(np.array([0.01, 0.01]), np.array([False, True]), 2, "b300", get_engine("vllm"),
                               gdn_layers=30)
    assert w[0] > 0 and w[1] == 0


def test_readme_says_a_fitted_engine_file_needs_its_seal(tmp_path):
    from steptime.errors import InputError
    from steptime.specs.engines import FITTED_FILE, get_engine

    text = _flat((ROOT / "README.md").read_text())
    i = text.index("fitted=PATH")
    assert "seal" in text[i:i + 300] and "names no file" in text[i:i + 300]
    p = tmp_path / "fitted.yaml"
    p.write_text(FITTED_FILE.read_text().replace("# sha256 of every line above", "# edited"))
    with pytest.raises(InputError):
        get_engine("vllm", fitted=p)


def test_moe_kernels_help_mentions_the_uncovered_gpu_flag(capsys):
    for cmd in ("predict", "serve", "plan"):
        text = _help(capsys, [cmd, "--help"])
        opt = text[text.index("--moe-kernels ENGINE whose"):]
        assert "no kernel family for the GPU and dtype" in opt and "all-GPU law" in opt, cmd


def test_the_uncovered_flag_under_the_default_laws(capsys):
    rc, out, _ = run_cli(capsys, ["predict", "--model", "qwen3-30b-a3b", "--gpu", "rtx-pro-6000", "--dtype",
                                  "fp8_block", "--decode", "8x1024"])
    assert rc == 0 and "vllm's tables give rtx-pro-6000 no fp8_block kernel family" in out


def test_e34_step_claims_name_every_constant_fitted_on_the_runs():
    from steptime_lab.experiments import moe_wallclock as mw

    s = {"model": "qwen3.6-35b-a3b", "gpu": "b300", "engine": "vllm", "tp": 1, "ep": 4, "dp": 4, "phase": "mixed",
         "cells": 10, "mape": 0.2}
    doc = mw.document({"scores": [], "pred": pd.DataFrame(), "skipped": []},
                      {"runs": [], "skipped": [], "latency_clock": None}, [], [],
                      {"tpot_mape_per_group": 0.12, "fpm_mape_per_phase": 0.12},
                      fpm_scores={"scores": [s, dict(s, tp=2, ep=2, dp=1)]})
    dp4, dp1 = (c["claim"] for c in doc["claims"])
    for text in (dp4, dp1):
        assert "the one constant" not in text
        assert f"launch.{mw.GDN_EAGER_FIELD}" in text and f"launch.{mw.HYBRID_EAGER_FIELD}" in text
    assert f"launch.{mw.DP_IDLE_FIELD}" in dp4 and f"launch.{mw.DP_IDLE_FIELD}" not in dp1


def test_readme_says_serve_and_plan_refuse_the_hybrids(capsys):
    from steptime.errors import SteptimeError
    from steptime.specs import get_model

    par = _readme_moe_paragraph()
    text = _flat((ROOT / "README.md").read_text())
    i = text.index("The Gated DeltaNet hybrids")
    said = text[i:i + 400]
    assert "`serve` refuses them" in said and "`plan` drops every layout" in said
    hybrids = [k for k in ("qwen3.5-397b-a17b", "qwen3.6-35b-a3b") if getattr(get_model(k), "n_linear_layers", 0)]
    assert hybrids == ["qwen3.5-397b-a17b", "qwen3.6-35b-a3b"] and "Qwen3.5/3.6" in par
    rc, _, err = run_cli(capsys, ["serve", "--model", "qwen3.6-35b-a3b", "--gpu", "b300", "--rate", "1", "--n", "4",
                                  "--isl", "64", "--osl", "4", "--no-progress"])
    assert rc == 2 and "Gated DeltaNet" in err
