"""Wave 37, helper harden5: bad input waves 34-36 left open, the dense kv_budget's layout checks, and a tidy of
precision.apply_rel (DESIGN.md `Bad input, wave 37`). One test per defect; each failed on the code before its fix.
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import numpy as np
import pytest

from steptime import specs
from steptime.terms import gemm
from steptime.terms import precision as PT
from steptime.errors import ModelConfigError, ServeError, SteptimeError
from steptime.plan import PlanError
from refusals import clean, refuses


# ---- tidy: apply_rel reads the fp8 memory factor once, bit-identical ------------------------------------------
def test_apply_rel_reads_the_memory_factor_once_and_prices_bit_identically(monkeypatch):
    """SGLang's fp8 GEMM on B200 has own-stream cells (cta_stream_rel): the concurrent limit used to call mem_rel a
    second time on the same t_memory. The result must equal the written-out combination bit for bit."""
    gpu = specs.get_gpu("b200")
    m = np.array([1.0, 2.0, 8.0, 16.0, 64.0, 512.0, 4096.0])
    g = PT.gemm_time_fp8(m, 4096.0, 4096.0, gpu, engine="sglang")
    assert g["own_stream"].any() and not g["own_stream"].all()  # both branches of the np.where are exercised
    rel = PT.fp8_rel(gpu, None, "sglang")
    p = gemm.resolve(gpu, None)
    calls = []
    real = PT.mem_rel
    monkeypatch.setattr(PT, "mem_rel", lambda r, q: calls.append(1) or real(r, q))
    t = PT.apply_rel(g, gpu, None, rel, p)
    assert len(calls) == 1
    # the reference, written out: the same operations in the same order
    r_m, op = real(rel, p), float(p["overlap_p"])
    dk, dk_add = float(p["duty_k"]), rel.get("duty_k_add")
    t_c = g["t_compute"] if dk_add is None else g["t_compute"] * (1.0 + (dk + dk_add) / g["k_cta"]) / (
        1.0 + dk / g["k_cta"])
    t_mem = np.where(g["own_stream"], gemm.smax(g["t_memory"] / r_m, g["t_cta"] * rel["cta_stream_rel"], op),
                     g["t_memory"] / r_m + g["t_cta"])
    ref = gemm.smax(t_c / rel["eta_c_rel"], t_mem, op)
    if rel.get("oob_rate_tbs") is not None and g.get("oob_bytes") is not None:
        ref = ref + PT.oob_time(g, gpu, rel["oob_rate_tbs"])
    ref = ref + g["t_floor"] + rel["floor_add_us"] * 1e-6
    assert np.array_equal(t, ref)


# ---- 3. kv_budget: a dense model's layout checked as the predictors check it ------------------------------------
SERVE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-progress", "--n", "5", "--rate", "2", "--isl",
         "64", "--osl", "4"]
PLAN = ["plan", "--model", "llama-3.1-8b", "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4", "--slo-ttft-ms",
        "1000", "--gpus", "h100-sxm", "--tp", "1", "--dtypes", "bf16", "--jobs", "1", "--no-progress", "--no-disagg"]


@pytest.mark.parametrize("kw, gpu", [(dict(ep=2), "h100-sxm"), (dict(dtype="fp8"), "a100-sxm"),
                                     (dict(dtype="fp16"), "h100-sxm"), (dict(dtype="fp4"), "h100-sxm")],
                         ids=["ep2", "fp8-a100", "fp16", "fp4"])
def test_kv_budget_refuses_a_dense_layout_the_predictor_refuses_with_its_line(kw, gpu):
    """Wave 36's open item: the dense kv_budget ignored ep and took fp8 on an A100 (no fp8 tensor cores)."""
    from steptime import predict_step
    from steptime.serve import kv_budget

    with pytest.raises(Exception) as want:
        predict_step("llama-3.1-8b", gpu, decode=[(1, 16)], **kw)
    with pytest.raises(type(want.value)) as e:
        kv_budget("llama-3.1-8b", gpu, **kw)
    assert clean(e) == str(want.value)  # the same class and the same line as the predictor's
    assert kv_budget("llama-3.1-8b", "h100-sxm", dtype="fp8").blocks() > 0  # fp8 where the GPU has it still runs


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b"], ids=["dense", "moe"])
def test_kv_budget_refuses_an_unknown_kv_dtype_in_one_line(model):
    """The MoE path raised a bare KeyError: 'x'."""
    from steptime.serve import kv_budget

    with pytest.raises(SteptimeError) as e:
        kv_budget(model, "h100-sxm", kv_dtype="x")
    assert clean(e) == "unknown KV-cache dtype kv_dtype 'x' (known: bf16, bfloat16, fp16, fp8)"


