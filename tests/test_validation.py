"""Bad input at every public boundary gives one clear line, case by case (issue 12).

Every bad input below must raise a SteptimeError that is also a ValueError (Python API), or
print one line on stderr and exit 2 (CLI). Valid inputs keep their results (test_predictor,
test_cli). Each `bad_*` parameter list is one case per bad input.
"""
import json
import math
import tracemalloc

import numpy as np
import pytest

from steptime import errors, predict_ops, predict_step
from steptime.errors import (BatchError, InputError, MemoryFitError, ModelConfigError, SteptimeError,
                             UnknownGPUError, UnknownModelError, UnsupportedModelError)
from steptime.specs import get_model, model_from_config
from steptime.step import Batch, Group, Request, memory_bytes, predict_steps
from steptime.validation import F_CLK_MAX_BOOST, MAX_DIM, MAX_REQUESTS, is_real
from refusals import clean, refuses, run_cli  # tests/refusals.py: the one refusal shape

NAN, INF = float("nan"), float("inf")




# ---------------------------------------------------------------------------------------
def test_every_error_type_is_a_steptime_value_error():
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not SteptimeError:
            assert issubclass(cls, SteptimeError) and issubclass(cls, ValueError), name
    assert issubclass(UnsupportedModelError, ModelConfigError)
    assert issubclass(UnknownGPUError, KeyError)  # earlier callers caught KeyError


# --- CLI: predict ----------------------------------------------------------------------
P = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100"]
BAD_CLI = [
    (P + ["--decode", "1x128", "--f-clk", "0"], "(0, 1]"),
    (P + ["--decode", "1x128", "--f-clk", "-0.5"], "(0, 1]"),
    (P + ["--decode", "1x128", "--f-clk", "nan"], "(0, 1]"),
    (P + ["--decode", "1x128", "--f-clk", "inf"], "(0, 1]"),
    (P + ["--decode", "1x128", "--f-clk=-inf"], "(0, 1]"),
    (P + ["--decode", "1x128", "--f-clk", "1.2"], "--allow-boost"),
    (P + ["--decode", "1x128", "--f-clk", "2"], "--allow-boost"),
    (P + ["--decode", "1x128", "--f-clk", "3", "--allow-boost"], "even with allow_boost"),
    (P + ["--decode", "1x128", "--f-clk", "fast"], "invalid float value"),
    (P + ["--decode", "1x128", "--tp", "0"], ">= 1"),
    (P + ["--decode", "1x128", "--tp", "-2"], ">= 1"),
    (P + ["--decode", "1x128", "--tp", "3"], "must divide"),
    (P + ["--decode", "1x128", "--tp", "2.5"], "invalid int value"),
    (P + ["--decode", "1x128", "--kv-dtype", "int4"], "invalid choice"),
    (P + ["--decode", "10000000000x1024"], "exceed the limit"),
    (P + ["--decode", f"{MAX_REQUESTS + 1}x16"], "exceed the limit"),
    (P + ["--decode", f"{MAX_REQUESTS // 2 + 1}x16", "--decode", f"{MAX_REQUESTS // 2 + 1}x16"], "exceed the limit"),
    (P + ["--decode", "1x" + "9" * 5000], "digits"),
    (P + ["--decode", "9" * 5000 + "x1"], "digits"),
    (P + ["--decode", "0x128"], ">= 1"),
    (P + ["--decode", "-1x128"], "expected one argument"),
    (P + ["--decode", "1.5x128"], "malformed"),
    (P + ["--decode", "1x128.5"], "malformed"),
    (P + ["--decode", ""], "--decode '': an empty value"),  # wave 40: cli.refuse_empty
    (P + ["--decode", "1x128@5"], "only for prefill"),
    (P + ["--decode", "1x1x1"], "malformed"),
    (P + ["--prefill", "1x0"], ">= 1"),
    (P + ["--prefill", "1x16@-3"], "malformed"),
    (P + ["--prefill", "1x16@200000"], "maximum"),
    (P + ["--prefill", "0x16"], ">= 1"),
    (["predict", "--model", "llama-3.1-8b", "--gpu", "", "--decode", "1x1"], "--gpu '': an empty value"),
    (["predict", "--model", "", "--gpu", "h100", "--decode", "1x1"], "--model '': an empty value"),
    (["predict", "--model", "nope/config.json", "--gpu", "h100", "--decode", "1x1"], "cannot read"),
    (["predict", "--model", "mistralai/Mixtral-8x7B-v0.1", "--gpu", "h100", "--decode", "1x1"],
     "93.4 GB per GPU"),  # Mixtral's 46.7 B bf16 parameters do not fit one H100
    (["predict", "--model", "databricks/dbrx-instruct", "--gpu", "h100", "--decode", "1x1"],
     "unlisted mixture-of-experts model"),
    (["predict", "--gpu", "h100", "--decode", "1x1"], "required"),
    (["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--decode", "1x1", "--bogus"], "unrecognized"),
    (["nonsense"], "invalid choice"),
]


