"""steptime.io's YAML readers: the same documents as yaml.safe_load, a cached read that the caller cannot spoil."""
import os

import pytest
import yaml

from steptime.io import find_root, read_yaml, read_yaml_cached, yaml_load

ROOT = find_root(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted([*(ROOT / "src" / "steptime" / "specs").glob("*.yaml"),
                *(ROOT / "src" / "steptime" / "calibration").glob("*.yaml"),
                ROOT / "config" / "experiments.yaml", ROOT / "config" / "config.yaml", ROOT / "raw" / "MANIFEST.yaml"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_fast_parser_reads_the_same_document_as_safe_load(path):
    assert read_yaml(path) == yaml.safe_load(path.read_text())


def test_yaml_load_refuses_what_safe_load_refuses():
    with pytest.raises(yaml.YAMLError):
        yaml_load("a: !!python/object:os.system ls")
    with pytest.raises(yaml.YAMLError):
        yaml_load("a: [1, 2")


def test_cached_read_gives_each_caller_its_own_copy_and_sees_edits(tmp_path):
    p = tmp_path / "doc.yaml"
    p.write_text("engines:\n  vllm: {a: 1}\n")
    first = read_yaml_cached(p)
    first["engines"]["vllm"]["a"] = 99  # a caller that edits what it was given
    assert read_yaml_cached(p) == {"engines": {"vllm": {"a": 1}}}
    p.write_text("engines:\n  vllm: {a: 2, b: 3}\n")  # another size: re-read
    assert read_yaml_cached(p) == {"engines": {"vllm": {"a": 2, "b": 3}}}


def test_yaml_problem_names_the_one_based_line_and_the_problem_in_one_line():
    """yaml_problem: PyYAML's marks count lines from 0; the message names the line an editor shows (wave 40, review10:
    reporting the 0-based line, dropping the line or keeping PyYAML's multi-line context survived every test)."""
    from steptime.io import yaml_problem

    text = "a: 1\nb: 2\nc: 'unterminated\n"   # the quoted scalar opens on line 3 and never closes
    with pytest.raises(yaml.YAMLError) as exc:
        yaml_load(text)
    msg = yaml_problem(exc.value)
    assert "\n" not in msg and msg.startswith("YAML error at line ")
    line = int(msg.split("at line ")[1].split(":")[0])
    assert line == exc.value.problem_mark.line + 1 >= 3
    assert "found unexpected end of stream" in msg
    with pytest.raises(yaml.YAMLError) as exc2:
        yaml_load("a: [1, 2\nb: 3\n")            # a flow sequence left open on line 1
    assert yaml_problem(exc2.value).startswith("YAML error at line ")
    assert yaml_problem(ValueError("x")) == "YAML error: ValueError"   # no mark, no problem: the type