def test_the_dense_layout_check_is_one_function_called_everywhere():
    """predict_steps, the serving timers and kv_budget call step.check_dense_layout; the twins are gone."""
    import inspect

    from steptime import step
    from steptime.serve import kv_budget
    from steptime.serve import timer as serve_timer

    for f in (step.predict_steps, serve_timer._checked, kv_budget):
        src = inspect.getsource(f)
        assert "check_dense_layout(" in src and "applies to mixture-of-experts models" not in src, f.__name__
    with pytest.raises(ServeError) as e:  # the timers keep their error class
        serve_timer.StepTimer("llama-3.1-8b", "h100-sxm", ep=2)
    assert clean(e) == "expert parallelism (ep=2) applies to mixture-of-experts models; llama-3.1-8b is dense"


# ---- 1. config files: a misspelt field, a key given twice --------------------------------------------------------
def test_a_misspelt_field_in_models_yaml_is_refused_naming_the_closest():
    """Before: `num_key_value_head: 4` beside the real field was dropped without a word."""
    import steptime.specs as S
    from steptime.io import read_yaml

    raw = dict(read_yaml(S.MODEL_FILE)["models"]["llama-3.1-8b"], num_key_value_head=4)
    with pytest.raises(ModelConfigError) as e:
        S._model_from_raw("llama-3.1-8b", raw)
    msg = clean(e, ModelConfigError)
    assert msg.startswith("models.yaml: model 'llama-3.1-8b': unknown field 'num_key_value_head' (did you mean "
                          "num_key_value_heads? known: ")
    for key, raw in read_yaml(S.MODEL_FILE)["models"].items():  # every shipped dense entry still reads
        if not S._moe_reason(raw):
            S._model_from_raw(key, raw)


def _patched_table(monkeypatch, tmp_path, module, attr, caches, old, new):
    """A copy of a shipped spec file with `old` replaced by `new`, read in place of the shipped one."""
    src = getattr(module, attr)
    text = src.read_text()
    assert old in text
    p = tmp_path / src.name
    p.write_text(text.replace(old, new, 1))
    monkeypatch.setattr(module, attr, p)
    for c in caches:
        c.cache_clear()
    return p


def test_a_misspelt_field_in_gpus_yaml_is_refused(monkeypatch, tmp_path):
    """Before: `mem_bw_gpbs: 1000` was dropped and the GPU kept its mem_bw_gbps."""
    import steptime.specs as S

    caches = (S.gpu_table, S._gpu_alias_index)
    _patched_table(monkeypatch, tmp_path, S, "GPU_FILE", caches, "    mem_bw_gbps: 3350\n",
                   "    mem_bw_gbps: 3350\n    mem_bw_gpbs: 1000\n")
    try:
        with pytest.raises(ValueError) as e:
            S.gpu_table()
        assert str(e.value).startswith("gpus.yaml: h100-sxm: unknown field 'mem_bw_gpbs' (did you mean mem_bw_gbps")
    finally:
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()
    assert S.get_gpu("h100-sxm").mem_bw == 3350e9


def test_a_misspelt_field_in_moe_models_yaml_is_refused_not_a_type_error(monkeypatch, tmp_path):
    """Before: `n_groups: 4` was a TypeError traceback (MoEModel.__init__() got an unexpected keyword argument)."""
    import steptime.specs.moe as SM

    caches = (SM.moe_model_table,)
    _patched_table(monkeypatch, tmp_path, SM, "MOE_MODEL_FILE", caches, "    n_group: 8 ", "    n_groups: 4\n    n_group: 8 ")
    try:
        with pytest.raises(ModelConfigError) as e:
            SM.moe_model_table()
        assert clean(e, ModelConfigError).startswith(
            "moe_models.yaml: model 'deepseek-v3': unknown field 'n_groups' (did you mean n_group")
    finally:
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()
    assert SM.moe_model_table()["deepseek-v3"].n_group == 8


