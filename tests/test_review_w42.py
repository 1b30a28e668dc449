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
    assert "held within its donors' range -6.87..+1.43 us" in note
    assert floor_note(fits, "b200") == "" and floor_note(fits, "h100-sxm") == ""


def test_ship_engine_constants_refuses_a_settled_file(tmp_path):
    """M c8 (the `_is_engine_doc` check of _check_engine_doc disabled): a sealed settled file handed to
    ship_engine_constants passed every per-engine check (it has no `engines:`) and was written as the fitted engine
    constants."""
    from steptime.calibration import ship_engine_constants

    dest = tmp_path / "engine_constants.yaml"
    with pytest.raises(InputError, match="not an engine-constants file"):
        ship_engine_constants(CAL / "comm.yaml", dest)
    assert not dest.exists()


def test_ship_refuses_two_engine_constants_files_before_writing(tmp_path):
    """M c9 (`len(engine_files) > 1` -> `> 2` in ship): two engine-constants files were both shipped, the second
    overwriting the first."""
    from steptime.calibration import DEFAULTS_FILE, ship

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    shutil.copy(CAL / "engine_constants.yaml", a)
    shutil.copy(CAL / "engine_constants.yaml", b)
    defaults = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, defaults)
    before = defaults.read_bytes()
    with pytest.raises(InputError, match="one engine-constants file at most"):
        ship([a, b], defaults, tmp_path / "fitted.yaml", tmp_path / "grey.npz")
    assert defaults.read_bytes() == before and not (tmp_path / "fitted.yaml").exists()


# ---- --moe-kernels (fixes11, wave 41) ------------------------------------------------------------------------------
def test_moe_kernel_choices_are_the_frameworks_whose_laws_ship():
    """M m1 (`k == "vllm" or k in mc.frameworks` dropped): a kernel set whose laws a constants set does not ship was
    offered (and then failed deep in pricing)."""
    from types import SimpleNamespace

    from steptime.moe_step import moe_kernel_choices

    assert moe_kernel_choices(SimpleNamespace(frameworks={})) == ("vllm",)
    assert moe_kernel_choices(SimpleNamespace(frameworks={"trtllm": {}})) == ("vllm", "trtllm")


def test_moe_kernels_is_read_case_and_space_blind():
    """M m3 (`kernels.strip().lower()` -> `kernels` in the membership test): ' TRTLLM ' was refused though the value
    returned is normalised (every other engine name is read so: get_engine)."""
    from steptime.moe_step import check_moe_kernels
    from steptime.specs import get_model

    assert check_moe_kernels(" TRTLLM ", get_model("qwen3-30b-a3b")) == "trtllm"


def test_engine_with_kernels_keeps_the_constants_fitted_engine_values():
    """M m4 (`fitted=constants.engines` -> `fitted={}`): --moe-kernels dropped the engine's per-GPU fitted constants
    (R2.3's), so selecting whose fused-MoE laws price the experts also changed the host and launch terms."""
    from steptime.calibration import Constants
    from steptime.moe_step import engine_with_kernels

    c = Constants.default()
    base = c.engine("vllm")
    assert base.fitted, "the shipped vllm profile has per-GPU fitted values"
    eng = engine_with_kernels("vllm", "trtllm", "qwen3-30b-a3b", constants=c)
    assert eng.moe_kernels() == "trtllm" and dict(eng.fitted) == dict(base.fitted)


def test_plan_max_rate_bound_counts_the_gpus_of_a_layout(capsys):
    """M p2 (`rates[-1] * max_gpus > MAX_RATE` -> `rates[-1] > MAX_RATE`): a per-GPU rate under the bound but above it
    times --max-gpus ran, its largest layouts drawing arrivals the clock cannot resolve."""
    from refusals import refuses
    from steptime.serve.workload import MAX_RATE

    rate = MAX_RATE / 4
    refuses(capsys, ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "50", "--gpus", "h100-sxm", "--n", "5",
                     "--max-gpus", "8", "--max-rate", f"1,{rate:.17g}"], "--max-gpus")


def test_plan_refuses_moe_kernels_with_a_peer_timer():
    """M p3 (the timer_factory refusal of plan dropped): --moe-kernels with a peer's timer_factory, which prices its own
    steps, was silently ignored."""
    from steptime.plan import PlanError, plan
    from steptime.serve import synthetic

    wl = synthetic(5, isl=8, osl=2, rate=1.0)
    with pytest.raises(PlanError, match="not a timer_factory's"):
        plan("qwen3-30b-a3b", wl, slo_tpot_s=0.05, gpus=("h100-sxm",), moe_kernels="trtllm",
             timer_factory=lambda model, gpu, tp=1: None)


