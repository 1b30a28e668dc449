"""E3.1 split by engine (wave 40, e31speed): one job per engine writes a part (its moe.run dict and the sha256 of its
inputs), a thin merge documents the parts. The merge refuses a part that is missing, unreadable, another engine's or
built from other bytes; what it documents from the parts is what the one-process build documented from the runs."""
from __future__ import annotations

import pickle
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from steptime_lab.experiments import moe as E
from steptime_lab.experiments.moe_parts import (ENGINES, JOB_ORDER, PART_KIND, PartError, check_engine, parts_environment,
                                                read_part, read_parts, write_part)
from steptime_lab.results import environment
from test_moe_trtllm import _run  # a stand-in engine run (E3.1's run dict)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def inputs(tmp_path):
    data = tmp_path / "moe.parquet"
    data.write_bytes(b"the tidy table")
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    return data, code


def _parts(tmp_path, inputs, runs=None):
    runs = runs or {e: _run(e, 0.1 + 0.05 * i) for i, e in enumerate(ENGINES)}
    paths = {}
    for e in ENGINES:
        paths[e] = tmp_path / f"E3_1_{e}.pkl.zst"
        write_part(paths[e], e, runs[e], [str(p) for p in inputs])
    return paths, runs


def test_engines_are_the_documents_engines():
    # vLLM's run first (document_engines takes it apart from the others), every engine the document names
    assert ENGINES[0] == E.SHIPPED_FRAMEWORK == "vllm"
    assert set(ENGINES) == set(E.ENGINE_CLAIM_PREFIX)
    assert sorted(JOB_ORDER) == sorted(ENGINES)   # the workflow's order of the same parts
    assert check_engine("sglang") == "sglang"
    with pytest.raises(PartError, match="E3.1 has no engine 'tgi': its engines are vllm, trtllm, sglang"):
        check_engine("tgi")


def test_parts_round_trip_to_the_same_document(tmp_path, inputs):
    paths, runs = _parts(tmp_path, inputs)
    parts = read_parts(paths, data=str(inputs[0]))
    assert [p["engine"] for p in parts] == list(ENGINES)
    got = [p["run"] for p in parts]
    assert [g["framework"] for g in got] == list(ENGINES)
    one = E.document_engines(runs["vllm"], [runs["trtllm"], runs["sglang"]], 12.0)
    split = E.document_engines(got[0], got[1:], 12.0)
    assert split == one
    for g, e in zip(got, ENGINES):
        pd.testing.assert_frame_equal(g["per"], runs[e]["per"])


def test_the_merged_result_records_the_environment_that_ran_the_engines(tmp_path, inputs):
    paths, _ = _parts(tmp_path, inputs)
    parts = read_parts(paths)
    assert parts_environment(parts) == environment()          # one machine, one venv: the parts' own
    parts[2]["environment"] = {**parts[2]["environment"], "python": "3.0"}
    got = parts_environment(parts)
    assert set(got) == {"per_engine"} and got["per_engine"]["sglang"]["python"] == "3.0"


def test_merge_refuses_a_missing_part(tmp_path, inputs):
    paths, _ = _parts(tmp_path, inputs)
    paths["sglang"].unlink()
    with pytest.raises(PartError, match=r"E3.1's part for engine 'sglang' \(.*E3_1_sglang.pkl.zst\) is missing: rule "
                                        "E3_1_engine writes it"):
        read_parts(paths)
    del paths["sglang"]
    with pytest.raises(PartError, match="no part for engine\\(s\\) sglang"):
        read_parts(paths)
    with pytest.raises(PartError, match="no engine 'tgi'"):
        read_parts({**paths, "tgi": paths["vllm"]})


def test_merge_refuses_another_engines_part(tmp_path, inputs):
    paths, _ = _parts(tmp_path, inputs)
    swapped = {**paths, "trtllm": paths["sglang"], "sglang": paths["trtllm"]}
    with pytest.raises(PartError, match=r"engine 'trtllm' \(.*E3_1_sglang.pkl.zst\) holds engine 'sglang''s run, not "
                                        "'trtllm''s"):
        read_parts(swapped)
    with pytest.raises(PartError, match="is not that engine's run"):
        write_part(tmp_path / "x.pkl", "trtllm", _run("sglang", 0.1), [str(inputs[0])])


