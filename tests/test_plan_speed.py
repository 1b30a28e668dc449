"""Wave 38 (helper `plan8`): the planner's speed-ups change no answer.

The fixtures in tests/fixtures/plan_main/ are three small plans' full outputs (text, --json, --csv) printed by the
code before the speed-ups (tests/fixtures/make_plan_fixtures.py says how they were made); the current code must print
them byte for byte, the wall-clock seconds aside. The caches' keys are tested on their own: entries of layouts or
steps that differ in a priced fact are never shared."""

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from steptime.serve import Policy, StepTimer, simulate_disagg, synthetic
from steptime.errors import ServeError

FIX = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIX))
import make_plan_fixtures  # noqa: E402

WALL = re.compile(r"; \d+\.\d s$", re.M)  # the text's wall-clock seconds (the summary line's end)


@pytest.mark.parametrize("name", sorted(make_plan_fixtures.CASES))
def test_plan_outputs_are_main_s_byte_for_byte(name, tmp_path):
    got = make_plan_fixtures.run(name, tmp_path)
    want = {k: (FIX / "plan_main" / f"{name}.{k}").read_text() for k in ("txt", "json", "csv")}
    # wave 41 (fixes11): an MoE plan also says whose fused-MoE laws priced the experts (a line, a JSON key): the law
    # the fixtures were priced with (the profile's, vLLM's), taken out before the byte-for-byte comparison
    # (wave 42: with the kernel dtype per GPU, moe_step.moe_law_text, as predict's and serve's header)
    law = ("routed experts priced with: engine vllm: vllm's fused-MoE laws at bf16 on b200, h100-sxm; fp8 on b200, "
           "h100-sxm\n")
    if name == "moe":
        assert law in got["txt"] and json.loads(got["json"]).pop("moe_kernels") == {"vllm": "vllm"}
        got["txt"] = got["txt"].replace(law, "", 1)
        got["json"] = re.sub(r'"moe_kernels": \{[^}]*\},?\s*', "", got["json"], count=1)
    assert got["csv"] == want["csv"]
    assert WALL.sub("", got["txt"]) == WALL.sub("", want["txt"])
    assert WALL.search(want["txt"])  # the mask took the seconds, not nothing
    g, w = json.loads(got["json"]), json.loads(want["json"])
    g.pop("wall_s"), w.pop("wall_s")
    assert g == w
    assert re.sub(r'"wall_s": [0-9.e+-]+', "", got["json"]) == re.sub(r'"wall_s": [0-9.e+-]+', "", want["json"])


@pytest.mark.parametrize("gpu", ["l40s", "b200", "a100-sxm"])  # the lanes that price the split combine per step
def test_decode_floor_cache_is_the_floor_of_every_step(gpu):
    t = StepTimer("llama-3.1-8b", gpu, max_tokens=512, max_requests=64)
    assert t._dsplit_us > 0
    rng = np.random.default_rng(1)
    cases = [(int(n), float(s)) for n, s in zip(rng.integers(1, 64, 3000), rng.integers(0, 200_000, 3000))]
    # neighbours of a block edge and of the split threshold: same (requests, blocks) on one side, not the other
    for n in (1, 2, 7, 33):
        for edge in (t._ctile * n * 3, t._dtile * n):
            cases += [(n, edge - 1.0), (n, edge), (n, edge + 1.0), (n, edge + 0.5)]
    cases += [(5, math.inf)]
    for n, s in cases + cases[::-1]:  # the second pass reads the cache filled in another order
        assert t._dfloor1(n, s) == t._dfloor_n(n, s), (n, s)
    keys = {k for k in t._dfl}
    assert len(keys) < len(cases)  # steps share entries (else the cache is no cache) ...
    assert len({k[:2] for k in keys}) > 1 and any(k[2] for k in keys) and not all(k[2] for k in keys)


def test_split_us_arrays_take_each_pair_once_and_give_the_per_step_values():
    t = StepTimer("llama-3.1-8b", "l40s", max_tokens=512, max_requests=64)
    n = np.array([3.0, 3.0, 3.0, 9.0, 9.0, 0.0, 40.0])
    kv = np.array([10.0, 5000.0, 10.0, 9.0 * 4000, 9.0 * 4001, 0.0, 40 * 77.0])
    got = t._split_us(n, kv)
    want = np.array([t._split_us(float(a), float(b)) for a, b in zip(n, kv)])
    assert np.array_equal(got, want)
    assert t._split_us(np.full((2, 3), 4.0), np.full((2, 3), 4000.0)).shape == (2, 3)


