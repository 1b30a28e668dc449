"""Wave 39, helper fixes9: a new user's mistyped inputs at the product's boundary (DESIGN.md `Bad input and review
mends, wave 39`). Each test failed on the code before its fix (run against main's src/ and workflow/, see DESIGN).
CLI: one line on stderr, exit 2, nothing written; API: a SteptimeError that is also a ValueError, in one line."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from refusals import clean, refuses
from test_workflow import test_workdir  # noqa: F401 (the fixture: a scratch workflow with .test/ laid over it)

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["plan", "--model", "llama-3.1-8b", "--n", "20", "--rate", "2", "--isl", "128", "--osl", "16", "--tp", "1",
        "--dtypes", "bf16", "--max-gpus", "1", "--no-disagg", "--jobs", "1", "--no-progress", "--slo-tpot-ms", "50"]


# ---- steptime plan: a mistyped GPU in the candidate list ---------------------------------------------------------
def test_plan_refuses_an_unknown_gpu_among_known_ones(capsys):
    """Before: `--gpus h100-sxm,h9000` left h9000 out with a `note:` and exited 0 with the best of the rest."""
    line = refuses(capsys, PLAN + ["--gpus", "h100-sxm,h9000"], "GPU to search (--gpus): unknown GPU 'h9000'")
    assert "closest" in line


def test_plan_api_refuses_an_unknown_gpu():
    from steptime.plan import PlanError, plan
    from steptime.serve import synthetic

    with pytest.raises(PlanError) as e:
        plan("llama-3.1-8b", synthetic(10, isl=64, osl=8, rate=1.0), slo_tpot_s=0.05, gpus=["h100-sxm", "h9000"],
             jobs=1)
    assert "unknown GPU 'h9000'" in clean(e)


# ---- --isl / --osl: the flag named -------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["serve", "plan"])
@pytest.mark.parametrize("flag, value, needle", [
    ("--isl", "0", "--isl '0': a request's length must be >= 1 token"),
    ("--osl", "0:8", "--osl '0:8': a request's length must be >= 1 token"),
    ("--isl", "300:100", "--isl '300:100': LO must be <= HI"),
])
def test_a_length_below_one_token_names_its_flag(capsys, cmd, flag, value, needle):
    """Before: `input length must be >= 1 (got 0)` / `input length range (300, 100) must satisfy ...`: no flag."""
    argv = (PLAN if cmd == "plan" else ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--n", "5",
                                        "--rate", "1", "--no-progress"]) + [flag, value]
    refuses(capsys, argv, needle)


# ---- --config: a config.json goes through --model ----------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["predict", "--config", "config.json", "--gpu", "h100-sxm"],
    ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--config=config.json"],
    ["plan", "--config", "config.json", "--slo-tpot-ms", "50"],
])
def test_config_option_points_at_model_path(capsys, argv):
    """Before: `predict --config c.json` was refused for the missing --model (`the following arguments are
    required: --model`), `serve ... --config=c.json` as an unrecognized argument, neither saying --model reads it."""
    refuses(capsys, argv, "a model's config.json is read through --model PATH")


def test_plan_ep_advice_is_unchanged(capsys):
    refuses(capsys, ["plan", "--model", "gpt-oss-120b", "--ep", "8"],
            "steptime plan: error: unrecognized arguments: --ep 8: steptime plan searches the expert-parallel")


# ---- steptime calibration ship: a truncated settled file ---------------------------------------------------------
def _defaults_copy(tmp_path):
    from steptime.calibration import DEFAULTS_FILE

    dest = tmp_path / "defaults.yaml"
    shutil.copyfile(DEFAULTS_FILE, dest)
    return dest


@pytest.mark.parametrize("name", ["gemm.yaml", "step.yaml", "comm.yaml"])
def test_ship_refuses_a_truncated_settled_file_and_writes_nothing(tmp_path, name):
    """Before: gemm.yaml cut at byte 700 still parsed (its last update's `source` cut mid-sentence) and shipped its
    first entries, exit 0. Every cut that leaves no final newline is refused now, before anything is written."""
    from steptime.calibration import ship
    from steptime.errors import InputError

    text = (ROOT / "results" / "calibration" / name).read_bytes()
    cut = tmp_path / name
    dest = _defaults_copy(tmp_path)
    before = dest.read_bytes()
    for n in (700, len(text) // 2, len(text) - 3):
        cut.write_bytes(text[:n])
        if text[:n].endswith(b"\n"):
            continue
        with pytest.raises(InputError) as e:
            ship([cut], path=dest)
        msg = clean(e)
        assert str(cut) in msg and ("truncated" in msg or "YAML error" in msg), msg
        assert dest.read_bytes() == before


def test_ship_cli_refuses_a_truncated_file_in_one_line(tmp_path, capsys):
    cut = tmp_path / "gemm.yaml"
    cut.write_bytes((ROOT / "results" / "calibration" / "gemm.yaml").read_bytes()[:700])
    refuses(capsys, ["calibration", "ship", str(cut)], "ends mid-line")


def test_ship_still_takes_the_settled_files_whole(tmp_path):
    """The check refuses no file the pipeline writes: each settled file ships into a copy of the defaults."""
    from steptime.calibration import ship

    dest = _defaults_copy(tmp_path)
    ship([ROOT / "results" / "calibration" / n for n in ("gemm.yaml", "step.yaml", "comm.yaml")], path=dest,
         engine_path=tmp_path / "engines_fitted.yaml", greybox_path=tmp_path / "greybox.npz")


# ---- YAML errors in one line -------------------------------------------------------------------------------------
def test_a_truncated_manifest_is_one_line(tmp_path):
    """Before: `raw/MANIFEST.yaml: not valid YAML: while scanning a quoted scalar\\n  in ... line 83 ...` (four
    lines of PyYAML's context inside one `steptime data verify` item)."""
    from steptime.errors import DataError
    from steptime_lab.data.manifest import load_manifest

    (tmp_path / "raw").mkdir()
    text = (ROOT / "raw" / "MANIFEST.yaml").read_text()
    quote = text.index(": '", 2000)  # cut inside a quoted scalar
    (tmp_path / "raw" / "MANIFEST.yaml").write_text(text[:quote + 5])
    with pytest.raises(DataError) as e:
        load_manifest(tmp_path)
    msg = clean(e)
    assert "not valid YAML (YAML error at line" in msg


# ---- config/*.yaml: a typo'd key, named with its file ------------------------------------------------------------
def test_a_misspelt_literature_field_is_named(tmp_path):
    """Before: `eta_clas` was reported as `lacks ['eta_class']`; now the unknown field and the closest name."""
    from steptime_lab.experiments.literature import load

    bad = tmp_path / "literature.yaml"
    bad.write_text((ROOT / "config" / "literature.yaml").read_text().replace("    eta_class: peak", "    eta_clas: peak", 1))
    with pytest.raises(ValueError, match=r"unknown field 'eta_clas' \(did you mean eta_class\?"):
        load(bad)


@pytest.mark.slow
@pytest.mark.parametrize("path, change, needle", [
    # before: accepted without a word (no schema); the figure left figures/PAPER.md's drawn list and `paper`
    ("config/paper_figures.yaml", lambda d: d["figures"]["E1.1a"].update(fiel=d["figures"]["E1.1a"].pop("file")),
     "('fiel' was unexpected)"),
    ("config/paper_figures.yaml", lambda d: d["figures"]["E1.1a"].update(claims=[0]), "0 is less than the minimum"),
    # before: "Error validating config file." whichever file it was, then the schema over many lines
    ("config/tables.yaml", lambda d: d["tables"]["distserve"].update(loader="x"), "('loader' was unexpected)"),
    ("config/collect.yaml", lambda d: d["clock_sweep"].update(rnus=5), "('rnus' was unexpected)"),
])
def test_a_config_file_typo_is_refused_naming_the_file(test_workdir, path, change, needle):
    doc = yaml.safe_load((test_workdir / path).read_text())
    change(doc)
    (test_workdir / path).write_text(yaml.safe_dump(doc))
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-n", "results/specs/gpus.json"],
                       cwd=test_workdir, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    line = next((ln for ln in out.splitlines() if ln.startswith(f"{path} does not validate against")), None)
    assert line is not None and needle in line, out[-2000:]