@pytest.mark.parametrize("typo, near", [("vendor", "vendors"), ("shedule", "schedule")])
def test_a_misspelt_section_of_an_engine_profile_is_refused(typo, near):
    """Before: a profile's `vendor:` (or `shedule:`) was dropped: every vendor allowed, the schedule left default."""
    from steptime.io import read_yaml
    from steptime.specs import engines as E

    doc = read_yaml(E.ENGINE_FILE)["engines"]["vllm"]
    with pytest.raises(ValueError) as e:
        E._parse_engine("vllm", {**doc, typo: doc[near]})
    assert str(e.value).startswith(f"engines.yaml: engine vllm: unknown field '{typo}' (did you mean {near}?")
    for key, raw in read_yaml(E.ENGINE_FILE)["engines"].items():  # every shipped profile still reads
        E._parse_engine(key, raw)


def test_a_yaml_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path):
    """Before: YAML kept the last of `mem_bw_gbps: 3350` / `mem_bw_gbps: 1000` without a word."""
    from steptime.io import DuplicateKeyError, read_yaml, yaml_load

    p = tmp_path / "gpus.yaml"
    p.write_text("gpus:\n  h100-sxm:\n    mem_bw_gbps: 3350\n    sms: 132\n    mem_bw_gbps: 1000\n")
    with pytest.raises(DuplicateKeyError) as e:
        read_yaml(p)
    assert clean(e) == (f"{p}: key 'mem_bw_gbps' is given twice in one mapping (lines 3 and 5): YAML would keep the "
                        "last without a word; remove one")
    # the same key in two mappings, and a merge key's override, are not duplicates
    assert yaml_load("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}
    assert yaml_load("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  x: 3\n") == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}


def test_every_shipped_yaml_file_reads_the_same_under_the_duplicate_check():
    import subprocess
    from pathlib import Path

    import yaml

    from steptime.io import yaml_load

    root = Path(__file__).resolve().parents[1]
    files = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 20
    for f in files:
        text = (root / f).read_text(encoding="utf-8")
        assert yaml_load(text) == yaml.safe_load(text), f


@pytest.mark.parametrize("entry, needle", [
    ("  h100-sxm: {usd_per_gpu_hour: 2, source: x, date: 2026-01-01, currency: EUR}\n",
     "the price of h100-sxm: unknown field 'currency' (known: date, provider, source, usd_per_gpu_hour)"),
    ("  h100-sxm: {usd_per_gpu_hour: 2, source: x, date: 2026-01-01}\nsoruces: {x: a}\n",
     "unknown field 'soruces' (did you mean sources"),
])
def test_a_price_table_field_the_reader_does_not_know_is_refused(tmp_path, capsys, entry, needle):
    """Before: `currency: EUR` was dropped and the price read as US dollars; a misspelt `sources:` dropped too."""
    from steptime.plan import load_prices

    p = tmp_path / "prices.yaml"
    p.write_text("prices:\n" + entry)
    with pytest.raises(PlanError) as e:
        load_prices(p)
    assert needle in clean(e)
    refuses(capsys, [*PLAN, "--prices", str(p)], needle)
    assert load_prices()  # the shipped table still reads


# ---- 1. the CLI: an empty output name, an option the policy does not read --------------------------------------
@pytest.mark.parametrize("argv, flag", [(SERVE, "--csv"), (SERVE, "--fig"), (PLAN, "--csv"), (PLAN, "--fig")])
def test_an_empty_output_file_name_is_refused_not_ignored(capsys, argv, flag):
    """Before: `--csv ''` read as "no file asked for": the run printed its table and wrote nothing."""
    refuses(capsys, [*argv, flag, ""], f"{flag} '': an empty value")  # wave 40: cli.refuse_empty, every option


def test_serve_replicas_with_the_disaggregated_policy_is_refused(capsys):
    """Before: `--policy disagg --replicas 3` ran one prefill + one decode instance, the replicas ignored."""
    refuses(capsys, [*SERVE, "--policy", "disagg", "--replicas", "3"],
            "--replicas 3 does not apply to --policy disagg: size its pools with --prefill-instances and "
            "--decode-instances")


