# Shared definitions and helper functions for the workflow/rules/*.smk files (rules live
# there, functions only here): config validation (every config file against its schema,
# unknown keys refused), the experiment registry, the software environment, the library
# source as an input (an edit to steptime reruns what imports it), and the raw-file check.
import collections
import functools
import glob
import os
import sys
import yaml
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


def yaml_load(stream):
    """yaml.safe_load with libyaml's parser where PyYAML has it (same document, faster DAG building)."""
    return yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def validate_file(doc, schema, where):
    """snakemake's validate with the file named: its error says "Error validating config file." whichever file it
    was (config/tables.yaml, collect.yaml ...) and prints the schema; this says `<file> does not validate against
    <schema>: <what> (at <where in it>)` in one line (wave 39)."""
    try:
        validate(doc, schema)
    except WorkflowError as exc:
        lines = str(exc.args[0] if exc.args else exc).splitlines()
        what = next((ln.split(": ", 1)[1] for ln in lines if ln.startswith("ValidationError: ")), None)
        if what is None:
            raise
        at = next((ln[len("On "):].rstrip(":") for ln in lines if ln.startswith("On instance[")), None)
        raise WorkflowError(f"{where} does not validate against workflow/schemas/{Path(schema).name}: {what}"
                            + (f" (at {at})" if at else "")) from None


validate_file(config, "../schemas/config.schema.yaml", "config/config.yaml (with any --configfile)")


def two_threads_if_room(wildcards=None):
    """Threads of a job that can use two (the RF fits, the planner's simulations): two where the run has more than
    two cores, one on a 2-core run. There a 2-thread job waits until both cores are free at once, which the greedy
    scheduler never leaves (it fills a free core with the next 1-thread job), so it ran last and stretched the main
    job's end by minutes. The numbers do not depend on it (the fits and simulations are the same at any count)."""
    try:  # `-j N` on a local run sets the jobs (nodes) count, `--cores N` the cores: the larger is the machine's share
        cores = max(int(getattr(workflow.global_resources.get(k), "value", None) or 1) for k in ("_cores", "_nodes"))
    except Exception:  # no count (a lint, a DAG listing): one thread
        cores = 1
    return 2 if cores > 2 else 1


with open(config["experiments"]) as _fh:
    _REGISTRY = yaml_load(_fh)
validate_file(_REGISTRY, "../schemas/experiments.schema.yaml", config["experiments"])
EXPERIMENTS = _REGISTRY["experiments"]

with open("config/collect.yaml") as _fh:
    COLLECT = yaml_load(_fh)
validate_file(COLLECT, "../schemas/collect.schema.yaml", "config/collect.yaml")

# The names the library knows (its spec tables): every {gpu} and {model} wildcard is one of them
# (the wildcard_constraints in the Snakefile), and config/collect.yaml may name no other.
with open("src/steptime/specs/gpus.yaml") as _fh:
    SPEC_GPUS = list(yaml_load(_fh)["gpus"])
with open("src/steptime/specs/models.yaml") as _fh:
    SPEC_MODELS = list(yaml_load(_fh)["models"])
for _g in COLLECT["gpus"]:
    if _g not in SPEC_GPUS:
        raise WorkflowError(f"config/collect.yaml: unknown GPU {_g!r} (not in src/steptime/specs/gpus.yaml)")
for _size in ("fast", "full"):
    for _g in config["sizes"]["r2_1_design"][_size]["targets"] or []:
        if _g not in SPEC_GPUS:
            raise WorkflowError(f"config/config.yaml: sizes.r2_1_design.{_size}.targets: unknown GPU {_g!r} "
                                "(not in src/steptime/specs/gpus.yaml)")


def refuse_non_finite(doc, where):
    """The schemas bound every number, but NaN compares false with any bound: refuse it (and inf) by name."""
    import math

    todo = [(where, doc)]
    while todo:
        at, x = todo.pop()
        if isinstance(x, float) and not math.isfinite(x):
            raise WorkflowError(f"{at}: {x} is not a finite number")
        if isinstance(x, dict):
            todo += [(f"{at}.{k}", v) for k, v in x.items()]
        elif isinstance(x, list):
            todo += [(f"{at}[{i}]", v) for i, v in enumerate(x)]


refuse_non_finite(config, "config/config.yaml")
refuse_non_finite(_REGISTRY, config["experiments"])
refuse_non_finite(COLLECT, "config/collect.yaml")
if COLLECT["steptrace"]["model"] not in SPEC_MODELS:
    raise WorkflowError(f"config/collect.yaml: steptrace.model {COLLECT['steptrace']['model']!r} is not in "
                        "src/steptime/specs/models.yaml")


