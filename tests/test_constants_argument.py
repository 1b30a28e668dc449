"""Constants are an argument (issue 18): nothing process-wide decides what a prediction uses.

- two predictions with different Constants, interleaved in one process, equal the same
  predictions made each in a fresh process;
- no module of the product holds module-level mutable state that a function changes (a scan
  of the source; lru_caches of the immutable shipped files are allowed, they are not state);
- `import steptime` stays light.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PRODUCT = SRC / "steptime"

# Two constants sets: the shipped one, and one whose host constants and vllm engine fits differ.
_SETUP = textwrap.dedent("""
    import json
    import numpy as np
    from steptime.calibration import Constants
    from steptime.specs import get_gpu
    from steptime.step import predict_step
    from steptime.serve import StepTimer

    A = Constants.default()
    B = Constants.default().with_overrides({"eta_mem_max": 0.5}, scope="gpu.h100-sxm").with_engines(
        {"vllm": {"h100-sxm": {"t_samp_ms": {"value": 1.5, "provenance": "FITTED", "source": "test"}}}})

    def one(c):
        r = predict_step("llama-3.1-8b", "h100-sxm", decode=[(32, 1024)], prefill=[(1, 512)], constants=c, tp=2)
        t = StepTimer("llama-3.1-8b", "h100-sxm", constants=c, max_tokens=1024).step_arrays(np.array([1, 1, 512]), np.array([1024, 64, 0]))
        return {"total_ms": r.total_ms, "terms_ms": r.terms_ms, "timer_s": t}
""")


def _fresh(which: str) -> dict:
    code = _SETUP + f"\nprint(json.dumps(one({which})))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_interleaved_constants_equal_separate_processes():
    ns: dict = {}
    exec(_SETUP, ns)
    one, A, B = ns["one"], ns["A"], ns["B"]
    inter = [one(A), one(B), one(A), one(B)]
    a, b = _fresh("A"), _fresh("B")
    assert a != b  # the two sets really differ
    for got, want in zip(inter, [a, b, a, b]):
        assert json.loads(json.dumps(got)) == want


MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add", "discard",
            "remove", "__setitem__", "__delitem__"}


def mutable_state(source: str) -> list[str]:
    """Module-level names bound to a mutable container (list/dict/set display or call) that a
    function of the module changes, and every `global` statement: one line per finding."""
    tree = ast.parse(source)
    mutable = set()
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is None:
            continue
        is_mut = isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("list", "dict", "set", "defaultdict", "OrderedDict", "deque"))
        if is_mut:
            mutable |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Global):
                found.append(f"line {n.lineno}: global {', '.join(n.names)} in {fn.name}")
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS
                  and isinstance(n.func.value, ast.Name) and n.func.value.id in mutable):
                found.append(f"line {n.lineno}: {n.func.value.id}.{n.func.attr}() in {fn.name}")
            elif isinstance(n, (ast.Assign, ast.AugAssign, ast.Delete)):
                for t in (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]):
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in mutable:
                        found.append(f"line {n.lineno}: {t.value.id}[...] assigned in {fn.name}")
    return found


def test_the_scan_finds_the_old_process_wide_constants():
    old = textwrap.dedent("""
        _ACTIVE: list = []
        def use(c):
            _ACTIVE.clear()
            _ACTIVE.append(c)
        _REG = {}
        def register(k, v):
            _REG[k] = v
        _N = 0
        def bump():
            global _N
            _N += 1
        KNOWN = {"a": 1}
        def read(k):
            return KNOWN[k]
    """)
    found = mutable_state(old)
    assert any("_ACTIVE.clear" in f for f in found) and any("_REG[...]" in f for f in found)
    assert any("global _N" in f for f in found) and not any("KNOWN" in f for f in found)


@pytest.mark.parametrize("path", sorted(PRODUCT.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_level_mutable_state_in_the_product(path):
    assert mutable_state(path.read_text()) == []


def test_import_steptime_is_light():
    """`import steptime` under 0.2 s (best of three fresh processes; the interpreter's own start
    is not counted): the package front imports nothing heavy until a name is used."""
    code = "import time; t = time.perf_counter(); import steptime; print(time.perf_counter() - t)"
    best = min(float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                    text=True).stdout) for _ in range(3))
    assert best < 0.2, f"import steptime took {best:.3f} s"