@pytest.mark.parametrize("argv,needle", BAD_CLI, ids=[" ".join(a[5:] or a)[:60] for a, _ in BAD_CLI])
def test_bad_cli_predict_one_line_exit_2(capsys, argv, needle):
    refuses(capsys, argv, needle)


def test_f_clk_range_accepted_and_boost_only_when_asked():
    base = dict(prefill=[(1, 4096)])
    one = predict_step("llama-3.1-8b", "h100-sxm", f_clk=1.0, **base)
    half = predict_step("llama-3.1-8b", "h100-sxm", f_clk=0.5, **base)
    boost = predict_step("llama-3.1-8b", "h100-sxm", f_clk=1.5, allow_boost=True, **base)
    assert half.total_ms > one.total_ms > boost.total_ms
    assert all(math.isfinite(r.total_ms) for r in (one, half, boost))
    with pytest.raises(InputError) as e:
        predict_step("llama-3.1-8b", "h100-sxm", f_clk=F_CLK_MAX_BOOST * 1.01, allow_boost=True, **base)
    clean(e)


def test_cli_allow_boost_runs(capsys):
    rc, out, err = run_cli(capsys, P + ["--decode", "1x128", "--f-clk", "1.2", "--allow-boost", "--json"])
    assert rc == 0, err
    assert math.isfinite(json.loads(out)["total_ms"])


# --- CLI: evaluate ---------------------------------------------------------------------
BAD_EVALUATE = [
    (["evaluate", "--family", "host", "--gpu", "h900"], "known: a100-sxm"),
    (["evaluate", "--family", "host", "--gpu", ""], "--gpu '': an empty value"),
    (["evaluate", "--family", "gemm", "--gpu", "a100", "--gpu", "tpu-v5"], "unknown GPU 'tpu-v5'"),
    (["evaluate", "--family", "nope"], "unknown family"),
    (["evaluate", "--family", "host", "--gpu", "rtx-pro-6000"], "no cells"),  # known GPU without data
]


@pytest.mark.parametrize("argv,needle", BAD_EVALUATE)
def test_bad_cli_evaluate(capsys, argv, needle):
    refuses(capsys, argv, needle)


def test_evaluate_gpu_accepts_aliases_like_predict(capsys):
    rc1, by_key, _ = run_cli(capsys, ["evaluate", "--family", "host", "--gpu", "a100-sxm", "--json"])
    rc2, by_alias, _ = run_cli(capsys, ["evaluate", "--family", "host", "--gpu", "A100_SXM", "--json"])
    assert rc1 == rc2 == 0
    recs = json.loads(by_alias)
    assert recs and by_alias == by_key and {r["gpu"] for r in recs} == {"a100-sxm"}