def test_merge_refuses_a_part_built_from_other_bytes(tmp_path, inputs):
    paths, _ = _parts(tmp_path, inputs)
    inputs[1].write_text("x = 2\n")   # the code changed after the part was built
    with pytest.raises(PartError, match=re.escape(f"was built from other bytes of {inputs[1]}") + r" \(sha256 \w{12} "
                                        r"then, \w{12} now\): rebuild it"):
        read_part(paths["vllm"], "vllm")
    inputs[1].unlink()
    with pytest.raises(PartError, match="which is gone"):
        read_part(paths["vllm"], "vllm")


def test_merge_refuses_a_part_of_another_table(tmp_path, inputs):
    paths, _ = _parts(tmp_path, inputs)
    other = tmp_path / "other.parquet"
    other.write_bytes(b"another table")
    with pytest.raises(PartError, match=f"was not built from {re.escape(str(other))}"):
        read_parts(paths, data=str(other))


def test_merge_refuses_what_is_not_a_part(tmp_path, inputs):
    p = tmp_path / "E3_1_vllm.pkl.zst"
    p.write_bytes(b"not a pickle")
    with pytest.raises(PartError, match=r"cannot be read \(\w+\): rebuild it"):
        read_part(p, "vllm")
    def put(doc):
        with pa.output_stream(str(p), compression="zstd") as f:
            pickle.dump(doc, f)

    put({"kind": "something else", "run": _run("vllm", 0.1)})
    with pytest.raises(PartError, match="is not an E3.1 engine part"):
        read_part(p, "vllm")
    put({"kind": PART_KIND, "version": 1, "engine": "vllm", "inputs": {}, "run": _run("vllm", 0.1)})
    with pytest.raises(PartError, match="records no inputs"):
        read_part(p, "vllm")
    with pytest.raises(PartError, match="does not exist"):
        write_part(p, "vllm", _run("vllm", 0.1), [str(tmp_path / "nowhere.parquet")])


def test_the_workflow_runs_one_job_per_engine_and_merges_them():
    """moe.smk: the part rule's engines are ENGINES (read from the library at parse), and rule E3_1 takes every part
    and the tidy table the parts record."""
    text = (ROOT / "workflow/rules/moe.smk").read_text()
    assert "from steptime_lab.experiments.moe_parts import ENGINES as E3_1_ENGINES, JOB_ORDER as E3_1_JOB_ORDER" in text
    script = (ROOT / "workflow/scripts/E3_1_moe_kernel.py").read_text()
    assert "read_parts(dict(zip(JOB_ORDER, snakemake.input.parts))" in script   # the parts zipped in the rule's order
    e31 = re.search(r"^rule E3_1:\n(.*?)(?=^\S)", text, re.S | re.M).group(1)
    assert 'parts=expand(rules.E3_1_engine.output.part, engine=E3_1_JOB_ORDER)' in e31 and 'data=tidy("moe")' in e31
    part = re.search(r"^rule E3_1_engine:\n(.*?)(?=^\S)", text, re.S | re.M).group(1)
    assert 'part="results/cache/E3_1_{engine}.pkl.zst"' in part and "engine=one_of(E3_1_ENGINES)" in part


# the engine job and the merge, run as Snakemake runs them (each script in its own process), on a small slice of the
# committed tidy table: Qwen3-235B-A22B's layer (the readings' shape), bf16, three Blackwell GPUs, every engine
_DRIVER = """
import ast, runpy, sys
from types import SimpleNamespace
from snakemake.iocontainers import InputFiles, OutputFiles, Params, Wildcards
script, inputs, outputs, params, wildcards, log, rule = sys.argv[1:8]
ev = ast.literal_eval  # the test's own literals
smk = SimpleNamespace(input=InputFiles(fromdict=ev(inputs)), output=OutputFiles(fromdict=ev(outputs)),
                      params=Params(fromdict=ev(params)), wildcards=Wildcards(fromdict=ev(wildcards)), log=[log],
                      rule=rule)
runpy.run_path(script, init_globals={"snakemake": smk}, run_name="__main__")
"""


