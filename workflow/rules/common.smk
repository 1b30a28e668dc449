# Shared definitions and helper functions for the workflow/rules/*.smk files (rules live
# there, functions only here): config validation (every config file against its schema,
# unknown keys refused), the experiment registry, the software environment, the library
# source as an input (an edit to steptime reruns what imports it), and the raw-file check.
import collections
import glob
import os
import yaml
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

validate(config, "../schemas/config.schema.yaml")

with open(config["experiments"]) as _fh:
    _REGISTRY = yaml.safe_load(_fh)
validate(_REGISTRY, "../schemas/experiments.schema.yaml")
EXPERIMENTS = _REGISTRY["experiments"]

with open("config/collect.yaml") as _fh:
    COLLECT = yaml.safe_load(_fh)
validate(COLLECT, "../schemas/collect.schema.yaml")

# The one software environment, named by every rule's conda: directive (paths resolve against
# the rule's own .smk file): the dependencies only. Every job imports steptime from this
# checkout's src/ (first on PYTHONPATH), with or without --use-conda, so the code a rule runs
# is the code it declares as input.
CONDA_ENV = "../envs/steptime.yaml"
_SRC = str(Path(workflow.basedir, "src").resolve())
os.environ.update(PYTHONPATH=_SRC)

# The code, declared as an input of every rule that imports it (the shipped constants file
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
            missing_raw(exp.get("raw", []), eid)
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


def experiment_results():
    """The experiment result JSONs among all_targets() (E1.x, E2.x, L0.x; no timing side files)."""
    return [
        r
        for r in all_targets()
        if Path(r).name.startswith(("E1", "E2", "L0")) and r.endswith(".json") and "timing" not in r
    ]


def part2_results():
    """Every Part-2 result among the experiment results but E2.7's own; called from input lambdas, so a
    missing raw file stops the jobs that need it, not the parse."""
    return [r for r in experiment_results() if Path(r).name.startswith("E2") and "E2_7" not in r]


def results_and_e2_7():
    """Every experiment result, E2.7's included where the registry holds it (not in .test/); called from
    input lambdas, as part2_results."""
    return [r for r in experiment_results() if "E2_7" not in r] + (["results/E2_7.json"] if "E2.7" in EXPERIMENTS else [])


# The library code the step-family rules (attention, light, host, step, literature) import: all of it.
STEP_LIB = lib()


# The tidy tables (config/tables.yaml) and the raw files each reads (raw/MANIFEST.yaml).
RAW_MANIFEST = "raw/MANIFEST.yaml"
with open("config/tables.yaml") as _fh:
    TABLES = yaml.safe_load(_fh)
validate(TABLES, "../schemas/tables.schema.yaml")
TABLES = TABLES["tables"]
# raw files per manifest table (read once, at parse time); a missing manifest stops the build
missing_raw([RAW_MANIFEST], "every tidy table")
_RAW_FILES = yaml.safe_load(Path(RAW_MANIFEST).read_text())["files"]
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
    return missing_raw(files, f"results/data/{wildcards.table}.parquet") + [RAW_MANIFEST]
