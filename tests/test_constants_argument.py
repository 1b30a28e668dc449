"""Constants are an argument (issue 18): nothing process-wide decides what a prediction uses.

- two predictions with different Constants, interleaved in one process, equal the same
  predictions made each in a fresh process;
- no module of the product holds module-level mutable state: a scan of the source (containers a
  function changes, `global`), and a check of every imported module's objects, all the way down
  (containers, unfrozen instances, caches not argued for, the values the caches hold);
- `import steptime` stays light.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import enum
import functools
import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys
import textwrap
import types
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


# ---------------------------------------------------------------------------------------------
# The same rule, checked on the imported modules (what the source scan cannot see: a dict built
# by a call, a registry object, a cache's value): every module-level object of the product is
# immutable, all the way down, except the few named here with their reason.

# module-level objects that are not data: what each is for
ALLOWED_OBJECTS = {
    ("steptime.io", "_UMASK_LOCK"): "a lock that serialises umask changes while a file is created; holds no data",
}
# functools caches: a pure function of its (hashable) arguments, or a loader of a file the package
# ships (read-only once installed; `steptime constants ship`, the one command that rewrites one,
# clears its caches). Each zero-argument cache's value is itself checked below.
CACHES = {
    "steptime.calibration._default_doc", "steptime.calibration._default_constants",
    "steptime.io._cached_sha256",  # keyed on (path, mtime, size): a changed file is a new key
    "steptime.io._read_yaml_cached",  # keyed on (path, mtime, size); read_yaml_cached hands out deep copies
    "steptime.specs.engines._sealed_fitted_doc",  # keyed on (path, mtime, size); fitted_engines hands out deep copies
    "steptime.terms.moe._default_moe", "steptime.terms.moe._power_law_block",
    "steptime.terms.moe._power_law_one",
    # keyed on whole numbers; the first returns a write-protected array, the second a tuple of floats
    "steptime.terms.moe.balanced_grouped_counts", "steptime.terms.moe._grouped_one",
    "steptime.specs.engines._doc", "steptime.specs.engines._profiles", "steptime.specs.engines.tp_sharding",
    "steptime.specs.gpu_table", "steptime.specs._gpu_alias_index", "steptime.specs._model_doc",
    "steptime.specs.model_table", "steptime.specs._moe_index", "steptime.specs._model_alias_index",
    "steptime.specs._moe_alias_index", "steptime.specs._operators",
    "steptime.specs.moe.moe_class", "steptime.specs.moe.moe_model_table",
    # moe_models.yaml's `unsupported` entries (wave 41) and their name index: loaders of a shipped file, read-only
    "steptime.specs.moe.unsupported_model_table", "steptime.specs._unsupported_index",
}
# raw YAML documents the loaders above parse; private, read by their own module only (their
# contents are checked unchanged by predictions in test_predictions_leave_the_caches_unchanged)
RAW_DOCS = {"steptime.calibration._default_doc", "steptime.specs.engines._doc", "steptime.specs._model_doc",
            "steptime.specs._operators"}


def _product_modules():
    import steptime

    return [m.name for m in pkgutil.walk_packages(steptime.__path__, "steptime.")
            if not m.name.endswith("__main__")]  # __main__ runs the CLI


def mutable_parts(v, where: str, depth: int = 0) -> list[str]:
    """Where `v` holds something mutable: containers, instances of the product's own classes that
    are not frozen, anything of a type not known to be immutable. Empty list: immutable."""
    if depth > 6 or isinstance(v, (str, bytes, int, float, complex, bool, type(None), range, Path, re.Pattern,
                                   types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                                   functools.partial)):
        return []
    if type(v) is object or type(v).__module__ in ("typing", "__future__", "collections.abc"):
        return []  # a sentinel, a type annotation
    from steptime.readonly import ReadOnlyDict

    if isinstance(v, (types.MappingProxyType, ReadOnlyDict)):
        return [p for k, x in v.items() for p in mutable_parts(x, f"{where}[{k!r}]", depth + 1)]
    if isinstance(v, (list, dict, set, bytearray, collections.deque)):
        return [f"{where}: a {type(v).__name__}"]
    if isinstance(v, (tuple, frozenset)):
        return [p for i, x in enumerate(v) for p in mutable_parts(x, f"{where}[{i}]", depth + 1)]
    if isinstance(v, enum.Enum):
        return []
    if dataclasses.is_dataclass(v):
        if not type(v).__dataclass_params__.frozen:
            return [f"{where}: an unfrozen {type(v).__name__}"]
        return [p for f in dataclasses.fields(v) for p in mutable_parts(getattr(v, f.name), f"{where}.{f.name}",
                                                                         depth + 1)]
    from steptime.calibration import Constants
    from steptime.peers import Registry

    if isinstance(v, Constants):
        # its scope tables are read-only mappings of frozen Constants; `_cache` memoises get() (a pure
        # function of those tables). A Constant's value may be a table (a dict or list: light_eta, tiles,
        # allreduce_curve) and `engines` is the fitted engine document: they stay plain containers because
        # results and settled files serialise them; no product code writes them (the cached default is
        # compared before and after a battery of predictions in test_predictions_leave_the_caches_unchanged)
        assert isinstance(v._scopes, ReadOnlyDict)  # read-only and picklable (plan's worker processes get it)
        return [p for s, t in v._scopes.items() for p in ([] if isinstance(t, ReadOnlyDict) else
                                                         [f"{where}._scopes[{s!r}]: a {type(t).__name__}"])]
    if isinstance(v, Registry):  # immutable by construction: no __setattr__, a read-only mapping of frozen entries
        return mutable_parts(v._entries, f"{where}._entries", depth + 1)
    return [f"{where}: a {type(v).__module__}.{type(v).__name__} (not known to be immutable)"]


def _module_state(name: str) -> list[str]:
    mod = importlib.import_module(name)
    found = []
    for k, v in vars(mod).items():
        if k.startswith("__") or (name, k) in ALLOWED_OBJECTS:
            continue
        if isinstance(v, functools._lru_cache_wrapper):
            qual = f"{v.__module__}.{v.__name__}"
            if qual not in CACHES:
                found.append(f"{name}.{k}: a cache not argued for (add it to CACHES with its reason, or remove it)")
            elif qual not in RAW_DOCS and not inspect.signature(v).parameters:
                found += mutable_parts(v(), f"{name}.{k}()")
            continue
        found += mutable_parts(v, f"{name}.{k}")
    return found


def test_the_runtime_check_finds_mutable_objects():
    from steptime.peers import PRODUCT

    assert mutable_parts({"a": 1}, "x") == ["x: a dict"]
    assert mutable_parts(types.MappingProxyType({"a": [1]}), "x") == ["x['a']: a list"]
    assert mutable_parts(types.MappingProxyType({"a": (1, frozenset({2}))}), "x") == []
    assert mutable_parts(((1, {3}),), "x") == ["x[0][1]: a set"]
    from steptime.readonly import ReadOnlyDict, read_only

    ro = read_only({"a": {"b": 1}})
    assert isinstance(ro["a"], ReadOnlyDict) and mutable_parts(ro, "x") == []
    with pytest.raises(TypeError, match="read-only"):
        ro["a"]["b"] = 2
    with pytest.raises(TypeError, match="read-only"):
        ro.update(c=3)
    assert json.loads(json.dumps(ro)) == {"a": {"b": 1}} and dict(ro) == {"a": {"b": 1}}
    import copy
    import pickle

    mine = copy.deepcopy(ro)  # a copy is the caller's: plain and changeable
    mine["a"]["b"] = 2
    assert ro["a"]["b"] == 1 and type(mine["a"]) is dict
    assert pickle.loads(pickle.dumps(ro)) == ro and isinstance(pickle.loads(pickle.dumps(ro)), ReadOnlyDict)
    assert mutable_parts(PRODUCT, "PRODUCT") == []

    @dataclasses.dataclass
    class Loose:
        a: int = 0

    assert mutable_parts(Loose(), "x") == ["x: an unfrozen Loose"]


@pytest.mark.parametrize("name", _product_modules())
def test_no_module_level_mutable_object_in_the_product(name):
    assert _module_state(name) == []


def test_predictions_leave_the_caches_unchanged():
    """The cached loaders' values (raw documents included) are read, never written: a battery of
    predictions (steps, operators, the simulator's timer, MoE) leaves each one as it was."""
    import numpy as np

    from steptime.calibration import Constants
    from steptime.ops import predict_ops
    from steptime.serve import StepTimer
    from steptime.step import predict_step

    def snapshot():
        out = {}
        for name in _product_modules():
            for k, v in vars(importlib.import_module(name)).items():
                if isinstance(v, functools._lru_cache_wrapper) and not inspect.signature(v).parameters:
                    val = v()
                    out[f"{name}.{k}"] = repr(val) if not isinstance(val, Constants) else repr(
                        (sorted(val._scopes.items()), val.engines))
        return out

    before = snapshot()
    c = Constants.default().with_overrides({"eta_mem_max": 0.5}, scope="gpu.h100-sxm")
    for cc in (None, c):
        predict_step("llama-3.1-8b", "h100-sxm", decode=[(8, 512)], prefill=[(1, 256)], constants=cc, tp=2)
        predict_step("qwen3-30b-a3b", "h100-sxm", decode=[(8, 512)], constants=cc)
        predict_ops("gemm", "a100-sxm", m=[16, 4096], n=[4096, 4096], k=[4096, 4096], constants=cc)
        StepTimer("llama-3.1-8b", "h100-sxm", constants=cc, max_tokens=1024).step_arrays(
            np.array([1, 256]), np.array([512, 0]))
    assert snapshot() == before
