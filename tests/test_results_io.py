import json

import pytest

from steptime.io import atomic_path, write_json
from steptime_lab.results import claim, provenance, write_result


def test_atomic_path_leaves_target_untouched_on_error(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_result_is_deterministic_and_has_provenance(tmp_path):
    inp = tmp_path / "in.csv"
    inp.write_text("a,b\n1,2\n")
    kw = dict(id="X1", question="q?", metrics={"mape": 0.123456789123},
              claims=[claim("mape below 10%", 0.12, "<= 0.10", target=0.10, met=False, op="<=")],
              provenance=provenance([inp], config={"fast": True}))
    write_result(tmp_path / "a.json", **kw)
    write_result(tmp_path / "b.json", **kw)
    a = (tmp_path / "a.json").read_bytes()
    assert a == (tmp_path / "b.json").read_bytes()
    d = json.loads(a)
    assert d["metrics"]["mape"] == 0.123457
    assert d["provenance"]["inputs"][str(inp)]["sha256"]
    assert d["claims"][0]["met"] is False


def test_provenance_refuses_missing_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        provenance([tmp_path / "nope.csv"])


def test_write_json_rejects_nan_as_null(tmp_path):
    write_json(tmp_path / "x.json", {"v": float("nan")})
    assert json.loads((tmp_path / "x.json").read_text()) == {"v": None}


def test_code_hash_covers_all_of_the_library_shipped_constants_included(tmp_path):
    """No build step writes into src/, so the hash covers every .py and .yaml there."""
    from steptime_lab.results import code_sha256

    (tmp_path / "calibration").mkdir()
    (tmp_path / "terms.py").write_text("x = 1\n")
    (tmp_path / "calibration" / "defaults.yaml").write_text("a: 1\n")
    before = code_sha256(tmp_path)
    (tmp_path / "calibration" / "defaults.yaml").write_text("a: 2\n")
    assert code_sha256(tmp_path) != before
    after = code_sha256(tmp_path)
    (tmp_path / "terms.py").write_text("x = 2\n")
    assert code_sha256(tmp_path) != after


def test_rule_provenance_is_built_from_the_declared_inputs_and_params(tmp_path):
    """A script's provenance lists every declared input but the code (and groups it excludes),
    and records the params it ran with as its config (questions left out)."""
    from types import SimpleNamespace

    from snakemake.iocontainers import InputFiles, Params

    from steptime_lab.results import rule_provenance

    a, b, code, model = (tmp_path / n for n in ("a.parquet", "b.yaml", "lib.py", "m.joblib"))
    for p in (a, b, code, model):
        p.write_text(p.name)
    inp = InputFiles(fromdict={"data": str(a), "settled": [str(b)], "code": [str(code)], "models": [str(model)]})
    smk = SimpleNamespace(input=inp, rule="E9_9",
                          params=Params(fromdict={"question": "why?", "q1": "x", "seed": 3, "n_boot": 50}))
    prov = rule_provenance(smk, script="workflow/scripts/E9_9.py", exclude=("code", "models"))
    assert sorted(prov["inputs"]) == sorted([str(a), str(b)])
    assert prov["config"] == {"seed": 3, "n_boot": 50}
    assert prov["rule"] == "E9_9"
    (tmp_path / "a.parquet").unlink()
    with pytest.raises(FileNotFoundError):
        rule_provenance(smk, script="x")


def test_write_experiment_writes_the_result_then_draws_at_the_figure_stem(tmp_path):
    """The thin scripts' shared tail: the result carries the rule's question, provenance (peers
    added) and `extra`; the figure is drawn at the output's path without its extension."""
    from types import SimpleNamespace

    from snakemake.iocontainers import InputFiles, Params

    from steptime_lab.results import write_experiment

    data = tmp_path / "a.parquet"
    data.write_text("a")
    smk = SimpleNamespace(input=InputFiles(fromdict={"data": str(data)}), rule="E9_9",
                          params=Params(fromdict={"question": "why?", "seed": 3}),
                          output=SimpleNamespace(result=str(tmp_path / "E9_9.json"), fig=str(tmp_path / "E9_9.png")))
    doc = {"metrics": {"x": 1.5}, "claims": [claim("x small", 1.5, "x <= target", target=2.0, op="<=", met=True)]}
    drawn = []
    out = write_experiment(smk, id="E9.9", doc=doc, script="workflow/scripts/E9_9_x.py", peers={"peer": "1.0"},
                           extra={"defaults_updates": []}, figure=drawn.append)
    back = json.loads((tmp_path / "E9_9.json").read_text())
    assert back == out and back["question"] == "why?" and back["metrics"] == {"x": 1.5}
    assert back["claims"][0]["met"] is True and back["defaults_updates"] == []
    assert back["provenance"]["peers"] == {"peer": "1.0"} and back["provenance"]["config"] == {"seed": 3}
    assert drawn == [str(tmp_path / "E9_9")]
