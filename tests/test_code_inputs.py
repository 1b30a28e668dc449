"""The DAG knows the code (issue 18): a rule's library-code inputs are derived from the import
graph of its script (`code_of` in workflow/rules/common.smk), not typed per rule."""
from __future__ import annotations

import ast
import functools
import glob
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMON = ROOT / "workflow" / "rules" / "common.smk"


@pytest.fixture(scope="module")
def code_of():
    """common.smk's lib/code_of and their helpers, run as plain Python from the repository root."""
    tree = ast.parse(COMMON.read_text())
    wanted = {"lib", "_module_files", "_imports", "code_of"}
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in fns} == wanted
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        ns = {"Path": Path, "functools": functools, "PACKAGES": ("steptime", "steptime_lab", "steptime_collect")}
        ns["LIB"] = sorted(p for pkg in ns["PACKAGES"] for ext in ("py", "yaml")
                           for p in glob.glob(f"src/{pkg}/**/*.{ext}", recursive=True))
        exec(compile(ast.Module(body=fns, type_ignores=[]), str(COMMON), "exec"), ns)
        ns["_MODULES"] = ns["_module_files"]()
        # memoised: the derivation is a pure function of the script and the files, and the tests ask
        # for the same scripts many times (unmemoised this file took minutes)
        yield functools.cache(lambda s: (os.chdir(ROOT), tuple(ns["code_of"](s)))[1])
    finally:
        os.chdir(cwd)


def scripts_of_rules() -> dict[str, str]:
    """rule name -> script stem, for every rule that declares code=code_of(...)."""
    out = {}
    for f in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = f.read_text()
        for m in re.finditer(r"^(?:rule|checkpoint)\s+(\w+):(.*?)(?=^\S|\Z)", text, re.S | re.M):
            c = re.search(r'code=code_of\("(\w+)"\)', m.group(2))
            s = re.search(r"scripts/(\w+)\.py", m.group(2))
            if c:
                assert s and c.group(1) == s.group(1), f"rule {m.group(1)}: code_of names another script"
                out[m.group(1)] = c.group(1)
    return out


def test_every_code_input_is_derived():
    text = "".join(f.read_text() for f in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert "code=lib(" not in text and len(scripts_of_rules()) >= 40


def test_e2_9_gets_what_its_script_imports(code_of):
    files = code_of("E2_9_chunk_budget")
    # the files the hand-typed list missed (issue 18), and what the serving experiment runs
    for f in ("src/steptime_lab/results.py", "src/steptime/io.py", "src/steptime_lab/experiments/serving/chunks.py",
              "src/steptime/serve/sim.py", "src/steptime/step.py", "src/steptime/calibration/defaults.yaml",
              "src/steptime/specs/engines.yaml"):
        assert f in files, f
    assert "src/steptime_lab/experiments/gemm/folds.py" not in files  # not imported by the serving chain


def test_a_module_reruns_exactly_its_importers(code_of):
    rules = scripts_of_rules()
    def users(module):
        return {r for r, s in rules.items() if module in code_of(s)}

    # E2_13 through steptime_lab.experiments.serving_peers (silicon_workloads)
    assert users("src/steptime_lab/experiments/serving_peers.py") == {"E2_12", "E2_13"}
    # the peer registry imports every product peer: a rule that obtains peers reruns when any of them changes
    assert users("src/steptime/serve/aic.py") == users("src/steptime/peers.py") > {"E1_23", "E2_1", "E2_12"}
    assert users("src/steptime_lab/experiments/design.py") == {"design_choices"}
    assert users("src/steptime_lab/experiments/serving/__init__.py") == {"E2_3", "E2_4", "E2_9", "E2_10", "E2_12", "E2_13",
                                                                      "E3_4"}  # E3_4: serving.replay.engines_by_gpu
    assert users("src/steptime_lab/experiments/serving/pools.py") == users("src/steptime_lab/experiments/serving/__init__.py")
