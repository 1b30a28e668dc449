"""The one split of a step into GPU work and host time (steptime.step: GPU_TERMS / GPU_KINDS / is_gpu_kind /
gpu_ms), and the experiments that read host overheads off measured steps against the ENGINE's own GPU part
(E1.18: wallclock.exposed_host / exposed_host_fpm / predict_tpot / exposed_host_tokens; E1.19: the host learner's
kernel_ms and static arm), never against the bare 'kernels' profile (issue 19 item 3)."""

import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.errors import InputError
from steptime.specs import get_gpu, get_model
from steptime.step import (BLOCK_TERMS, GPU_KINDS, GPU_TERMS, HOST_KINDS, TERMS, gpu_ms, is_gpu_kind,
                           predict_step, predict_steps, term_kind)
from steptime import moe_step
from steptime_lab.experiments import wallclock as W
from steptime_lab.experiments import wallclock_report as R
from steptime_lab.experiments.host import learner

C = Constants.default()


# ---- the product's split ----------------------------------------------------------------------------------
def test_gpu_kinds_are_the_block_terms_kinds_and_host_the_rest():
    assert GPU_KINDS == {"gemm", "attention", "light", "comm", "moe"}
    assert HOST_KINDS == {"launch", "host"}
    assert GPU_TERMS == set(BLOCK_TERMS) | set(moe_step.BLOCK_TERMS)
    assert not GPU_TERMS & {"dispatch_floor", "host", "sampling"}
    assert all(is_gpu_kind(k) for k in GPU_KINDS) and not any(is_gpu_kind(k) for k in HOST_KINDS)
    with pytest.raises(InputError, match="unknown step term kind 'cpu'"):
        is_gpu_kind("cpu")


def test_moe_terms_keep_their_own_kind_in_the_lab_sums():
    """A mixture-of-experts breakdown is summed by the product's kinds (term_kind), not by the dense table with a
    'light' fallback: the routed experts are 'moe', the expert exchange 'comm', the router 'gemm'."""
    assert (term_kind("moe_experts"), term_kind("moe_a2a"), term_kind("router")) == ("moe", "comm", "gemm")
    assert term_kind("o_proj") == "gemm" and term_kind("sampling") == "host"
    with pytest.raises(InputError, match="unknown step term 'cpu_time'"):
        term_kind("cpu_time")
    n = 2
    terms = {t: np.full(n, 1.0) for t in moe_step.TERMS}
    k = W.term_kinds(terms, n)
    assert set(W.KINDS) <= set(k) and k["moe"].tolist() == [1.0, 1.0]
    assert k["comm"].tolist() == [2.0, 2.0]  # moe_a2a and allreduce
    assert np.allclose(k["total"], len(moe_step.TERMS))
    with pytest.raises(InputError, match="unknown step term"):
        W.term_kinds({"cpu_time": np.ones(n)}, n)


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0", "sglang", "trtllm", "kernels"])
def test_gpu_ms_is_t_blocks_and_the_host_terms_close_the_total(engine):
    m, g = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    n = 3
    r = predict_steps(m, g, np.arange(n), np.array([1, 1, 300]), np.array([900, 2000, 0]), n, engine=engine,
                      constants=C)
    assert np.allclose(gpu_ms(r["terms_ms"]), r["blocks_ms"])
    host = sum(r["terms_ms"][t] for t in TERMS if t not in GPU_TERMS)
    assert np.allclose(gpu_ms(r["terms_ms"]) + host, r["total_ms"])
    one = predict_step("llama-3.1-8b", "h100-sxm", decode=[(4, 1000)], engine=engine, constants=C)
    assert gpu_ms(one.terms_ms) == pytest.approx(one.total_ms - sum(one.terms_ms[t] for t in
                                                                     ("dispatch_floor", "host", "sampling")))


def test_gpu_ms_refuses_a_term_it_does_not_know():
    with pytest.raises(InputError, match="unknown step term"):
        gpu_ms({"gate_up_proj": 1.0, "tokenizer": 2.0})


def test_the_lab_kinds_derive_from_the_product():
    assert set(W.GPU_KINDS) == set(W.KINDS) & GPU_KINDS
    assert set(W.HOST_KINDS) == set(W.KINDS) & HOST_KINDS
    assert W.TERM_GROUPS["host"] == W.HOST_KINDS
    assert W.SCALES[W.BLOCK_SCALE] == W.GPU_KINDS