# --- Python API: predict_step ----------------------------------------------------------
M, G = "llama-3.1-8b", "h100-sxm"
BAD_STEP = [
    (dict(decode=[(-1, 128)]), BatchError, ">= 0"),
    (dict(decode=[(-1, 128), (4, 128)]), BatchError, ">= 0"),
    (dict(decode=[(2.5, 128)]), BatchError, "integer"),
    (dict(decode=[(2, 128.7)]), BatchError, "integer"),
    (dict(decode=[("4", 128)]), BatchError, "integer"),
    (dict(decode=[(None, 128)]), BatchError, "integer"),
    (dict(decode=[(True, 128)]), BatchError, "integer"),
    (dict(decode=[(NAN, 128)]), BatchError, "integer"),
    (dict(decode=[(INF, 128)]), BatchError, "integer"),
    (dict(decode=[(np.float64(1.5), 128)]), BatchError, "integer"),
    (dict(decode=[(1,)]), BatchError, "expected (count, kv_len)"),
    (dict(decode=[(1, 2, 3)]), BatchError, "expected (count, kv_len)"),
    (dict(decode=["32x1024"]), BatchError, "expected (count, kv_len)"),
    (dict(decode="32x1024"), BatchError, "list of tuples"),
    (dict(decode=5), BatchError, "list of tuples"),
    (dict(decode=[(1, -5)]), BatchError, ">= 0"),
    (dict(decode=[(10**12, 128)]), BatchError, "exceed the limit"),
    (dict(decode=[(MAX_REQUESTS, 1), (1, 1)]), BatchError, "exceed the limit"),
    (dict(decode=[(0, 128)]), BatchError, "empty batch"),
    (dict(), BatchError, "empty batch"),
    (dict(prefill=[(1, 0)]), BatchError, ">= 1"),
    (dict(prefill=[(1, -4)]), BatchError, ">= 1"),
    (dict(prefill=[(1, 4, -1)]), BatchError, ">= 0"),
    (dict(prefill=[(1, 4.5)]), BatchError, "integer"),
    (dict(prefill=[(-2, 16)]), BatchError, ">= 0"),
    (dict(prefill=[(1,)]), BatchError, "expected (count, tokens[, kv_len])"),
    (dict(prefill=[(1, 2, 3, 4)]), BatchError, "expected (count, tokens[, kv_len])"),
    (dict(prefill=[(1, 200_000)]), BatchError, "maximum"),
    (dict(requests=[(0, 5)]), BatchError, ">= 1"),
    (dict(requests=[(1, -1)]), BatchError, ">= 0"),
    (dict(requests=[("a", 1)]), BatchError, "integer"),
    (dict(requests=[(1, 2, 3)]), BatchError, "expected (new_tokens[, kv_len])"),
    (dict(requests=[3]), BatchError, "expected (new_tokens[, kv_len])"),
    (dict(decode=[(1, 128)], tp=0), InputError, ">= 1"),
    (dict(decode=[(1, 128)], tp=-2), InputError, ">= 1"),
    (dict(decode=[(1, 128)], tp=2.5), InputError, "integer"),
    (dict(decode=[(1, 128)], tp="2"), InputError, "integer"),
    (dict(decode=[(1, 128)], tp=None), InputError, "integer"),
    (dict(decode=[(1, 128)], tp=3), BatchError, "must divide"),
    (dict(decode=[(1, 128)], f_clk=0), InputError, "(0, 1]"),
    (dict(decode=[(1, 128)], f_clk=-1), InputError, "(0, 1]"),
    (dict(decode=[(1, 128)], f_clk=NAN), InputError, "(0, 1]"),
    (dict(decode=[(1, 128)], f_clk=INF), InputError, "(0, 1]"),
    (dict(decode=[(1, 128)], f_clk=1.5), InputError, "allow_boost"),
    (dict(decode=[(1, 128)], f_clk="0.9"), InputError, "number"),
    (dict(decode=[(1, 128)], f_clk=True), InputError, "number"),
    (dict(decode=[(1, 128)], kv_dtype="int8"), InputError, "KV-cache dtype"),
    (dict(decode=[(1, 128)], kv_dtype=None), InputError, "KV-cache dtype"),
    (dict(decode=[(1, 128)], constants={"f_clk": 1}), InputError, "Constants"),
    (dict(batch="4x128"), InputError, "Batch"),
    (dict(batch=Batch.build(decode=[(1, 8)]), decode=[(1, 8)]), InputError, "not both"),
    (dict(decode=[(64, 100_000)]), MemoryFitError, "GB over"),
]


@pytest.mark.parametrize("kwargs,cls,needle", BAD_STEP, ids=[str(i) for i in range(len(BAD_STEP))])
def test_bad_predict_step(kwargs, cls, needle):
    with pytest.raises(cls) as e:
        predict_step(M, G, **kwargs)
    assert needle in clean(e, cls)


BAD_NAMES = [
    (None, G, UnknownModelError, "name or a path"),
    (123, G, UnknownModelError, "name or a path"),
    ("", G, UnknownModelError, "unknown model"),
    ("llama-9", G, UnknownModelError, "unknown model"),
    ("databricks/dbrx-instruct", G, UnsupportedModelError, "unlisted mixture-of-experts model"),
    ("Qwen/Qwen3-480B-A99B", G, UnsupportedModelError, "known MoE models: deepseek-v3"),
    (M, None, UnknownGPUError, "unknown GPU"),
    (M, "", UnknownGPUError, "unknown GPU"),
    (M, "tpu-v5", UnknownGPUError, "known: a100-sxm"),
]


