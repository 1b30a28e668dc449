"""Wave 41, helper review11: tests that kill the mutants of wave 40's code that no test caught (DESIGN.md, "A reviewer
reads wave 40's code, claims and README, wave 41"). Each test names the mutant it kills; each failed on that mutant
(a one-line replacement in a scratch copy of src/) and passes on the code as landed."""
from __future__ import annotations

import importlib
import pickle

import pandas as pd
import pytest
import yaml

from refusals import clean, refuses
from steptime.errors import InputError
from steptime.specs import get_gpu


# ---- the seal (fixes10) ------------------------------------------------------------------------------------------
def test_seal_text_closes_a_text_without_its_last_newline_on_a_line_of_its_own():
    """S1: seal_text on a text lacking its final newline wrote the seal on the text's last line ('a: 1# sha256 ...',
    a YAML value of its own) and sealed other bytes than the file holds."""
    from steptime.calibration import SEAL_PREFIX, check_seal, seal_text

    sealed = seal_text("a: 1")
    assert sealed.splitlines()[0] == "a: 1" and sealed.splitlines()[1].startswith(SEAL_PREFIX)
    assert yaml.safe_load(sealed) == {"a": 1}
    check_seal(sealed, "x")
    assert seal_text("a: 1") == seal_text("a: 1\n")


@pytest.mark.parametrize("last", [
    "# sha256 of every line above: " + "0" * 40,        # S5: a digest cut short, then a newline (an editor's save)
    "# sha256 of every line above: " + "Z" * 64,        # S5: not hex
    "# sha256 of every line above:" + "0" * 64,         # S2: the prefix's head, a malformed rest
])
def test_a_malformed_seal_line_is_refused_even_where_no_seal_is_required(last):
    """S2 / S5: a last line that starts as the seal line but is not one (a digest cut short or not hex, the prefix
    mangled) is a damaged seal, refused, not a file without one: Constants.load (seal not required) read such a file
    as unsealed on S2, and S5 took any digest that is not 64 hex digits as a match."""
    from steptime.calibration import check_seal

    text = "a: 1\n" + last + "\n"
    for required in (True, False):
        with pytest.raises(InputError) as e:
            check_seal(text, "f.yaml", required=required)
        assert "does not match the lines above it" in clean(e)


def test_constants_load_refuses_an_edited_sealed_file(tmp_path):
    """S11: DESIGN (fixes10) says Constants.load, the pipeline's reader, checks a seal line where one is present; with
    the check dropped unless required, a settled file edited by hand (seal kept) was loaded silently."""
    from pathlib import Path

    from steptime.calibration import DEFAULTS_FILE, Constants

    cal = Path(__file__).resolve().parents[1] / "results" / "calibration"
    text = (cal / "comm.yaml").read_text()
    Constants.load(DEFAULTS_FILE, cal / "comm.yaml")   # the committed file, sealed, loads
    edited = tmp_path / "comm.yaml"
    lines = text.splitlines(keepends=True)
    i = next(i for i, x in enumerate(lines) if x.lstrip().startswith("value:"))
    lines[i] = lines[i].rstrip("\n") + "  # edited\n"   # the same document, other bytes
    edited.write_text("".join(lines))
    assert yaml.safe_load(edited.read_text()) == yaml.safe_load(text)
    with pytest.raises(InputError) as e:
        Constants.load(DEFAULTS_FILE, edited)
    assert str(edited) in clean(e) and "does not match the lines above it" in str(e.value)


# ---- trtrule's list ------------------------------------------------------------------------------------------------
def test_the_lists_entries_on_sm_100_and_103():
    """T2 / T3: the list's sm 100 / 103 entries, both GPUs of each SM: nvfp4 and fp8_block are gaps (trtgap: neither
    closes from source), mxfp4_mxfp8 is established on sm 103 as on sm 100 (the TRT-LLM-gen kernels' sm100f family).
    With nvfp4 marked established (T2) or sm 103 dropped (T3) every test of wave 40 still passed."""
    from steptime_lab.experiments.moe import default_established

    for g in ("b200", "gb200", "b300", "gb300"):
        gpu = get_gpu(g)
        for dt in ("nvfp4", "fp8_block"):
            ok, why = default_established("trtllm", dt, gpu)
            assert ok is False and why.startswith("gap: "), (g, dt)
        ok, why = default_established("trtllm", "mxfp4_mxfp8", gpu)
        assert ok is True and "get_mxfp4_quant_algo" in why, g