# ---- serving bounds (fixes11, wave 41) -----------------------------------------------------------------------------
def test_a_static_batch_one_above_the_step_limit_is_refused_and_the_limit_taken():
    """M i1 (`max_num_seqs > MAX_REQUESTS` -> `> 10 * MAX_REQUESTS`): the bound was tested at 10**20 only, so a batch
    up to ten times the most requests one step is priced for still ran."""
    from steptime.errors import ServeError
    from steptime.serve.sim import Policy
    from steptime.validation import MAX_REQUESTS

    assert Policy(name="static", max_num_seqs=MAX_REQUESTS).max_num_seqs == MAX_REQUESTS
    with pytest.raises(ServeError, match="static batch size"):
        Policy(name="static", max_num_seqs=MAX_REQUESTS + 1)


def test_closed_loop_concurrency_bound_is_the_workload_limit_itself():
    """M w2 (`concurrency > MAX_WORKLOAD_REQUESTS` -> `> 10 * MAX_WORKLOAD_REQUESTS`): only 10**20 was tested."""
    import numpy as np

    from steptime.errors import ServeError
    from steptime.serve.workload import MAX_WORKLOAD_REQUESTS, Workload

    one = (np.zeros(1), np.array([8]), np.array([2]))
    assert Workload(*one, name="w", concurrency=MAX_WORKLOAD_REQUESTS).concurrency == MAX_WORKLOAD_REQUESTS
    with pytest.raises(ServeError, match="above the most requests a workload holds"):
        Workload(*one, name="w", concurrency=MAX_WORKLOAD_REQUESTS + 1)


def test_time_scale_bound_is_the_trace_mean_gap_at_the_clock_resolution():
    """M w3 (`gap < TIME_RESOLUTION_S` -> `< TIME_RESOLUTION_S / 2`) and M w6 (the mean gap over n rather than n - 1
    gaps): only a factor of 1e-300 was tested. A two-request trace 1 s apart has one gap of `time_scale` seconds: at
    1.5 resolutions it is taken, at 0.75 refused."""
    import pandas as pd

    from steptime.errors import ServeError
    from steptime.serve import from_table
    from steptime.serve.workload import TIME_RESOLUTION_S

    df = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [8, 8], "output_tokens": [2, 2]})
    assert len(from_table(df, time_scale=1.5 * TIME_RESOLUTION_S)) == 2
    with pytest.raises(ServeError, match="below the simulator's time resolution"):
        from_table(df, time_scale=0.75 * TIME_RESOLUTION_S)


def test_a_boolean_rate_is_refused():
    """M w5 (`isinstance(rate, bool)` dropped from check_rate): rate=True ran as 1 request/s."""
    from steptime.errors import ServeError
    from steptime.serve.workload import check_rate

    with pytest.raises(ServeError, match="must be > 0 requests/s"):
        check_rate(True)
    assert check_rate(1) == 1.0


def test_a_subnormal_rate_whose_gap_overflows_is_refused_by_check_rate():
    """M w7 (check_rate's overflow test dropped): a rate of 1e-320 requests/s, finite and > 0, has a mean gap of
    1 / 1e-320 = inf; check_rate (every --rate's one check since wave 41) let it through."""
    from steptime.errors import ServeError
    from steptime.serve.workload import check_rate

    with pytest.raises(ServeError, match="overflows"):
        check_rate(1e-320)


# ---- known, unrepresented models (fixes11, wave 41) ----------------------------------------------------------------
def test_a_known_unrepresented_model_under_another_org_is_refused_by_name():
    """M u2 (get_model's last-path-part lookup of the unsupported index dropped): 'someorg/DeepSeek-V4-Pro', a
    repackaging under an org the registry does not list, fell through to another refusal without the reason."""
    from steptime.errors import UnsupportedModelError
    from steptime.specs import get_model

    with pytest.raises(UnsupportedModelError, match="is known but steptime cannot represent it"):
        get_model("someorg/DeepSeek-V4-Pro")


