import pytest

from steptime.calibration import PROVENANCES, Calibration, Constant, Constants, update_defaults
from steptime.errors import CalibrationLeakError
from steptime.specs import get_gpu


def test_every_default_constant_names_its_provenance():
    rows = Constants.default().table()
    assert rows
    for r in rows:
        assert r["provenance"] in PROVENANCES
        assert r["source"], f"{r['scope']}.{r['name']} has no source"


def test_resolution_order_gpu_then_family_then_global():
    from steptime.calibration import _parse

    c = Constants(_parse({"constants": {"global": {"x": {"value": 1.0, "provenance": "DERIVED", "source": "t"}}}}))
    h100, a100 = get_gpu("h100-sxm"), get_gpu("a100-sxm")
    assert c.get("x", h100) == 1.0
    c2 = c.with_overrides({"x": 0.5}, scope="family.hopper")
    assert c2.get("x", h100) == 0.5
    assert c2.get("x", a100) == 1.0
    c3 = c2.with_overrides({"x": 0.4}, scope="gpu.h100-sxm", provenance="MEASURED")
    assert c3.get("x", h100) == 0.4
    assert c3.lookup("x", h100).provenance == "MEASURED"
    assert c3.without_gpu("h100-sxm").get("x", h100) == 0.5
    assert c.get("x", h100) == 1.0  # original untouched
    with pytest.raises(KeyError, match="no constant 'y'"):
        c.get("y", h100)


def test_bad_provenance_rejected():
    with pytest.raises(ValueError):
        Constant("x", 1, "GUESSED", "nowhere")


def test_calibration_contract_refuses_overlap():
    cal = Calibration()
    cal.record("eta_mem_max", [("h100-sxm", "gemm", 64, 4096, 4096)], note="deploy reading")
    cal.check_disjoint([("h100-sxm", "gemm", 128, 4096, 4096)])
    with pytest.raises(CalibrationLeakError, match="1 evaluation cell"):
        cal.check_disjoint([("h100-sxm", "gemm", 64, 4096, 4096), ("h100-sxm", "gemm", 1, 1, 1)])
    assert cal.exclude([("h100-sxm", "gemm", 64, 4096, 4096), ("a", 1)]) == [("a", 1)]
    d = cal.to_dict()
    assert d["eta_mem_max"]["n_cells"] == 1


def test_update_defaults_roundtrip(tmp_path):
    import shutil

    from steptime.calibration import DEFAULTS_FILE

    p = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, p)
    update_defaults([{"scope": "gpu.h100-sxm", "name": "eta_mem_max", "value": 0.77, "provenance": "MEASURED",
                      "source": "test", "experiment": "E1.3", "cells": [("h100-sxm", "gemm", 1, 2, 3)]}], path=p)
    import yaml

    doc = yaml.safe_load(p.read_text())
    e = doc["constants"]["gpu"]["h100-sxm"]["eta_mem_max"]
    assert e["value"] == 0.77 and e["experiment"] == "E1.3" and e["cells"] == [{"gpu": "h100-sxm", "table": "gemm", "cell": [1, 2, 3]}]
    assert "global" in doc["constants"]  # other constants kept


def _gpu_cells(doc: dict, tables=None) -> dict:
    """{gpu: set of (table, cell)} over every cell record in a constants document (all scopes):
    the GPU's deploy cells (host-scheduler and all-reduce rows apart), or those of `tables`."""
    per_gpu: dict = {}
    consts = doc["constants"]
    scopes = [consts.get("global") or {}] + [t for kind in ("family", "gpu") for t in (consts.get(kind) or {}).values()]
    for table in scopes:
        for e in (table or {}).values():
            for rec in e.get("cells") or []:
                assert isinstance(rec, dict) and (set(rec) == {"gpu", "table", "cell"} or set(rec) == {"sample"}), rec
                keep = rec.get("table") in tables if tables else rec.get("table") not in ("host", "allreduce")
                if "gpu" in rec and keep:
                    per_gpu.setdefault(rec["gpu"], set()).add((rec["table"], tuple(rec["cell"])))
    return per_gpu


def test_shipped_constants_read_at_most_three_gpu_cells_per_gpu():
    """DESIGN's contract on the shipped file: per GPU, the cells of that GPU that set any constant
    (GEMM, attention, light; any scope) are at most three. The cells are records {gpu, table, cell}.
    Host-scheduler rows (Vidur's CPU overheads, a property of the serving host, not of the GPU)
    are counted apart, and so are all-reduce readings (E1.25: a property of the node's
    interconnect, with their own budget of three per GPU, like the wall-clock readings per GPU
    and engine)."""
    import yaml

    from steptime.calibration import DEFAULTS_FILE

    per_gpu = _gpu_cells(yaml.safe_load(DEFAULTS_FILE.read_text()))
    assert len(per_gpu) >= 9, f"defaults.yaml records per-GPU cells of only {sorted(per_gpu)}"
    over = {g: sorted(map(str, c)) for g, c in per_gpu.items() if len(c) > 3}
    assert not over, f"more than three deploy cells: {over}"
    per_node = _gpu_cells(yaml.safe_load(DEFAULTS_FILE.read_text()), tables=("allreduce",))
    over = {g: sorted(map(str, c)) for g, c in per_node.items() if len(c) > 3}
    assert not over, f"more than three all-reduce readings: {over}"


