"""E3.1 wave 27: the per-pair token passes of vLLM's Triton fused-MoE path priced at the SMs' issue rate as well as
at HBM's (terms.moe tok_bytes_per_clk_sm, overlapped at the law's overlap_p)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from steptime.specs import get_gpu
from steptime.terms import moe as M
from steptime.terms.gemm import smax
from steptime_lab.experiments import moe as E

LAW = {"eta_c": 0.5, "eta_mem_max": 0.8, "x_half": 0.5, "floor_us": 20.0, "token_passes": 4.0,
       "local_token_passes": 0.0, "l2_fit": 0.8, "l2_bytes_per_clk_sm": 16.0, "overlap_p": 3.0}


def _r(gpu, **extra):
    mc = M.MoEConstants(values={f"{k}:bf16": v for k, v in {**LAW, **extra}.items()})
    return M.routed_experts_time(16384, 4096, 1536, 8, 128, get_gpu(gpu), mc, ep=128, routing="balanced", family="")


def test_token_passes_take_the_sm_issue_bound_where_the_law_has_it():
    g = get_gpu("h200-sxm")
    hbm = _r("h200-sxm")["t_tokens"]
    with_sm = _r("h200-sxm", tok_bytes_per_clk_sm=10.0)["t_tokens"]
    sm = LAW["token_passes"] * 2.0 * 4096 * 16384 * 8 / (10.0 * g.sms * g.boost_mhz * 1e6)
    assert float(with_sm) == pytest.approx(float(smax(hbm, sm, LAW["overlap_p"])), rel=1e-12)
    assert float(with_sm) > max(float(hbm), sm)        # the two overlap imperfectly
    # H100 and H200 share SMs and clock: the token passes are closer together than HBM's 1.43x
    ratio = float(with_sm / _r("h100-sxm", tok_bytes_per_clk_sm=10.0)["t_tokens"])
    assert 3.35 / 4.8 < ratio < 1.0
    # a law without the constant is unchanged (the shipped moe.yaml until it is re-settled)
    assert float(hbm) == pytest.approx(LAW["token_passes"] * 2.0 * 4096 * 16384 * 8 / g.mem_bw)


def test_token_sm_is_fitted_for_vllm_triton_cells_only():
    cells = pd.DataFrame({"sdtype": ["bf16", "bf16", "mxfp4", "fp8"], "family": ["triton", "triton", "oaitriton",
                                                                                   "cutlass_sm90"]})
    assert E.token_sm(cells, "bf16") and not E.token_sm(cells, "mxfp4") and not E.token_sm(cells, "fp8")
    assert not E.token_sm(cells.assign(family=["triton", "marlin", "x", "y"]), "bf16")   # a mixed set: no
    assert not E.token_sm(cells, "nvfp4")                                                 # no cells: no
    names, p0, lo, hi = E.law_params("fp8_block", ep_floor=True, tok_sm=True)
    assert "tok_bytes_per_clk_sm" in names and names[-1] == "quant_passes"
    assert len(names) == len(p0) == len(lo) == len(hi)
    assert "tok_bytes_per_clk_sm" not in E.law_params("bf16", ep_floor=True)[0]


def test_fit_law_carries_the_token_sm_bound_bit_for_bit():
    rows = [(g, T, ep) for g in ("h100-sxm", "l40s") for T in (1, 16, 4096) for ep in (1, 8)]
    d = pd.DataFrame({"gpu": [r[0] for r in rows], "sdtype": "bf16", "distribution": "balanced",
                      "num_tokens": [r[1] for r in rows], "hidden_size": 4096, "inter_size": 1536, "topk": 8,
                      "num_experts": 128, "moe_tp": 1, "moe_ep": [r[2] for r in rows]})
    names, p0, lo, hi = E.law_params("bf16", ep_floor=True, tok_sm=True)
    groups = E._groups(d)
    law = E._FitLaw(groups, len(d), "bf16", names, {"unpadded_rows": 8.0, "tile_m": 16.0})
    rng = np.random.default_rng(1)
    x = np.asarray(lo) + rng.random(len(lo)) * (np.asarray(hi) - np.asarray(lo))
    base = law.predict(x)
    for j in [None, *range(len(x)), None]:   # a Jacobian's steps: each moves one parameter, its cached parts return
        xj = x.copy()
        if j is not None:
            xj[j] = xj[j] * (1 + 1e-7) + 1e-9
        slow = E._predict_groups(groups, len(d), {"bf16": law.law(xj)}, None, E.REGIME)
        assert law.predict(xj).tobytes() == slow.tobytes()
    k = names.index("tok_bytes_per_clk_sm")
    xs = x.copy()
    xs[k] = lo[k]                                   # a slow SM-issue rate makes the large-batch cells slower
    assert (law.predict(xs)[d.num_tokens.to_numpy() == 4096] > base[d.num_tokens.to_numpy() == 4096]).all()
