"""Wave 42 (fixes12): the shell-injection and unsafe-load patterns, scanned in every file that runs code, so that
none can come back unnoticed. Python files are read as syntax trees (a pattern inside a string or a comment is not
a call); the Snakemake rule files and the shell scripts as text. Each allowed exception is listed with its reason."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_DIRS = ("src", "workflow/scripts", "notebooks", "benchmarks", "tests")
SNAKE_FILES = ("Snakefile", "workflow/rules")
SHELL_FILES = ("workflow/scripts", ".ci")

# calls that hand a string to a shell, or run text as code
SHELL_CALLS = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "commands.getoutput",
               "pty.spawn"}
CODE_CALLS = {"eval", "exec", "compile"}
UNSAFE_YAML = {"yaml.unsafe_load", "yaml.full_load", "yaml.unsafe_load_all", "yaml.full_load_all", "yaml.load_all"}
SAFE_LOADERS = re.compile(r"(C?Safe|Base)Loader|_yaml_loader\(\)|getattr\(yaml, ['\"]CSafeLoader['\"], yaml\.SafeLoader\)")
PICKLE_LOADS = {"pickle.load", "pickle.loads", "joblib.load", "dill.load", "marshal.load", "marshal.loads",
                "shelve.open", "torch.load"}

# (file, call) -> why it is allowed: each reads a file the pipeline itself wrote under results/, never a user's
ALLOWED = {
    ("src/steptime_lab/experiments/moe_parts.py", "pickle.load"):
        "E3.1's engine parts (results/cache), written by rule E3_1_engine, checked against their recorded inputs",
    ("workflow/scripts/E2_2_ranking.py", "joblib.load"): "the rf_fit / greybox rules' own results/cache models",
    ("workflow/scripts/E2_1_grid.py", "joblib.load"): "the rf_fit rule's own results/cache models",
    ("workflow/scripts/E2_1_transfer.py", "joblib.load"): "the rf_fit rule's own results/cache models",
    ("workflow/scripts/E2_5_calibration_cost.py", "joblib.load"): "the rf_fit rule's own results/cache models",
    ("tests/test_constants_argument.py", "exec"): "runs the test's own constant setup string (no outside input)",
    ("tests/test_code_inputs.py", "exec"): "runs workflow/rules/common.smk's own functions (the repository's code)",
    ("tests/test_code_inputs.py", "compile"): "the same: compiles common.smk's function definitions",
    ("tests/test_constants_argument.py", "pickle.loads"): "the bytes the test itself pickled one line before",
}


def _name(node) -> str:
    """'a.b.c' of a call's function (Name / Attribute chain), '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def python_findings(text: str) -> list[tuple[int, str, str]]:
    """(line, call, what) for every unsafe pattern in one Python source."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        kws = {k.arg: k.value for k in node.keywords}
        if isinstance(kws.get("shell"), ast.Constant) and kws["shell"].value is not False:
            out.append((node.lineno, name, "shell=True"))
        elif "shell" in kws and not isinstance(kws["shell"], ast.Constant):
            out.append((node.lineno, name, "shell= not a literal False"))
        if name in SHELL_CALLS or name.startswith(("os.exec", "os.spawn")):
            out.append((node.lineno, name, "runs a command through a shell or replaces the process"))
        if name in CODE_CALLS:
            out.append((node.lineno, name, "runs text as code"))
        if name in UNSAFE_YAML:
            out.append((node.lineno, name, "a YAML loader that builds arbitrary objects"))
        if name == "yaml.load":
            loader = kws.get("Loader", node.args[1] if len(node.args) > 1 else None)
            if loader is None or not SAFE_LOADERS.search(ast.unparse(loader)):
                out.append((node.lineno, name, "yaml.load without a safe Loader"))
        if name in PICKLE_LOADS:
            out.append((node.lineno, name, "unpickles (runs code from the file)"))
        if name in ("np.load", "numpy.load") and isinstance(kws.get("allow_pickle"), ast.Constant) \
                and kws["allow_pickle"].value:
            out.append((node.lineno, name, "np.load with allow_pickle=True"))
    return out


def test_the_python_scanner_finds_each_pattern():
    bad = ("import os, subprocess, yaml, pickle, numpy as np\n"
           "subprocess.run(cmd, shell=True)\nsubprocess.run(cmd, shell=flag)\nos.system('x')\nos.popen('x')\n"
           "os.execv('x', [])\neval('1')\nexec('1')\nyaml.load(s)\nyaml.load(s, Loader=yaml.Loader)\n"
           "yaml.unsafe_load(s)\npickle.load(f)\nnp.load(p, allow_pickle=True)\n"
           "'os.system(\"in a string\")'\nyaml.load(s, Loader=yaml.CSafeLoader)\nsubprocess.run(['ls'])\n")
    found = [(line, what) for line, _, what in python_findings(bad)]
    assert [line for line, _ in found] == list(range(2, 14)), found


def _py_files():
    for d in PY_DIRS:
        yield from sorted((ROOT / d).rglob("*.py"))


def test_no_shell_string_code_string_unsafe_yaml_or_unpickling_in_any_python_file():
    bad = []
    for f in _py_files():
        rel = f.relative_to(ROOT).as_posix()
        if rel == "tests/test_injection_scan.py":
            continue  # this file names every pattern in its own scanner's check
        for line, call, what in python_findings(f.read_text()):
            if (rel, call) not in ALLOWED:
                bad.append(f"{rel}:{line}: {call}: {what}")
    assert not bad, bad


def test_every_allowed_exception_is_still_there():
    """An entry whose call is gone is removed from ALLOWED (the list does not grow stale)."""
    seen = {(f.relative_to(ROOT).as_posix(), call) for f in _py_files() for _, call, _ in
            python_findings(f.read_text())}
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)


def _rule_texts():
    for p in SNAKE_FILES:
        q = ROOT / p
        yield from ([q] if q.is_file() else sorted(q.glob("*.smk")))


_SHELL_SUBST = re.compile(r"\{(?!threads\}|resources\.)[A-Za-z_][^{}]*\}")


def shell_block_findings(text: str) -> list[str]:
    """Every {...} substitution of a rule's `shell:` block without :q ({threads} and {resources.*}, integers Snakemake
    fills in, aside; {config...} included), and any shell=True / os.system in a rule file."""
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"shell\s*=\s*True|os\.system\(|os\.popen\(", line):
            out.append(f"{i + 1}: {line.strip()}")
        if line.strip() != "shell:":
            continue
        indent = len(line) - len(line.lstrip())
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            out += [f"{j + 1}: {m.group(0)}" for m in _SHELL_SUBST.finditer(lines[j]) if not m.group(0).endswith(":q}")]
            j += 1
    return out


def test_the_shell_block_scanner_finds_unquoted_config_and_params():
    text = ("rule a:\n    shell:\n        \"x {config[gpu]} {params.m:q} {threads} {resources.mem_mb} {wildcards.g}\"\n"
            "        \" {output:q}\"\n    run:\n        subprocess.run(c, shell=True)\n")
    assert shell_block_findings(text) == ["3: {config[gpu]}", "3: {wildcards.g}", "6: subprocess.run(c, shell=True)"]


def test_every_shell_block_substitution_is_quoted_config_included():
    bad = [f"{f.relative_to(ROOT)}:{x}" for f in _rule_texts() for x in shell_block_findings(f.read_text())]
    assert not bad, bad


_CODE_ARG = re.compile(r"""\b(python3?|bash|sh|perl|ruby|node)\s+(-c|-e)\s+"[^"]*\$""")


def shell_script_findings(text: str) -> list[str]:
    """A shell variable expanded inside a code string (python -c "...$x...", bash -c "...$x..."), and eval."""
    return [f"{i + 1}: {ln.strip()}" for i, ln in enumerate(text.splitlines())
            if not ln.lstrip().startswith("#") and (_CODE_ARG.search(ln) or re.match(r"\s*eval\s", ln))]


def test_the_shell_script_scanner_finds_a_variable_inside_python_code():
    assert shell_script_findings("""python3 -c "print(s.get_gpu('$gpu'))"\n""")
    assert shell_script_findings('eval "$cmd"\n')
    assert not shell_script_findings("""python3 -c 'import sys; print(sys.argv[1])' "$gpu"\n""")


def test_no_shell_script_expands_a_variable_inside_code():
    files = [p for d in SHELL_FILES for p in sorted((ROOT / d).iterdir())
             if p.is_file() and (p.suffix == ".sh" or p.read_text(errors="replace").startswith("#!/usr/bin/env bash"))]
    assert any(p.name == "collect_lone_gpu.sh" for p in files)
    bad = [f"{p.relative_to(ROOT)}:{x}" for p in files for x in shell_script_findings(p.read_text())]
    assert not bad, bad
