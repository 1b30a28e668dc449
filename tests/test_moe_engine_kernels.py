"""An engine's MoE step reads the fused-MoE laws of the kernels it runs (specs/engines.yaml moe.kernels;
calibration/moe.yaml constants.frameworks; MoEConstants.for_kernels; issue 20 step 3, wave 39, trtstep)."""
import copy
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from steptime.errors import InputError, UnsupportedError
from steptime.specs import engines as E
from steptime.specs import get_gpu, get_model
from steptime.step import predict_step
from steptime.terms import moe as M
from steptime_lab.experiments import moe as X

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src/steptime/calibration/moe.yaml"


def _doc():
    return yaml.safe_load(SHIPPED.read_text())["constants"]


def test_each_profile_names_the_kernels_its_moe_term_reads():
    # the lead's decision (wave 39, trtstep2): TensorRT-LLM keeps vLLM's law by default, said so, until the
    # default-kernel mapping covers the kernels the measured releases run; its own laws stay selectable
    trt = E.get_engine("trtllm")
    assert trt.moe_kernels() == "vllm" and trt.lookup("moe_kernels").provenance == "ASSUMED"
    src = trt.lookup("moe_kernels").source
    assert "kept on vLLM's law after seeing these scores (wave 39, lead)" in src
    assert "b200 .322 -> .550" in src and "with_moe_kernels('trtllm')" in src
    for name in ("vllm", "vllm-v1-unfused", "vllm-v1-sync", "vllm-no-p2p"):
        assert E.get_engine(name).moe_kernels() == "vllm", name
        assert E.get_engine(name).lookup("moe_kernels").provenance == "DERIVED", name
    sg = E.get_engine("sglang")  # its own tables are not vendored yet: vLLM's law, said so
    assert sg.moe_kernels() == "vllm" and sg.lookup("moe_kernels").provenance == "ASSUMED"
    # SGLang's tables are vendored and scored in E3.1 since wave 39 (sglmoe), their laws not shipped: the source says
    # so, and says it only while calibration/moe.yaml holds no SGLang section (review10: it said "no SGLang fused-MoE
    # table is vendored", false after sglmoe)
    src = sg.lookup("moe_kernels").source
    assert "vendored and scored held out by GPU in E3.1" in src and "no SGLang fused-MoE table" not in src
    assert "not shipped" in src and "sglang" not in M.MoEConstants.default().frameworks
    assert "sglang" not in E.MOE_KERNELS   # no shipped laws, so no engine may select them
    assert E.get_engine("kernels").moe_kernels() == E.MOE_KERNELS_DEFAULT == "vllm"  # absent: today's pricing
    assert set(E.MOE_KERNELS) <= set(M.MOE_FRAMEWORKS)


def test_an_unknown_kernels_value_is_refused_in_one_line_naming_engine_and_value():
    doc = {"host_terms": False, "moe": {"kernels": {"value": "flashinfer", "provenance": "ASSUMED", "source": "x"}},
           "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}},
           "backend": "none"}
    with pytest.raises(ValueError) as exc:
        E._parse_engine("myengine", doc)
    msg = str(exc.value)
    assert "\n" not in msg and "engine myengine" in msg and "moe.kernels 'flashinfer'" in msg
    ok = copy.deepcopy(doc)
    ok["moe"]["kernels"]["value"] = "trtllm"
    assert E._parse_engine("myengine", ok).moe_kernels() == "trtllm"
    with pytest.raises(UnsupportedError, match="unknown fused-MoE kernel framework 'flashinfer'"):
        M.MoEConstants.default().for_kernels("flashinfer")


def test_a_caller_selects_an_engines_own_kernels_through_the_api():
    trt = E.get_engine("trtllm")
    own = trt.with_moe_kernels("trtllm")
    assert own.moe_kernels() == "trtllm" and trt.moe_kernels() == "vllm"  # a copy: the shipped profile unchanged
    assert own.lookup("moe_kernels").provenance == "ASSUMED" and "with_moe_kernels" in own.lookup("moe_kernels").source
    assert {k: v for k, v in own.values.items() if k != "moe_kernels"} == {
        k: v for k, v in trt.values.items() if k != "moe_kernels"}
    assert own.fitted == trt.fitted and own.backend == trt.backend == "trtllm"
    assert E.get_engine(own) is own  # predict_step(engine=own) takes it as it is
    with pytest.raises(InputError) as exc:
        trt.with_moe_kernels("flashinfer")
    assert "\n" not in str(exc.value) and "engine trtllm: moe.kernels 'flashinfer' not in" in str(exc.value)