# ---- E1.18: the engine's own GPU part ---------------------------------------------------------------------
def _small_steps(gpu="b300", model="qwen3-32b", engine="vllm", tps=(1, 4), ns=(1, 2, 4, 8)):
    rows = [dict(phase="decode", segment="real", ctx_tokens=0, ctx_requests=0, ctx_kv_tokens=0, decode_requests=n,
                 mean_decode_kv_tokens=1500.0, tp=tp) for tp in tps for n in ns]
    s = pd.DataFrame(rows)
    s["step"] = np.arange(len(s))
    s["gpu"], s["model"], s["engine"] = gpu, model, engine
    s["latency_ms"] = 1.0
    return s


def test_exposed_host_subtracts_the_engines_own_gpu_part_not_the_bare_kernels():
    s = _small_steps()
    prof = W.predict_table(s, W.make_predictor("vllm", "qwen3-32b", "b300", constants=C))
    kern = W.predict_table(s, W.make_predictor("kernels", "qwen3-32b", "b300", constants=C))
    s["latency_ms"] = prof["pred_ms"]  # a wall clock that is exactly the profile's step
    ex = W.exposed_host(s, prof, 4, kernels_pred=kern)
    assert [e["tp"] for e in ex] == [1, 4] and all(e["steps"] == 3 for e in ex)
    for e in ex:
        # the exposed host is the profile's own host part (sampling; async scheduling hides S(N)), positive ...
        assert e["exposed_ms_median"] == pytest.approx(e["predicted_host_ms_median"], abs=1e-9)
        assert e["exposed_ms_median"] > 0 and e["host_error_ms_median"] == pytest.approx(0.0, abs=1e-9)
        # ... whereas the bare kernels over-state vLLM's fused GPU work: measured minus THEM is negative
        assert e["gpu_minus_bare_kernels_ms_median"] < 0
    bare = W.exposed_host(s, kern, 4)  # what the pre-wave-23 definition read
    assert all(b["exposed_ms_median"] < 0 for b in bare)
    with pytest.raises(W.WallclockError, match="predict_table frame"):
        W.exposed_host(s, prof[["pred_ms"]], 4)


def test_exposed_host_fpm_reads_each_engine_against_its_own_profile():
    s = pd.concat([_small_steps(engine="vllm"), _small_steps(engine="vllm-v1-sync")], ignore_index=True)
    s["step"] = np.arange(len(s))
    for eng in ("vllm", "vllm-v1-sync"):
        m = s["engine"] == eng
        s.loc[m, "latency_ms"] = W.predict_table(s[m], W.make_predictor(eng, "qwen3-32b", "b300",
                                                                        constants=C))["pred_ms"].to_numpy()
    ex = W.exposed_host_fpm(s, 4, constants=C)
    assert {(e["engine"], e["tp"]) for e in ex} == {(e, t) for e in ("vllm", "vllm-v1-sync") for t in (1, 4)}
    for e in ex:
        assert e["exposed_ms_median"] == pytest.approx(e["predicted_host_ms_median"], abs=1e-9)
        assert e["exposed_ms_median"] > 0
    sync = next(e for e in ex if e["engine"] == "vllm-v1-sync" and e["tp"] == 1)
    asyn = next(e for e in ex if e["engine"] == "vllm" and e["tp"] == 1)
    assert sync["predicted_host_ms_median"] > asyn["predicted_host_ms_median"]  # no async overlap: S(N) exposed


def _tok_rows(n=3):
    return pd.DataFrame({"dataset": "mlenergy-v3", "gpu": "h100-sxm", "engine": "vllm", "tp": 1,
                         "batch": [2.0, 3.5, 6.0][:n], "prompt_tokens": [300.0, 800.0, 1500.0][:n],
                         "output_tokens": [200.0, 400.0, 300.0][:n], "mode": ["agg", "agg", "disagg"][:n]})


def test_predict_tpot_splits_the_engines_own_steps():
    rows = _tok_rows()
    eng = W.make_predictor("vllm-v1-sync", "llama-3.1-8b", "h100-sxm", constants=C)
    kern = W.make_predictor("kernels", "llama-3.1-8b", "h100-sxm", constants=C)
    r = W.predict_tpot(rows, eng, kern, tp=1)
    # the decode step's GPU part is the engine's own: at an integer batch, exactly its GPU kinds
    fr = W._decode_frame(np.array([2]), W.mean_context(rows["prompt_tokens"][:1], rows["output_tokens"][:1]), 1)
    own = eng(fr, 1, None)
    assert r["decode_gpu_ms"][0] == pytest.approx(sum(own[k][0] for k in W.GPU_KINDS))
    assert r["decode_gpu_ms"][0] < kern(fr, 1, None)["total"][0]  # fused add+RMSNorm: below the bare kernels
    assert (r["decode_ms"] - r["decode_gpu_ms"] > 0.5).all()  # the synchronous V1 engine's exposed S(N) + sampling
    # amortised prefill: split on aggregated rows only; the mixed variant does not split
    assert (r["prefill_amortised_gpu_ms"][:2] > 0).all() and (r["prefill_amortised_host_ms"][:2] > 0).all()
    assert r["prefill_amortised_gpu_ms"][2] == 0 and r["prefill_amortised_host_ms"][2] == 0
    mixed = W.predict_tpot(rows, eng, kern, tp=1, variant="mixed", token_budget=8192)
    assert np.isnan(mixed["prefill_amortised_gpu_ms"]).all()