def test_three_cell_count_catches_a_fourth_cell():
    doc = {"constants": {"global": {}, "gpu": {"h100-sxm": {
        f"c{i}": {"value": 1, "provenance": "MEASURED", "source": "t",
                  "cells": [{"gpu": "h100-sxm", "table": "gemm", "cell": [i, 8, 8]}]} for i in range(4)}}}}
    assert len(_gpu_cells(doc)["h100-sxm"]) == 4


def test_cell_records_from_every_written_form():
    from steptime.calibration import cell_key, cell_record

    rec = {"gpu": "h100-sxm", "table": "gemm", "cell": [1, 10240, 10240]}
    assert cell_record(["h100-sxm", "gemm", 1, 10240, 10240]) == rec
    assert cell_record("h100-sxm: ['h100-sxm', 'gemm', 1, 10240, 10240]") == rec
    assert cell_record("aic-gemm table, 2000 cells per GPU") == {"sample": "aic-gemm table, 2000 cells per GPU"}
    assert cell_key(rec) == ("h100-sxm", "gemm", 1, 10240, 10240)
    with pytest.raises(ValueError):
        cell_record({"gpu": "h100-sxm", "cell": [1]})


def _settled(tmp_path, name, updates):
    from steptime.calibration import write_settled

    p = tmp_path / name
    write_settled(p, updates, settled_by="test")
    return p


def test_settled_files_overlay_without_touching_the_shipped_file(tmp_path):
    """Constants.load(defaults, settled...) applies the settled records in memory; a prediction given
    them answers with them; the shipped file is written only by ship()."""
    from steptime.calibration import DEFAULTS_FILE, ship

    before = DEFAULTS_FILE.read_bytes()
    p = _settled(tmp_path, "gemm.yaml", [{"scope": "gpu.h100-sxm", "name": "eta_mem_max", "value": 0.5,
                                          "provenance": "MEASURED", "source": "test", "experiment": "settle_x",
                                          "cells": [["h100-sxm", "gemm", 1, 8, 8]]}])
    c = Constants.load(DEFAULTS_FILE, p)
    assert c.lookup("eta_mem_max", get_gpu("h100-sxm")).value == 0.5
    assert c.lookup("eta_mem_max", get_gpu("h100-sxm")).cells == ({"gpu": "h100-sxm", "table": "gemm", "cell": [1, 8, 8]},)
    assert Constants.default().get("eta_mem_max", get_gpu("h100-sxm")) != 0.5
    from steptime.ops import predict_ops

    t_settled = predict_ops("gemm", "h100-sxm", m=1, n=8192, k=8192, constants=c)["t_ms"]
    t_shipped = predict_ops("gemm", "h100-sxm", m=1, n=8192, k=8192)["t_ms"]
    assert t_settled != t_shipped  # the argument, not anything process-wide, decides
    assert DEFAULTS_FILE.read_bytes() == before
    # ship into a copy: the value lands, and a constant its experiment no longer sets is dropped
    import shutil

    import yaml

    dst = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, dst)
    doc = yaml.safe_load(dst.read_text())
    doc["constants"]["gpu"]["h100-sxm"]["stale_reading"] = {"value": 1, "provenance": "MEASURED", "source": "old",
                                                            "experiment": "settle_x"}
    dst.write_text(yaml.safe_dump(doc))
    report = ship([p], path=dst)
    shipped = yaml.safe_load(dst.read_text())["constants"]["gpu"]["h100-sxm"]
    assert shipped["eta_mem_max"]["value"] == 0.5 and "stale_reading" not in shipped
    assert "gpu.h100-sxm:stale_reading" in report["removed"]


def test_settled_file_refuses_bad_provenance(tmp_path):
    with pytest.raises(ValueError, match="provenance"):
        _settled(tmp_path, "x.yaml", [{"scope": "global", "name": "x", "value": 1, "provenance": "GUESSED",
                                       "source": "t"}])


