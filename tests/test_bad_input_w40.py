"""Wave 40, helper fixes10: settled files that check themselves, `plan` refusing before its report, the MoE law
text's engine names from one place, and a new user's empty values, folders and malformed files at the boundary
(DESIGN.md `Bad input and three known gaps, wave 40`). Each test failed on main's code before its fix (see DESIGN).
CLI: one line on stderr, exit 2, nothing written; API: a SteptimeError that is also a ValueError, in one line."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from refusals import clean, refuses, run_cli

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "results" / "calibration"
PLAN = ["plan", "--model", "llama-3.1-8b", "--n", "20", "--rate", "2", "--isl", "128", "--osl", "16", "--tp", "1",
        "--dtypes", "bf16", "--max-gpus", "1", "--no-disagg", "--jobs", "1", "--no-progress", "--gpus", "h100-sxm"]


def _defaults_copy(tmp_path):
    from steptime.calibration import DEFAULTS_FILE

    dest = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, dest)
    return dest


# ---- 1. a settled file cut exactly at a line end -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["gemm.yaml", "step.yaml", "comm.yaml", "engine_constants.yaml"])
def test_ship_refuses_a_settled_file_cut_at_a_line_end(tmp_path, name):
    """Before (wave 39's known gap): `head -n` of a settled file at an update boundary still parsed, passed every
    check and shipped its first constants, exit 0. The settle step now closes each file with a seal line (the sha256
    of every line above it); a copy without it is refused before anything is written, naming the file."""
    from steptime.calibration import ship
    from steptime.errors import InputError

    lines = (CAL / name).read_text().splitlines(keepends=True)
    dest, engines = _defaults_copy(tmp_path), tmp_path / "fitted.yaml"
    before = dest.read_bytes()
    cut = tmp_path / name
    # cuts at entry boundaries (an update, an engine's GPU, a top-level key): the copies `head -n` gives that parse
    ends = [i for i, x in enumerate(lines) if i and (x.startswith(("- scope:", "scales:")) or x.startswith("    b"))]
    by_seal = 0
    for n in ends:
        cut.write_text("".join(lines[:n]))
        with pytest.raises(InputError) as e:
            ship([cut], path=dest, engine_path=engines)
        msg = clean(e)
        assert str(cut) in msg, msg
        by_seal += "no closing seal line" in msg
        assert dest.read_bytes() == before and not engines.exists()
    assert ends and by_seal >= 1  # at least one cut passes every other check: only the seal catches it


def test_ship_refuses_a_settled_file_with_a_line_cut_out_of_its_middle(tmp_path):
    from steptime.calibration import ship
    from steptime.errors import InputError

    lines = (CAL / "gemm.yaml").read_text().splitlines(keepends=True)
    i = next(i for i, x in enumerate(lines) if x.startswith("- scope:") and i > len(lines) // 2)
    j = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("- scope:"))
    cut = tmp_path / "gemm.yaml"
    cut.write_text("".join(lines[:i] + lines[j:]))  # one whole update removed: valid YAML, seal line kept
    dest = _defaults_copy(tmp_path)
    with pytest.raises(InputError) as e:
        ship([cut], path=dest)
    assert "does not match the lines above it" in clean(e)


def test_ship_cli_names_the_file_without_its_seal(tmp_path, capsys):
    cut = tmp_path / "step.yaml"
    cut.write_text("".join((CAL / "step.yaml").read_text().splitlines(keepends=True)[:-1]))
    line = refuses(capsys, ["calibration", "ship", str(cut)], "no closing seal line")
    assert str(cut) in line


def test_the_settle_writers_close_their_files_with_a_seal_that_ships(tmp_path):
    """write_settled (the gemm/step/comm settle rules) and R2.3's write_fitted_constants end with the seal line; the
    sealed files ship into a copy of the defaults; the committed settled files carry it too."""
    from steptime.calibration import SEAL_PREFIX, check_seal, read_settled, ship, write_settled
    from steptime_lab.experiments.wallclock import write_fitted_constants

    settled = tmp_path / "s.yaml"
    u = read_settled(CAL / "comm.yaml")["updates"][:1]
    write_settled(settled, u, settled_by="test")
    fitted = tmp_path / "engine_constants.yaml"
    write_fitted_constants(fitted, yaml.safe_load((CAL / "engine_constants.yaml").read_text()))
    for f in (settled, fitted, *(CAL / n for n in ("gemm.yaml", "step.yaml", "comm.yaml", "engine_constants.yaml"))):
        text = f.read_text()
        assert text.splitlines()[-1].startswith(SEAL_PREFIX), f
        check_seal(text, f)
    ship([settled, fitted], path=_defaults_copy(tmp_path), engine_path=tmp_path / "shipped.yaml")
    assert (tmp_path / "shipped.yaml").read_bytes() == fitted.read_bytes()


# ---- 2. plan: a refusal prints no report -------------------------------------------------------------------------
@pytest.mark.parametrize("extra, needle", [
    (["--slo-tpot-ms", "0.001"], "no layout meets the SLO"),
    (["--slo-tpot-ms", "50", "--model", "llama-3.1-405b"], "the workload fits no layout"),
])
def test_plan_with_no_answer_prints_nothing_on_stdout(capsys, extra, needle):
    """Before: `plan --json` printed its whole report (`"best": []`) on stdout, then the error on stderr, exit 2; a
    user piping --json got a document for a plan that had failed. Now a refusal like any other: stdout empty."""
    for fmt in ([], ["--json"]):
        rc, out, err = run_cli(capsys, PLAN + extra + fmt)
        assert rc == 2 and out == "", out[:200]
        assert needle in err and err.count("\n") == 1, err


def test_plan_refusal_names_the_csv_it_wrote(tmp_path, capsys):
    """The --csv of every layout tried is still written (whole): the refusal says where."""
    csv = tmp_path / "all.csv"
    rc, out, err = run_cli(capsys, PLAN + ["--slo-tpot-ms", "0.001", "--json", "--csv", str(csv)])
    assert rc == 2 and out == "" and f"every layout tried is in {csv}" in err
    assert csv.read_text().count("\n") == 5  # header and the 4 layouts


# ---- 3. the MoE law text's engine names come from terms.moe -------------------------------------------------------
def test_moe_law_text_takes_engine_names_from_terms_moe(monkeypatch):
    """Before: experiments/moe.py spelt 'TensorRT-LLM' / 'SGLang' (and 'TRT-LLM') in ENGINE_LAW_NAMES and
    ENGINE_CLAIM_PREFIX, a second copy of terms.moe.ENGINE_NAMES; a renamed engine kept its old name there."""
    import importlib

    from steptime.terms import moe as M
    import steptime_lab.experiments.moe as X
    from test_moe_trtllm import _run

    monkeypatch.setattr(M, "ENGINE_NAMES", {"trtllm": "TRT-X", "sglang": "SG-X"})
    X = importlib.reload(X)
    try:
        doc = X.document_engines(_run("vllm", 0.1), [_run("trtllm", 0.2)], 12.0)
        law = doc["metrics"]["trtllm"]["law"]
        assert doc["claims"][-1]["claim"].startswith("TRT-X's own ")
        assert "its TRT-X kernel family (terms.moe.TRTLLM_KERNEL_FAMILIES;" in law and "own TRT-X cells" in law
        assert "TensorRT-LLM" not in law and "TRT-LLM " not in law
    finally:
        monkeypatch.undo()
        importlib.reload(X)


# ---- 4. empty values that ran on the defaults without a word ------------------------------------------------------
SERVE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--n", "5", "--rate", "1", "--no-progress"]


@pytest.mark.parametrize("argv, flag", [
    (PLAN + ["--slo-tpot-ms", "50", "--prices", ""], "--prices"),      # priced with the shipped prices
    (PLAN[:-2] + ["--slo-tpot-ms", "50", "--tp", "", "--gpus", "h100-sxm"], "--tp"),  # searched every degree
    (PLAN + ["--slo-tpot-ms", "50", "--trace", ""], "--trace"),        # simulated a synthetic workload
    (PLAN + ["--slo-tpot-ms", "50", "--max-rate="], "--max-rate"),     # searched for cost instead
    (SERVE + ["--trace", " "], "--trace"),                            # simulated a synthetic workload
])
def test_an_empty_option_value_is_refused(capsys, argv, flag):
    line = refuses(capsys, argv, f"{flag} ")
    assert "an empty value" in line


def test_calibration_ship_of_an_empty_name_says_so(capsys):
    """Before: `constants file '.': is a directory, not a file` (Path('') is the current folder)."""
    refuses(capsys, ["calibration", "ship", ""], "calibration ship: an empty file name ''")


def test_an_output_folder_is_named_a_folder(tmp_path, capsys):
    """Before: `--csv <folder>` said `expected a .csv file name (got suffix 'none')`."""
    refuses(capsys, SERVE + ["--csv", str(tmp_path)], "is a directory; give a file name")


# ---- 5. the collectors' --out, checked before the collection ------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (["steptime_collect.clock", "--out", "{tmp}", "--dry-run"], "is a folder; give the file to write"),
    (["steptime_collect.ncu", "--out", "/dev/null", "--m", "1", "--shapes", "8x8"], "is not a regular file"),
    (["steptime_collect.dispatch", "--gpu", "h100-sxm", "--out", ""], "an empty file name"),
])
def test_a_collector_refuses_an_out_path_it_cannot_write_before_collecting(tmp_path, argv, needle):
    """Before: a folder or device as --out was met only by the atomic rename after the whole collection
    (IsADirectoryError, a traceback, hours of GPU time gone); on a CPU host `clock --dry-run` took it, exit 0."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---- 6. fitted engine constants and constants files handed to the API ----------------------------------------------
def _bad_files(tmp_path):
    from steptime.calibration import seal_text  # sealed (wave 42: a fitted file is refused for its seal first)

    (tmp_path / "bad.yaml").write_text(seal_text("a: [\n"))
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "list.yaml").write_text(seal_text("- 1\n- 2\n"))
    (tmp_path / "dir").mkdir()
    return {"bad.yaml": "YAML error at line ", "bin.yaml": "not UTF-8 text", "list.yaml": "a YAML list",
            "dir": "is a directory"}


