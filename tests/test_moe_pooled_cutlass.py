"""E3.1, issue 20, wave 41 (helper wsmoe): a TensorRT-LLM CUTLASS family that no other GPU ran in the dtype (the L40S's
sm 89, the RTX PRO 6000's sm 120) takes its law from every other GPU's CUTLASS cells, all SMs, with the per-pair
passes' SM-issue branch; a family with a twin, another engine's families and a dtype no other GPU ran in CUTLASS keep
today's training cells and law form."""
from __future__ import annotations

import pandas as pd

from steptime_lab.experiments import moe as X

SHAPE = {"hidden_size": 2048, "inter_size": 768, "topk": 8, "num_experts": 128, "moe_tp": 1, "moe_ep": 1}


def _rows(spec):
    """Per-family cells: [(gpu, sdtype, family), ...], two token counts each."""
    out = []
    for g, dt, fam in spec:
        for T in (16, 256):
            out.append({"gpu": g, "sdtype": dt, "family": fam, "distribution": "balanced", "num_tokens": T,
                        "kernel_source": "moe_torch_flow_cutlass", "latency_ms": 0.1 + T * 1e-4, **SHAPE})
    return pd.DataFrame(out)


ROWS = _rows([("h100-sxm", "bf16", "cutlass_sm90"), ("h200-sxm", "bf16", "cutlass_sm90"),
              ("b200", "bf16", "cutlass_sm100"), ("b300", "bf16", "cutlass_sm103"),
              ("l40s", "bf16", "cutlass_sm89"), ("rtx-pro-6000", "bf16", "cutlass_sm120"),
              ("b200", "nvfp4", "trtllm"), ("b200", "nvfp4", "cutlass_sm100"), ("rtx-pro-6000", "nvfp4", "cutlass_sm120"),
              ("b200", "mxfp4_mxfp8", "torch_flow_sm100"), ("rtx-pro-6000", "mxfp4_mxfp8", "cutlass_sm120"),
              ("h100-sxm", "fp8_block", "cutlass_sm90"), ("l40s", "fp8", "cutlass_sm89")])


def test_a_cutlass_family_without_a_twin_is_fitted_on_every_sms_cutlass_cells_with_the_sm_branch():
    t, what = X.engine_training_cells(ROWS, "rtx-pro-6000", "bf16", "cutlass_sm120", ROWS, "trtllm")
    assert set(t.gpu) == {"h100-sxm", "h200-sxm", "b200", "b300", "l40s"}
    assert set(t.family) == {"cutlass_sm90", "cutlass_sm100", "cutlass_sm103", "cutlass_sm89"}
    assert (t.sdtype == "bf16").all() and t["tok_sm"].all() and "all SMs" in what
    assert X.token_sm(t, "bf16")
    assert "tok_bytes_per_clk_sm" in X.law_params("bf16", tok_sm=X.token_sm(t, "bf16"))[0]
    # nvfp4: the other GPUs' CUTLASS cells only (B200's min-latency TRT-LLM-gen family is other code)
    t, _ = X.engine_training_cells(ROWS, "rtx-pro-6000", "nvfp4", "cutlass_sm120", ROWS, "trtllm")
    assert set(t.family) == {"cutlass_sm100"} and t["tok_sm"].all()
    # the L40S (sm 89) likewise, its held-out cells never among them
    t, _ = X.engine_training_cells(ROWS, "l40s", "bf16", "cutlass_sm89", ROWS, "trtllm")
    assert "l40s" not in set(t.gpu) and "rtx-pro-6000" in set(t.gpu) and X.token_sm(t, "bf16")


def test_a_twin_another_engine_a_sibling_dtype_or_no_cutlass_cells_keep_todays_training_cells():
    def same(gpu, dt, fam, fw="trtllm"):
        t, what = X.engine_training_cells(ROWS, gpu, dt, fam, ROWS, fw)
        t0, what0 = X.training_cells(ROWS, gpu, dt, fam, ROWS)
        assert what == what0 and t.equals(t0) and "tok_sm" not in t and not X.token_sm(t, dt)

    same("h100-sxm", "bf16", "cutlass_sm90")             # its twin H200 ran the family
    same("rtx-pro-6000", "bf16", "cutlass_sm120", "vllm")  # vLLM's FlashInfer CUTLASS families: not pooled
    same("rtx-pro-6000", "bf16", "cutlass_sm120", "sglang")
    same("rtx-pro-6000", "mxfp4_mxfp8", "cutlass_sm120")  # no other GPU ran mxfp4_mxfp8 in CUTLASS: the fallback
    same("h200-sxm", "fp8", "cutlass_sm90")               # H100 ran the family in the sibling dtype fp8_block
    same("b200", "nvfp4", "trtllm")                       # not a CUTLASS family


def test_token_sm_reads_the_engines_mark_and_the_family_list_alone_otherwise():
    t = ROWS[ROWS.sdtype == "bf16"]
    assert not X.token_sm(t, "bf16")
    assert X.token_sm(t.assign(tok_sm=True), "bf16")
    assert not X.token_sm(t.assign(tok_sm=[True] * (len(t) - 1) + [False]), "bf16")
    assert not X.token_sm(t.assign(tok_sm=True), "fp8")   # no cell of the dtype
    assert X.token_sm(t.assign(family="triton"), "bf16")   # vLLM's Triton family, as before
