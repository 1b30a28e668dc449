"""The wall between the product (`steptime`) and the lab (`steptime_lab`) and the collectors.

The product is what `pip install steptime` gives a user: it never imports the lab or the collectors
(the CLI's front for lab commands is the one place allowed, inside the function that runs them), and
it imports no heavy pipeline library (pandas, matplotlib, seaborn, scipy, sklearn, snakemake) at
module level. A module-level import is any import not inside a function body.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "src" / "steptime"
HEAVY = {"pandas", "matplotlib", "seaborn", "scipy", "sklearn", "snakemake", "pyarrow", "pandera", "tqdm", "jsonschema"}
LAB = {"steptime_lab", "steptime_collect"}
# product modules allowed to import the lab, inside a function only: the one CLI that fronts both
LAB_FRONT = {"cli.py"}


def _imports(tree):
    """(module name, at module level?) for every import in a module's AST."""
    out = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, not in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.append((child.module, not in_func))
            visit(child, func)

    visit(tree, False)
    return out


def _product_modules():
    return sorted(p for p in PRODUCT.rglob("*.py") if "__pycache__" not in p.parts)


def test_product_never_imports_the_lab_or_collectors():
    bad = []
    for p in _product_modules():
        rel = p.relative_to(PRODUCT).as_posix()
        for mod, top in _imports(ast.parse(p.read_text())):
            if mod.split(".")[0] in LAB and (top or rel not in LAB_FRONT):
                bad.append(f"{rel}: {mod}")
    assert not bad, "product imports the lab: " + ", ".join(bad)


# Heavy imports still at module level in the product (issue 18 emptied it: the serving simulator
# imports pandas only where a run's table is built); the set may only shrink.
KNOWN_HEAVY: set = set()


def test_product_imports_no_heavy_library_at_module_level():
    bad = {f"{p.relative_to(PRODUCT).as_posix()}: {mod}" for p in _product_modules()
           for mod, top in _imports(ast.parse(p.read_text())) if top and mod.split(".")[0] in HEAVY}
    assert bad == KNOWN_HEAVY, (f"heavy imports at module level in the product: new {sorted(bad - KNOWN_HEAVY)}, "
                                f"fixed (remove from KNOWN_HEAVY) {sorted(KNOWN_HEAVY - bad)}")


def test_import_steptime_loads_no_lab_and_no_heavy_library():
    code = ("import sys, steptime; print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & "
            + repr(HEAVY | LAB) + ")))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}).stdout.strip()
    assert out == "", f"import steptime loaded: {out}"


def test_the_walker_sees_a_lab_import():
    """The check above can fail: a module-level lab import is found, a function-level one is told apart."""
    tree = ast.parse("import os\nfrom steptime_lab.data import x\ndef f():\n    import pandas\n")
    assert ("steptime_lab.data", True) in _imports(tree)
    assert ("pandas", False) in _imports(tree)
