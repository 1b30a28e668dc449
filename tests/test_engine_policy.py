"""The serving policy takes the engine profile's schedule facts (engines.yaml schedule.*): `steptime serve` and
`steptime plan` simulate each engine as it schedules by default, prefix caching included (issue 19)."""
import json

import numpy as np
import pytest

from steptime.cli import main
from steptime.errors import UnknownEngineError
from steptime.serve import Workload, engine_policy, simulate
from steptime.specs import engines as E


def test_each_profile_states_whether_it_caches_prefixes():
    assert E.get_engine("vllm").caches_prefixes() and E.get_engine("vllm-v1-sync").caches_prefixes()
    assert E.get_engine("vllm").lookup("prefix_caching").provenance == "DERIVED"
    assert not E.get_engine("vllm-v0").caches_prefixes()  # V0: opt-in
    assert not E.get_engine("kernels").caches_prefixes()  # absent: off
    with pytest.raises(ValueError, match="schedule.prefix_caching must be true or false"):
        E._parse_engine("x", {**E._doc()["engines"]["vllm"],
                              "schedule": {"prefix_caching": {"value": 1, "provenance": "DERIVED", "source": "t"}}})


@pytest.mark.parametrize("name", ["vllm", "vllm-v0", "sglang", "trtllm"])
def test_the_policy_is_the_profiles_schedule(name):
    e = E.get_engine(name)
    p = engine_policy(name, max_num_batched_tokens=4096, max_num_seqs=64)
    assert (p.name, p.max_num_batched_tokens, p.max_num_seqs) == ("vllm", 4096, 64)
    assert (p.chunked_prefill, p.mixed_prefill, p.prefix_caching) == (
        e.chunks_prefill(), e.mixes_prefill(), e.caches_prefixes())
    assert engine_policy(name, prefix_caching=False).prefix_caching is False  # an explicit knob wins
    with pytest.raises(UnknownEngineError):
        engine_policy("tgi")


def test_serve_simulates_the_engines_prefix_caching_under_preemption(capsys):
    # a KV cache too small for the batch: requests are preempted; with the profile's prefix caching a preempted
    # request recomputes less, so the run is no slower and its policy records the flag
    wl = Workload(np.zeros(24), np.full(24, 1024), np.full(24, 512), name="tight")
    on = simulate("llama-3.1-8b", "h100-sxm", wl, engine_policy("vllm", kv_blocks=900), engine="vllm")
    off = simulate("llama-3.1-8b", "h100-sxm", wl, engine_policy("vllm", kv_blocks=900, prefix_caching=False),
                   engine="vllm")
    assert on.policy["prefix_caching"] is True and off.policy["prefix_caching"] is False
    assert on.knobs["preempted"] and off.knobs["preempted"]
    assert on.requests["finish_s"].max() < off.requests["finish_s"].max()
    capsys.readouterr()
    assert main(["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "24", "--isl", "1024",
                 "--osl", "512", "--kv-blocks", "900", "--engine", "sglang", "--json", "--no-progress"]) == 0
    pol = json.loads(capsys.readouterr().out)["policy"]
    assert pol["prefix_caching"] is True and pol["mixed_prefill"] is False  # SGLang's own schedule