@pytest.mark.parametrize("model,gpu,cls,needle", BAD_NAMES)
def test_bad_model_or_gpu_name(model, gpu, cls, needle):
    with pytest.raises(cls) as e:
        predict_step(model, gpu, decode=[(1, 16)])
    assert needle in clean(e, cls)


BAD_BATCHES = [
    (lambda: Batch([Group(10**12, 1, 16)]), "exceed the limit"),
    (lambda: Batch([Group(MAX_REQUESTS, 1, 16), Group(1, 1, 16)]), "exceed the limit"),
    (lambda: Batch([Group(-3, 1, 16)]), ">= 0"),
    (lambda: Batch([Group(1, 0, 16)]), ">= 1"),
    (lambda: Batch([Group(1.5, 1, 16)]), "integer"),
    (lambda: Batch([Request(1, -1)]), ">= 0"),
    (lambda: Batch([(1, 16)]), "Group or a Request"),
    (lambda: Batch("1x16"), "list of tuples"),
    (lambda: Batch.parse(decode="32x1024"), "list of strings"),
]


@pytest.mark.parametrize("make,needle", BAD_BATCHES, ids=[str(i) for i in range(len(BAD_BATCHES))])
def test_bad_batch_objects(make, needle):
    with pytest.raises(BatchError) as e:
        make()
    assert needle in clean(e, BatchError)