def test_fitted_engine_constants_refuse_a_file_that_is_not_one(tmp_path):
    """Before: get_engine(fitted=path) / Constants.with_engines(path) raised PyYAML's ParserError, UnicodeDecodeError,
    IsADirectoryError or AttributeError ('list' object has no attribute 'get'), and took a number as no fits."""
    from steptime.calibration import Constants
    from steptime.errors import SteptimeError
    from steptime.specs.engines import get_engine

    for name, needle in _bad_files(tmp_path).items():
        with pytest.raises(SteptimeError) as e:
            get_engine("vllm", fitted=tmp_path / name)
        assert needle in clean(e)
    with pytest.raises(SteptimeError) as e:
        Constants.default().with_engines(5)
    assert "got int" in clean(e)


def test_constants_load_refuses_a_base_that_is_not_a_constants_file(tmp_path):
    """Before: Constants.load(<folder | empty | list | binary>) raised IsADirectoryError, TypeError or
    UnicodeDecodeError; Constants.load(DEFAULTS_FILE, 5) TypeError ('int' object is not iterable)."""
    from steptime.calibration import DEFAULTS_FILE, Constants
    from steptime.errors import SteptimeError

    (tmp_path / "empty.yaml").write_text("")
    cases = {**_bad_files(tmp_path), "empty.yaml": "no `constants:` mapping"}
    cases["list.yaml"] = "no `constants:` mapping"
    for name, needle in cases.items():
        with pytest.raises(SteptimeError) as e:
            Constants.load(tmp_path / name)
        assert needle in clean(e), name
    with pytest.raises(SteptimeError) as e:
        Constants.load(DEFAULTS_FILE, 5)
    assert "a path or a list of paths, got int" in clean(e)


