"""Wave 36, second pass, helper harden4: bad input harden3 found and left (DESIGN.md `Bad input, wave 36, second
pass`). One test per defect; each failed on the code before its fix. CLI: one line on stderr, exit 2; API: a
SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import inspect
import json

import pytest

from steptime import step, validation
from steptime.errors import ModelConfigError, ServeError, SteptimeError
from steptime.serve import kv_budget, policy
from steptime.serve import memory as serve_memory
from steptime.serve import timer as serve_timer
from steptime.specs import MLP_ACTIVATIONS, model_from_config
from refusals import clean, refuses

SERVE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-progress", "--n", "5", "--rate", "2", "--isl",
         "64", "--osl", "4"]


# ---- 1. one tp-divides-the-heads check, kv_budget included --------------------------------------------------
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b"], ids=["dense", "moe"])
def test_kv_budget_refuses_a_tp_every_predictor_refuses(model):
    with pytest.raises(ServeError) as e:
        kv_budget(model, "h100-sxm", tp=3)
    assert clean(e) == f"tensor-parallel degree 3 must divide {model}'s 32 attention heads"
    with pytest.raises(ServeError) as e:  # a TP group spanning nodes: step.check_tp, as the predictors
        kv_budget(model, "h100-sxm", tp=16)
    assert "is beyond h100-sxm's 8 GPUs per node" in clean(e)
    assert kv_budget(model, "h100-sxm", tp=2).blocks() > 0  # a layout the predictors take still runs


def test_the_tp_heads_check_is_one_function_called_everywhere():
    """The message lives once (validation.check_tp_heads); the three former copies and kv_budget call it."""
    for mod in (step, serve_timer, serve_memory):
        assert "num_attention_heads % tp" not in inspect.getsource(mod), mod.__name__
    callers = [inspect.getsource(f) for f in (step.validate_batch, step._check_steps, serve_timer._checked,
                                              kv_budget)]
    assert all("check_tp_heads(" in src for src in callers)
    with pytest.raises(ServeError) as e:
        validation.check_tp_heads(step.get_model("llama-3.1-8b"), 3, ServeError)
    assert clean(e) == "tensor-parallel degree 3 must divide llama-3.1-8b's 32 attention heads"


# ---- 2. an MLP activation the model spec does not know ------------------------------------------------------
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072}


def config(tmp_path, cfg, **more):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, **more}))
    return p


@pytest.mark.parametrize("field", ["hidden_act", "activation_function"])
def test_an_unknown_mlp_activation_is_refused_naming_the_known_ones(tmp_path, field):
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, DENSE, **{field: "geglu_v2"}))
    msg = clean(e)
    assert f"{field} 'geglu_v2' is not an activation steptime knows (known: silu, swiglu" in msg
    assert all(a in msg for a in MLP_ACTIVATIONS) and '"gated_mlp": true or false' in msg


def test_known_activations_read_as_before_and_gated_mlp_reads_an_unknown_one(tmp_path):
    assert model_from_config(config(tmp_path, DENSE, hidden_act="silu")).gated_mlp is True
    assert model_from_config(config(tmp_path, DENSE, hidden_act="gelu_new")).gated_mlp is False
    assert model_from_config(config(tmp_path, DENSE, activation_function="relu")).gated_mlp is False
    assert model_from_config(config(tmp_path, DENSE)).gated_mlp is True  # no field: silu, as before
    assert model_from_config(config(tmp_path, DENSE, hidden_act="xielu", gated_mlp=False)).gated_mlp is False
    gemma = {**DENSE, "architectures": ["Gemma2ForCausalLM"]}
    assert model_from_config(config(tmp_path, gemma, hidden_act="gelu_pytorch_tanh")).gated_mlp is True


# ---- 3. sarathi's chunk refused under the name the user typed -------------------------------------------------
@pytest.mark.parametrize("chunk,needle", [
    ("99999999999999999999", "sarathi chunk (--chunk) 99999999999999999999 tokens is beyond any model's context"),
    ("0", "sarathi chunk (--chunk) must be >= 1, got 0"),
    ("100", "sarathi chunk (--chunk) 100 is below max_num_seqs 256")])
def test_serve_chunk_is_refused_naming_chunk_not_max_num_batched_tokens(capsys, chunk, needle):
    err = refuses(capsys, [*SERVE, "--policy", "sarathi", "--chunk", chunk], needle)
    assert "max_num_batched_tokens" not in err and "token budget" not in err
    with pytest.raises(ServeError) as e:  # the API's chunk= too
        policy("sarathi", chunk=int(chunk))
    assert needle in clean(e)


def test_the_vllm_budget_keeps_its_own_name(capsys):
    refuses(capsys, [*SERVE, "--max-num-batched-tokens", "100"], "token budget 100 is below max_num_seqs 256")


# ---- 4. data verify --root that is not a directory ----------------------------------------------------------
def test_data_verify_root_that_is_a_file_says_the_root_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    for sub in ("verify", "list"):
        err = refuses(capsys, ["data", sub, "--root", str(f)], f"root '{f}' is not a directory: the root must be the "
                      "repository's directory, the one holding raw/MANIFEST.yaml and the raw/ files it lists")
        assert "problem" not in err
    refuses(capsys, ["data", "verify", "--root", str(tmp_path / "nope")], "does not exist: the root must be")
    refuses(capsys, ["data", "verify", "--root", str(tmp_path)], "no manifest here (root given explicitly): the root "
            "must be the repository's directory")


# ---- 5. (a new user's MoE pass) kv_budget and plan take the predictors' layout checks -----------------------
@pytest.mark.parametrize("kw,needle", [
    (dict(ep=3), "expert-parallel degree 3 must divide qwen3-30b-a3b's 128 experts"),
    (dict(tp=2, ep=3), "expert-parallel degree 3 must be a multiple of the tensor-parallel degree 2"),
    (dict(ep=16), "expert-parallel degree 16 is beyond h100-sxm's 8 GPUs per node"),
    (dict(dtype="fp4"), "h100-sxm (hopper) has no fp4 tensor cores")])
def test_kv_budget_refuses_an_moe_layout_every_predictor_refuses(kw, needle):
    with pytest.raises(SteptimeError) as e:
        kv_budget("qwen3-30b-a3b", "h100-sxm", **kw)
    assert needle in clean(e)
    assert kv_budget("qwen3-30b-a3b", "h100-sxm", ep=2).blocks() > 0
    assert kv_budget("qwen3-30b-a3b", "h100-sxm", dtype="mxfp4").blocks() > 0


PLAN = ["plan", "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4", "--slo-ttft-ms", "1000", "--gpus", "h100-sxm",
        "--no-progress", "--jobs", "1", "--tp", "1"]


@pytest.mark.parametrize("model,dtypes,needle", [
    ("qwen3-30b-a3b", "bf16,fp3", "unknown dtype to search for qwen3-30b-a3b 'fp3' (known: bf16, fp8, fp8_block, fp4"),
    ("llama-3.1-8b", "mxfp4", "unknown dtype to search for llama-3.1-8b 'mxfp4' (known: bf16, fp8)")])
def test_plan_refuses_an_unknown_dtype_up_front_naming_the_known_ones(capsys, model, dtypes, needle):
    err = refuses(capsys, [*PLAN, "--model", model, "--dtypes", dtypes], needle)
    assert "dropped" not in err


def test_plan_drops_a_tp_that_does_not_split_the_heads_with_the_one_message():
    from steptime.plan import _static_reason, Layout

    lay = Layout("h100-sxm", 3, "vllm", "bf16", 64, 2048, replicas=1, ep=1)
    assert _static_reason(step.get_model("llama-3.1-8b"), step.get_gpu("h100-sxm"), lay) == \
        "tensor-parallel degree 3 must divide llama-3.1-8b's 32 attention heads"