def test_ship_sends_engine_constants_to_the_engine_loader_and_pipeline_runs_ignore_the_shipped_copy(tmp_path):
    """An engine-constants file among the shipped files goes (byte for byte) to where get_engine reads
    fitted overrides, and `steptime predict --engine` then uses them on that GPU only; constants a pipeline
    rule loads (Constants.load) carry fitted engine constants only from its declared inputs; a bad file is refused."""
    import shutil

    import yaml

    from steptime.calibration import DEFAULTS_FILE, seal_text, ship
    from steptime.errors import InputError
    from steptime.specs import engines as E

    field = next(k for k, v in E.get_engine("vllm", fitted={}).values.items() if v.value is not None)
    shipped_value = E.get_engine("vllm", fitted={}).values[field].value
    doc = {"constants": {}, "scales": {}, "engines": {"vllm": {"b300": {field: {
        "value": shipped_value * 3 + 1.0, "provenance": "FITTED", "source": "test", "experiment": "R2.3"}}}}}
    src = tmp_path / "engine_constants.yaml"
    src.write_text(seal_text(yaml.safe_dump(doc)))  # closed by its seal line, as R2.3's writer closes it
    defaults, dest = tmp_path / "defaults.yaml", tmp_path / "fitted.yaml"
    shutil.copy(DEFAULTS_FILE, defaults)
    report = ship([src], path=defaults, engine_path=dest)
    assert dest.read_bytes() == src.read_bytes() and report["fields"] == [f"vllm@b300:{field}"]
    assert defaults.read_bytes() == DEFAULTS_FILE.read_bytes() or report["changed"] == []
    shipped = Constants.default().with_engines(dest)  # as if shipped into the package
    assert shipped.engine("vllm").get(field, get_gpu("b300")) == shipped_value * 3 + 1.0
    assert shipped.engine("vllm").get(field, get_gpu("h100-sxm")) == E.get_engine("vllm", fitted={}).get(
        field, get_gpu("h100-sxm"))
    assert Constants.load(DEFAULTS_FILE).engines == {}  # a pipeline rule: the shipped copy is not read
    assert Constants.load(DEFAULTS_FILE, [src]).engine("vllm").get(field, get_gpu("b300")) == shipped_value * 3 + 1.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(seal_text(yaml.safe_dump({"engines": {"vllm": {"b300": {"no_such_field": {
        "value": 1.0, "provenance": "FITTED", "source": "t"}}}}})))  # sealed: the seal is checked first (wave 41)
    with pytest.raises(InputError, match="no_such_field"):
        ship([bad], path=defaults, engine_path=tmp_path / "x.yaml")
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("bad_name, bad_text, needle", [
    ("engine_constants.yaml", "engines:\n  vllm:\n    b300:\n      no_such_field: {value: 1.0, provenance: FITTED, "
                              "source: t}\n", "no_such_field"),
    ("greybox.npz", "not an npz", "not a grey-box corrections file"),
])
def test_ship_checks_every_file_before_writing_any(tmp_path, bad_name, bad_text, needle):
    """Wave 34 (helper harden): a bad engine-constants or grey-box file among the settled files left
    defaults.yaml already rewritten (a half-applied ship); now nothing is written."""
    import shutil

    import yaml

    from steptime.calibration import DEFAULTS_FILE, seal_text, ship
    from steptime.errors import InputError
    from steptime.io import find_root

    doc = yaml.safe_load((find_root() / "results" / "calibration" / "step.yaml").read_text())
    doc["updates"] = doc["updates"][:1]
    doc["updates"][0]["value"] = float(doc["updates"][0]["value"]) * 1.5 + 1.0  # a change defaults.yaml would take
    good = tmp_path / "step.yaml"
    good.write_text(seal_text(yaml.safe_dump(doc)))
    bad = tmp_path / bad_name
    bad.write_text(seal_text(bad_text) if bad_name.endswith(".yaml") else bad_text)  # the seal is checked first
    defaults = tmp_path / "defaults.yaml"
    shutil.copy(DEFAULTS_FILE, defaults)
    before = defaults.read_bytes()
    with pytest.raises(InputError, match=needle):
        ship([good, bad], path=defaults, engine_path=tmp_path / "e.yaml", greybox_path=tmp_path / "g.npz")
    assert defaults.read_bytes() == before
    assert not (tmp_path / "e.yaml").exists() and not (tmp_path / "g.npz").exists()
    ship([good], path=defaults)  # the good file alone does change it: the test above can fail
    assert defaults.read_bytes() != before


def test_get_with_a_default_gives_it_only_for_a_missing_name():
    from steptime.calibration import Constants
    from steptime.specs import get_gpu

    c, g = Constants.default(), get_gpu("h100-sxm")
    have = c.get("f_clk", g)
    assert c.get("f_clk", g, -1.0) == have
    assert c.get("no_such_constant", g, 0.25) == 0.25
    with pytest.raises(KeyError, match="no_such_constant"):
        c.get("no_such_constant", g)
    with pytest.raises(KeyError):  # a default is not remembered as the value
        c.get("no_such_constant", g)
