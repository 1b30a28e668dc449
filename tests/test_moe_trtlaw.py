"""E3.1's TensorRT-LLM law options (issue 20, wave 39, helper trtlaw): the min-latency (TRT-LLM-gen) family's expert
limit and router, which reach no vLLM family."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.6, "l2_fit": 0.5, "l2_bytes_per_clk_sm": 40.0, "eta_mem_max": 0.8, "x_half": 2.0,
       "token_passes": 1.0, "local_token_passes": 0.5, "floor_us": 10.0, "overlap_p": 4.0, "tile_m": 16.0}


def _cells(experts=(128, 384), tokens=(16, 4096), ep=(1, 4)) -> pd.DataFrame:
    rows = [{"gpu": "b200", "sdtype": "nvfp4", "distribution": "balanced", "hidden_size": 4096, "inter_size": 1536,
             "topk": 8, "num_experts": e, "moe_tp": 1, "moe_ep": p, "num_tokens": t}
            for e in experts for t in tokens for p in ep]
    return pd.DataFrame(rows)


def test_family_options_are_the_trtllm_engines_min_latency_family_only():
    opt = E.family_options("trtllm", "trtllm")
    assert opt == {"max_experts": 256, "routing": "balanced_grouped_8_4"}
    # vLLM's trtllm family (FlashInfer's TRT-LLM MoE under vLLM's collector) and TRT-LLM's other families: none
    assert E.family_options("vllm", "trtllm") == {} and E.family_options("trtllm", "cutlass_sm100") == {}
    assert E.family_options("sglang", "trtllm") == {}  # SGLang's FlashInfer TRT-LLM rows: its own collector's router
    with pytest.raises(ValueError, match="unknown fused-MoE kernel framework 'tgi'"):
        E.family_options("tgi", "trtllm")


def test_a_family_above_its_expert_limit_is_no_candidate_and_its_router_prices_its_balanced_cells():
    d = _cells()
    fast = {**LAW, "floor_us": 1.0, "eta_c": 1.0}
    laws = {"nvfp4@cutlass_sm100": LAW, "nvfp4@trtllm": fast}
    opts = {"nvfp4@trtllm": {"max_experts": 256}}
    both = E.predict(d, laws)
    limited = E.predict(d, laws, law_opts=opts)
    cut = E.predict(d, {"nvfp4": LAW})
    trt = E.predict(d, {"nvfp4": fast})
    big = (d.num_experts > 256).to_numpy()
    assert np.array_equal(limited[big], cut[big]) and np.array_equal(limited[~big], both[~big])
    assert (trt[big] < cut[big]).all()   # without the limit the faster law would have taken them
    # a cell no law of its dtype may price is refused, not left unpriced
    with pytest.raises(ValueError, match=r"no law of nvfp4 on b200 runs shapes of \[384\] experts"):
        E.predict(d, {"nvfp4": fast}, law_opts={"nvfp4": {"max_experts": 256}})
    # the family's own router: its law priced under balanced_grouped_8_4 on the balanced cells
    routed = E.predict(d, {"nvfp4": fast}, law_opts={"nvfp4": {"routing": "balanced_grouped_8_4"}})
    r = d.iloc[[1, 3]]   # 128 experts, EP 4, 16 and 4,096 tokens
    mc = M.MoEConstants(values={f"{k}:nvfp4": v for k, v in fast.items()})
    want = M.routed_experts_time(r.num_tokens.to_numpy(float), 4096, 1536, 8, 128, get_gpu("b200"), mc,
                                 ep=r.moe_ep.to_numpy(float), dtype="nvfp4", routing="balanced_grouped_8_4",
                                 regime=E.REGIME, family="")["t"] * 1e3
    assert np.allclose(routed[[1, 3]], want, rtol=1e-12) and not np.allclose(routed[[1, 3]], trt[[1, 3]])
    # a power-law cell keeps its own router
    p = d.assign(distribution="power_law_1.01").iloc[:2]
    assert np.array_equal(E.predict(p, {"nvfp4": fast}, law_opts={"nvfp4": {"routing": "balanced_grouped_8_4"}}),
                          E.predict(p, {"nvfp4": fast}))


def test_cell_routing_reads_a_named_router_on_balanced_cells_only():
    d = _cells(experts=(128,), tokens=(16,), ep=(1,))
    d = pd.concat([d, d.assign(distribution="power_law_1.2")], ignore_index=True)
    named = E.with_family_routing(d, {"routing": "balanced_grouped_8_4"})
    assert list(E.cell_routing(named)) == ["balanced_grouped_8_4", "power_law_1.2"]
    assert list(E.cell_routing(d)) == ["balanced", "power_law_1.2"]
    assert E.with_family_routing(d, {}) is d
    # the named cells are not judged against the balanced router (unbalanced_shapes)
    assert not E.unbalanced_shapes(named[named.distribution == "balanced"].assign(
        gpu="b200", latency_ms=1.0, moe_ep=2).pipe(lambda x: pd.concat([x, x.assign(moe_ep=1)]))
        .assign(num_tokens=4096))


def test_the_expert_limit_admits_a_shape_of_exactly_256_experts():
    """The collector runs the min-latency kernels on models of at most 256 experts ("DS router only support up to 256
    experts"): DeepSeek-V3's 256 are inside, so its cells keep the family as a candidate (wave 40, review10: a strict
    `<` survived every test, the test cells had 128 and 384 experts)."""
    d = _cells(experts=(256, 264), tokens=(16,), ep=(1,))
    fast = {**LAW, "floor_us": 1.0, "eta_c": 1.0}
    laws = {"nvfp4@cutlass_sm100": LAW, "nvfp4@trtllm": fast}
    limited = E.predict(d, laws, law_opts={"nvfp4@trtllm": E.family_options("trtllm", "trtllm")})
    fast_only = E.predict(d, {"nvfp4": fast}, law_opts={"nvfp4": {"routing": E.MIN_LATENCY_ROUTING}})
    cut = E.predict(d, {"nvfp4": LAW})
    assert limited[0] == fast_only[0] < cut[0]      # 256 experts: the min-latency law, under its own router
    assert limited[1] == cut[1]                     # 264: not a candidate