def test_a_framework_without_shipped_laws_is_refused():
    doc = _doc()
    doc.pop("frameworks", None)
    mc = M.MoEConstants.from_doc(doc)
    with pytest.raises(UnsupportedError, match="no fused-MoE laws of framework 'trtllm'"):
        mc.for_kernels("trtllm")
    with pytest.raises(UnsupportedError, match="no fused-MoE laws of framework 'trtllm'"):
        predict_step("gpt-oss-120b", "h200", decode=[(16, 2048)], tp=2, dtype="mxfp4",
                     engine=E.get_engine("trtllm").with_moe_kernels("trtllm"), moe_constants=mc)
    # the shipped TensorRT-LLM profile reads vLLM's laws: no framework section needed
    predict_step("gpt-oss-120b", "h200", decode=[(16, 2048)], tp=2, dtype="mxfp4", engine="trtllm", moe_constants=mc)
    bad = {**doc, "frameworks": {"trtllm": {"global": {"a2a_floor_us:ll:dispatch": {
        "value": 1.0, "provenance": "FITTED", "source": "x"}}}}}
    with pytest.raises(ValueError, match="not a fused-MoE kernel constant"):
        M.MoEConstants.from_doc(bad)
    with pytest.raises(ValueError, match="frameworks.tgi is not a framework"):
        M.MoEConstants.from_doc({**doc, "frameworks": {"tgi": {}}})


def test_kernel_keys_are_the_law_family_and_readings_only():
    for k in ("eta_c:bf16", "floor_us:nvfp4@cutlass_sm100", "family:fp8_block", "s_c", "s_mem", "d_floor_us",
              "batch_us:bf16@trtllm"):
        assert M.is_kernel_key(k), k
    for k in ("a2a_floor_us:ll:dispatch", "a2a_s_floor:ll:combine", "mla_eta_kv", "mla_head_cycles"):
        assert not M.is_kernel_key(k), k


def test_the_trtllm_set_holds_only_trtllm_kernel_laws_and_keeps_the_rest():
    mc = M.MoEConstants.default()
    t = mc.for_kernels("trtllm")
    own = mc.frameworks["trtllm"]
    assert mc.for_kernels("vllm") is mc
    assert mc.for_kernels("trtllm") is t  # built once per framework and constants object
    # every kernel law is TRT-LLM's own: none of vLLM's leaks in (e.g. vLLM's FlashInfer "trtllm" family laws)
    assert {k for k in t.values if M.is_kernel_key(k)} == set(own["values"])
    assert all(t.values[k] == v for k, v in own["values"].items())
    # the all-to-all and MLA constants are vLLM's set's, unchanged
    rest = {k: v for k, v in mc.values.items() if not M.is_kernel_key(k)}
    assert rest and all(t.values[k] == v for k, v in rest.items())
    for g in ("b200", "h200-sxm"):
        assert t.per_gpu[g]["family:bf16"] == own["per_gpu"][g]["family:bf16"]
        assert t.per_gpu[g]["s_c"] == own["per_gpu"][g]["s_c"]
        assert t.per_gpu[g]["a2a_s_slope:ht"] == mc.per_gpu[g]["a2a_s_slope:ht"]
    # the default families (DEFAULT_SOURCES): TensorRT-LLM's CUTLASS MoE, DeepGEMM for Blackwell's fp8_block
    assert t.per_gpu["b200"]["family:nvfp4"] == "cutlass_sm100"
    assert t.per_gpu["b200"]["family:fp8_block"] == "deepgemm"
    assert t.per_gpu["h200-sxm"]["family:fp8_block"] == "cutlass_sm90"
    assert t.per_gpu["h200-sxm"]["family:mxfp4"] == "torch_flow_sm90"   # torch_flow split by architecture (wave 40)


@pytest.mark.parametrize("model,gpu,tp,ep,dtype", [("gpt-oss-120b", "h200", 4, 1, "mxfp4"),
                                                   ("deepseek-v3", "b200", 8, 1, "fp8_block"),
                                                   ("qwen3-235b-a22b", "b200", 4, 1, "nvfp4")])
