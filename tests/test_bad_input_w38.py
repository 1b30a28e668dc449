"""Wave 38, helper fixes8: the review's findings (the serving timers' dtype default, one reading of a multimodal
MoE config's quantization_config) and what a new user met running MoE models with the parallel options (DESIGN.md
`Bad input and review mends, wave 38`). Each test failed on the code before its fix (checked against main's src).
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import json

import numpy as np
import pytest

from steptime.errors import ModelConfigError, UnsupportedError
from refusals import clean, refuses
from test_bad_input_w37b import _config

REPO = __import__("pathlib").Path(__file__).parents[1]
CONFIGS = REPO / "raw/aiconfigurator/model_configs"


def _write(tmp_path, cfg, name="m"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


def _vendored(name):
    return json.loads((CONFIGS / name).read_text())


# ---- review 1: the serving timers price a checkpoint at its own precision by default ---------------------------
def test_the_serving_timers_default_to_the_checkpoints_precision(tmp_path):
    """Before: StepTimer / DirectTimer defaulted to dtype="bf16", so an fp8 config.json was refused unless the
    caller named fp8, while predict_steps (default None) priced it at fp8; and `_checked` dropped resolve_dtype's
    answer."""
    from steptime.serve import DirectTimer, StepTimer, kv_capacity_requests, simulate, synthetic
    from steptime.serve.memory import kv_budget

    path = _config(tmp_path, {"quant_method": "fp8"})
    t = StepTimer(path, "h100-sxm", max_tokens=64, max_requests=8)
    assert t.dtype == "fp8" and DirectTimer(path, "h100-sxm").dtype == "fp8"
    named = StepTimer(path, "h100-sxm", dtype="fp8", max_tokens=64, max_requests=8)
    assert t.step([1, 1], [100, 200]) == named.step([1, 1], [100, 200])
    assert kv_budget(path, "h100-sxm").weight_bytes == kv_budget(path, "h100-sxm", dtype="fp8").weight_bytes
    assert kv_capacity_requests(path, "h100-sxm", 2048) == kv_capacity_requests(path, "h100-sxm", 2048, dtype="fp8")
    run = simulate(path, "h100-sxm", synthetic(4, isl=64, osl=4, rate=2.0))
    assert len(run.requests) == 4
    # a spec-table model's default is still bf16 (no number moves)
    assert StepTimer("llama-3.1-8b", "h100-sxm", max_tokens=64, max_requests=8).dtype == "bf16"


# ---- review 2: one reading of a multimodal MoE config's quantization_config -----------------------------------
def _scout(top=None, text=None):
    cfg = _vendored("meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json")
    if top is not None:
        cfg["quantization_config"] = top
    if text is not None:
        cfg["text_config"]["quantization_config"] = text
    return cfg


def test_a_multimodal_config_whose_two_quantization_configs_disagree_is_refused_naming_both(tmp_path):
    """Before: the top-level one set the priced dtype (fp8) and the text model's the published weights_dtype
    (mxfp4), two answers read without a word."""
    from steptime.specs import get_model

    path = _write(tmp_path, _scout({"quant_method": "fp8"}, {"quant_method": "mxfp4"}))
    with pytest.raises(ModelConfigError) as e:
        get_model(path)
    assert ("quantization_config reads fp8 but text_config.quantization_config reads mxfp4: which weights the "
            "checkpoint holds is ambiguous") in clean(e)


@pytest.mark.parametrize("top, text, want", [
    ({"quant_method": "fp8"}, None, "fp8"),             # before: weights_dtype bf16, checkpoint_dtype fp8
    (None, {"quant_method": "fp8"}, "fp8"),             # before: the same (text's read when the top has none)
    ({"quant_method": "fp8"}, {"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),  # one reading
])
def test_a_multimodal_config_has_one_weight_dtype(tmp_path, top, text, want):
    from steptime.specs import get_model

    m = get_model(_write(tmp_path, _scout(top, text)))
    assert m.checkpoint_dtype == m.weights_dtype == want


def test_a_null_top_level_quantization_config_defers_to_the_text_models(tmp_path):
    """Before: `quantization_config: null` at the top hid the text model's fp8 (dict.get's default is not used for
    a key that is present), so the checkpoint was priced at bf16 and published as fp8."""
    from steptime.specs import get_model

    cfg = _scout(text={"quant_method": "fp8"})
    cfg["quantization_config"] = None
    m = get_model(_write(tmp_path, cfg))
    assert m.checkpoint_dtype == m.weights_dtype == "fp8"


# ---- a new user's MoE configs with odd fields -------------------------------------------------------------------
def _gpt_oss(**edits):
    cfg = _vendored("openai--gpt-oss-120b_config.json")
    cfg.update(edits)
    return cfg


@pytest.mark.parametrize("edits, needle", [
    # before: the first 10 kinds were read as the whole pattern (the window on every other layer, by luck right)
    (lambda c: dict(layer_types=c["layer_types"][:9]), "layer_types lists 9 layers but num_hidden_layers is 36"),
    # before: a string was read as no list at all: every layer full attention, the window dropped
    (lambda c: dict(layer_types="sliding_attention"), "layer_types must be a list of layer kinds"),
    (lambda c: dict(layer_types=[1] * 36), "layer_types must be a list of layer kinds"),
    # before: null / 0 read as no window on the layers layer_types calls sliding
    (lambda c: dict(sliding_window=None), "layer_types names 18 sliding-attention layers but sliding_window is None"),
    (lambda c: dict(sliding_window=0), "layer_types names 18 sliding-attention layers but sliding_window is 0"),
])
def test_an_moe_config_with_inconsistent_layer_types_is_refused(tmp_path, capsys, edits, needle):
    from steptime.specs import get_model

    cfg = _gpt_oss()
    path = _write(tmp_path, _gpt_oss(**edits(cfg)))
    with pytest.raises(ModelConfigError) as e:
        get_model(path)
    assert needle in clean(e)
    refuses(capsys, ["predict", "--model", path, "--gpu", "b200", "--ep", "8"], needle)


def test_an_moe_layer_step_of_zero_is_refused(tmp_path):
    """Before: interleave_moe_layer_step 0 was read as absent (every layer MoE); transformers divides by it."""
    from steptime.specs import get_model

    cfg = _vendored("meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json")
    cfg["text_config"]["interleave_moe_layer_step"] = 0
    with pytest.raises(ModelConfigError) as e:
        get_model(_write(tmp_path, cfg))
    assert "the MoE layer step (interleave_moe_layer_step / decoder_sparse_step) must be a positive whole number, " \
           "got 0" in clean(e)


def test_the_vendored_moe_configs_still_read():
    from steptime.specs import get_model

    m = get_model(str(CONFIGS / "openai--gpt-oss-120b_config.json"))
    assert (m.sliding_window, m.sliding_layers_every, m.weights_dtype) == (128, 2, "mxfp4")
    assert get_model(str(CONFIGS / "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json")).moe_layer_step == 2


# ---- fp4 on a GPU without it: the advice names only formats the GPU has ---------------------------------------
def test_fp4_on_a_gpu_without_it_advises_only_formats_it_has(capsys):
    """Before: an A100 was told to use fp8, which it has no tensor cores for either."""
    from steptime.step import predict_step

    with pytest.raises(UnsupportedError) as e:
        predict_step("gpt-oss-120b", "a100-sxm", decode=[(8, 1024)], ep=8, dtype="fp4")
    msg = clean(e)
    assert "a100-sxm (ampere) has no fp4 tensor cores" in msg and "use bf16 or mxfp4 weights" in msg
    assert "fp8" not in msg
    line = refuses(capsys, ["predict", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--ep", "8", "--dtype", "fp4"],
                   "h100-sxm (hopper) has no fp4 tensor cores")
    assert "use bf16, fp8 or mxfp4 weights" in line


# ---- a command's unknown option: its own parser's line, with advice for plan --ep -------------------------------
def test_plan_refuses_ep_pointing_at_its_own_help_and_at_serve(capsys):
    """Before: `steptime: error: unrecognized arguments: --ep 8 (see `steptime --help`)`."""
    line = refuses(capsys, ["plan", "--model", "gpt-oss-120b", "--ep", "8"],
                   "steptime plan: error: unrecognized arguments: --ep 8: steptime plan searches the expert-parallel "
                   "degree itself")
    assert "(see `steptime plan --help`)" in line and "`steptime serve --ep` simulates one" in line
    line = refuses(capsys, ["predict", "--model", "gpt-oss-120b", "--gpu", "b200", "--bogus", "1"],
                   "steptime predict: error: unrecognized arguments: --bogus 1")
    assert "(see `steptime predict --help`)" in line


# ---- a static batch's step timer is sized to the workload, not to 2^16 tokens -----------------------------------
def test_the_step_timer_table_is_sized_to_what_a_step_of_the_workload_can_hold():
    """Before: a static policy's unbounded budget tabulated 65,536 token counts up front (minutes for gpt-oss-120b at
    --ep 8: `steptime serve --policy static` looked hung). The table grows on demand bit for bit the same, so the
    run is unchanged."""
    from steptime.serve import StepTimer, policy, simulate, synthetic
    from steptime.serve.sim import timer_tokens

    wl = synthetic(6, isl=100, osl=10, rate=2.0)
    pol = policy("static", batch=4)
    assert timer_tokens(wl, pol.budget, pol.max_num_seqs) == 4 * 110
    assert timer_tokens(wl, 256, 4) == 256 and timer_tokens(wl, 1 << 62, 1000) == 6 * 110
    big = StepTimer("llama-3.1-8b", "h100-sxm", max_tokens=1 << 16, max_requests=6)
    a = simulate("llama-3.1-8b", "h100-sxm", wl, pol).requests
    b = simulate("llama-3.1-8b", "h100-sxm", wl, pol, timer=big).requests
    assert a.equals(b)
    small = StepTimer("llama-3.1-8b", "h100-sxm", max_tokens=64, max_requests=6)
    assert np.array_equal(small.A, big.A[:len(small.A)]) and small.step([300], [0]) == big.step([300], [0])


# ---- a memory refusal at the bf16 default names the lighter published weights ---------------------------------
def test_a_memory_refusal_at_bf16_names_the_models_published_weights(capsys):
    """Before: `serve --model deepseek-v3 --ep 8` on an H200 said only that the (bf16) weights leave no KV cache;
    the spec-table entry is priced at bf16 unless asked, its published weights are fp8_block."""
    from steptime.errors import MemoryFitError, ServeError
    from steptime.serve.memory import kv_budget
    from steptime.step import predict_step

    hint = "its published weights are fp8_block: --dtype fp8_block (dtype='fp8_block') prices those"
    with pytest.raises(ServeError) as e:
        kv_budget("deepseek-v3", "h200-sxm", ep=8)
    assert clean(e).endswith(hint)
    with pytest.raises(MemoryFitError) as e:
        predict_step("gpt-oss-120b", "h100-sxm", decode=[(64, 2048)])
    assert "but h100-sxm has" in clean(e) and "its published weights are mxfp4: --dtype mxfp4" in str(e.value)
    refuses(capsys, ["serve", "--model", "deepseek-v3", "--gpu", "h200-sxm", "--ep", "8", "--n", "5", "--rate", "1",
                     "--no-progress"], hint)
    # the dtype asked is the published one, or the published one is bf16 / not priced (int4): no hint
    assert kv_budget("deepseek-v3", "h200-sxm", ep=8, dtype="fp8_block").hint == ""
    for model in ("qwen3-235b-a22b", "kimi-k2.5"):
        with pytest.raises(MemoryFitError) as e:
            predict_step(model, "h200-sxm", decode=[(64, 2048)])
        assert "published" not in clean(e)