# ---- 1. the API: predict_ops ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op, kw, msg", [
    ("gemm", dict(m=8, n=10, kk=10), "predict_ops('gemm'): unknown argument kk (did you mean k? takes m, n, k, dtype)"),
    ("allreduce", dict(bytes=1e6, tp=2), "predict_ops('allreduce'): unknown argument bytes (did you mean nbytes? "
                                         "takes nbytes, tp)"),
    ("attention_prefill", dict(batch=1, new_tokens=128, heads=32, kv_heads=8, head_dim=128),
     "predict_ops('attention_prefill'): unknown argument new_tokens (did you mean tokens? takes batch, heads, "
     "kv_heads, head_dim, tokens, kv_dtype, kv_len, warm_l2)"),
])
def test_predict_ops_names_a_misspelt_argument_not_the_one_it_hides(op, kw, msg):
    """Before: `kk=10` was reported as `missing argument k`, the misspelling not named."""
    from steptime import predict_ops

    with pytest.raises(SteptimeError) as e:
        predict_ops(op, "h100-sxm", **kw)
    assert clean(e) == msg


def test_predict_ops_allreduce_refuses_a_tp_group_beyond_the_node():
    """Before: tp=16 on an 8-GPU H100 node was priced by the in-node law; predict_step refuses it."""
    from steptime import predict_ops

    with pytest.raises(SteptimeError) as e:
        predict_ops("allreduce", "h100-sxm", nbytes=1e6, tp=16)
    assert clean(e).startswith("tensor-parallel degree 16 is beyond h100-sxm's 8 GPUs per node")
    assert predict_ops("allreduce", "h100-sxm", nbytes=1e6, tp=8)["t"] > 0


def test_a_config_json_key_given_twice_is_refused(tmp_path):
    """Before: `"hidden_size": 4096, ..., "hidden_size": 2048` priced a 2048-wide model without a word."""
    import json

    from steptime.specs import model_from_config

    fields = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "max_position_embeddings": 131072}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(fields)[:-1] + ', "hidden_size": 2048}')
    with pytest.raises(ModelConfigError) as e:
        model_from_config(p)
    assert clean(e, ModelConfigError) == (f"{p}: key 'hidden_size' is given twice in one object: JSON readers keep "
                                          "the last without a word; remove one")
    p.write_text(json.dumps(fields))
    assert model_from_config(p).hidden_size == 4096


def test_bench_jobs_without_plan_is_refused(capsys):
    """Before: `steptime bench --jobs 2` ran the benchmark, --jobs read by nothing."""
    refuses(capsys, ["bench", "--jobs", "2"], "--jobs 2 applies to --plan (the planner search's worker processes)")


# ---- 1. the API: the planner's search lists and flags, the simulator's flags and policies ---------------------
def _wl():
    from steptime.serve import synthetic

    return synthetic(5, isl=64, osl=4, rate=2)


PLAN_KW = dict(gpus=("h100-sxm",), tps=(1,), dtypes=("bf16",), seqs=(64,), budgets=(2048,), disagg=False, jobs=1,
               replicas=(1,), slo_ttft_s=1.0)


@pytest.mark.parametrize("kw, msg", [
    (dict(replicas=(0,)), "replica counts to search: entry must be >= 1, got 0"),
    (dict(replicas=(1.5,)), "replica counts to search: entry must be an integer, got 1.5"),
    (dict(replicas=(1, 1)), "replica counts to search: 1 is listed twice"),
    (dict(disagg=True, pools=((0, 1),)), "disaggregated pools to search: instance count must be >= 1, got 0"),
    (dict(disagg=True, pools=(1, 1)), "disaggregated pools to search: entry 1 must be a (prefill, decode) pair of "
                                      "instance counts"),
    (dict(disagg=True, pools=((1, 1, 1),)), "disaggregated pools to search: entry (1, 1, 1) must be a (prefill, "
                                            "decode) pair of instance counts"),
    (dict(eps=(2,)), "expert-parallel degrees (eps) apply to mixture-of-experts models; llama-3.1-8b is dense"),
    (dict(rates=(1, 2)), "rates apply to objective='max_rate' (--max-rate), not objective='cost'"),
    (dict(seed=1.5), "seed must be an integer, got 1.5"),
    (dict(attainment="no"), "attainment must be True or False, got 'no' (str)"),
    (dict(disagg="no"), "disagg must be True or False, got 'no' (str)"),
    (dict(exhaustive="no"), "exhaustive must be True or False, got 'no' (str)"),
    (dict(prices={"h100-sxm": 2}), "prices['h100-sxm'] must be a mapping with usd_per_gpu_hour > 0 (load_prices' "
                                   "shape), got 2"),
])
def test_plan_refuses_search_lists_flags_and_prices_it_would_misread(kw, msg):
    """Before: replicas 0 / 1.5 were searched as layouts `0x` / `1.5x`, a pool (1, 1, 1) or a flat (1, 1) was a
    TypeError / ValueError traceback, eps on a dense model and rates without the max_rate objective were ignored,
    seed 1.5 was truncated, "no" read as True, a bare number as a price a TypeError."""
    from steptime.plan import plan

    with pytest.raises(PlanError) as e:
        plan("llama-3.1-8b", _wl(), **{**PLAN_KW, **kw})
    assert clean(e) == msg


