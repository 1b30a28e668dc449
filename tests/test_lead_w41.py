"""The lead's wave-41 mends of two review11 findings (DESIGN.md, "Wave 41, the lead's decisions and merges"):
E3.1's claim names the cells its held-out law was fitted on (not always "its kernel family"), and TensorRT-LLM's
Hopper fp8 default, which its own source excepts for gpt-oss, is a gap of the (dtype, SM) list."""
import pytest

from steptime.specs import get_gpu
from steptime_lab.experiments import moe


def test_fp8_on_hopper_is_a_gap_because_gpt_oss_is_excepted():
    ok, why = moe.default_established("trtllm", "fp8", get_gpu("h100-sxm"))
    assert ok is False and why.startswith("gap:") and "gpt-oss" in why
    # the block-scaled and mxfp4 Hopper entries stay established
    assert moe.default_established("trtllm", "fp8_block", get_gpu("h100-sxm"))[0] is True
    assert moe.default_established("trtllm", "mxfp4", get_gpu("h200-sxm"))[0] is True


def test_claim_text_names_the_recorded_training_cells():
    fits = {"l40s": {"trained_on": {"bf16": "cutlass_sm90 on h100-sxm (every CUTLASS cell, all SMs)"}},
            "b200": {"trained_on": {"bf16@triton": "triton on b300", "bf16@trtllm": "trtllm on gb200",
                                    "fp8": "x on y"}}}
    assert moe.law_source(fits, "l40s", "bf16") == "cutlass_sm90 on h100-sxm (every CUTLASS cell, all SMs)"
    # a dtype whose cells two families won names both laws' cells, and no other dtype's
    assert moe.law_source(fits, "b200", "bf16") == "triton on b300; trtllm on gb200"
    with pytest.raises(ValueError, match="no recorded training cells for b200 fp8_block"):
        moe.law_source(fits, "b200", "fp8_block")


def test_committed_e3_1_claims_carry_their_law_source():
    import json
    from pathlib import Path
    r = json.loads((Path(__file__).resolve().parents[1] / "results" / "E3_1.json").read_text())
    texts = [c["claim"] for c in r["claims"] if "fused MoE on " in c["claim"] and " held out " in c["claim"]]
    assert texts and not any("law of its kernel family" in t for t in texts)
    l40s = [t for t in texts if t.startswith("TensorRT-LLM's own fused MoE on l40s (bf16)")]
    assert len(l40s) == 1 and "law fitted on cutlass_" in l40s[0]
