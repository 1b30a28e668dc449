"""Wave 41, helper fixes11: the CLI's route to an engine's own MoE laws (--moe-kernels), a known model steptime cannot
represent refused by name with its reason (DeepSeek-V4), a decode over no cached tokens and rates the simulator's clock
cannot resolve refused, one error type for an unknown MoE engine, and `calibration ship` reading each file once
(DESIGN.md `Bad input and four known gaps, wave 41`). Each test failed on main's code before its fix (see DESIGN).
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line."""
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from refusals import clean, refuses, run_cli

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "results" / "calibration"
MOE = ["--model", "gpt-oss-20b", "--gpu", "b200", "--dtype", "mxfp4"]
SERVE_MOE = ["serve", *MOE, "--n", "4", "--isl", "64", "--osl", "4", "--no-progress", "--json"]
PLAN_MOE = ["plan", "--model", "gpt-oss-20b", "--slo-tpot-ms", "100", "--gpus", "b200", "--tp", "1", "--max-gpus", "1",
            "--dtypes", "mxfp4", "--no-disagg", "--n", "10", "--isl", "64", "--osl", "4", "--jobs", "1",
            "--no-progress"]
DENSE = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]


# ---- 1. --moe-kernels: TensorRT-LLM's own MoE laws from the command line ------------------------------------------
def _json(capsys, argv) -> dict:
    rc, out, err = run_cli(capsys, argv)
    assert rc == 0, err
    return json.loads(out)


def test_predict_moe_kernels_prices_the_experts_with_trtllms_laws_and_says_so(capsys):
    """Before: no option (Python only); the JSON did not say whose law priced the experts."""
    from steptime import predict_step
    from steptime.calibration import Constants

    own = _json(capsys, ["predict", *MOE, "--decode", "8x1024", "--moe-kernels", "trtllm", "--json"])
    base = _json(capsys, ["predict", *MOE, "--decode", "8x1024", "--json"])
    assert (own["moe_kernels"], own["moe_kernel_dtype"]) == ("trtllm", "mxfp4_mxfp8")  # sm 100: W4A8 (trtrule)
    assert (base["moe_kernels"], base["moe_kernel_dtype"]) == ("vllm", "mxfp4")
    eng = Constants.default().engine("vllm").with_moe_kernels("trtllm")
    api = predict_step("gpt-oss-20b", "b200", decode=[(8, 1024)], dtype="mxfp4", engine=eng)
    assert own["terms_ms"]["moe_experts"] == pytest.approx(api.terms_ms["moe_experts"], rel=1e-5)  # JSON's digits
    assert abs(own["terms_ms"]["moe_experts"] / base["terms_ms"]["moe_experts"] - 1) > 1e-3
    assert api.to_dict()["moe_kernels"] == "trtllm"
    rc, out, _ = run_cli(capsys, ["predict", *MOE, "--moe-kernels", "trtllm"])
    assert rc == 0 and "routed experts priced with trtllm's fused-MoE laws at mxfp4_mxfp8" in out.splitlines()[0]


def test_serve_and_plan_take_the_same_option_and_report_the_law(capsys):
    own = _json(capsys, [*SERVE_MOE, "--moe-kernels", "trtllm"])
    base = _json(capsys, SERVE_MOE)
    assert own["moe_kernels"] == "trtllm" and base["moe_kernels"] == "vllm"
    assert own["summary"]["tpot_s"]["p50"] != base["summary"]["tpot_s"]["p50"]
    plan_own = _json(capsys, [*PLAN_MOE, "--moe-kernels", "trtllm", "--json"])
    plan_base = _json(capsys, [*PLAN_MOE, "--json"])
    assert plan_own["moe_kernels"] == {"vllm": "trtllm"} and plan_base["moe_kernels"] == {"vllm": "vllm"}
    assert plan_own["best"][0]["tpot_pct_s"] != plan_base["best"][0]["tpot_pct_s"]


def test_the_option_reads_the_same_on_the_three_commands():
    from steptime.cli import build_parser

    p = build_parser()
    helps = {}
    for cmd in ("predict", "serve", "plan"):
        act = next(a for a in p.commands[cmd]._actions if "--moe-kernels" in a.option_strings)
        helps[cmd] = act.help
        assert "dense" in act.help and "trtllm" in act.help and "vllm" in act.help
    # the same text but for whose default it replaces: plan searches --engines, it has no --engine (docs11)
    assert helps["predict"] == helps["serve"] and "--engine profile's" in helps["predict"]
    def outside_default(h):
        return h[:h.index("Default: ")] + h[h.index(". Refused"):]

    assert outside_default(helps["plan"]) == outside_default(helps["predict"])
    assert "--engines" in helps["plan"] and "--engine profile's" not in helps["plan"]