def test_huge_batch_refused_before_anything_is_allocated_per_request():
    """10^12 requests are refused at once, and a million requests that do not fit in memory
    are refused from their one group, with far less memory than one array entry per request
    (2 x 8 MB) would take."""
    tracemalloc.start()
    try:
        with pytest.raises(BatchError, match="exceed the limit"):
            Batch.parse(decode=["999999999999x1024"])
        with pytest.raises(BatchError, match="exceed the limit"):
            predict_step(M, G, decode=[(10**12, 16)])
        with pytest.raises(MemoryFitError, match="GB over"):
            predict_step(M, G, decode=[(MAX_REQUESTS, 100_000)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4e6


def test_counts_are_groups_until_validated():
    b = Batch.build(decode=[(3, 100)], prefill=[(2, 64, 8)])
    count, new, kv = b.group_arrays()
    assert list(count) == [3, 2] and b.n_requests == 5
    new_r, kv_r = b.arrays()
    assert list(new_r) == [1, 1, 1, 64, 64] and list(kv_r) == [100, 100, 100, 8, 8]


def test_integral_floats_and_numpy_ints_are_the_same_batch():
    a = predict_step(M, G, decode=[(4, 128)], prefill=[(1, 64, 8)])
    b = predict_step(M, G, decode=[(4.0, np.int64(128))], prefill=[(np.int32(1), 64.0, 8)])
    assert a.to_dict() == b.to_dict()


# --- memory check honours the KV (and weight) dtype -------------------------------------
def test_memory_check_honours_kv_dtype():
    # llama-3.1-8b on an L40S (48 GB): 16 GB of weights; 64 x 5000 tokens of KV is
    # 42 GB in bf16 (does not fit) and 21 GB in fp8 (fits).
    batch = dict(decode=[(64, 5000)])
    with pytest.raises(MemoryFitError, match="bf16 KV"):
        predict_step(M, "l40s", **batch)
    r = predict_step(M, "l40s", kv_dtype="fp8", **batch)
    assert r.requests == 64
    m = get_model(M)
    w = memory_bytes(m, 0)
    assert memory_bytes(m, 1000, kv_dtype="fp8") - w == pytest.approx((memory_bytes(m, 1000) - w) / 2)
    assert memory_bytes(m, 0, weight_dtype="fp8") == pytest.approx(w / 2)
    with pytest.raises(InputError):
        memory_bytes(m, 10, kv_dtype="fp4")


# --- Python API: predict_ops -----------------------------------------------------------
A = dict(batch=8, heads=32, kv_heads=8, head_dim=128)
BAD_OPS = [
    ("conv", {}, "unknown op"),
    (None, {}, "unknown op"),
    ("gemm", dict(m=16, n=4096), "missing argument k"),
    ("gemm", dict(), "missing arguments m, n, k"),
    ("gemm", dict(m=16, n=4096, k=4096, q=1), "unknown argument q"),
    ("gemm", dict(m=0, n=4096, k=4096), "> 0"),
    ("gemm", dict(m=-1, n=4096, k=4096), "> 0"),
    ("gemm", dict(m=NAN, n=4096, k=4096), "finite"),
    ("gemm", dict(m=INF, n=4096, k=4096), "finite"),
    ("gemm", dict(m=np.array([16, np.nan]), n=4096, k=4096), "finite"),
    ("gemm", dict(m=1.5, n=4096, k=4096), "whole numbers"),
    ("gemm", dict(m="16", n=4096, k=4096), "numbers"),
    ("gemm", dict(m=[], n=4096, k=4096), "empty"),
    ("gemm", dict(m=None, n=4096, k=4096), "missing"),
    ("gemm", dict(m=[1, None], n=4096, k=4096), "finite"),
    ("gemm", dict(m=16, n=0, k=4096), "> 0"),
    ("gemm", dict(m=16, n=4096, k=-5), "> 0"),
    ("gemm", dict(m=16, n=4096, k=4096, dtype="int4"), "GEMM dtype"),
    ("attention_decode", dict(batch=8, kv_len=128, kv_heads=8, head_dim=128), "missing argument heads"),
    ("attention_decode", dict(A, kv_len=128, kv_heads=0), "> 0"),
    ("attention_decode", dict(A, kv_len=128, kv_heads=64), "multiple of kv_heads"),
    ("attention_decode", dict(A, kv_len=128, kv_heads=6), "multiple of kv_heads"),
    ("attention_decode", dict(A, kv_len=128, head_dim=NAN), "finite"),
    ("attention_decode", dict(A, kv_len=128, batch=0), "> 0"),
    ("attention_decode", dict(A, kv_len=0), "> 0"),
    ("attention_decode", dict(A, kv_len=-1), "> 0"),
    ("attention_decode", dict(A, kv_len=128, kv_dtype="fp4"), "KV-cache dtype"),
    ("attention_decode", dict(A, kv_len=128, warm_l2="yes"), "warm_l2"),
    ("attention_decode", dict(A, kv_len=128, tokens=4), "unknown argument tokens"),
    ("attention_prefill", dict(A, tokens=0), "> 0"),
    ("attention_prefill", dict(A, tokens=NAN), "finite"),
    ("attention_prefill", dict(A, tokens=128, kv_len=-1), ">= 0"),
    ("attention_prefill", dict(A, tokens=128.5), "whole numbers"),
    ("attention_prefill", dict(batch=1, tokens=128, heads=32, kv_heads=8), "missing argument head_dim"),
    ("light", dict(nbytes=1e6), "missing argument 'kernel'"),
    ("light", dict(kernel="softmax", nbytes=1e6), "unknown light kernel"),
    ("light", dict(kernel="rmsnorm", nbytes=0), "> 0"),
    ("light", dict(kernel="rmsnorm", nbytes=-1), "> 0"),
    ("light", dict(kernel="rmsnorm", nbytes=NAN), "finite"),
    ("light", dict(kernel="rmsnorm", nbytes=INF), "finite"),
    ("light", dict(kernel="rmsnorm"), "missing argument nbytes"),
    ("allreduce", dict(nbytes=1e6, tp=0), ">= 1"),
    ("allreduce", dict(nbytes=1e6, tp=-4), ">= 1"),
    ("allreduce", dict(nbytes=1e6, tp=1.5), "integer"),
    ("allreduce", dict(nbytes=1e6), "missing argument tp"),
    ("allreduce", dict(nbytes=NAN, tp=2), "finite"),
    ("gemm", dict(m=16, n=4096, k=4096, f_clk=0), "(0, 1]"),
    ("gemm", dict(m=16, n=4096, k=4096, f_clk=NAN), "(0, 1]"),
    ("gemm", dict(m=16, n=4096, k=4096, f_clk=1.5), "allow_boost"),
    ("gemm", dict(m=16, n=4096, k=4096, constants="defaults"), "Constants"),
    # wave 34 (helper harden): numpy's broadcast error named no argument
    ("gemm", dict(m=np.array([1, 2]), n=np.array([64, 64, 64]), k=64), "m (2,), n (3,), k ()"),
    ("attention_decode", dict(batch=np.array([1, 2]), heads=np.array([32, 32, 32]), kv_heads=8, head_dim=128,
                              kv_len=100), "do not broadcast together"),
]


@pytest.mark.parametrize("op,cells,needle", BAD_OPS, ids=[str(i) for i in range(len(BAD_OPS))])
def test_bad_predict_ops(op, cells, needle):
    with pytest.raises(InputError) as e:
        predict_ops(op, "h100-sxm", **cells)
    assert needle in clean(e, InputError)


def test_bad_predict_ops_gpu():
    with pytest.raises(UnknownGPUError) as e:
        predict_ops("gemm", "h1000", m=1, n=1, k=1)
    clean(e)


def test_predict_ops_valid_edges_still_answer():
    assert predict_ops("allreduce", "h100-sxm", nbytes=1e6, tp=1)["t_ms"] == 0.0
    r = predict_ops("gemm", "h100-sxm", m=np.array([1.0, 64.0]), n=4096, k=4096, f_clk=1.2, allow_boost=True)
    assert np.all(np.isfinite(r["t_ms"])) and np.all(r["t_ms"] > 0)
    r = predict_ops("attention_prefill", "h100-sxm", **A, tokens=16, kv_len=0)
    assert np.all(r["t_ms"] > 0)


# --- Python API: predict_steps ---------------------------------------------------------
BAD_STEPS = [
    (dict(step_id=[0, 0], new_tokens=[1], kv_len=[5, 5]), "differ in length"),
    (dict(step_id=[0], new_tokens=[0], kv_len=[5]), ">= 1"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[-1]), ">= 0"),
    (dict(step_id=[-1], new_tokens=[1], kv_len=[5]), ">= 0"),
    (dict(step_id=[0, 3], new_tokens=[1, 1], kv_len=[5, 5], n_steps=2), "not below n_steps"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[NAN]), "finite"),
    (dict(step_id=[0.5], new_tokens=[1], kv_len=[5]), "whole numbers"),
    (dict(step_id=[[0]], new_tokens=[[1]], kv_len=[[5]]), "1-D"),
    (dict(step_id=["a"], new_tokens=[1], kv_len=[5]), "1-D array of numbers"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], tp=0), ">= 1"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], tp=3), "must divide"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], f_clk=NAN), "(0, 1]"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], kv_dtype="int8"), "KV-cache dtype"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], n_steps=-1), ">= 0"),
    # wave 34 (helper harden): an empty step was a NaN 'outside what the model covers' (MoE: a bare ValueError)
    (dict(step_id=[0, 2], new_tokens=[1, 1], kv_len=[5, 5]), "step 1 has no rows"),
    (dict(step_id=[0], new_tokens=[1], kv_len=[5], n_steps=2), "step 1 has no rows"),
    (dict(model="qwen3-30b-a3b", step_id=[1], new_tokens=[1], kv_len=[5]), "step 0 has no rows"),
]