def test_kernel_dtype_returns_the_canonical_name():
    """T9: kernel_dtype names the dtype the kernels run in canonical form ('fp4' is NVFP4), as every other reader of
    an MoE dtype does (has_dtype, routed_experts_time)."""
    from steptime.terms.moe import kernel_dtype

    assert kernel_dtype("trtllm", "fp4", get_gpu("b200")) == "nvfp4"
    assert kernel_dtype("vllm", "fp4", get_gpu("b200")) == "nvfp4"


def test_the_own_law_pass_relabels_only_gpt_oss_nvfp4_rows():
    """P7: own_rows reads an nvfp4 label on gpt-oss as its MXFP4 checkpoint; any other label on gpt-oss (E3.4's three
    H100 fp8 rows of gpt-oss-120b, TensorRT-LLM 1.3.0rc1) and every label of another model stay as they are."""
    from steptime_lab.experiments import moe_wallclock as W

    base = {"dataset": "aic-silicon", "engine": "trtllm", "gpu": "h100-sxm", "tp": 4, "ep": 1, "dp": 1,
            "engine_version": "1.3.0rc1"}
    rows = pd.DataFrame([{**base, "model": "gpt-oss-120b", "dtype": "fp8", "source_id": "a"},
                         {**base, "model": "gpt-oss-120b", "dtype": "bf16", "source_id": "b"},
                         {**base, "model": "deepseek-v3", "dtype": "nvfp4", "gpu": "b200", "source_id": "c"},
                         {**base, "model": "gpt-oss-120b", "dtype": "nvfp4", "gpu": "b200", "source_id": "d"}])
    assert list(W.own_rows(rows, "trtllm").dtype) == ["fp8", "bf16", "nvfp4", "mxfp4"]


# ---- e31speed's merge ------------------------------------------------------------------------------------------------
def _put(path, doc):
    import pyarrow as pa

    with pa.output_stream(str(path), compression="zstd") as f:
        pickle.dump(doc, f)


def test_merge_refuses_a_part_whose_header_and_run_name_different_engines(tmp_path):
    """E4: read_part checked the run's framework only; a part whose header names another engine than its run (a part
    written by hand or by another tool) was accepted."""
    from steptime_lab.experiments.moe_parts import PART_KIND, PART_VERSION, PartError, read_part
    from test_moe_trtllm import _run

    data = tmp_path / "moe.parquet"
    data.write_bytes(b"table")
    from steptime.io import file_sha256

    p = tmp_path / "E3_1_trtllm.pkl.zst"
    _put(p, {"kind": PART_KIND, "version": PART_VERSION, "engine": "sglang", "inputs": {str(data): file_sha256(data)},
             "environment": {}, "run": _run("trtllm", 0.1)})
    with pytest.raises(PartError, match="holds engine 'sglang''s run, not 'trtllm''s"):
        read_part(p, "trtllm")


def test_merge_refuses_a_part_of_another_format_version(tmp_path):
    """E8: read_part took a part of any version (a part written by a later format, read with this code)."""
    from steptime_lab.experiments.moe_parts import PART_KIND, PART_VERSION, PartError, read_part
    from test_moe_trtllm import _run

    p = tmp_path / "E3_1_vllm.pkl.zst"
    _put(p, {"kind": PART_KIND, "version": PART_VERSION + 1, "engine": "vllm", "inputs": {"x": "y"},
             "environment": {}, "run": _run("vllm", 0.1)})
    with pytest.raises(PartError, match="is not an E3.1 engine part"):
        read_part(p, "vllm")


# ---- cli.refuse_empty --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, flag", [
    (["predict", "--gpu", "h100-sxm", "--model", "", "--decode", "1x8"], "--model"),
    (["evaluate", "--family", " "], "--family"),
])
def test_an_empty_required_option_is_asked_for_not_told_to_be_left_out(capsys, argv, flag):
    """C4: refuse_empty told a required option given '' to be left out ('leave --model out to take its default':
    there is none); it asks for a value."""
    line = refuses(capsys, argv, f"{flag} ")
    assert "an empty value (give one)" in line and "leave" not in line