@pytest.mark.parametrize("argv", [["predict", *MOE], SERVE_MOE, PLAN_MOE])
def test_an_unknown_kernel_set_is_refused_naming_the_choices(capsys, argv):
    refuses(capsys, [*argv, "--moe-kernels", "sglang"], "--moe-kernels 'sglang': no shipped fused-MoE laws of that "
                                                        "name (choices: vllm, trtllm")


@pytest.mark.parametrize("argv", [["predict", *DENSE], ["serve", *DENSE, "--n", "3"],
                                  ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "50", "--gpus", "h100-sxm"]])
def test_a_dense_model_with_the_option_is_refused(capsys, argv):
    refuses(capsys, [*argv, "--moe-kernels", "trtllm"], "llama-3.1-8b is dense")


def test_plan_api_refuses_the_option_for_a_dense_model():
    from steptime.plan import plan
    from steptime.serve import synthetic

    with pytest.raises(ValueError) as e:
        plan("llama-3.1-8b", synthetic(10, isl=64, osl=4), slo_tpot_s=0.05, moe_kernels="trtllm")
    assert "is dense" in clean(e)


# ---- 2. a known model steptime cannot represent: refused by name, with its reason --------------------------------
@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V4-Flash", "DeepSeek-V4-Flash", "deepseek-v4-flash",
                                  "nvidia/DeepSeek-V4-Flash-NVFP4", "deepseek-ai/DeepSeek-V4-Pro"])
def test_deepseek_v4_is_refused_with_what_steptime_cannot_represent(name):
    """Before: `unknown model 'deepseek-ai/DeepSeek-V4-Flash' (or pass a path to a config.json)`."""
    from steptime.errors import UnsupportedModelError
    from steptime.specs import get_model

    with pytest.raises(UnsupportedModelError) as e:
        get_model(name)
    msg = clean(e)
    assert "DeepseekV4ForCausalLM" in msg and "compressed attention with a sparse indexer" in msg
    assert "moe_models.yaml unsupported" in msg


def test_deepseek_v4_cli_refusal_is_one_line(capsys):
    refuses(capsys, ["predict", "--model", "deepseek-ai/DeepSeek-V4-Flash", "--gpu", "b200"],
            "is known but steptime cannot represent it")
    refuses(capsys, ["serve", "--model", "DeepSeek-V4-Pro", "--gpu", "b200", "--n", "3"],
            "is known but steptime cannot represent it")


def test_the_registry_entry_matches_the_config_it_cites():
    """The reason's numbers as the cited config.json has them (aiconfigurator-core 0.12.0's copy, where installed)."""
    from steptime.specs.moe import unsupported_model_table

    e = unsupported_model_table()["deepseek-v4-flash"]
    try:
        from importlib.resources import files

        cfg_path = files("aiconfigurator_core") / "model_configs" / "deepseek-ai--DeepSeek-V4-Flash_config.json"
        cfg = json.loads(cfg_path.read_text())
    except (ImportError, ModuleNotFoundError, FileNotFoundError):
        pytest.skip("aiconfigurator-core's model_configs are not installed here")
    assert cfg["architectures"] == [e["architecture"]]
    why = " ".join(e["why"].split())
    assert f"index_topk {cfg['index_topk']}" in why and f"hc_mult {cfg['hc_mult']}" in why
    layers = cfg["num_hidden_layers"]
    compressed = sum(1 for r in cfg["compress_ratios"][:layers] if r)
    assert f"on {compressed} of its {layers} layers" in why
    assert f"first {cfg['num_hash_layers']} MoE layers" in why


def test_a_registry_name_that_is_also_a_represented_model_is_refused(monkeypatch):
    from types import MappingProxyType

    import steptime.specs as S
    from steptime.errors import ModelConfigError

    bad = MappingProxyType({"x": MappingProxyType({"source": "deepseek-ai/DeepSeek-V3", "aliases": (),
                                                   "architecture": "A", "config": "c", "why": "w", "read": "r"})})
    monkeypatch.setattr(S, "unsupported_model_table", lambda: bad)
    S._unsupported_index.cache_clear()
    try:
        with pytest.raises(ModelConfigError, match="is also represented model 'deepseek-v3'"):
            S._unsupported_index()
    finally:
        monkeypatch.undo()
        S._unsupported_index.cache_clear()