def test_a_trtllm_step_and_a_vllm_step_differ_by_their_laws_ratio(model, gpu, tp, ep, dtype):
    """The same MoE shape priced with TensorRT-LLM's kernels selected (with_moe_kernels) and with vLLM's: the
    routed-expert term of each is routed_experts_time (one law) on that framework's constants, so their ratio is
    the laws' ratio; vLLM's is the top-level law, as before, and the shipped TensorRT-LLM profile reads it."""
    mc = M.MoEConstants.default()
    m, g = get_model(model), get_gpu(gpu)
    n = 16
    engines = {"vllm": "vllm", "trtllm": E.get_engine("trtllm").with_moe_kernels("trtllm"), "trtllm_default": "trtllm"}
    steps = {k: predict_step(model, gpu, decode=[(n, 2048)], tp=tp, ep=ep, dtype=dtype, engine=eng)
             for k, eng in engines.items()}

    def law_ms(consts):
        x = M.routed_experts_time(np.array([float(n)]), m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok,
                                  m.num_experts, g, consts, tp=tp, ep=ep, dtype=dtype,
                                  routing=f"power_law_{float(m.router_alpha):g}")
        return float(m.n_moe_layers * (x["t"] - x["t_tokens"])[0] * 1e3)

    v, t = law_ms(mc), law_ms(mc.for_kernels("trtllm"))
    assert steps["vllm"].terms_ms["moe_experts"] == pytest.approx(v, rel=1e-12)
    assert steps["trtllm"].terms_ms["moe_experts"] == pytest.approx(t, rel=1e-12)
    assert steps["trtllm"].terms_ms["moe_experts"] / steps["vllm"].terms_ms["moe_experts"] == pytest.approx(
        t / v, rel=1e-12)
    assert abs(t / v - 1.0) > 1e-3  # the two engines' kernels are priced apart
    assert steps["trtllm_default"].terms_ms["moe_experts"] == pytest.approx(v, rel=1e-12)  # the profile's default


def test_make_predictor_swaps_only_the_kernels_field():
    from steptime.calibration import Constants
    from steptime_lab.experiments.wallclock import make_predictor

    c = Constants.default()
    steps = pd.DataFrame({"decode_requests": [16, 64], "mean_decode_kv_tokens": [2048.0, 2048.0],
                          "ctx_requests": [0, 1], "ctx_tokens": [0.0, 512.0], "ctx_kv_tokens": [0.0, 0.0]})
    kw = dict(engine="trtllm", dtype="fp8_block", constants=c, ep=1)
    base = make_predictor("trtllm", "deepseek-v3", "b200", **kw)(steps, 8)
    vllm_laws = make_predictor("trtllm", "deepseek-v3", "b200", moe_kernels="vllm", **kw)(steps, 8)
    own = make_predictor("trtllm", "deepseek-v3", "b200", moe_kernels="trtllm", **kw)(steps, 8)
    assert all(np.array_equal(base[k], vllm_laws[k]) for k in base)
    assert not np.allclose(own["total"], base["total"])
    with pytest.raises(InputError, match="moe.kernels 'sglang' not in"):
        make_predictor("trtllm", "deepseek-v3", "b200", moe_kernels="sglang", **kw)


def test_vllms_numbers_do_not_depend_on_another_frameworks_laws():
    doc = _doc()
    bare = {k: v for k, v in doc.items() if k != "frameworks"}
    with_, without = M.MoEConstants.from_doc(doc), M.MoEConstants.from_doc(bare)
    for eng in ("vllm", "vllm-v1-sync", "sglang"):
        a = predict_step("qwen3-235b-a22b", "h200", decode=[(32, 1024)], tp=4, dtype="fp8_block", engine=eng,
                         moe_constants=with_)
        b = predict_step("qwen3-235b-a22b", "h200", decode=[(32, 1024)], tp=4, dtype="fp8_block", engine=eng,
                         moe_constants=without)
        assert a.terms_ms == b.terms_ms, eng


def test_settle_appends_the_framework_section_after_vllms():
    k = {"global": {"eta_c:bf16": {"value": 0.5, "provenance": "FITTED", "source": "x"}}, "gpu": {}}
    a = {"global": {}, "gpu": {}}
    plain = X.settle(k, a, a)
    assert "frameworks" not in plain["constants"]
    fw = {"trtllm": {"global": {"eta_c:bf16": {"value": 0.4, "provenance": "FITTED", "source": "y"}}, "gpu": {}}}
    both = X.settle({**k, "frameworks": fw}, a, a)
    assert list(both["constants"]) == ["global", "gpu", "frameworks"]
    assert both["constants"]["global"] == plain["constants"]["global"]
    assert both["constants"]["frameworks"] == fw


