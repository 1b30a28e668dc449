"""E3.1 split by engine (wave 40): each engine's held-out run (experiments.moe.run on its own fused-MoE tables) is one
Snakemake job that writes a part, and a thin merge documents the parts exactly as the one-process build did
(moe.document_engines, the constants, the figure), so two cores work on E3.1 at once. Nothing here fits or scores:
a part is the engine's `run` dict as it came out, pickled (zstd-compressed: the runs' cell tables pickle to 130-320
MB, about a quarter of that compressed), with the engine's name, the numeric environment of the process that ran it
and the sha256 of every file its job declared as input (the tidy table and the library files it imports); the merge
refuses a part that is missing, unreadable, of another engine or built from other inputs than those on disk now, each
with one line naming it.

Its module level imports the standard library and steptime.io only: the workflow reads ENGINES when it parses
(workflow/rules/moe.smk)."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from steptime.io import atomic_path, file_sha256

# the engines whose own fused-MoE tables E3.1 holds out by GPU, in its document's order: vLLM's run first (its laws
# ship as calibration/moe.yaml's own), then the engines whose claims moe.document_engines adds after vLLM's
ENGINES = ("vllm", "trtllm", "sglang")
# the order the workflow lists the parts in (rule E3_1's input), the longest run first: Snakemake started a rule's
# jobs in that order (wave 40: vllm, trtllm, sglang listed so, sglang started last and ran alone at the end; runs of
# 42 / 56 / 89 s on an idle machine). Order only, never a number.
JOB_ORDER = ("sglang", "trtllm", "vllm")
PART_KIND = "steptime E3.1 engine part"
PART_VERSION = 1
COMPRESSION = "zstd"   # pyarrow's codec (pyarrow reads the tidy tables already)


class PartError(ValueError):
    """A per-engine part of E3.1 that the merge cannot use (missing, unreadable, another engine's, stale)."""


def check_engine(engine) -> str:
    """`engine` if it is one of ENGINES, else PartError naming it."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise PartError(f"E3.1 has no engine {engine!r}: its engines are {', '.join(ENGINES)}")
    return engine


def write_part(path: str | os.PathLike, engine: str, run: dict, inputs) -> None:
    """Write one engine's part: `run` (moe.run(df, engine), unchanged) with the sha256 of each file in `inputs`
    (the paths its job declared, read now: they are the bytes the run was built from) and this process's
    environment (results.environment: the one that computed the run's numbers)."""
    import pyarrow as pa

    from steptime_lab.results import environment

    check_engine(engine)
    if not isinstance(run, dict) or run.get("framework") != engine:
        raise PartError(f"write_part: the run given for engine {engine!r} is not that engine's run (its framework: "
                        f"{run.get('framework') if isinstance(run, dict) else type(run).__name__!r})")
    recorded = {}
    for p in sorted({str(p) for p in inputs}):
        sha = file_sha256(p)
        if sha is None:
            raise PartError(f"write_part: input {p} of engine {engine!r}'s part does not exist")
        recorded[p] = sha
    doc = {"kind": PART_KIND, "version": PART_VERSION, "engine": engine, "inputs": recorded,
           "environment": environment(), "run": run}
    with atomic_path(path) as tmp:
        with pa.output_stream(str(tmp), compression=COMPRESSION) as f:
            pickle.dump(doc, f, protocol=pickle.HIGHEST_PROTOCOL)


def read_part(path: str | os.PathLike, engine: str, data: str | os.PathLike | None = None) -> dict:
    """Engine `engine`'s part at `path` ({"run": its moe.run dict, "environment", "inputs", ...}). PartError, naming
    the part, when the file is missing or is not an E3.1 part, holds another engine's run, was built from a file whose bytes have changed since (or that is
    gone), or (with `data`, the tidy table the merge reads) was not built from that table."""
    import pyarrow as pa

    check_engine(engine)
    p = Path(path)
    where = f"E3.1's part for engine {engine!r} ({p})"
    if not p.is_file():
        raise PartError(f"{where} is missing: rule E3_1_engine writes it")
    try:
        with pa.input_stream(str(p), compression=COMPRESSION) as f:
            doc = pickle.load(f)
    except Exception as exc:  # noqa: BLE001 - any unreadable part is refused, named
        raise PartError(f"{where} cannot be read ({exc.__class__.__name__}): rebuild it (rule E3_1_engine)") from None
    if not isinstance(doc, dict) or doc.get("kind") != PART_KIND or doc.get("version") != PART_VERSION:
        raise PartError(f"{where} is not an E3.1 engine part (version {PART_VERSION}): rebuild it (rule E3_1_engine)")
    if doc.get("engine") != engine or not isinstance(doc.get("run"), dict) or doc["run"].get("framework") != engine:
        raise PartError(f"{where} holds engine {doc.get('engine')!r}'s run, not {engine!r}'s")
    inputs = doc.get("inputs")
    if not isinstance(inputs, dict) or not inputs:
        raise PartError(f"{where} records no inputs: rebuild it (rule E3_1_engine)")
    if data is not None and str(data) not in inputs:
        raise PartError(f"{where} was not built from {data} (its inputs: {', '.join(sorted(inputs)) or 'none'})")
    for q, sha in sorted(inputs.items()):
        now = file_sha256(q)
        if now is None:
            raise PartError(f"{where} was built from {q}, which is gone: rebuild it (rule E3_1_engine)")
        if now != sha:
            raise PartError(f"{where} was built from other bytes of {q} (sha256 {str(sha)[:12]} then, {now[:12]} "
                            "now): rebuild it (rule E3_1_engine)")
    return doc


def read_parts(parts, data: str | os.PathLike | None = None) -> list[dict]:
    """The parts (read_part) of every engine of ENGINES, in its order, from `parts` ({engine: path}); PartError when
    an engine's part is not given, an engine E3.1 does not have is given, or a part fails read_part."""
    if not isinstance(parts, dict):
        raise PartError(f"read_parts needs {{engine: path}}, not {type(parts).__name__}")
    for e in parts:
        check_engine(e)
    missing = [e for e in ENGINES if e not in parts]
    if missing:
        raise PartError(f"E3.1's merge is given no part for engine(s) {', '.join(missing)} (it needs one per engine: "
                        f"{', '.join(ENGINES)})")
    return [read_part(parts[e], e, data) for e in ENGINES]


def parts_environment(parts: list[dict]) -> dict:
    """The environment that computed the parts' numbers, for the merged result's provenance: the parts' own when
    they agree (one machine, one virtual environment), else {"per_engine": {engine: environment}}."""
    envs = {p["engine"]: p.get("environment") for p in parts}
    first = next(iter(envs.values()), None)
    return first if all(e == first for e in envs.values()) else {"per_engine": envs}