def test_e34_fpm_part_carries_the_registrys_refusal():
    from steptime.errors import SteptimeError
    from steptime_lab.experiments import moe_wallclock as X

    part = X.fpm_parts([{"name": "DeepSeek-V4-Flash", "model": "deepseek-ai/DeepSeek-V4-Flash", "runs": "r"}])[0]
    assert not part["represented"] and part["refusal"].startswith("UnsupportedModelError: ")
    assert "sparse indexer" in part["refusal"]
    with pytest.raises(SteptimeError, match="represented or listed with its reason"):  # unknown: a settings error
        X.fpm_parts([{"name": "Z", "model": "no-such-model-xyz", "runs": "r"}])
    with pytest.raises(SteptimeError, match="drop the entry's own `why`"):  # the reason has one place
        X.fpm_parts([{"name": "V4", "model": "deepseek-v4-flash", "runs": "r", "why": "restated"}])


def test_e34s_committed_claim_carries_the_refusal():
    doc = json.loads((ROOT / "results" / "E3_4.json").read_text())
    c = next(c for c in doc["claims"] if c["claim"].startswith("FPM MoE runs of DeepSeek-V4-Flash"))
    assert c["value"].startswith("UnsupportedModelError: ") and "sparse indexer" in c["value"]


# ---- 3. a decode over no cached tokens; rates the clock cannot resolve -------------------------------------------
def test_decode_over_zero_cached_tokens_is_refused(capsys):
    """Before: `predict --decode 1x0` priced a decode step over no cache, exit 0."""
    from steptime import predict_step
    from steptime.errors import BatchError

    line = refuses(capsys, ["predict", *DENSE, "--decode", "1x0"], "--decode '1x0': a decode request reads")
    assert "--prefill 1x1" in line
    with pytest.raises(BatchError) as e:
        predict_step("llama-3.1-8b", "h100-sxm", decode=[(3, 0)])
    assert "KV length must be >= 1 (got 0)" in clean(e) and "prefill=[(3, 1)]" in clean(e)
    # what it names instead runs, and a request of one new token over no cache stays one
    a = predict_step("llama-3.1-8b", "h100-sxm", prefill=[(3, 1)]).total_ms
    assert a == predict_step("llama-3.1-8b", "h100-sxm", requests=[(1, 0)] * 3).total_ms


def test_the_rate_bound_is_the_clocks_resolution_over_its_horizon():
    from steptime.serve.workload import MAX_RATE, MAX_TIME_S, TIME_RESOLUTION_S

    assert TIME_RESOLUTION_S == float(np.spacing(MAX_TIME_S)) == 2.0 ** -26 and MAX_RATE == 2.0 ** 26


@pytest.mark.parametrize("argv", [["serve", *DENSE, "--n", "5", "--no-progress"],
                                  ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "50", "--gpus", "h100-sxm",
                                   "--n", "5"]])
def test_a_rate_faster_than_the_clock_resolves_is_refused(capsys, argv):
    """Before: `serve --rate 1e308` ran, every request at t = 0."""
    refuses(capsys, [*argv, "--rate", "1e308"], "--rate: Poisson arrival rate 1e+308 requests/s")


def test_rate_bound_at_the_api_and_at_the_bound_itself():
    from steptime.errors import ServeError
    from steptime.serve import poisson_arrivals, synthetic
    from steptime.serve.workload import MAX_RATE

    assert len(synthetic(5, isl=8, osl=2, rate=MAX_RATE)) == 5  # the bound is taken
    for bad in (MAX_RATE * 2, 1e308):
        with pytest.raises(ServeError) as e:
            poisson_arrivals(5, bad)
        assert "below the simulator's time resolution" in clean(e)


def test_max_rate_per_gpu_times_the_gpus_is_bounded_too(capsys):
    refuses(capsys, ["plan", "--model", "llama-3.1-8b", "--slo-tpot-ms", "50", "--gpus", "h100-sxm", "--n", "5",
                     "--max-rate", "1,1e308"], "--max-rate 1e+308 requests/s per GPU")


def test_a_time_scale_that_squeezes_a_trace_below_the_resolution_is_refused():
    import pandas as pd

    from steptime.errors import ServeError
    from steptime.serve import from_table

    df = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0], "prompt_tokens": [8, 8, 8], "output_tokens": [2, 2, 2]})
    assert len(from_table(df, time_scale=1e-3)) == 3
    with pytest.raises(ServeError) as e:
        from_table(df, time_scale=1e-300)
    assert "time_scale 1e-300" in clean(e)