def one_of(names):
    """A wildcard constraint that matches exactly one of the given names (each taken literally); with no
    names, one that matches nothing (e.g. no notebooks in a scratch copy)."""
    import re

    names = sorted(names, key=len, reverse=True)  # the longest first: a100-sxm-40gb before a100-sxm
    return "|".join(re.escape(n) for n in names) or "(?!)"


# the GPUs the collection rules run on (config/collect.yaml `gpus`, each with a Slurm gres)
COLLECT_GPUS = one_of(COLLECT["gpus"])


# What a collection job asks Slurm for (every collection rule's resources, one place): one GPU of the model named in
# config/collect.yaml through the executor plugin's own `gpu_model` resource (it writes `--gpus=<model>:1`), and a
# node of its own through `slurm_extra`. The plugin refuses a `--gres`/`--gpus` (or account, partition, memory ...)
# in slurm_extra at submission, not in a dry run: those are its resources (tests/test_telemetry.py submits through
# a stand-in sbatch to check).
def collect_gpu_model(wc):
    return COLLECT["gpus"][wc.gpu]["gres"]


COLLECT_SLURM_EXTRA = "--exclusive"


def check_wildcards_constrained(rules, global_constraints):
    """Refuse, at parse time, a rule whose wildcard no constraint limits (its own or the Snakefile's global
    wildcard_constraints): an unconstrained wildcard matches any text a target names, shell syntax included."""
    for r in rules:
        free = set(r.wildcard_names) - set(r.wildcard_constraints) - set(global_constraints)
        if free:
            raise WorkflowError(f"wildcard(s) {', '.join(sorted(free))} of rule {r.name} without a constraint; "
                                "add one to the Snakefile's wildcard_constraints, from the registry's names")

# The one software environment, named by every rule's conda: directive (paths resolve against
# the rule's own .smk file): the dependencies only. Every job imports steptime from this
# checkout's src/ (first on PYTHONPATH), with or without --use-conda, so the code a rule runs
# is the code it declares as input.
CONDA_ENV = "../envs/steptime.yaml"
_SRC = str(Path(workflow.basedir, "src").resolve())
os.environ.update(PYTHONPATH=_SRC)
sys.path.insert(0, _SRC)  # this process too (the registered-raw check reads the manifest through the library)

# A key given twice in one mapping of a config file: Snakemake's configfile reader and yaml_load above keep the last
# without a word (the schemas cannot see it); the library's loader refuses it (steptime.io.DuplicateKeyError).
from steptime.io import DuplicateKeyError as _DuplicateKeyError, read_yaml as _read_yaml_strict

for _f in ("config/config.yaml", config["experiments"], "config/collect.yaml"):
    try:
        _read_yaml_strict(_f)
    except _DuplicateKeyError as _e:
        raise WorkflowError(str(_e)) from None

# The code, declared as an input of every rule that imports it (code_of, derived from the import
# graph of the rule's script, not typed per rule) (the shipped constants file
# src/steptime/calibration/defaults.yaml included: no rule writes it; the settle rules write
# results/calibration/*.yaml and `steptime calibration ship` ships them). Three packages under src/:
# the product steptime, the lab steptime_lab and the collectors steptime_collect.
PACKAGES = ("steptime", "steptime_lab", "steptime_collect")
LIB = sorted(p for pkg in PACKAGES for ext in ("py", "yaml") for p in glob.glob(f"src/{pkg}/**/*.{ext}", recursive=True))


def lib(*parts):
    """Code files of the named modules/subpackages, by path inside any package or from src/ (a whole
    package by its name), all code if none."""
    if not parts:
        return LIB
    prefixes = [f"src/{part}" for part in parts] + [f"src/{pkg}/{part}" for pkg in PACKAGES for part in parts]
    return [p for p in LIB if p.startswith(tuple(prefixes))] + [
        "src/steptime/__init__.py"
    ]


def _module_files():
    """{module name: its file} for every module of the three packages."""
    out = {}
    for p in LIB:
        if p.endswith(".py"):
            parts = Path(p).relative_to("src").with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


_MODULES = _module_files()