def test_default_families_follow_trtllms_default_backend_not_the_fastest():
    rows = pd.DataFrame({"gpu": ["b200"] * 4 + ["h200-sxm"] * 2,
                         "sdtype": ["nvfp4", "nvfp4", "fp8_block", "bf16", "fp8_block", "mxfp4"],
                         "kernel_source": ["moe_torch_flow_min_latency", "moe_torch_flow_cutlass", "deepgemm",
                                           "moe_torch_flow_cutlass", "moe_torch_flow_cutlass", "moe_torch_flow"],
                         "latency_ms": [0.1, 0.5, 1.0, 1.0, 1.0, 1.0]})
    fam = X.default_families(rows, "trtllm")
    assert fam == {"b200": {"nvfp4": "cutlass_sm100", "fp8_block": "deepgemm", "bf16": "cutlass_sm100"},
                   "h200-sxm": {"fp8_block": "cutlass_sm90", "mxfp4": "torch_flow_sm90"}}
    assert X.default_families(rows, "vllm") == {}  # vLLM ships its fastest backend's family


def test_e34_reports_trtllms_own_laws_after_every_claim_without_a_verdict():
    """E3.4 (the lead's decision, wave 39): each TensorRT-LLM group is also priced with its own laws, from the same
    rows through the same prediction path with the engine's field swapped; those claims come last, with no target,
    and carry the default's MAPE and signed mean beside them."""
    from steptime.calibration import Constants
    from steptime_lab.experiments import moe_wallclock as W

    rows = pd.DataFrame({"dataset": "aic-silicon", "gpu": "h200-sxm", "model": "gpt-oss-120b", "model_found": "specs",
                         "engine": ["trtllm", "trtllm", "vllm"], "tp": 4, "ep": 1, "dp": 1, "dtype": "mxfp4",
                         "mode": "agg", "batch": [8.0, 16.0, 8.0], "prompt_tokens": 1024.0, "output_tokens": 256.0,
                         "tpot_ms": [6.0, 7.0, 6.0], "measure": "tpot_ms", "source_id": ["a", "b", "c"]})
    kw = dict(mixed={"chunked": ["vllm", "trtllm"], "token_budget": 8192}, n_boot=10, constants=Constants.default())
    tok = W.predict_tokens(rows, **kw)
    own = W.own_law_tokens(rows, "trtllm", **kw)
    assert own["framework"] == "trtllm" and set(own["pred"]["engine"]) == {"trtllm"} and len(own["scores"]) == 1
    base = tok["pred"][tok["pred"]["engine"] == "trtllm"]
    assert np.all(own["pred"]["pred_ms"].to_numpy() != base["pred_ms"].to_numpy())  # TRT-LLM's laws, not vLLM's
    same = W.predict_tokens(rows[rows["engine"] == "trtllm"], moe_kernels="trtllm", **kw)
    assert np.array_equal(same["pred"]["pred_ms"], own["pred"]["pred_ms"])  # the one prediction path
    targets = {"tpot_mape_per_group": 0.15, "fpm_mape_per_phase": 0.12}
    plain = W.document(tok, {"runs": [], "skipped": []}, [], [], targets)
    doc = W.document(tok, {"runs": [], "skipped": []}, [], [], targets, own_laws=own)
    assert doc["claims"][:len(plain["claims"])] == plain["claims"]  # appended: no claim id moves
    new = doc["claims"][len(plain["claims"]):]
    assert len(new) == 1 and "target" not in new[0] and "met" not in new[0]
    assert "priced with TensorRT-LLM's own fused-MoE laws (engine field trtllm; not the default" in new[0]["claim"]
    d = next(s for s in tok["scores"] if s["engine"] == "trtllm")
    assert new[0]["value"] == {"mape": round(own["scores"][0]["mape"], 4),
                               "signed_mean": round(own["scores"][0]["signed_mean"], 4),
                               "default_mape": round(d["mape"], 4), "default_signed_mean": round(d["signed_mean"], 4)}
    assert doc["metrics"]["targets_total"] == plain["metrics"]["targets_total"]
    assert "kept on vLLM's law after seeing these scores" in doc["metrics"]["disclosed"]
    assert list(doc["metrics"]["token_time_own_laws"]["groups"]) == ["aic-silicon/h200-sxm/trtllm"]
    with pytest.raises(ValueError, match="framework 'vllm' not in"):
        W.own_law_tokens(rows, "vllm", **kw)


