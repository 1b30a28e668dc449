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
                      "source": "test", "experiment": "E1.3", "cells": [("h100-sxm", 1, 2, 3)]}], path=p)
    import yaml

    doc = yaml.safe_load(p.read_text())
    e = doc["constants"]["gpu"]["h100-sxm"]["eta_mem_max"]
    assert e["value"] == 0.77 and e["experiment"] == "E1.3" and e["cells"] == [["h100-sxm", 1, 2, 3]]
    assert "global" in doc["constants"]  # other constants kept


def test_shipped_constants_read_at_most_three_gpu_cells_per_gpu():
    """DESIGN's contract on the shipped file: per GPU, the cells of that GPU that set any constant
    (GEMM, attention, light) are at most three. Host-scheduler rows (Vidur's CPU overheads, a
    property of the serving host, not of the GPU) are counted apart, and so are all-reduce rows
    (E1.25: a property of the node's interconnect, with its own budget of three per GPU, like
    the wall-clock readings per GPU and engine)."""
    cal = Calibration.from_constants(Constants.default())
    per_gpu: dict = {}
    per_node: dict = {}
    for name, cells in cal.used.items():
        if not name.startswith("gpu."):
            continue
        for cell in cells:
            if isinstance(cell, tuple) and len(cell) > 1 and cell[1] == "allreduce":
                per_node.setdefault(cell[0], set()).add(cell)
            elif isinstance(cell, tuple) and len(cell) > 1 and cell[1] != "host":
                per_gpu.setdefault(cell[0], set()).add(cell)
    assert per_gpu, "defaults.yaml records no per-GPU cells"
    over = {g: sorted(map(str, c)) for g, c in per_gpu.items() if len(c) > 3}
    assert not over, f"more than three deploy cells: {over}"
    over = {g: sorted(map(str, c)) for g, c in per_node.items() if len(c) > 3}
    assert not over, f"more than three all-reduce readings: {over}"