def test_seal_helpers_round_trip():
    """The seal line is a YAML comment: the document parses the same with and without it."""
    from steptime.calibration import check_seal, seal_text
    from steptime.errors import InputError

    text = "a: 1\nb: [1, 2]\n"
    sealed = seal_text(text)
    assert yaml.safe_load(sealed) == yaml.safe_load(text) and sealed.startswith(text)
    check_seal(sealed, "x")
    with pytest.raises(InputError):
        check_seal(sealed.replace("a: 1", "a: 2"), "x")
    check_seal(text, "x", required=False)
    assert json.dumps(yaml.safe_load(sealed))


# ---- 7. steptime data: one line, nothing on stdout ----------------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    ([], "a subcommand is required"),                       # before: the usage on stdout, exit 2
    (["verfy"], "unknown subcommand 'verfy'"),              # before: the error and the usage, two lines
    (["verify", "--json", "extra"], "unrecognized arguments: extra"),  # before: argparse's usage block and error
    (["verify", "--root", ""], "--root '': an empty value"),  # before: '' read as the cwd, a full verify
])
def test_data_refusals_are_one_line(capsys, argv, needle):
    try:
        rc, out, err = run_cli(capsys, ["data", *argv])
    except SystemExit as e:  # argparse
        cap = capsys.readouterr()
        rc, out, err = e.code, cap.out, cap.err
    assert rc == 2 and out == "" and needle in err and err.count("\n") == 1, (out, err)