@pytest.mark.parametrize("kwargs,needle", BAD_STEPS, ids=[str(i) for i in range(len(BAD_STEPS))])
def test_bad_predict_steps(kwargs, needle):
    kwargs = dict(kwargs)
    with pytest.raises(InputError) as e:
        predict_steps(kwargs.pop("model", M), G, **kwargs)
    assert needle in clean(e, InputError)


# --- model configs (Hugging Face config.json) -------------------------------------------
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
         "max_position_embeddings": 131072, "tie_word_embeddings": False, "head_dim": 128}


def cfg(**kw):
    d = dict(LLAMA)
    for k, v in kw.items():
        if v is ...:
            d.pop(k)
        else:
            d[k] = v
    return json.dumps(d).encode()


BAD_CONFIGS = [
    (cfg(num_attention_heads=0), "num_attention_heads must be >= 1"),
    (cfg(hidden_size="4096"), "hidden_size must be a positive integer, got a string"),
    (cfg(hidden_size=None), "hidden_size is null"),
    (cfg(num_hidden_layers=None), "num_hidden_layers is null"),
    (cfg(hidden_size=-4096), "hidden_size must be >= 1"),
    (cfg(intermediate_size=-1), "intermediate_size must be >= 1"),
    (cfg(vocab_size=-5), "vocab_size must be >= 1"),
    (cfg(num_key_value_heads=64), "multiple of num_key_value_heads"),
    (cfg(num_key_value_heads=6), "multiple of num_key_value_heads"),
    (cfg(num_key_value_heads=0), "num_key_value_heads must be >= 1"),
    (cfg(head_dim=..., hidden_size=4000, num_attention_heads=48, num_key_value_heads=8),
     "not a multiple of num_attention_heads"),
    (cfg(num_hidden_layers=0), "num_hidden_layers must be >= 1"),
    (cfg(hidden_size=4096.5), "hidden_size must be an integer"),
    (cfg(num_attention_heads=True), "num_attention_heads must be an integer"),
    (cfg(hidden_size=1e40), f"between 1 and {MAX_DIM}"),
    (cfg(hidden_size=[4096]), "got a list"),
    (cfg(hidden_size={"v": 1}), "got an object"),
    (cfg(head_dim=0), "head_dim must be >= 1"),
    (cfg(max_position_embeddings=-1), "max_position_embeddings must be >= 1"),
    (cfg(vocab_size="32000"), "vocab_size must be a positive integer, got a string"),
    (cfg(tie_word_embeddings="yes"), "tie_word_embeddings must be true or false"),
    (cfg(hidden_act=5), "hidden_act must be a string"),
    (cfg(hidden_size=...), "lacks hidden_size"),
    (cfg(vocab_size=..., num_hidden_layers=...), "lacks num_hidden_layers, vocab_size"),
    (b"\xff\xfe{\x00}", "not UTF-8"),
    (b'{"hidden_size": "\xe9"}', "not UTF-8"),
    (b"42", "got a number"),
    (b"[1, 2, 3]", "got a list"),
    (b'"llama"', "got a string"),
    (b"null", "got null"),
    (b"{hidden_size: 4096}", "not valid JSON"),
    (b"", "not valid JSON"),
    (b'{"hidden_size": 4096,', "not valid JSON"),
    (b"[" * 100000, "not a model config"),
    (cfg(hidden_size=float("nan")), "hidden_size must be an integer"),
    (cfg(num_hidden_layers=float("inf")), "num_hidden_layers must be an integer"),
    # wave 34 (helper harden): layers that are not attention + MLP were read as a plain transformer
    (cfg(architectures=["MambaForCausalLM"]), "architecture MambaForCausalLM: steptime times decoder-only"),
    (cfg(architectures=["FalconH1ForCausalLM"], mamba_d_ssm=1024), "cannot represent this model's layers"),
    (cfg(architectures=["NemotronHForCausalLM"], hybrid_override_pattern="M-M*-"), "hybrid_override_pattern"),
    (cfg(architectures=["BertForMaskedLM"], model_type="bert"), "architecture BertForMaskedLM"),
    (cfg(architectures=["Lfm2ForCausalLM"]), "architecture Lfm2ForCausalLM"),
    (cfg(architectures=["FooForCausalLM"], layer_types=["conv", "full_attention"]), "layer_types with conv layers"),
    (cfg(is_encoder_decoder=True), "is_encoder_decoder=true"),
]
MOE_CONFIGS = [
    cfg(num_local_experts=8, num_experts_per_tok=2),  # Mixtral
    cfg(n_routed_experts=256, n_shared_experts=1, moe_intermediate_size=2048),  # DeepSeek-V3
    cfg(num_experts=60, moe_intermediate_size=1408),  # Qwen2-MoE
    cfg(moe_intermediate_size=768),
    cfg(ffn_config={"moe_num_experts": 16, "moe_top_k": 4}),  # DBRX
    cfg(architectures=["MixtralForCausalLM"]),
    cfg(model_type="qwen3_moe", architectures=None),
    cfg(architectures=["OlmoeForCausalLM"]),
    json.dumps({"model_type": "llama4", "text_config": dict(LLAMA, num_local_experts=16)}).encode(),
]