def test_plan_still_takes_an_empty_replica_list_for_disaggregated_layouts_only():
    from steptime.plan import plan

    res = plan("llama-3.1-8b", _wl(), **{**PLAN_KW, "replicas": (), "disagg": True, "pools": ((1, 1),)})
    assert [r["layout"] for r in res.rows] == ["h100-sxm 1P+1D tp1 vllm bf16 seqs64 budget2048"]


def test_plan_refuses_expert_parallel_degrees_that_are_not_whole_numbers():
    from steptime.plan import plan

    with pytest.raises(PlanError) as e:
        plan("qwen3-30b-a3b", _wl(), **{**PLAN_KW, "eps": -1})
    assert clean(e) == "expert-parallel degrees to search must be a non-empty list (got -1)"


@pytest.mark.parametrize("kw, msg", [
    (dict(fast="no"), "fast must be True or False, got 'no' (str)"),
    (dict(progress="no"), "progress must be True or False, got 'no' (str)"),
    (dict(max_num_seqs=8), "policy settings max_num_seqs apply to a policy given by name; pol is already a Policy: "
                           "set them on it (Policy(..., setting=value))"),
])
def test_simulate_refuses_flags_and_settings_it_would_misread(kw, msg):
    """Before: fast="no" ran the fast path, and max_num_seqs=8 beside a Policy object was dropped."""
    from steptime.serve import Policy, simulate

    with pytest.raises(ServeError) as e:
        simulate("llama-3.1-8b", "h100-sxm", _wl(), Policy("vllm"), **kw)
    assert clean(e) == msg


def test_simulate_disagg_refuses_a_pool_policy_given_by_name():
    """Before: prefill_policy="sarathi" was an AttributeError ('str' object has no attribute 'budget')."""
    from steptime.serve import simulate_disagg

    with pytest.raises(ServeError) as e:
        simulate_disagg("llama-3.1-8b", "h100-sxm", _wl(), prefill_policy="sarathi")
    assert clean(e) == ("prefill_policy must be a steptime.serve.Policy (e.g. Policy(\"vllm\", ...)) or None for the "
                        "default, got 'sarathi'")


@pytest.mark.parametrize("pol, tail", [("static", "(it runs whole batches: --batch)"),
                                       ("sarathi", "(its token budget is --chunk)")])
def test_serve_max_num_batched_tokens_under_a_policy_that_does_not_read_it_is_refused(capsys, pol, tail):
    """Before: `--policy static --max-num-batched-tokens 100` ran with the option ignored."""
    refuses(capsys, [*SERVE, "--policy", pol, "--max-num-batched-tokens", "100"],
            f"--max-num-batched-tokens 100 applies to --policy vllm or disagg, not --policy {pol} {tail}")


# ---- 1. the workflow's own config files: a key given twice --------------------------------------------------------
@pytest.mark.parametrize("path, old, new, key", [
    ("config/config.yaml", "\nseed:", "\nseed: 1\nseed:", "seed"),
    ("config/collect.yaml", "\n  h100-sxm: {gres: \"H100\"}", "\n  h100-sxm: {gres: \"H100\"}\n  h100-sxm: {gres: \"H200\"}",
     "h100-sxm"),
])
def test_a_workflow_config_key_given_twice_stops_the_parse(clean_workdir, path, old, new, key):
    """Before: Snakemake's configfile reader (and common.smk's yaml_load) kept the second value without a word."""
    import subprocess
    import sys

    p = clean_workdir / path
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-n", "results/specs/gpus.json"],
                       cwd=clean_workdir, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert f"key '{key}' is given twice in one mapping" in r.stdout + r.stderr, (r.stdout + r.stderr)[-1500:]