# ---- the collectors' --out ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["clock", "ncu", "gemm_sweep", "dispatch", "engine_kernels", "steptrace"])
def test_every_collector_refuses_a_folder_as_out_while_parsing(tmp_path, capsys, module):
    """O5: fixes10 names six collectors whose --out is checked before collecting; its test ran three (clock, ncu,
    dispatch): gemm_sweep, engine_kernels and steptrace with --out back to a plain string passed every test."""
    mod = importlib.import_module(f"steptime_collect.{module}")
    with pytest.raises(SystemExit) as e:
        mod.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "is a folder; give the file to write" in err, err


@pytest.mark.parametrize("text", ["", " ", "\t"])
def test_output_path_refuses_an_empty_or_blank_name(text):
    """O1: output_path took a blank name (' ') as a file to write (a file named ' ' in the cwd, after the collection)."""
    import argparse

    from steptime_collect.cli import output_path

    with pytest.raises(argparse.ArgumentTypeError, match="an empty file name"):
        output_path(text)


# ---- claims: the text says what the list checks ------------------------------------------------------------------------
def test_the_kernel_lists_note_says_it_checks_neither_releases_nor_models():
    """The rule asks for a default kernel established 'for the releases the rows ran'; DEFAULT_ESTABLISHED holds one
    entry per (kernel dtype, SM) (E3.4's closed H100 fp8 pair is gpt-oss-120b's three 1.3.0rc1 rows, under an entry
    whose own text excepts gpt-oss). E3.4's note and the trtllm profile's source said the list established it for the
    rows' releases; they now say what it checks."""
    from pathlib import Path

    from steptime.terms.moe import MoEConstants
    from steptime_lab.experiments import moe_wallclock as W

    assert "neither per release nor per model" in W.KERNEL_LIST_NOTE and "not sufficient" in W.KERNEL_LIST_NOTE
    rows = pd.DataFrame([{"engine": "trtllm", "model": "gpt-oss-120b", "dtype": "fp8", "gpu": "h100-sxm",
                          "engine_version": "1.3.0rc1"}])
    assert W.kernel_list(rows, MoEConstants.default(), "trtllm")["note"] == W.KERNEL_LIST_NOTE
    spec = Path(__file__).resolve().parents[1] / "src/steptime/specs/engines.yaml"
    text = yaml.safe_load(spec.read_text())["engines"]["trtllm"]["moe"]["kernels"]["source"]
    assert "not yet checked release by release or per model" in text


# ---- a second round of mutants (review11): survivors of wave 40's tests ----------------------------------------------
def test_each_engines_law_text_names_its_own_family_table():
    """F1: engine_law_names with one table name for every engine (SGLang's law text citing TRTLLM_KERNEL_FAMILIES)
    passed fixes10's test, which documents TensorRT-LLM only."""
    from steptime_lab.experiments.moe import engine_law_names

    assert engine_law_names("trtllm") == ("TensorRT-LLM", "TRTLLM_KERNEL_FAMILIES")
    assert engine_law_names("sglang") == ("SGLang", "SGLANG_KERNEL_FAMILIES")


def test_calibration_ship_of_a_blank_name_says_so(capsys):
    """F2: a blank name (' ') was checked as the empty one only ('' refused, ' ' looked up as a file named ' ')."""
    refuses(capsys, ["calibration", "ship", " "], "calibration ship: an empty file name ' '")


def test_constants_load_refuses_a_mapping_without_constants(tmp_path):
    """F4: a YAML mapping with no `constants:` (another project's file) went past _read_base to a KeyError."""
    from steptime.calibration import Constants

    (tmp_path / "other.yaml").write_text("a: 1\n")
    with pytest.raises(InputError) as e:
        Constants.load(tmp_path / "other.yaml")
    assert "no `constants:` mapping" in clean(e)


def test_a_kernel_list_with_no_rows_is_not_closed():
    """F6: with no TensorRT-LLM row (no pair) the list read closed (all() of nothing) and the field would switch to
    the engine's own laws on no evidence."""
    from steptime.terms.moe import MoEConstants
    from steptime_lab.experiments import moe_wallclock as W

    empty = pd.DataFrame(columns=["engine", "model", "dtype", "gpu", "engine_version"])
    lst = W.kernel_list(empty, MoEConstants.default(), "trtllm")
    assert lst["pairs"] == [] and lst["closed"] is False