def test_more_clients_than_any_workload_holds_and_a_step_beyond_the_predictor_are_refused(capsys):
    refuses(capsys, ["serve", *DENSE, "--n", "5", "--concurrency", "1" + "0" * 20], "closed-loop concurrency 1e+20")
    refuses(capsys, ["serve", *DENSE, "--n", "5", "--policy", "static", "--batch", "1" + "0" * 20],
            "static batch size (--batch)")


# ---- 4. one error type for an unknown MoE engine; ship reads each file once --------------------------------------
def test_an_unknown_moe_engine_is_the_packages_error_everywhere():
    """Before: aic_dtype and kernel_family raised a bare ValueError, kernel_dtype UnsupportedError; kernel_dtype
    returned an unknown dtype as it came."""
    from steptime.errors import UnsupportedError
    from steptime.specs import get_gpu
    from steptime.terms import moe as M

    b200 = get_gpu("b200")
    for call in (lambda: M.aic_dtype("tgi"), lambda: M.kernel_dtype("tgi", "mxfp4", b200),
                 lambda: M.kernel_family("moe_torch_flow", b200, "tgi")):
        with pytest.raises(UnsupportedError) as e:
            call()
        assert "unknown fused-MoE kernel framework 'tgi'" in clean(e)
    with pytest.raises(UnsupportedError) as e:
        M.kernel_dtype("tgi", "mxfp4", b200)
    assert "expert dtype 'mxfp4'" in clean(e)
    with pytest.raises(UnsupportedError) as e:
        M.kernel_dtype("trtllm", "int3", b200)
    assert "unknown MoE dtype 'int3' for trtllm's fused-MoE kernels" in clean(e)


def _count_opens(monkeypatch, paths) -> dict:
    """How many times each of `paths` is opened (io.open / builtins.open: Path.read_bytes, shutil.copyfile)."""
    import builtins

    real = io.open
    counts = {str(p): 0 for p in paths}

    def counting(file, *a, **k):
        if str(file) in counts:
            counts[str(file)] += 1
        return real(file, *a, **k)

    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(builtins, "open", counting)
    return counts


def test_ship_reads_each_file_once(tmp_path, monkeypatch):
    """Before: 3 reads of each settled file (classify, parse, seal check last) and 4 of the engine file."""
    from steptime.calibration import ship

    files = []
    for n in ("gemm.yaml", "step.yaml", "engine_constants.yaml"):
        shutil.copy(CAL / n, tmp_path / n)
        files.append(tmp_path / n)
    dest = tmp_path / "defaults.yaml"
    from steptime.calibration import DEFAULTS_FILE

    shutil.copy(DEFAULTS_FILE, dest)
    counts = _count_opens(monkeypatch, files)
    ship(files, path=dest, engine_path=tmp_path / "fitted.yaml")
    monkeypatch.undo()
    assert counts == {str(p): 1 for p in files}


def test_ship_writes_the_bytes_it_checked(tmp_path, monkeypatch):
    """The engine-constants file is replaced on disk after ship first read it: what lands is what was checked
    (before: every later read saw the replacement, here refused for its missing seal, so nothing shipped; a replacement
    carrying a seal of its own would have been checked on one read and copied from another)."""
    from steptime.calibration import DEFAULTS_FILE, ship

    src = tmp_path / "engine_constants.yaml"
    shutil.copy(CAL / "engine_constants.yaml", src)
    good = src.read_bytes()
    dest = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, dest)
    real = Path.read_bytes

    def read_then_replace(self):
        data = real(self)
        if self == src:
            src.write_bytes(b"engines: {}\n")  # someone rewrites it after the check
        return data

    monkeypatch.setattr(Path, "read_bytes", read_then_replace)
    try:
        ship([src], path=dest, engine_path=tmp_path / "fitted.yaml")
    finally:
        monkeypatch.undo()
    fitted = tmp_path / "fitted.yaml"
    assert fitted.exists() and fitted.read_bytes() == good


def test_ship_checks_the_seal_before_parsing(tmp_path, monkeypatch, capsys):
    """An unsealed file is refused without being parsed: the YAML reader never sees it."""
    import steptime.calibration as cal

    bad = tmp_path / "x.yaml"
    bad.write_text("updates: [\n")  # not YAML, and no seal: refused for the seal, before any parse
    seen = []
    monkeypatch.setattr(cal, "yaml_load", lambda text: seen.append(text))
    line = refuses(capsys, ["calibration", "ship", str(bad)], "no closing seal line")
    assert str(bad) in line and seen == []