def _pools(timer, wl, shared, p, d, seqs=64, budget=2048):
    return simulate_disagg(timer.model, timer.gpu, wl, prefill_instances=p, decode_instances=d, timer=timer,
                           prefill_policy=Policy("vllm", max_num_batched_tokens=budget, max_num_seqs=seqs,
                                                 chunked_prefill=False),
                           decode_policy=Policy("vllm", max_num_batched_tokens=budget, max_num_seqs=seqs,
                                                reserve_full=True), prefill_runs=shared)


def test_prefill_pool_runs_are_shared_only_by_pools_of_the_same_prefill_pool():
    timer = StepTimer("llama-3.1-8b", "h100-sxm", max_tokens=2048, max_requests=64)
    wl = synthetic(60, isl=(128, 900), osl=(16, 64), rate=6.0, seed=3)
    shared = {}
    for p, d, seqs, budget in ((1, 1, 64, 2048), (1, 2, 64, 2048), (2, 1, 64, 2048), (1, 1, 16, 2048),
                               (1, 1, 64, 1024), (2, 3, 64, 2048)):
        got = _pools(timer, wl, shared, p, d, seqs, budget)
        ref = _pools(timer, wl, None, p, d, seqs, budget)
        assert got.requests.equals(ref.requests) and np.array_equal(got.itl_s, ref.itl_s)
        assert (got.n_steps, got.busy_s, got.makespan_s, got.knobs) == (ref.n_steps, ref.busy_s, ref.makespan_s,
                                                                        ref.knobs)
    # one entry per (prefill instances, prefill policy): the knobs and the instance count are in the key
    # (2 + 3 shares 2 + 1's prefill pool; the other five pools' prefill pools differ in instances or knobs)
    assert sorted((k[0], k[1].max_num_seqs, k[1].max_num_batched_tokens) for k in shared) == [
        (1, 16, 2048), (1, 64, 1024), (1, 64, 2048), (2, 64, 2048)]


def test_prefill_runs_must_be_a_dict():
    timer = StepTimer("llama-3.1-8b", "h100-sxm", max_tokens=2048, max_requests=64)
    with pytest.raises(ServeError, match="prefill_runs must be a dict"):
        _pools(timer, synthetic(10, isl=128, osl=16, rate=2.0), [], 1, 1)


def test_bench_plan_times_a_dense_and_a_moe_search_each_against_its_own_baseline(monkeypatch):
    from steptime import bench

    small = tuple((p, m, dict(kw, n=12), gpus[:1], ttft, tpot) for p, m, kw, gpus, ttft, tpot in bench.PLANS)
    assert [p[0] for p in small] == ["plan", "plan_moe"] and small[1][1] == "gpt-oss-20b"
    monkeypatch.setattr(bench, "PLANS", small)
    d = bench._plan(0, 1)
    for p in ("plan", "plan_moe"):
        assert d[f"{p}_requests"] == 12 and d[f"{p}_simulated"] >= 1 and d[f"{p}_cpu_s"] > 0
        assert d[f"{p}_sim_cpu_ratio"] == d[f"{p}_cpu_per_simulated_s"] / d[f"{p}_one_simulate_cpu_s"]
    assert d["plan_moe_model"] == "gpt-oss-20b"


@pytest.mark.parametrize("model,gpu,kw", [("gpt-oss-20b", "h100-sxm", {}), ("gpt-oss-20b", "b200", {"ep": 2}),
                                          ("llama-3.1-8b", "l40s", {"tp": 2}), ("llama-3.1-8b", "a100-sxm", {})])
def test_decode_attention_of_one_request_count_is_decode_attention_element_for_element(model, gpu, kw):
    t = StepTimer(model, gpu, max_tokens=512, max_requests=64, **kw)
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 17, 64, 17):  # 17 twice: the second reads the cached factors
        s = n * rng.integers(0, 9000, 40).astype(float) + rng.integers(0, n, 40)
        got, want = t._decode_attention_n(n, s), t.decode_attention(np.full(s.shape, float(n)), s)
        assert got.shape == want.shape and np.array_equal(got, want), (n, np.max(np.abs(got - want)))
    assert set(t._dn) == {1, 2, 3, 17, 64}
