"""One registry of peers (`steptime.peers`, issue 18): the product registers its own, the lab
registers its table-fitted ones on import, and the product refuses a lab peer until then."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from steptime import peers
from steptime.errors import SteptimeError

SRC = Path(__file__).resolve().parents[1] / "src"
PRODUCT_PEERS = {"steptime", "bare_roofline", "datasheet_alpha", "aic_empirical", "distserve", "aiconfigurator"}
LAB_PEERS = {"calibrated_roofline", "vidur_rf", "vidur_poly", "ml_loo", "steptime_home_only"}


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


def test_the_product_alone_lists_its_peers_and_refuses_the_labs():
    got = _fresh(
        "import json\nfrom steptime import peers\nout = {'names': peers.names(), 'origins': sorted({peers.entry(n).origin "
        "for n in peers.names()})}\ntry:\n    peers.make('ml_loo', 'aic_gemm', None)\nexcept peers.PeerError as e:\n"
        "    out['refused'] = str(e)\nimport sys\nout['lab_loaded'] = sorted(m for m in sys.modules if m.startswith('steptime_lab'))\n"
        "print(json.dumps(out))")
    assert set(got["names"]) == PRODUCT_PEERS and got["origins"] == ["product"]
    assert "lab's tables" in got["refused"] and "steptime_lab.experiments.transfer" in got["refused"]
    assert got["lab_loaded"] == []  # asking for a lab peer never imports the lab


def test_the_lab_registers_its_peers_on_import():
    got = _fresh("import json\nfrom steptime import peers\nimport steptime_lab.baselines\n"
                 "import steptime_lab.experiments.transfer\n"
                 "print(json.dumps({n: [peers.entry(n).origin, peers.entry(n).query] for n in peers.names()}))")
    assert set(got) == PRODUCT_PEERS | LAB_PEERS
    assert {n for n, (o, _) in got.items() if o == "lab"} == LAB_PEERS
    assert got["ml_loo"][1] == "transfer" and got["vidur_rf"][1] == "op" and got["distserve"][1] == "step"


def test_every_peer_answers_its_query_and_says_what_it_was_fitted_on():
    import steptime_lab.baselines  # noqa: F401
    import steptime_lab.experiments.transfer  # noqa: F401

    for n in peers.names():
        e = peers.entry(n)
        assert e.cls.name == n and callable(getattr(e.cls, e.method)) and len(e.fitted_on) > 10, n
    X = {"m": np.array([4096.0]), "n": np.array([4096.0]), "k": np.array([4096.0])}
    bare = peers.make("bare_roofline", gpu="h100-sxm").predict(X)
    assert 0 < bare[0] < peers.make("datasheet_alpha", gpu="h100-sxm").predict(X)[0]


def test_a_name_registers_once_and_a_lab_name_never_as_the_products():
    class Other:
        def predict(self, X):
            return X

    with pytest.raises(peers.PeerError, match="registered twice"):
        peers.register("bare_roofline", query="gemm", fitted_on="a second bare roofline")(Other)
    with pytest.raises(peers.PeerError, match="unknown query"):
        peers.register("x_peer", query="telepathy", fitted_on="nothing at all here")(Other)
    with pytest.raises(peers.PeerError, match="no step_arrays"):
        peers.register("y_peer", query="step", fitted_on="nothing at all here")(Other)
    Other.__module__ = "steptime.fake"  # a product module may not take a lab peer's name
    with pytest.raises(peers.PeerError, match="the lab's"):
        peers.register("vidur_rf", query="gemm", fitted_on="a product forest?")(Other)
    with pytest.raises(SteptimeError, match="unknown peer 'nope'"):
        peers.make("nope")
    assert "x_peer" not in peers.names() and "y_peer" not in peers.names()