@pytest.mark.parametrize("entry, needle", [
    ("{source: s, architecture: A, config: c, read: r}", "missing fields why"),
    ("{source: s, architecture: A, config: c, why: w, read: r, extra: 1}", "extra"),
])
def test_an_unsupported_entry_with_a_missing_or_unknown_field_is_refused(tmp_path, monkeypatch, entry, needle):
    """M u4 (the missing-fields check of unsupported_model_table dropped) and M u5 (its check_known_fields dropped): an
    entry without its reason, or with a misspelt field, loaded."""
    import steptime.specs.moe as SM
    from steptime.errors import ModelConfigError

    f = tmp_path / "moe_models.yaml"
    f.write_text(f"models: {{}}\nunsupported:\n  x: {entry}\n")
    monkeypatch.setattr(SM, "MOE_MODEL_FILE", f)
    SM.unsupported_model_table.cache_clear()
    try:
        with pytest.raises(ModelConfigError, match=needle):
            SM.unsupported_model_table()
    finally:
        monkeypatch.undo()
        SM.unsupported_model_table.cache_clear()


# ---- MoE terms (vhop, tactic; wave 41) -----------------------------------------------------------------------------
def test_family_ep_prices_ep_2_the_smallest_ep_above_one():
    """M t4 (`ep > 1` -> `ep > 2` where routed_experts_time picks family_ep): EP 2, the commonest expert-parallel
    layout, was priced with the EP-1 kernel's law (vLLM's Hopper fp8_block: Triton instead of FlashInfer CUTLASS);
    only EP 8 was tested."""
    import numpy as np

    from steptime.specs import get_gpu
    from steptime.terms import moe as M

    h100, mc = get_gpu("h100-sxm"), M.MoEConstants.default()
    fam_ep = mc.get("family_ep:fp8_block", h100, "")
    assert fam_ep and fam_ep != mc.get("family:fp8_block", h100, "")
    args = (np.array([16.0, 256.0]), 4096, 1536, 8, 128, h100, mc)
    kw = dict(tp=1, dtype="fp8_block", routing="balanced")
    assert np.array_equal(M.routed_experts_time(*args, ep=2, **kw)["t"],
                          M.routed_experts_time(*args, ep=2, family=fam_ep, **kw)["t"])


def test_tactic_k_tiles_are_128_bytes_of_the_operand():
    """M t9 (TACTIC_K_BYTES 128 -> 64): the CUTLASS grouped GEMM's K tile is 128 bytes of the operand
    (cutlass_heuristic.cpp CtaShape...x128B): 128 fp8 elements. The tactic work at an fp8 width that is not a multiple
    of 128 (gpt-oss's 2880) pads K to whole 128-element tiles; only widths that are multiples of 128 were tested,
    where 64 and 128 agree."""
    import numpy as np

    from steptime.specs import get_gpu
    from steptime.terms import moe as M

    h100 = get_gpu("h100-sxm")
    T = np.array([8.0, 64.0, 512.0])
    rows = lambda tN: np.full(np.shape(T), 4.0)   # noqa: E731  (any row count; the same for the check)
    work, fm, fn = M.tactic_compute(T, 2880.0, 2880.0, 4, 128, 1, h100, "fp8", rows)
    expect = [M._tactic_work(4.0, 2880.0, 2880.0, 128.0, h100.sms, a, b) for a, b in zip(fm, fn)]
    assert np.allclose(work, expect, rtol=0, atol=0)


# ---- E3.1's lab rules (tactic, wsread; wave 41) --------------------------------------------------------------------
def test_the_tactic_law_needs_every_cell_of_the_dtype_marked():
    """M l4 (tactic_law's `.all()` -> `.any()`): a training set that mixes cells marked for the tactic law with cells
    of another law fitted them all as one tactic law."""
    import pandas as pd

    from steptime_lab.experiments.moe import tactic_law

    t = pd.DataFrame({"sdtype": ["bf16", "bf16", "fp8"], "tactic": [True, False, True]})
    assert tactic_law(t, "bf16") is False and tactic_law(t, "fp8") is True
    assert tactic_law(t.drop(columns="tactic"), "fp8") is False


def test_floor_bounds_need_two_donors_that_give_the_reading():
    """M l7 (`len(vals) < 2` -> `< 1` in floor_reading_bounds): with two training GPUs of which one lacks a reading
    cell, the range was one donor's reading (lo == hi), forcing the target's floor to it."""
    import test_moe_floor_bounds as F
    from steptime_lab.experiments import moe as E

    donors = F._cells({"h100-sxm": 1.0, "h200-sxm": -1.0})
    choice = dict(E.READINGS)
    gone = E.reading_cells(donors[donors.gpu == "h200-sxm"], "h200-sxm", choice).index
    assert len(gone)
    assert E.floor_reading_bounds(donors, donors.drop(index=gone), choice) is None