@pytest.mark.parametrize("content,needle", BAD_CONFIGS, ids=[str(i) for i in range(len(BAD_CONFIGS))])
def test_bad_model_config(tmp_path, content, needle):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(ModelConfigError) as e:
        get_model(str(p))
    msg = clean(e, ModelConfigError)
    assert needle in msg and str(p) in msg


def test_sliding_window_layer_types_stay_a_dense_transformer(tmp_path):
    """Gemma-3 style layer_types (sliding and full attention) are attention layers: read, not refused."""
    p = tmp_path / "config.json"
    p.write_bytes(cfg(architectures=["Gemma3ForCausalLM"], layer_types=["sliding_attention", "full_attention"]))
    assert model_from_config(p).num_hidden_layers == json.loads(p.read_text())["num_hidden_layers"]


@pytest.mark.parametrize("content", MOE_CONFIGS, ids=[str(i) for i in range(len(MOE_CONFIGS))])
def test_moe_config_never_treated_as_dense(tmp_path, content):
    """An MoE config is read as an MoE model or refused with one line; never as a dense model."""
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(ModelConfigError) as e:
        model_from_config(p)
    msg = clean(e, ModelConfigError)
    assert "cannot represent" in msg or "routed-expert count" in msg


@pytest.mark.parametrize("content,needle", [(BAD_CONFIGS[0][0], "num_attention_heads"),
                                            (MOE_CONFIGS[0], "cannot represent"),
                                            (b"\xff", "not UTF-8")])
