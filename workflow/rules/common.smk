# Shared helpers for every rule file: config validation, the experiment registry,
# and the library source as an input (an edit to steptime reruns what imports it).
import glob
import yaml
from pathlib import Path

from snakemake.utils import validate

validate(config, "../schemas/config.schema.yaml")

with open(config["experiments"]) as _fh:
    EXPERIMENTS = yaml.safe_load(_fh)["experiments"]

# The library code, declared as an input of every rule that imports it.
# The constants file is left out: rules that settle constants write it, and a rule
# that needs the settled defaults names DEFAULTS (or the settle rule's output) itself.
DEFAULTS = "src/steptime/calibration/defaults.yaml"
LIB = [
    p
    for p in sorted(glob.glob("src/steptime/**/*.py", recursive=True))
    + sorted(glob.glob("src/steptime/**/*.yaml", recursive=True))
    if p != DEFAULTS
]


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
    out.append("results/specs/gpus.json")
    out.append("results/SUMMARY.md")
    out.append("results/specs/models.json")
    return out
