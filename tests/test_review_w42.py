"""review12 (wave 42): tests that kill the one-line mutations of wave 41's code that survived the suite, and the claim
texts of E3.1 / E3.4 that said less than the code does (DESIGN.md, "A reviewer reads wave 41's code, claims and
README"). Each test checks behaviour; each fails on the mutation named in its docstring."""
import shutil
from pathlib import Path

import pytest

from steptime.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "results" / "calibration"


def _unsealed(path: Path) -> str:
    """A settled file's text without its closing seal line (what Constants.load, which requires no seal, reads)."""
    return path.read_text().rstrip("\n").rpartition("\n")[0] + "\n"


# ---- calibration: one read per file (fixes11, wave 41) -------------------------------------------------------------
def test_constants_load_refuses_two_engine_constants_files(tmp_path):
    """M c2 (`len(engine_files) > 1` -> `> 2` in Constants.load): two engine-constants files were both accepted and the
    first silently used."""
    from steptime.calibration import DEFAULTS_FILE, Constants

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    shutil.copy(CAL / "engine_constants.yaml", a)
    shutil.copy(CAL / "engine_constants.yaml", b)
    with pytest.raises(InputError, match="one engine-constants file at most"):
        Constants.load(DEFAULTS_FILE, a, b)


def test_a_file_with_updates_is_a_settled_file_even_with_an_engines_key(tmp_path):
    """M c3 (`and "updates" not in doc` dropped from _is_engine_doc): a settled file that also holds an `engines:` key
    was taken for an engine-constants file, its updates never applied."""
    from steptime.calibration import is_engine_constants

    both = tmp_path / "both.yaml"
    both.write_text(_unsealed(CAL / "comm.yaml") + "engines: {}\n")
    assert is_engine_constants(both) is False
    only = tmp_path / "engines.yaml"
    only.write_text("engines: {}\n")
    assert is_engine_constants(only) is True


def test_constants_load_refuses_a_settled_file_cut_mid_line(tmp_path):
    """M c5 (the ends-mid-line check of _read_input disabled): Constants.load, which requires no seal, read a copy cut
    inside its last line and settled its first entries only."""
    from steptime.calibration import DEFAULTS_FILE, Constants

    cut = tmp_path / "cut.yaml"
    cut.write_text(_unsealed(CAL / "comm.yaml").rstrip("\n"))
    with pytest.raises(InputError, match="ends mid-line"):
        Constants.load(DEFAULTS_FILE, cut)
    whole = tmp_path / "whole.yaml"
    whole.write_text(_unsealed(CAL / "comm.yaml"))
    Constants.load(DEFAULTS_FILE, whole)   # the same bytes with their newline load


def test_ship_greybox_names_a_file_that_is_not_an_npz(tmp_path):
    """M c6 (the zip check of _check_greybox disabled): a text file handed as the grey-box corrections was refused only
    by numpy's pickle message, not as 'not an .npz'; nothing is written either way."""
    from steptime.calibration import ship_greybox

    bad, dest = tmp_path / "greybox.npz", tmp_path / "out.npz"
    bad.write_text("not a zip\n")
    with pytest.raises(InputError, match=r"not a grey-box corrections file \(not an \.npz"):
        ship_greybox(bad, dest)
    assert not dest.exists()


# ---- claim texts (task 2) ------------------------------------------------------------------------------------------
def test_e3_4_token_claims_name_the_borrowed_fused_moe_laws():
    """E3.4's token-time claims of TensorRT-LLM and SGLang are priced with vLLM's fused-MoE laws (their profiles'
    moe.kernels); the claim said nothing of it (review12). A profile reading its own framework's laws adds nothing,
    and one switched to its own laws no longer says vLLM's."""
    from steptime.specs.engines import get_engine
    from steptime_lab.experiments.moe_wallclock import borrowed_kernels_note

    for eng, own in (("trtllm", "TensorRT-LLM"), ("sglang", "SGLang")):
        note = borrowed_kernels_note(eng)
        assert "vLLM's fused-MoE laws" in note and f"not {own}'s own" in note, (eng, note)
    for eng in ("vllm", "vllm-v1-sync", "vllm-v1-unfused"):
        assert borrowed_kernels_note(eng) == ""
    assert borrowed_kernels_note(get_engine("trtllm").with_moe_kernels("trtllm")) == ""


def test_e3_1_claim_says_where_the_floor_reading_was_clipped():
    """wsread (wave 41) clips a held-out GPU's floor reading to its donors' range; E3.1's claim still said 'bf16
    readings of its own' alone (review12). The clip's range is named where the fold had one, nothing where not."""
    from steptime_lab.experiments.moe import floor_note

    fits = {"rtx-pro-6000": {"floor_bounds": [-6.87, 1.43]}, "b200": {"floor_bounds": None}}
    note = floor_note(fits, "rtx-pro-6000")
    assert "clipped to its donors' range -6.87..+1.43 us" in note
    assert floor_note(fits, "b200") == "" and floor_note(fits, "h100-sxm") == ""