def test_bad_model_config_on_the_cli(tmp_path, capsys, content, needle):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    refuses(capsys, ["predict", "--model", str(p), "--gpu", "h100", "--decode", "1x16"], needle)


def test_missing_paths(tmp_path):
    for path in (tmp_path / "nope.json", tmp_path / "config.json"):
        with pytest.raises(ModelConfigError, match="cannot read"):
            model_from_config(path)
    with pytest.raises(ModelConfigError, match="cannot read"):
        get_model(str(tmp_path) + "/")  # a directory without a config.json


def test_valid_config_matches_the_registry(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(cfg())
    m, ref = get_model(str(p)), get_model("llama-3.1-8b")
    for f in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "gated_mlp", "tie_word_embeddings", "max_position_embeddings"):
        assert getattr(m, f) == getattr(ref, f), f
    p.write_bytes(cfg(head_dim=None, num_key_value_heads=None, tie_word_embeddings=None))  # HF null = default
    m = get_model(str(p))
    assert (m.head_dim, m.num_key_value_heads, m.tie_word_embeddings) == (128, 32, False)
    assert predict_step(m, G, decode=[(2, 64)]).total_ms > 0


BAD_MODEL_FIELDS = [("hidden_size", 0), ("num_key_value_heads", 5), ("head_dim", "128"), ("gated_mlp", "yes"),
                    ("vocab_size", None)]


@pytest.mark.parametrize("field,value", BAD_MODEL_FIELDS)
def test_model_objects_are_checked_too(field, value):
    from dataclasses import asdict

    from steptime.specs import Model

    d = asdict(get_model("llama-3.1-8b"))
    d[field] = value
    with pytest.raises(ModelConfigError) as e:
        Model(**d)
    assert field in clean(e, ModelConfigError)


def test_moe_entry_in_models_yaml_is_refused_by_name(tmp_path, monkeypatch):
    import steptime.specs as S

    y = tmp_path / "models.yaml"
    y.write_text("models:\n"
                 "  toy-dense:\n    hidden_size: 64\n    num_hidden_layers: 2\n    num_attention_heads: 4\n"
                 "    num_key_value_heads: 2\n    head_dim: 16\n    intermediate_size: 128\n    vocab_size: 100\n"
                 "    gated_mlp: true\n    tie_word_embeddings: false\n    max_position_embeddings: 512\n"
                 "  toy-experts:\n    source: org/Toy-Experts\n    num_local_experts: 8\n")
    caches = (S._model_doc, S.model_table, S._moe_index, S._model_alias_index)
    monkeypatch.setattr(S, "MODEL_FILE", y)
    for c in caches:
        c.cache_clear()
    try:
        assert S.model_keys() == ["toy-dense"]
        for name in ("toy-experts", "org/Toy-Experts"):
            with pytest.raises(UnsupportedModelError) as e:
                S.get_model(name)
            assert "unlisted mixture-of-experts model" in clean(e)
    finally:
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()
    assert "llama-3.1-8b" in S.model_keys()


# --- evaluate (API) ---------------------------------------------------------------------
BAD_EVALUATE_GPUS = [["h900"], "tpu"]


@pytest.mark.parametrize("gpus", BAD_EVALUATE_GPUS)
def test_evaluate_api_unknown_gpu(gpus):
    from steptime_lab.evaluate import evaluate

    with pytest.raises(UnknownGPUError) as e:
        evaluate("host", gpus)
    assert "known: a100-sxm" in clean(e)


@pytest.mark.parametrize("x, ok", [(1, True), (0.5, True), (np.float32(2.0), True), (np.int64(3), True), (-1e9, True),
                                   (True, False), (np.bool_(True), False), ("1", False), (None, False),
                                   (float("nan"), False), (float("inf"), False), (-math.inf, False), ([1.0], False)])
def test_is_real_takes_finite_numbers_only(x, ok):
    assert is_real(x) is ok