def _script(tmp_path, name, inputs, outputs, params=None, wildcards=None, rule="E3_1"):
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", _DRIVER, str(ROOT / "workflow/scripts" / f"{name}.py"), repr(inputs),
                        repr(outputs), repr(params or {}), repr(wildcards or {}), str(tmp_path / f"{name}.log"), rule],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
def test_the_split_build_writes_what_the_one_process_build_wrote(tmp_path):
    import json

    import yaml

    from steptime.io import dumps
    from steptime_lab.results import write_result

    df = pd.read_parquet(ROOT / "results/data/moe.parquet")
    sub = df[df.gpu.isin(["b200", "b300", "gb200"]) & (df.hidden_size == 4096) & (df.inter_size == 1536)
             & (df.topk == 8) & (df.num_experts == 128) & (df.dtype == "bfloat16")].reset_index(drop=True)
    assert set(sub.framework) == set(ENGINES)
    data = tmp_path / "moe.parquet"
    sub.to_parquet(data)
    code = [str(ROOT / "src/steptime_lab/experiments/moe.py")]
    parts = []
    for e in JOB_ORDER:   # as rule E3_1 lists them
        parts.append(str(tmp_path / f"E3_1_{e}.pkl.zst"))
        _script(tmp_path, "E3_1_moe_engine", {"data": str(data), "code": code}, {"part": parts[-1]},
                wildcards={"engine": e}, rule="E3_1_engine")
    out = {"result": str(tmp_path / "E3_1.json"), "constants": str(tmp_path / "moe_kernel.yaml"),
           "fig": str(tmp_path / "E3_1_moe_kernel.png")}
    _script(tmp_path, "E3_1_moe_kernel", {"data": str(data), "parts": parts, "code": code}, out,
            params={"question": "q?", "target_pct": 12})
    # the one-process build (the script before the split): every engine's run in this process, documented at once
    runs = {e: E.run(sub, e) for e in ENGINES}
    doc = E.document_engines(runs["vllm"], [runs["trtllm"], runs["sglang"]], target_pct=12.0)
    ref = write_result(tmp_path / "ref.json", id="E3.1", question="q?", metrics=doc["metrics"], claims=doc["claims"],
                       provenance={})
    got = json.loads((tmp_path / "E3_1.json").read_text())
    assert {k: v for k, v in got.items() if k not in ("provenance", "result_sha256")} == \
        {k: v for k, v in ref.items() if k not in ("provenance", "result_sha256")}
    for key, e in (("fits", "vllm"), ("trtllm_fits", "trtllm"), ("sglang_fits", "sglang")):   # as results round them
        assert got["provenance"]["calibration"][key] == json.loads(dumps(runs[e]["fits"]))
    assert sorted(got["provenance"]["inputs"]) == sorted([str(data), *parts])
    # the engines' processes' environment, as their parts recorded it (not this test process's: an earlier test in
    # the same worker may have set thread variables this process reports)
    from steptime_lab.experiments.moe_parts import parts_environment, read_parts
    assert got["provenance"]["environment"] == parts_environment(read_parts(dict(zip(JOB_ORDER, parts)), data))
    assert got["provenance"]["environment"]["numeric"]["machine"] == environment()["numeric"]["machine"]
    assert (tmp_path / "moe_kernel.yaml").read_text() == yaml.safe_dump(
        {**E.moe_constants_doc(runs["vllm"]), "frameworks": {"trtllm": E.framework_constants_doc(runs["trtllm"])}},
        sort_keys=True)
    assert (tmp_path / "E3_1_moe_kernel.png").is_file()
    # a part rebuilt from another table is refused by the merge, naming it
    sub.head(10).to_parquet(data)
    with pytest.raises(AssertionError, match="E3.1's part for engine '\w+' .* was built from other bytes of"):
        _script(tmp_path, "E3_1_moe_kernel", {"data": str(data), "parts": parts, "code": code}, out,
                params={"question": "q?", "target_pct": 12})