@functools.cache
def _imports(path):
    """The package modules `path` imports (ast: top-level and function-level imports alike). Memoised:
    every rule's code_of walks the same modules, and re-parsing them took most of the parse time."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in _MODULES else node.module
                     for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in _MODULES:  # the deepest module the name points at
                n = n.rpartition(".")[0]
            if n:
                found.add(n)
    return frozenset(found)


def code_of(script):
    """The library files a workflow script runs: the transitive closure of the steptime,
    steptime_lab and steptime_collect modules it imports (each module's parent packages, whose
    __init__ runs first, included), plus the data files (*.yaml) beside each, plus the data
    loaders config/tables.yaml names by module (imported by name, invisible to ast)."""
    todo = list(_imports(f"workflow/scripts/{script}.py"))
    seen = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parents = [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)]
        todo += [q for q in parents if q in _MODULES] + sorted(_imports(_MODULES[m]))
    files = {_MODULES[m] for m in seen}
    if "steptime_lab.data.tables" in seen:
        files |= set(lib("data"))
    dirs = {str(Path(f).parent) for f in files}
    files |= {p for p in LIB if p.endswith(".yaml") and str(Path(p).parent) in dirs}
    return sorted(files)


def question(eid):
    """An experiment's question from the registry (its ID where the registry leaves it out, as .test/ does)."""
    return EXPERIMENTS.get(eid, {}).get("question", eid)


def targets(eid):
    """An experiment's pass/fail targets from the registry (config/experiments.yaml `targets:`),
    passed to its script as a param so the library's document functions take them as an argument."""
    return EXPERIMENTS.get(eid, {}).get("targets", {})


def settings(eid):
    """An experiment's method settings from the registry (config/experiments.yaml `settings:`; empty where
    the registry leaves the experiment out, as .test/ does), passed to its script as a param."""
    return EXPERIMENTS.get(eid, {}).get("settings", {})


def figure(key, stem):
    """A figure's declared outputs, as plotting.save writes them: {key: stem.png, key_pdf: stem.pdf,
    key_caption: stem.caption.txt} (unpack into output: with **). The PNG goes into the Snakemake
    HTML report (`snakemake --report report.html`), grouped by part and experiment, captioned by
    workflow/report/figure.rst (the question, the data the rule read, the claims it backs)."""
    eid = figure_experiment(stem)
    png = report(f"{stem}.png", caption="../report/figure.rst", category=part_of(eid), subcategory=eid,
                 labels={"experiment": eid, "figure": Path(stem).name})
    return {key: png, f"{key}_pdf": f"{stem}.pdf", f"{key}_caption": f"{stem}.caption.txt"}


def figure_experiment(stem):
    """The experiment ID a figure belongs to, from its name (figures/E1_1c_light -> E1.1c); 'data' else."""
    import re

    m = re.match(r"([ELR]\d)_(\d+[a-z]?)(?:_|$)", Path(stem).name)
    return f"{m.group(1)}.{m.group(2)}" if m else "data"


def part_of(eid):
    """The report category of an experiment ID."""
    return {"E1": "Part 1 (the predictor)", "L0": "Part 1 (literature)", "E2": "Part 2 (utility)",
            "R2": "Round 2"}.get(eid.split(".")[0], "Data and walkthroughs")


def size(name):
    """A fit size from config `sizes`: the `fast` set in the main job, `full` with fast: false."""
    return config["sizes"][name]["fast" if config["fast"] else "full"]


def registered_raw(*eids):
    """An input function that stops the build with one line naming the first registered raw input of the
    experiments (config/experiments.yaml `raw:`) that is gone: a file missing or dropped from raw/MANIFEST.yaml,
    a directory missing a file the manifest lists (steptime_lab.data.manifest.registered_problems; `steptime data
    verify` checks the same). It adds no input (the data reach the rule through its tidy tables); every rule
    that writes a registry experiment's outputs declares it (checked at parse: check_registered_raw)."""

    def check(wildcards):
        for eid in eids:
            exp = EXPERIMENTS.get(eid, {})
            # awaiting: its `raw:` names the telemetry rule all waits for; the rule reads whatever was collected
            if exp.get("status") in ("built", "optional"):
                stop_on_registered(exp.get("raw", []), eid)
        return []

    check.eids = eids
    return check


def stop_on_registered(paths, eid):
    """WorkflowError with the first problem of an experiment's registered raw inputs, if any."""
    from steptime_lab.data.manifest import registered_problems

    problems = registered_problems(paths, ".", needed_by=eid)
    if problems:
        raise WorkflowError(problems[0][1])


def check_registered_raw(rules):
    """Refuse, at parse time, a rule that writes an experiment's registered outputs without declaring
    `registered=registered_raw(<its IDs>)` among its inputs."""
    owner = {o: eid for eid, exp in EXPERIMENTS.items() for o in exp["outputs"]}
    for r in rules:
        eids = {owner[str(o)] for o in r.output if str(o) in owner}
        if not eids:
            continue
        idx = r.input._names.get("registered", (None,))[0]
        have = set(getattr(r.input[idx], "eids", ())) if idx is not None else set()
        if not eids <= have:
            raise WorkflowError(f"the rule {r.name} writes outputs of {', '.join(sorted(eids))} without the input "
                                f"registered=registered_raw(...) naming them (their config/experiments.yaml raw: check)")


