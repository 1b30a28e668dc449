"""Wave 35, helper harden2: bad input at the public boundaries (DESIGN.md `Bad input, wave 35`).

One test (or parametrised set) per defect; each failed on the code before its fix. CLI: one line on stderr,
exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import numpy as np
import pytest

import steptime
from steptime import step as step_mod
from steptime.errors import InputError, ServeError, SteptimeError, UnknownEngineError, UnsupportedError
from steptime.plan import plan
from steptime.serve import (DirectTimer, Policy, StepTimer, from_table, simulate, simulate_disagg, simulate_replicas,
                            synthetic)
from steptime.specs import VENDORS, get_gpu
from steptime.specs import engines as E
from steptime.step import predict_step, predict_steps
from refusals import clean, refuses

M, G = "llama-3.1-8b", "h100-sxm"
SERVE = ["serve", "--model", M, "--gpu", G, "--no-progress", "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4"]


def small_workload(n: int = 5):
    return synthetic(n, isl=(64, 128), osl=(4, 8), rate=1.0)


# ---- 1. predict_steps' rows: whole numbers within the context, one check with predict_step ------------------
@pytest.mark.parametrize("field,new,kv,value", [("new_tokens", [1.5], [10], "1.5"), ("kv_len", [1], [10.25], "10.25")])
def test_predict_steps_refuses_a_fractional_token_count(field, new, kv, value):
    with pytest.raises(InputError) as e:
        predict_steps(M, G, [0], new, kv)
    msg = clean(e)
    assert f"predict_steps: {field} must be whole numbers of tokens, got {value}" in msg


def test_predict_steps_refuses_kv_beyond_the_context_window_naming_field_value_and_limit():
    with pytest.raises(InputError) as e:
        predict_steps(M, G, [0, 0], [1, 1], [10, 10**9])
    msg = clean(e)
    assert "kv_len + new_tokens = 1000000001 positions" in msg and "kv_len 1000000000" in msg
    assert "llama-3.1-8b's context window: a maximum of 131072 positions (max_position_embeddings)" in msg


def test_predict_step_and_predict_steps_agree_at_the_context_edge():
    ok = predict_steps(M, G, [0], [1], [131071])["total_ms"][0]
    assert ok == pytest.approx(predict_step(M, G, decode=[(1, 131071)]).total_ms, rel=1e-12)
    with pytest.raises(InputError) as a:
        predict_steps(M, G, [0], [1], [131072])
    with pytest.raises(InputError) as b:
        predict_step(M, G, decode=[(1, 131072)])
    assert "context window: a maximum of 131072 positions" in clean(a)
    assert "context window: a maximum of 131072 positions" in clean(b)


def test_predict_step_and_predict_steps_share_one_row_validator(monkeypatch):
    seen = []

    def spy(new, kv, model, **kw):
        seen.append(kw["where"])
        raise InputError("spy")

    monkeypatch.setattr(step_mod, "check_request_rows", spy)
    for call in (lambda: predict_steps(M, G, [0], [1], [10]), lambda: predict_step(M, G, decode=[(1, 10)])):
        with pytest.raises(InputError, match="spy"):
            call()
    assert seen == ["predict_steps", "batch"]


def test_predict_steps_work_rows_take_averaged_lengths_and_equal_request_rows_on_whole_ones():
    sid, new, kv = np.array([0, 0, 1]), np.array([1.0, 1.0, 300.0]), np.array([1000.0, 2000.0, 0.0])
    a = predict_steps(M, G, sid, new, kv)
    b = predict_steps(M, G, sid, new, kv, rows="work")
    assert np.array_equal(a["total_ms"], b["total_ms"])
    r = predict_steps(M, G, [0], [1.0], [1500.5], rows="work")  # a measured step's mean KV
    assert np.isfinite(r["total_ms"]).all()
    with pytest.raises(InputError) as e:
        predict_steps(M, G, [0], [1], [10], rows="mean")
    assert "unknown predict_steps rows 'mean' (known: requests, work)" in clean(e)


def test_the_serving_timer_still_builds_a_token_table_beyond_a_small_models_context():
    # phi-2's context is 2,048 positions; a step of 8,192 batched tokens is one table row (rows="work")
    t = StepTimer("phi-2", G, max_tokens=8192)
    assert t.check() < 1e-6


# ---- 2. an engine on a GPU vendor it does not run on ------------------------------------------------------
def test_every_shipped_engine_states_its_vendors_with_a_source():
    for key, e in E.engine_table().items():
        assert e.vendors is not None, key
        assert set(e.vendors.value) <= set(VENDORS) and e.vendors.value, key
        assert e.vendors.provenance in E.PROVENANCES and e.vendors.source, key
    assert E.get_engine("trtllm").vendors.value == ("NVIDIA",)
    assert "AMD" in E.get_engine("vllm").vendors.value  # vLLM's ROCm build


def test_an_unknown_vendor_in_engines_yaml_is_refused():
    doc = {**E._doc()["engines"]["trtllm"], "vendors": {"value": ["Intel"], "provenance": "DERIVED", "source": "t"}}
    with pytest.raises(ValueError, match="vendors must be a list of distinct GPU vendors"):
        E._parse_engine("x", doc)


def test_trtllm_on_an_amd_gpu_is_refused_naming_the_engines_that_run_there(capsys):
    with pytest.raises(UnsupportedError) as e:
        predict_step(M, "mi300x", decode=[(1, 10)], engine="trtllm")
    msg = clean(e)
    assert "engine trtllm runs on NVIDIA GPUs only" in msg and "mi300x is an AMD GPU" in msg
    assert "engines that run on AMD GPUs: vllm," in msg and "sglang" in msg and "trtllm," not in msg
    with pytest.raises(UnsupportedError):
        predict_steps(M, "mi300x", [0], [1], [10], engine="trtllm")
    with pytest.raises(UnsupportedError):
        StepTimer(M, "mi325x", engine="trtllm")
    refuses(capsys, ["predict", "--model", M, "--gpu", "mi300x", "--engine", "trtllm", "--decode", "1x10"],
            "runs on NVIDIA GPUs only")
    refuses(capsys, ["serve", "--model", M, "--gpu", "mi300x", "--engine", "trtllm", "--no-progress", "--n", "3",
                     "--rate", "1"], "runs on NVIDIA GPUs only")
    assert predict_step(M, "mi300x", decode=[(1, 10)], engine="sglang").total_ms > 0  # SGLang's ROCm build


def test_plan_drops_trtllm_layouts_on_an_amd_gpu_with_the_reason():
    r = plan(M, small_workload(), slo_ttft_s=1.0, gpus=["mi300x"], engines=["trtllm"], tps=(1,), jobs=1)
    assert r.rows and all("runs on NVIDIA GPUs only" in (x["dropped"] or "") for x in r.rows)


# ---- 3. --kv-blocks beyond the GPU's memory ------------------------------------------------------------------
def test_kv_blocks_beyond_the_gpus_memory_is_refused_with_the_numbers(capsys):
    line = refuses(capsys, [*SERVE, "--kv-blocks", "100000000"], "kv_blocks (--kv-blocks) 100,000,000 of 16 tokens")
    assert "after llama-3.1-8b's weights (16.1 GB per GPU at tp=1): at most 33,302 blocks" in line
    with pytest.raises(ServeError) as e:
        simulate(M, G, small_workload(), Policy(kv_blocks=33303))
    assert "at most 33,302 blocks" in clean(e)
    assert simulate(M, G, small_workload(), Policy(kv_blocks=33302)).kv_blocks == 33302  # the whole memory: runs


def test_plan_reports_a_kv_block_count_beyond_memory_as_the_drop_reason():
    r = plan(M, small_workload(), slo_ttft_s=1.0, kv_blocks=10**9, tps=(1,), dtypes=("bf16",), jobs=1)
    assert r.rows and all("at most 33,302 blocks" in (x["dropped"] or "") for x in r.rows)


# ---- 4. a new user's other wrong inputs -------------------------------------------------------------------
def test_an_unknown_engine_suggests_the_closest_names(capsys):
    with pytest.raises(UnknownEngineError) as e:
        E.get_engine("trtl")
    assert "unknown engine 'trtl'; closest: trtllm" in clean(e)
    refuses(capsys, [*SERVE, "--engine", "sglng"], "closest: sglang")


@pytest.mark.parametrize("wl", [None, [1, 2, 3], {"prompt": [10]}])
def test_the_simulators_refuse_a_workload_that_is_not_one(wl):
    for call in (lambda: simulate(M, G, wl), lambda: simulate_replicas(M, G, wl, Policy(), 2),
                 lambda: simulate_disagg(M, G, wl)):
        with pytest.raises(ServeError) as e:
            call()
        assert "workload must be a steptime.serve.Workload" in clean(e)


def test_simulate_disagg_refuses_a_fractional_pool():
    with pytest.raises(ServeError) as e:
        simulate_disagg(M, G, small_workload(), prefill_instances=1.5)
    assert "prefill_instances must be an integer, got 1.5" in clean(e)


@pytest.mark.parametrize("u", ["a", None, [0.9]])
def test_policy_refuses_a_gpu_memory_utilization_that_is_not_a_number(u):
    with pytest.raises(ServeError) as e:
        Policy(gpu_memory_utilization=u)
    assert "gpu_memory_utilization must be in (0, 1]" in clean(e)


def test_predict_step_refuses_moe_constants_of_the_wrong_type():
    with pytest.raises(InputError) as e:
        predict_step("qwen3-30b-a3b", G, decode=[(1, 10)], moe_constants=5)
    assert "moe_constants must be a steptime.terms.moe.MoEConstants" in clean(e)


@pytest.mark.parametrize("kw", [{"check_memory": "no"}, {"allow_boost": "yes", "f_clk": 1.5}, {"check_memory": 0}])
def test_predict_step_refuses_a_flag_that_is_not_a_bool(kw):
    with pytest.raises(InputError) as e:
        predict_step(M, G, decode=[(1, 10)], **kw)
    assert "must be True or False" in clean(e)


@pytest.mark.parametrize("kw,needle", [({"tps": [1.5]}, "tp degrees to search: entry must be an integer, got 1.5"),
                                       ({"tps": ["a"]}, "tp degrees to search: entry must be an integer"),
                                       ({"budgets": [-5]}, "token budgets to search: entry must be >= 1, got -5"),
                                       ({"seqs": 5}, "max_num_seqs values to search must be a non-empty list")])
def test_plan_refuses_search_lists_that_are_not_whole_numbers(kw, needle):
    with pytest.raises(SteptimeError) as e:
        plan(M, small_workload(), slo_ttft_s=1.0, jobs=1, **{"tps": (1,), **kw})
    assert needle in clean(e)


def test_predict_ops_refuses_an_engine_off_its_vendor():
    with pytest.raises(UnsupportedError) as e:
        steptime.predict_ops("gemm", "mi300x", m=8, n=4096, k=4096, engine="trtllm")
    assert "engine trtllm runs on NVIDIA GPUs only" in clean(e)
    assert steptime.predict_ops("gemm", "mi300x", m=8, n=4096, k=4096)["t"] > 0  # no engine: the bare kernel


@pytest.mark.parametrize("make", [StepTimer, DirectTimer])
def test_the_serving_timers_refuse_constants_of_the_wrong_type(make):
    with pytest.raises(InputError) as e:
        make(M, G, constants=5)
    assert "constants must be a steptime Constants (or None for the defaults), got int" in clean(e)


@pytest.mark.parametrize("table", [None, [[0.0, 10, 5]], "trace.csv"])
def test_from_table_refuses_what_is_not_a_table(table):
    with pytest.raises(ServeError) as e:
        from_table(table)
    assert "trace: expected a table (a pandas DataFrame" in clean(e)


@pytest.mark.parametrize("deadline,needle", [("a", "deadline must be per-request first-token deadlines"),
                                             ([1.0, 2.0], "5 expected, got shape (2,)"),
                                             ([np.nan] * 5, "not NaN")])
def test_simulate_refuses_deadlines_that_are_not_one_per_request(deadline, needle):
    from steptime.serve import ScalarEstimator

    with pytest.raises(ServeError) as e:
        simulate(M, G, small_workload(), deadline=deadline, estimator=ScalarEstimator(1e-3))
    assert needle in clean(e)
