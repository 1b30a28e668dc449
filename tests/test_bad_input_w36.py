"""Wave 36, helper harden3: bad input at the public boundaries (DESIGN.md `Bad input, wave 36`).

One test (or parametrised set) per defect; each failed on the code before its fix. CLI: one line on stderr,
exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import argparse
import json

import numpy as np
import pytest

from steptime import cli
from steptime import greybox
from steptime.errors import ModelConfigError, ServeError, SteptimeError
from steptime.plan import MAX_JOBS, plan
from steptime.serve import Policy, StepTimer, kv_capacity_blocks, simulate_disagg, simulate_replicas, synthetic
from steptime.specs import engines as E
from steptime.specs import model_from_config
from steptime.validation import MAX_INSTANCES, MAX_TOKENS
from refusals import clean, refuses

M, G = "llama-3.1-8b", "h100-sxm"
SERVE = ["serve", "--model", M, "--gpu", G, "--no-progress", "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4"]
PLAN = ["plan", "--model", M, "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4", "--slo-ttft-ms", "1000",
        "--gpus", G, "--no-progress", "--jobs", "1"]
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072}
QWEN_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
            "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
            "max_position_embeddings": 40960}
DEEPSEEK = {**{k: v for k, v in QWEN_MOE.items() if k not in ("head_dim", "num_experts")},
            "architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 256, "kv_lora_rank": 512,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "q_lora_rank": 1536}


def small_workload(n: int = 5):
    return synthetic(n, isl=(64, 128), osl=(4, 8), rate=1.0)


def config(tmp_path, cfg, drop=(), **put):
    d = {k: v for k, v in cfg.items() if k not in drop}
    d.update(put)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return p


# ---- 1. a KV block size the engine does not take -------------------------------------------------------------
def test_every_shipped_engine_states_its_kv_block_sizes_with_a_source():
    for key, e in E.engine_table().items():
        assert e.kv_block_sizes is not None, key
        assert e.kv_block_sizes.provenance in E.PROVENANCES and e.kv_block_sizes.source, key
    assert E.get_engine("vllm").kv_block_sizes.value == (1, 8, 16, 32, 64, 128, 256)
    assert E.get_engine("vllm-v1-sync").kv_block_sizes.value == (1, 8, 16, 32, 64, 128, 256)  # merged from vllm
    assert E.get_engine("trtllm").kv_block_sizes.value == "powers_of_two"


@pytest.mark.parametrize("value", [[], [16, 16], [0, 16], ["16"], [True], "odd", 16])
def test_a_malformed_kv_block_sizes_entry_in_engines_yaml_is_refused(value):
    doc = {"kv_block_sizes": {"value": value, "provenance": "DERIVED", "source": "t"}}
    with pytest.raises(ValueError, match="kv_block_sizes must be a list of distinct positive block sizes"):
        E._parse_block_sizes(doc, "engines.yaml: t")


@pytest.mark.parametrize("engine,size,needle", [
    ("vllm", 7, "engine vllm takes KV-cache blocks of 1, 8, 16, 32, 64, 128, 256 tokens"),
    ("vllm", 48, "engine vllm takes KV-cache blocks of 1, 8, 16, 32, 64, 128, 256 tokens"),
    ("vllm-v0", 1, "engine vllm-v0 takes KV-cache blocks of 8, 16, 32, 64, 128 tokens"),
    ("trtllm", 48, "engine trtllm takes KV-cache blocks of a power of two (the nearest: 32, 64) tokens")])
def test_a_block_size_the_engine_does_not_take_is_refused_with_the_sizes_it_does(engine, size, needle):
    timer = StepTimer(M, G, engine=engine, max_tokens=64, max_requests=4)
    with pytest.raises(ServeError) as e:
        kv_capacity_blocks(timer, Policy(block_size=size))
    assert f"block_size (--block-size) {size}: {needle} (specs/engines.yaml kv_block_sizes)" in clean(e)


@pytest.mark.parametrize("engine,size", [("vllm", 16), ("vllm", 256), ("trtllm", 64), ("sglang", 7), ("kernels", 3)])
def test_a_block_size_the_engine_takes_still_runs(engine, size):
    timer = StepTimer(M, G, engine=engine, max_tokens=64, max_requests=4)
    assert kv_capacity_blocks(timer, Policy(block_size=size)) > 0


def test_serve_block_size_7_is_refused_in_one_line(capsys):
    refuses(capsys, [*SERVE, "--block-size", "7"], "block_size (--block-size) 7: engine vllm takes KV-cache blocks")
    refuses(capsys, [*SERVE, "--policy", "disagg", "--block-size", "7"], "engine vllm takes KV-cache blocks of 1, 8")


# ---- 2. a config.json without max_position_embeddings ---------------------------------------------------------
@pytest.mark.parametrize("cfg", [DENSE, QWEN_MOE], ids=["dense", "moe"])
def test_a_config_without_max_position_embeddings_is_refused_not_given_4096(tmp_path, cfg):
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, cfg, drop=("max_position_embeddings",)))
    assert "max_position_embeddings is missing; expected a positive integer (the model's context window" in clean(e)


def test_a_gpt2_style_config_gives_its_context_as_n_positions(tmp_path):
    p = config(tmp_path, DENSE, drop=("max_position_embeddings",), n_positions=1024)
    assert model_from_config(p).max_position_embeddings == 1024
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, DENSE, drop=("max_position_embeddings",), n_positions="1k"))
    assert "n_positions must be a positive integer" in clean(e)


# ---- 3. malformed mixture-of-experts configs ------------------------------------------------------------------
@pytest.mark.parametrize("base,arch", [(QWEN_MOE, "Qwen3MoeForCausalLM"), (DEEPSEEK, "DeepseekV3ForCausalLM")])
def test_an_moe_config_without_its_expert_width_is_refused_not_given_the_dense_width(tmp_path, base, arch):
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, base, drop=("moe_intermediate_size",)))
    assert f"moe_intermediate_size is missing; expected a positive integer ({arch}'s routed-expert" in clean(e)


def test_a_mixtral_config_still_reads_its_expert_width_from_intermediate_size(tmp_path):
    p = config(tmp_path, QWEN_MOE, drop=("moe_intermediate_size", "num_experts"),
               architectures=["MixtralForCausalLM"], num_local_experts=8, num_experts_per_tok=2)
    assert model_from_config(p).moe_intermediate_size == 6144


@pytest.mark.parametrize("base,field,value,needle", [
    (QWEN_MOE, "num_experts", "128", "num_experts must be a positive integer, got a string '128'"),
    (QWEN_MOE, "num_experts", 128.5, "num_experts must be an integer, got 128.5"),
    (QWEN_MOE, "num_experts", True, "num_experts must be an integer, got True"),
    (QWEN_MOE, "num_experts", [1], "num_experts must be a positive integer, got a list"),
    (QWEN_MOE, "n_shared_experts", "a", "n_shared_experts must be a whole number >= 0, got a string"),
    (QWEN_MOE, "shared_expert_intermediate_size", "x", "shared_expert_intermediate_size must be a whole number"),
    (QWEN_MOE, "first_k_dense_replace", "x", "first_k_dense_replace must be a whole number >= 0"),
    (DEEPSEEK, "n_group", "x", "n_group must be a whole number >= 0"),
    (DEEPSEEK, "topk_group", 1.5, "topk_group must be an integer, got 1.5"),
    (DEEPSEEK, "kv_lora_rank", "x", "kv_lora_rank must be a whole number >= 0"),
    (DEEPSEEK, "v_head_dim", "x", "v_head_dim must be a whole number >= 0"),
    (DEEPSEEK, "q_lora_rank", -1, "q_lora_rank must be >= 0, got -1")])
def test_an_moe_config_field_of_the_wrong_type_is_refused_naming_it(tmp_path, base, field, value, needle):
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, base, **{field: value}))
    assert needle in clean(e)


def test_a_sliding_window_that_is_not_a_number_is_refused(tmp_path):
    p = config(tmp_path, QWEN_MOE, sliding_window="x", layer_types=["sliding_attention", "full_attention"] * 24)
    with pytest.raises(ModelConfigError) as e:
        model_from_config(p)
    assert "sliding_window must be a whole number >= 0, got a string 'x'" in clean(e)


@pytest.mark.parametrize("base,field,value,needle", [
    (QWEN_MOE, "architectures", "Qwen3MoeForCausalLM", "architectures must be a list of class names"),
    (DENSE, "architectures", 5, "architectures must be a list of class names"),
    (DENSE, "architectures", [5], "architectures must be a list of class names"),
    (QWEN_MOE, "quantization_config", "fp8", "quantization_config must be an object of fields, got 'fp8'"),
    (QWEN_MOE, "text_config", [1], "text_config must be an object of fields, got [1]")])
def test_a_config_section_of_the_wrong_shape_is_refused(tmp_path, base, field, value, needle):
    with pytest.raises(ModelConfigError) as e:
        model_from_config(config(tmp_path, base, **{field: value}))
    assert needle in clean(e)


# ---- 4. huge counts: refused before numpy overflows -----------------------------------------------------------
@pytest.mark.parametrize("field", ["max_num_batched_tokens", "block_size"])
def test_a_policy_token_count_beyond_any_context_is_refused(field):
    with pytest.raises(ServeError) as e:
        Policy(**{field: MAX_TOKENS + 1})
    assert f"{field} {MAX_TOKENS + 1} tokens is beyond any model's context" in clean(e)


@pytest.mark.parametrize("extra,needle", [
    (["--max-num-batched-tokens", "99999999999999999999"], "max_num_batched_tokens 99999999999999999999 tokens"),
    (["--policy", "sarathi", "--chunk", "99999999999999999999"], "is beyond any model's context"),
    (["--block-size", "99999999999999999999"], "block_size 99999999999999999999 tokens"),
    (["--replicas", "99999999999999999999"], f"above the limit of {MAX_INSTANCES} instances"),
    (["--policy", "disagg", "--prefill-instances", "99999999999999999999"], "prefill_instances 99999999999999999999")])
def test_serve_refuses_huge_counts_in_one_line(capsys, extra, needle):
    refuses(capsys, [*SERVE, *extra], needle)


def test_the_simulators_refuse_an_instance_count_above_the_limit():
    with pytest.raises(ServeError) as e:
        simulate_replicas(M, G, small_workload(), Policy(), 10**20)
    assert f"replicas 100000000000000000000 is above the limit of {MAX_INSTANCES}" in clean(e)
    with pytest.raises(ServeError) as e:
        simulate_disagg(M, G, small_workload(), decode_instances=MAX_INSTANCES + 1)
    assert f"decode_instances {MAX_INSTANCES + 1} is above the limit" in clean(e)


def test_plan_and_bench_refuse_a_worker_count_above_the_limit(capsys):
    refuses(capsys, [*PLAN[:-2], "--jobs", "99999999999999999999"], f"worker processes, at most {MAX_JOBS}")
    refuses(capsys, ["bench", "--plan", "--jobs", "99999999999999999999"], "worker processes, at most")


# ---- 5. plan: a search list naming a value twice; tp degrees no instance fits --------------------------------
@pytest.mark.parametrize("extra,needle", [(["--tp", "1,1"], "tp degrees to search: 1 is listed twice"),
                                          (["--gpus", "h100,h100-sxm"], "gpus to search: h100-sxm is listed twice"),
                                          (["--engines", "vllm,VLLM"], "engines to search: vllm is listed twice"),
                                          (["--dtypes", "bf16,bf16"], "dtypes to search: bf16 is listed twice")])
def test_plan_refuses_a_value_listed_twice(capsys, extra, needle):
    argv = [a for a in PLAN]
    if "--gpus" in extra:
        i = argv.index("--gpus")
        del argv[i:i + 2]
    refuses(capsys, [*argv, *extra], needle)


def test_plan_api_refuses_duplicate_budgets():
    with pytest.raises(SteptimeError) as e:
        plan(M, small_workload(), slo_ttft_s=1.0, jobs=1, tps=(1,), budgets=(2048, 2048))
    assert "token budgets to search: 2048 is listed twice" in clean(e)


def test_plan_refuses_tp_degrees_that_all_exceed_max_gpus(capsys):
    refuses(capsys, [*PLAN, "--tp", "16"], "tp degrees to search (16) all exceed --max-gpus 8: no instance fits")
    refuses(capsys, [*PLAN, "--tp", "99999999999999999999"], "all exceed --max-gpus 8")


# ---- 6. the grey box's corrections are written whole or not at all --------------------------------------------
def test_greybox_corrections_save_leaves_the_old_file_on_a_failure_half_way(tmp_path, monkeypatch):
    corr = greybox.Corrections({}, {"models": {}, "note": "x" * 100})
    target = tmp_path / "greybox.npz"
    target.write_bytes(b"previous corrections")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", boom)
    with pytest.raises(OSError):
        corr.save(target)
    assert target.read_bytes() == b"previous corrections"
    assert [p.name for p in tmp_path.iterdir()] == ["greybox.npz"]  # no temporary left behind
    monkeypatch.undo()
    corr.save(target)
    assert greybox.Corrections.load(target).meta == corr.meta


# ---- 7. --help: every option says what it is, its unit where it has one, and its default ---------------------
def test_every_cli_option_has_a_help_line_that_states_its_default():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bad = []
    for name, sp in sub.choices.items():
        for a in sp._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flag = isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
            if not a.help:
                bad.append(f"{name} {a.dest}: no help")
            elif not flag and a.default not in (None, argparse.SUPPRESS) and "default" not in a.help:
                bad.append(f"{name} {a.dest}: default {a.default!r} not stated")
    assert not bad, bad
    text = sub.choices["serve"].format_help()
    assert "KV-cache block size, tokens" in text and "time-to-first-token SLO, ms" in text


# ---- 8. predict_ops: a size beyond what a kernel indexes ------------------------------------------------------
@pytest.mark.parametrize("op,kw,needle", [
    ("gemm", dict(m=10**20, n=10, k=10), "predict_ops('gemm'): m must be <= 2147483647, got 1e+20"),
    ("gemm", dict(m=[1, 2**31], n=10, k=10), "predict_ops('gemm'): m must be <= 2147483647, got 2147483648"),
    ("attention_decode", dict(batch=1, heads=8, kv_heads=8, head_dim=128, kv_len=10**12),
     "predict_ops('attention_decode'): kv_len must be <= 2147483647")])
def test_predict_ops_refuses_a_size_beyond_32_bit_indexing(op, kw, needle):
    import steptime

    with pytest.raises(SteptimeError) as e:
        steptime.predict_ops(op, G, **kw)
    assert needle in clean(e)
    assert steptime.predict_ops("gemm", G, m=2**31 - 1, n=1, k=1)["t_ms"] > 0  # the largest size still runs


# ---- 9. calibration ship of a file that is not an .npz --------------------------------------------------------
def test_shipping_a_greybox_file_that_is_not_a_zip_says_so_without_numpys_pickle_advice(capsys, tmp_path):
    bad = tmp_path / "greybox.npz"
    bad.write_bytes(b"PK garbage")
    line = refuses(capsys, ["calibration", "ship", str(bad)], "not a grey-box corrections file (not an .npz")
    assert "pickle" not in line


# ---- 10. a policy setting that does not exist ------------------------------------------------------------------
def test_an_unknown_policy_setting_is_refused_naming_it_and_the_known_ones():
    from steptime.serve import policy, simulate

    with pytest.raises(ServeError) as e:
        simulate(M, G, small_workload(), "vllm", max_num_seq=8)
    msg = clean(e)
    assert "unknown policy setting max_num_seq (known: max_num_batched_tokens, max_num_seqs," in msg
    assert policy("sarathi", chunk=256).max_num_batched_tokens == 256  # chunk and batch are taken as before
    assert policy("static", batch=4).max_num_seqs == 4


# ---- 11. a Gemma config.json: its GeGLU MLP is gated whatever hidden_act says ----------------------------------
def test_a_gemma_config_json_is_read_with_a_gated_mlp_as_the_specs_gemma(tmp_path):
    from steptime.specs import get_model

    gemma2 = {**DENSE, "architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 42,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
              "max_position_embeddings": 8192, "hidden_act": "gelu_pytorch_tanh"}
    m = model_from_config(config(tmp_path, gemma2))
    assert m.gated_mlp and get_model("gemma-2-9b").gated_mlp
    plain = {**gemma2, "architectures": ["Starcoder2ForCausalLM"]}  # the same activation in a two-matrix MLP
    assert not model_from_config(config(tmp_path, plain)).gated_mlp