def data_present(exp):
    """True when every raw input of an experiment exists (awaiting telemetry otherwise)."""
    return all(Path(p).exists() for p in exp.get("raw", []))


def missing_raw(paths, what):
    """Stop the build with one line naming the first missing raw file (never drop it silently)."""
    for p in paths:
        if not Path(p).exists():
            raise WorkflowError(
                f"raw file missing: {p} (needed by {what}; listed in raw/MANIFEST.yaml or "
                f"config/experiments.yaml): restore it (git checkout -- {p}) or change the registry"
            )
    return list(paths)


def all_targets():
    """Every `built` experiment's outputs (a missing raw file stops the build, naming it), the
    outputs of `awaiting` experiments whose telemetry has arrived, the data tables and specs."""
    out = []
    for eid, exp in EXPERIMENTS.items():
        if exp["status"] == "built":
            stop_on_registered(exp.get("raw", []), eid)
            out.extend(exp["outputs"])
        elif exp["status"] == "awaiting" and data_present(exp):
            out.extend(exp["outputs"])
    out.extend(globals().get("DATA_TARGETS", []))
    if config["rf"].get("grid_check", False):
        out.extend(globals().get("GRID_CHECK_TARGETS", []))
    out.append("results/specs/gpus.json")
    out.append("results/SUMMARY.md")
    out.append("results/specs/models.json")
    return out


def primary_result(eid):
    """An experiment's own result file: results/<ID with _>.json (E1.16 -> results/E1_16.json)."""
    return f"results/{eid.replace('.', '_')}.json"


def experiment_results():
    """Every registered experiment's own result among all_targets(), whatever its ID's prefix (E1, E2, E3, L0,
    R2, any new one): the registry names them, no hand list (no timing or calibration side files)."""
    own = {primary_result(eid) for eid in EXPERIMENTS}
    return [r for r in all_targets() if r in own]


def part2_results():
    """Every Part-2 result among the experiment results but E2.7's own; called from input lambdas, so a
    missing raw file stops the jobs that need it, not the parse."""
    return [r for r in experiment_results() if Path(r).name.startswith("E2") and "E2_7" not in r]


def results_and_e2_7():
    """Every experiment result, E2.7's included where the registry holds it (not in .test/); called from
    input lambdas, as part2_results."""
    return [r for r in experiment_results() if "E2_7" not in r] + (["results/E2_7.json"] if "E2.7" in EXPERIMENTS else [])


# The tidy tables (config/tables.yaml) and the raw files each reads (raw/MANIFEST.yaml).
RAW_MANIFEST = "raw/MANIFEST.yaml"
with open("config/tables.yaml") as _fh:
    TABLES = yaml_load(_fh)
validate_file(TABLES, "../schemas/tables.schema.yaml", "config/tables.yaml")
TABLES = TABLES["tables"]
# raw files per manifest table (read once, at parse time); a missing manifest stops the build
missing_raw([RAW_MANIFEST], "every tidy table")
_RAW_FILES = yaml_load(Path(RAW_MANIFEST).read_text())["files"]
RAW = collections.defaultdict(list)
for _f in _RAW_FILES:
    RAW[_f.get("table")].append(_f["path"])
DATA_LIB = lib("data", "specs", "errors", "io")


def tidy(name):
    """The path of one tidy table (a row of config/tables.yaml builds it)."""
    return f"results/data/{name}.parquet"


def raw_inputs(wildcards):
    """The raw files of one tidy table and the manifest; a missing file stops the build, named."""
    files = sorted(p for t in TABLES[wildcards.table]["raw"] for p in RAW[t])
    if not files:
        raise WorkflowError(f"tidy table {wildcards.table}: raw/MANIFEST.yaml lists no file of "
                            f"{TABLES[wildcards.table]['raw']}")
    missing_raw(files, f"results/data/{wildcards.table}.parquet")
    table_registered(wildcards.table, files)
    return files + [RAW_MANIFEST]


def table_registered(table, files):
    """Stop a tidy table's build on a registered raw input of an experiment that reads it which is gone
    (steptime_lab.data.manifest.table_registry_problems): a file removed together with its manifest entry no
    longer shrinks the table silently."""
    from steptime_lab.data.manifest import table_registry_problems

    for path, msg in table_registry_problems(files, EXPERIMENTS, "."):
        raise WorkflowError(f"{msg} (the tidy table {table} reads it)")