def test_a_gpu_without_the_frameworks_own_readings_keeps_none_of_vllms_kernel_readings():
    """for_kernels drops vLLM's per-GPU kernel constants (family, readings) on every GPU, also where the framework
    has no readings of its own: a GPU priced with TensorRT-LLM's laws must not read vLLM's bf16 family or its
    Triton-kernel scales (wave 40, review10: keeping them survived every test; the shipped a100-sxm has vLLM
    readings and no TensorRT-LLM ones)."""
    vllm_gpu = {"s_c": 1.3, "s_mem": 0.7, "d_floor_us": 2.0, "family:bf16": "triton", "a2a_s_slope:ht": 1.1}
    mc = M.MoEConstants(values={"eta_c:bf16": 0.5, "a2a_floor_us:ll:dispatch": 3.0},
                        per_gpu={"a100-sxm": dict(vllm_gpu), "b200": {"s_c": 0.9}},
                        frameworks={"trtllm": {"values": {"eta_c:bf16": 0.4}, "per_gpu": {"b200": {"s_c": 1.1}}}})
    t = mc.for_kernels("trtllm")
    assert t.per_gpu["a100-sxm"] == {"a2a_s_slope:ht": 1.1}   # the exchange's reading stays, no kernel one
    assert t.per_gpu["b200"] == {"s_c": 1.1}
    assert t.get("s_c", "a100-sxm", default=-1.0) == -1.0
    # the laws' provenance is the framework's own too (`steptime constants` and --explain read it)
    shipped_t = M.MoEConstants.default().for_kernels("trtllm")
    for k, v in M.MoEConstants.default().frameworks["trtllm"]["provenance"].items():
        assert shipped_t.provenance[k] == v, k
    shipped = M.MoEConstants.default()
    gone = set(shipped.per_gpu) - set(shipped.frameworks["trtllm"]["per_gpu"])
    assert gone, "a GPU with vLLM readings and no TensorRT-LLM ones (a100-sxm when this was written)"
    for g in gone:
        own = shipped.for_kernels("trtllm").per_gpu.get(g, {})
        assert not [k for k in own if M.is_kernel_key(k)], (g, own)


def test_a_vllm_section_under_frameworks_is_refused():
    """vLLM's laws are moe.yaml's top level; a `frameworks.vllm` section would be a second copy that for_kernels('vllm')
    never reads (it returns the top level): refused at load with one line (wave 40, review10: accepting it survived
    every test)."""
    doc = _doc()
    with pytest.raises(ValueError, match="frameworks.vllm is not a framework with laws of its own") as exc:
        M.MoEConstants.from_doc({**doc, "frameworks": {**doc.get("frameworks", {}), "vllm": {}}})
    assert "\n" not in str(exc.value)


def test_with_values_keeps_the_frameworks_own_laws():
    """A constants set with some values replaced (with_values: a fit's overrides) still holds TensorRT-LLM's laws, so
    an engine that runs them is priced as before and not refused (wave 40, review10: dropping them survived every
    test)."""
    mc = M.MoEConstants.default()
    mv = mc.with_values({"a2a_floor_us:ll:dispatch": 7.0})
    assert mv.frameworks == mc.frameworks
    t = mv.for_kernels("trtllm")
    assert t.values["a2a_floor_us:ll:dispatch"] == 7.0
    assert {k: v for k, v in t.values.items() if M.is_kernel_key(k)} == dict(mc.frameworks["trtllm"]["values"])


def test_with_moe_kernels_records_the_callers_provenance_and_source():
    """The copy's moe_kernels value carries the provenance and source the caller gives (`steptime constants` lists
    them), not a fixed ASSUMED (wave 40, review10: ignoring the argument survived every test)."""
    own = E.get_engine("trtllm").with_moe_kernels("trtllm", source="a rule written before scoring", provenance="DERIVED")
    v = own.lookup("moe_kernels")
    assert (v.value, v.provenance, v.source) == ("trtllm", "DERIVED", "a rule written before scoring")
