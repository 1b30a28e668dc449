"""Wave 37, second pass, helper harden6: four gaps harden5 found and left (DESIGN.md `Bad input, wave 37, second
pass`). One test per defect; each failed on the code before its fix (checked against main's src, see DESIGN).
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import os

import pandas as pd
import pytest

from steptime.errors import ServeError
from steptime.plan import PlanError
from steptime.serve import from_table
from steptime_lab.audit import AuditError, audit, experiment_id
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
