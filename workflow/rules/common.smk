# Shared definitions and helper functions for the workflow/rules/*.smk files (rules live
# there, functions only here): config validation, the experiment registry, the software
# environment, and the library source as an input (an edit to steptime reruns what imports it).
import glob
import yaml
from pathlib import Path

from snakemake.utils import validate

validate(config, "../schemas/config.schema.yaml")

with open(config["experiments"]) as _fh:
    EXPERIMENTS = yaml.safe_load(_fh)["experiments"]

# The one software environment, named by every rule's conda: directive. It is the top-level
# environment.yml itself (conda: paths resolve against the rule's own .smk file, and every
# rule file sits in workflow/rules/).
CONDA_ENV = "../../environment.yml"

# The library code, declared as an input of every rule that imports it (the shipped
# constants file src/steptime/calibration/defaults.yaml included: no rule writes it; the
# settle rules write results/calibration/*.yaml and `steptime calibration ship` ships them).
LIB = sorted(glob.glob("src/steptime/**/*.py", recursive=True)) + sorted(
    glob.glob("src/steptime/**/*.yaml", recursive=True)
)


def lib(*parts):
    """Library files of the named subpackages/modules (all of the library if none)."""
    if not parts:
        return LIB
    return [p for p in LIB if any(f"src/steptime/{part}" in p for part in parts)] + [
        "src/steptime/__init__.py"
    ]


def data_present(exp):
    """True when every raw input of an experiment exists (awaiting telemetry otherwise)."""
    return all(Path(p).exists() for p in exp.get("raw", []))


def all_targets():
    out = []
    for eid, exp in EXPERIMENTS.items():
        if exp.get("status") in ("built", "awaiting") and data_present(exp):
            out.extend(exp.get("outputs", [f"results/{eid}.json"]))
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
