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


def test_trtllm_profile_text_points_to_e3_4_for_current_own_law_numbers():
    """engines.yaml's trtllm moe.kernels source names E3.4's side-by-side claims for the current own-law / vLLM-law
    token-time MAPEs instead of restating them (docs11 found wave 40's numbers left standing after wave 41 moved them;
    a number quoted in src/ goes stale at every refit), and E3.4 holds those claims for the four GPUs."""
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    text = (root / "src" / "steptime" / "specs" / "engines.yaml").read_text()
    assert "the current values are E3.4's own, side by side per group" in text
    assert "with wave 41's" not in text
    r = json.loads((root / "results" / "E3_4.json").read_text())
    gpus = {c["claim"].split(":")[0].split()[1] for c in r["claims"]
            if "priced with TensorRT-LLM's own fused-MoE laws" in c["claim"] and c["claim"].startswith("aic-silicon ")
            and {"mape", "default_mape"} <= set(c["value"])}
    assert gpus == {"b200", "h200-sxm", "gb200", "h100-sxm"}
