"""Wave 37, second pass, helper harden6: four gaps harden5 found and left (DESIGN.md `Bad input, wave 37, second
pass`). One test per defect; each failed on the code before its fix (checked against main's src, see DESIGN).
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import os

import pandas as pd
import pytest

from steptime.errors import ServeError
from steptime.plan import PlanError
from steptime.serve import from_table
from steptime_lab.audit import AuditError, audit
from refusals import clean, refuses
from test_audit import repo  # noqa: F401  (the fixture: a one-experiment repository, E9.1)

SERVE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-progress", "--n", "5", "--rate", "2", "--isl",
         "64", "--osl", "4"]
PLAN = ["plan", "--model", "llama-3.1-8b", "--n", "5", "--rate", "2", "--isl", "64", "--osl", "4", "--slo-ttft-ms",
        "1000", "--gpus", "h100-sxm", "--tp", "1", "--dtypes", "bf16", "--jobs", "1", "--no-progress", "--no-disagg"]
TRACE = pd.DataFrame({"arrival": [0.0, 0.5], "prompt_tokens": [64, 32], "output_tokens": [4, 8]})


# ---- item 3: from_table(n=...) beyond the trace ---------------------------------------------------------------
def test_from_table_refuses_more_requests_than_the_trace_holds_naming_both():
    """Before: n=5 on a 2-request trace took the 2 without a word."""
    with pytest.raises(ServeError) as e:
        from_table(TRACE, name="t", n=5)
    assert "n=5 requests asked but the trace holds 2" in clean(e)


def test_from_table_still_takes_the_first_n_and_the_whole_trace():
    assert len(from_table(TRACE, n=1).prompt) == 1
    assert len(from_table(TRACE, n=2).prompt) == 2 and len(from_table(TRACE).prompt) == 2


def test_serve_refuses_an_n_beyond_a_trace_file(tmp_path, capsys):
    f = tmp_path / "t.csv"
    TRACE.to_csv(f, index=False)
    refuses(capsys, ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-progress", "--trace", str(f),
                     "--n", "3"], "n=3 requests asked but the trace holds 2")


# ---- item 4: audit's experiment ids ---------------------------------------------------------------------------
@pytest.mark.parametrize("given", ["e9.1", "E9_1", "e9_1", " E9.1 "])
def test_audit_reads_an_id_in_another_case_or_with_an_underscore(repo, given):  # noqa: F811
    """Before: `unknown experiment 'e9.1'; registered: <every id>`."""
    (a,) = audit(repo, given)
    assert a.id == "E9.1"
    (a,) = audit(repo, f"{given.strip()}:2")
    assert [c.id for c in a.claims] == ["E9.1:2"]


def test_audit_suggests_the_closest_id_instead_of_listing_them_all():
    from steptime_lab.audit import experiment_id

    known = ["E1.1", "E2.1", "E2.11", "E2.11b", "E3.1", "R2.1"]
    assert experiment_id("e2.11B", known) == "E2.11b"
    with pytest.raises(AuditError) as e:
        experiment_id("E2.111", known)
    msg = clean(e)
    assert msg.startswith("unknown experiment 'E2.111'; closest: E2.11") and "R2.1" not in msg
    with pytest.raises(AuditError) as e:
        experiment_id("zz", known)
    assert clean(e) == "unknown experiment 'zz' (`steptime status` lists every ID)"


def test_cli_audit_takes_a_lower_case_id(repo, monkeypatch, capsys):  # noqa: F811
    from steptime.cli import main

    monkeypatch.setenv("STEPTIME_ROOT", str(repo))
    assert main(["audit", "e9.1"]) == 0
    assert "E9.1" in capsys.readouterr().out


# ---- an empty entry between commas in a list option -----------------------------------------------------------
@pytest.mark.parametrize("flag, value", [("--gpus", "h100-sxm,,l40s"), ("--gpus", "h100-sxm,"), ("--tp", "1,,2"),
                                         ("--dtypes", ",bf16"), ("--engines", "vllm, ,sglang")])
def test_plan_refuses_an_empty_entry_between_commas(capsys, flag, value):
    """Before: the empty entry was skipped without a word."""
    argv = list(PLAN)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    refuses(capsys, argv, f"{flag} {value!r}: entry ")


def test_plan_refuses_an_empty_entry_in_max_rate(capsys):
    refuses(capsys, [*PLAN, "--max-rate", "1,2,,3"], "--max-rate '1,2,,3': entry 3 is empty")


def test_the_list_parser_names_the_empty_entry():
    from steptime.plan_command import _names

    with pytest.raises(PlanError) as e:
        _names("h100-sxm,,b200", "gpus")
    assert clean(e) == ("--gpus 'h100-sxm,,b200': entry 2 is empty (two commas in a row, or one at an end): "
                        "expected comma-separated names")
    assert _names(" h100-sxm , b200 ", "gpus") == ["h100-sxm", "b200"]


# ---- item 2: serve --csv asks for a .csv name, as plan's ------------------------------------------------------
@pytest.mark.parametrize("name", ["out.parquet", "out.txt", "out"])
def test_serve_csv_with_another_suffix_is_refused_before_the_run(tmp_path, capsys, monkeypatch, name):
    """Before: CSV bytes were written to any name (out.parquet held a CSV)."""
    import steptime.serve.command as C

    monkeypatch.setattr(C, "run_args", lambda a: (_ for _ in ()).throw(AssertionError("ran before the check")))
    refuses(capsys, [*SERVE, "--csv", str(tmp_path / name)], "expected a .csv file name")
    assert not list(tmp_path.iterdir())


def test_serve_csv_with_a_csv_name_any_case_is_written(tmp_path, capsys):
    from steptime.cli import main

    f = tmp_path / "R.CSV"
    assert main([*SERVE, "--csv", str(f)]) == 0
    assert f.read_text().splitlines()[0].count(",") >= 2 and os.path.getsize(f) > 0


# ---- item 1: a config.json's quantization_config --------------------------------------------------------------
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072, "hidden_act": "silu"}


def _config(tmp_path, quant=None, name="m"):
    import json

    cfg = dict(LLAMA) if quant is None else {**LLAMA, "quantization_config": quant}
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


def test_a_dense_fp8_checkpoint_is_priced_at_fp8_by_default(tmp_path):
    """Before: priced at bf16 (the --dtype default) without a word."""
    from steptime.step import predict_step

    path = _config(tmp_path, {"quant_method": "fp8", "activation_scheme": "dynamic"})
    r = predict_step(path, "h100-sxm", decode=[(8, 1024)])
    assert r.dtype == "fp8"
    assert r.total_ms == predict_step(path, "h100-sxm", decode=[(8, 1024)], dtype="fp8").total_ms
    bf16 = predict_step(_config(tmp_path, name="b"), "h100-sxm", decode=[(8, 1024)])
    assert bf16.dtype == "bf16" and bf16.total_ms > r.total_ms  # the same shapes; fp8 weights stream half the bytes


@pytest.mark.parametrize("quant, needle", [
    ({"quant_method": "awq", "bits": 4}, "its weights are quantized by 'awq' (quantization_config.quant_method): "
                                        "steptime cannot price that checkpoint"),
    ({"quant_method": "gptq", "bits": 4}, "quantized by 'gptq'"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "its checkpoint holds block-scaled fp8 "
                                                               "(weight_block_size) weights"),
])
def test_a_checkpoint_steptime_cannot_price_is_refused_in_one_line(tmp_path, quant, needle):
    from steptime.errors import InputError
    from steptime.step import predict_step

    with pytest.raises(InputError) as e:
        predict_step(_config(tmp_path, quant), "h100-sxm", decode=[(8, 1024)])
    assert needle in clean(e)


def test_a_dtype_that_contradicts_the_checkpoint_is_refused(tmp_path, capsys):
    from steptime.errors import InputError
    from steptime.serve import StepTimer
    from steptime.step import predict_step

    path = _config(tmp_path, {"quant_method": "fp8"})
    with pytest.raises(InputError) as e:
        predict_step(path, "h100-sxm", decode=[(8, 1024)], dtype="bf16")
    assert "dtype 'bf16' contradicts m (" in clean(e) and "holds fp8 weights" in str(e.value)
    with pytest.raises(ServeError) as e:
        StepTimer(path, "h100-sxm", dtype="bf16")  # the serving timers refuse it the same way
    assert "contradicts" in clean(e)
    refuses(capsys, ["predict", "--model", path, "--gpu", "h100-sxm", "--dtype", "bf16"], "dtype 'bf16' contradicts")
    refuses(capsys, [*SERVE[:2], path, *SERVE[3:], "--dtype", "bf16"], "dtype 'bf16' contradicts")


def test_a_bad_quantization_config_is_refused_naming_the_field(tmp_path):
    from steptime.errors import ModelConfigError
    from steptime.specs import get_model

    for quant, needle in (([1], "quantization_config must be an object of fields"),
                          ({"bits": 4}, "quantization_config.quant_method must name the method")):
        with pytest.raises(ModelConfigError) as e:
            get_model(_config(tmp_path, quant, name=str(len(needle))))
        assert needle in clean(e)


def test_the_cli_says_which_dtype_and_where_it_came_from(tmp_path, capsys):
    import json

    from steptime.cli import main

    path = _config(tmp_path, {"quant_method": "fp8"})
    assert main(["predict", "--model", path, "--gpu", "h100-sxm", "--decode", "8x1024"]) == 0
    assert "fp8 weights from the checkpoint's quantization_config" in capsys.readouterr().out.splitlines()[0]
    assert main(["predict", "--model", path, "--gpu", "h100-sxm", "--decode", "8x1024", "--explain"]) == 0
    assert "fp8 weights from the checkpoint's quantization_config" in capsys.readouterr().out.splitlines()[0]
    assert main(["predict", "--model", path, "--gpu", "h100-sxm", "--decode", "8x1024", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["dtype"] == "fp8" and d["dtype_from"] == "the checkpoint's quantization_config"
    assert main([*SERVE[:2], path, *SERVE[3:]]) == 0
    assert "fp8 weights from the checkpoint's config.json" in capsys.readouterr().out.splitlines()[0]
    # a spec-table model: as before (bf16 by default, no origin added)
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--decode", "8x1024"]) == 0
    assert "engine vllm, bf16):" in capsys.readouterr().out.splitlines()[0]


def test_the_dense_and_moe_readers_share_one_reading_of_quantization_config(repo_root):
    """The MoE reader's weights_dtype (E3.4 reads it) is unchanged; its checkpoint precision is the same function's."""
    import json

    from steptime.specs.model import checkpoint_dtype
    from steptime.specs.moe import moe_from_config

    root = repo_root / "raw/aiconfigurator/model_configs"
    for name, wd, ck in (("deepseek-ai--DeepSeek-V3_config.json", "fp8_block", "fp8_block"),
                         ("openai--gpt-oss-20b_config.json", "mxfp4", "mxfp4"),
                         ("nvidia--Qwen3.6-35B-A3B-NVFP4_config.json", "bf16", "modelopt")):
        cfg = json.loads((root / name).read_text())
        m = moe_from_config(cfg, root / name)
        assert (m.weights_dtype, m.checkpoint_dtype) == (wd, ck)
        assert checkpoint_dtype(cfg, name) == ck
