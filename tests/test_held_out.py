"""steptime_lab.evaluate.held_out: a GPU's held-out constants across families, with its calibration cells."""
import json
from pathlib import Path

import pytest

from steptime.calibration import Constants
from steptime_lab.evaluate.held_out import HeldOut, held_out_constants
from steptime.specs import get_gpu


ROOT = Path(__file__).resolve().parents[1]


def test_gemm_fold_comes_from_the_other_gpus_and_lists_the_targets_readings():
    """On the committed GEMM folds: the target's constants are its fold's, not the all-GPU fit."""
    doc = json.loads((ROOT / "results/calibration/gemm_constants.json").read_text())
    c, cal = held_out_constants("h100-sxm", ("gemm",), gemm_doc=doc, base=Constants.default())
    fold = doc["folds"]["h100-sxm"]
    # clk_droop: on a Hopper part its family's fold value (hopper_clk_droop) stands in for the global one; the
    # family-scoped fold globals (hopper_*, blackwell_*: FAMILY_GLOBALS) are not global names
    from steptime_lab.experiments.gemm.folds import FAMILY_GLOBALS
    name = next(n for n in fold["globals"] if n != "clk_droop" and n not in FAMILY_GLOBALS)
    assert c.get(name, get_gpu("h100-sxm")) == pytest.approx(fold["globals"][name])
    assert c.get("clk_droop", get_gpu("h100-sxm")) == pytest.approx(fold["globals"].get("hopper_clk_droop",
                                                                                      fold["globals"]["clk_droop"]))
    readings = cal.used["gemm_fold@h100-sxm"]
    assert 1 <= len(readings) <= 3 and all(r[0] == "h100-sxm" for r in readings)


def test_without_folds_keeps_defaults_and_says_so():
    c, cal = held_out_constants("h100-sxm", ("gemm", "attention"), base=Constants.default())
    assert c.get("duty_k") == Constants.default().get("duty_k")
    assert cal.notes["gemm_constants"].startswith("defaults.yaml as shipped")
    assert cal.notes["attention_constants"].startswith("defaults.yaml as shipped")


def test_attention_fold_overrides_the_target_only_and_records_its_cells():
    factors = {"attn_eta_mem": 0.123}
    doc = {"metrics": {"per_gpu": {"h100-sxm": {"factors": factors, "fit_on": ["a100-sxm"],
                                                "deploy_cells": {"d": ["h100-sxm", "attention", "decode", 1]}}}}}
    heldout = HeldOut(("attention",), attn_doc=doc, base=Constants.default())
    c, cal = heldout("h100-sxm")
    assert c.get("attn_eta_mem", get_gpu("h100-sxm")) == pytest.approx(0.123)
    assert ("h100-sxm", "attention", "decode", 1) in cal.used["attention_fold@h100-sxm"]
    assert heldout("h100-sxm")[0] is c  # memoised
    c2, cal2 = heldout("a100-sxm")  # no fold for A100: defaults
    assert "attention_fold@a100-sxm" not in cal2.used
    assert cal2.notes["attention_constants"].startswith("defaults.yaml")


def test_unknown_family_and_dataset_are_refused():
    with pytest.raises(ValueError, match="unknown constant families"):
        held_out_constants("h100-sxm", ("gemm", "kv"), base=Constants.default())
    with pytest.raises(ValueError, match="unknown dataset"):
        HeldOut.for_dataset("trace")
