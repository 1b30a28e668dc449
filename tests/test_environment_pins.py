"""The committed results were built in the pinned environment (constraints.txt), and each says so.

Every result records the Python and the versions of the distributions that can move its numbers
(provenance.environment, steptime_lab.results.NUMERIC_DISTRIBUTIONS). A pin changed without a rebuild,
or a result rebuilt in another environment and committed, fails here."""
import json
import re
from importlib import metadata
from pathlib import Path

import pytest

from steptime_lab.results import NUMERIC_DISTRIBUTIONS, environment

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        if not m:
            raise ValueError(f"constraints.txt:{n}: not a `name==version` pin: {line!r}")
        if _norm(m[1]) in out:
            raise ValueError(f"constraints.txt:{n}: {m[1]} pinned twice")
        out[_norm(m[1])] = m[2]
    return out


def _results_with_provenance():
    for path in sorted((ROOT / "results").rglob("*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "code_sha256" in (doc.get("provenance") or {}):
            yield path, doc


def test_pin_parser_refuses_what_is_not_a_pin():
    assert pins("# c\nnumpy==2.4.6\nPyYAML==6.0.4\n") == {"numpy": "2.4.6", "pyyaml": "6.0.4"}
    with pytest.raises(ValueError, match="not a `name==version` pin"):
        pins("numpy>=2\n")
    with pytest.raises(ValueError, match="pinned twice"):
        pins("numpy==2.4.6\nNumPy==2.4.5\n")


def test_every_numeric_distribution_is_pinned():
    pinned = pins((ROOT / "constraints.txt").read_text())
    missing = [d for d in NUMERIC_DISTRIBUTIONS if _norm(d) not in pinned]
    assert not missing, f"constraints.txt pins none of {missing}"


def test_environment_reads_the_installed_versions():
    env = environment()
    assert set(env["packages"]) == set(NUMERIC_DISTRIBUTIONS)
    assert env["packages"]["numpy"] == metadata.version("numpy")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", env["python"])


# Results of opt-in rules that the main job (`snakemake -j2 --forceall`, rule all) does not build, committed from an
# earlier build before results recorded their environment: E2.12 needs AIConfigurator's package (`.[peers]`).
# E2.1's grid check (config/grid_check.yaml) was rebuilt in wave 39 and records its environment like any result.
OPT_IN_BUILT_EARLIER = {"E2_12.json"}


def test_committed_results_were_built_in_the_pinned_environment():
    pinned = pins((ROOT / "constraints.txt").read_text())
    seen, wrong = 0, []
    for path, doc in _results_with_provenance():
        seen += 1
        env = doc["provenance"].get("environment")
        if env is None:
            if path.name not in OPT_IN_BUILT_EARLIER:
                wrong.append(f"{path.relative_to(ROOT)}: records no environment")
            continue
        for name, version in env["packages"].items():
            if version != pinned.get(_norm(name)):
                wrong.append(f"{path.relative_to(ROOT)}: {name} {version}, pinned {pinned.get(_norm(name))}")
        if not env["python"].startswith("3.11."):
            wrong.append(f"{path.relative_to(ROOT)}: Python {env['python']}, pinned 3.11")
    assert seen >= 40, f"only {seen} results with provenance found under results/"
    assert not wrong, f"{len(wrong)} result(s) off the pins: " + "; ".join(wrong[:8])