def test_exposed_host_tokens_reads_tpot_against_the_engines_gpu_part():
    rows = _tok_rows()
    eng = W.make_predictor("vllm-v1-sync", "llama-3.1-8b", "h100-sxm", constants=C)
    r = W.predict_tpot(rows, eng, W.make_predictor("kernels", "llama-3.1-8b", "h100-sxm", constants=C), tp=1)
    own_host = r["decode_ms"] - r["decode_gpu_ms"] + r["prefill_amortised_host_ms"]
    d = rows.assign(decode_ms=r["decode_ms"], decode_gpu_ms=r["decode_gpu_ms"],
                    prefill_amortised_gpu_ms=r["prefill_amortised_gpu_ms"],
                    prefill_amortised_host_ms=r["prefill_amortised_host_ms"])
    d["tpot_ms"] = r["decode_gpu_ms"] + r["prefill_amortised_gpu_ms"] + own_host  # the engine's own steps, exactly
    (e,) = R.exposed_host_tokens(d)
    assert e["exposed_ms_median"] == pytest.approx(e["predicted_host_ms_median"])
    assert e["exposed_ms_median"] == pytest.approx(float(np.median(own_host))) and e["exposed_ms_median"] > 0
    with pytest.raises(W.WallclockError, match="naive variant"):
        R.exposed_host_tokens(d.assign(prefill_amortised_gpu_ms=np.nan))
    with pytest.raises(W.WallclockError, match="lacks decode_gpu_ms"):
        R.exposed_host_tokens(d.drop(columns=["decode_gpu_ms"]))
    doc = R.exposed_host_document([], [e], 4, 16.0)
    assert "GPU-work part of the vllm profile's own" in doc["claims"][0]["claim"]
    assert "bare 'kernels'" in doc["metrics"]["method"]


# ---- E1.19: the host floor against the shipped profile's own GPU part -------------------------------------
def test_e1_19_reads_the_host_floor_against_the_profiles_own_gpu_part():
    s = _small_steps(tps=(1,), ns=(1, 3, 8, 16))
    tidy = s.rename(columns={"segment": "workload_segment"}).assign(
        counter_id=s["step"], moe=False, engine_version="0.20.1", over_token_budget=False,
        decode_kv_tokens=s["decode_requests"] * s["mean_decode_kv_tokens"])
    steps, _ = learner.predict_host_floor(tidy, engine="vllm", constants=C)
    prof = W.predict_table(W.fpm_steps(tidy), W.make_predictor("vllm", "qwen3-32b", "b300", constants=C))
    kern = W.predict_table(W.fpm_steps(tidy), W.make_predictor("kernels", "qwen3-32b", "b300", constants=C))
    assert np.allclose(steps["kernel_ms"].to_numpy(), W.gpu_part(prof).to_numpy())
    static = (steps["static_ms"] - steps["kernel_ms"]).to_numpy()
    assert np.allclose(static, W.host_part(prof).to_numpy()) and (static > 0).all()
    assert ((prof["pred_ms"] - kern["pred_ms"]).to_numpy() < 0).all()  # the old static arm: negative


def test_the_sampler_pays_its_floor_for_the_first_request_and_its_slope_for_each_further_one():
    """sampling_time = t_samp_ms + t_samp_b_ms x (N - 1), zero without requests: the form R2.3 fits its two sampler
    constants in. Pricing the slope on all N requests (N in place of N - 1) passed every test before (mutation
    review, wave 39)."""
    from steptime.specs.engines import get_engine
    from steptime.terms import host

    g = get_gpu("h100-sxm")
    a, b = float(C.get("t_samp_ms", g)), float(C.get("t_samp_b_ms", g))
    assert b > 0
    got = host.sampling_time(np.array([0.0, 1.0, 2.0, 65.0]), g, C)
    np.testing.assert_allclose(got, [0.0, a * 1e-3, (a + b) * 1e-3, (a + 64 * b) * 1e-3], rtol=1e-12)
    e = get_engine("vllm")
    ea, eb = e.get("t_samp_ms", g, C), e.get("t_samp_b_ms", g, C)
    np.testing.assert_allclose(host.sampling_time(np.array([1.0, 9.0]), g, C, engine=e),
                               [ea * 1e-3, (ea + 8 * eb) * 1e-3], rtol=1e-12)
