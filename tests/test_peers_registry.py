"""Peers behind one interface (`steptime.peers`, issue 18): the product's peers are an immutable
registry value (`PRODUCT`); the lab composes its own registries from it (`with_peers`), and
importing a lab module changes nothing in the product; the product refuses a lab peer by name."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from steptime import peers
from steptime.errors import SteptimeError
from steptime_lab.baselines import REGISTRY as BASELINES
from steptime_lab.peer_registry import LAB

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
    assert "lab's tables" in got["refused"] and "steptime_lab.peer_registry.LAB" in got["refused"]
    assert got["lab_loaded"] == []  # asking for a lab peer never imports the lab


def test_importing_the_lab_leaves_the_product_registry_as_it_was():
    got = _fresh("import json\nfrom steptime import peers\nbefore = peers.names()\n"
                 "import steptime_lab.peer_registry as R\n"
                 "print(json.dumps({'before': before, 'after': peers.names(), "
                 "'lab': {n: [R.LAB.entry(n).origin, R.LAB.entry(n).query] for n in R.LAB.names()}}))")
    assert got["before"] == got["after"] == sorted(PRODUCT_PEERS)
    assert set(got["lab"]) == PRODUCT_PEERS | LAB_PEERS
    assert {n for n, (o, _) in got["lab"].items() if o == "lab"} == LAB_PEERS
    assert got["lab"]["ml_loo"][1] == "transfer" and got["lab"]["vidur_rf"][1] == "op"
    assert got["lab"]["distserve"][1] == "step"
    assert set(BASELINES.names(origin="lab")) == {"calibrated_roofline", "vidur_rf", "vidur_poly"}


def test_every_peer_answers_its_query_and_says_what_it_was_fitted_on():
    for n in LAB.names():
        e = LAB.entry(n)
        assert e.cls.name == n and callable(getattr(e.cls, e.method)) and len(e.fitted_on) > 10, n
    X = {"m": np.array([4096.0]), "n": np.array([4096.0]), "k": np.array([4096.0])}
    bare = peers.make("bare_roofline", gpu="h100-sxm").predict(X)
    assert 0 < bare[0] < LAB.make("datasheet_alpha", gpu="h100-sxm").predict(X)[0]


def test_a_registry_is_a_value_and_a_name_is_taken_once():
    class Other:
        name = "bare_roofline"

        def predict(self, X):
            return X

    with pytest.raises(peers.PeerError, match="registered twice"):
        peers.PRODUCT.with_peers(peers.Entry.of(Other, query="gemm", fitted_on="a second bare roofline"))
    Other.name = "x_peer"
    with pytest.raises(peers.PeerError, match="unknown query"):
        peers.Entry.of(Other, query="telepathy", fitted_on="nothing at all here")
    with pytest.raises(peers.PeerError, match="no step_arrays"):
        peers.Entry.of(Other, query="step", fitted_on="nothing at all here")
    with pytest.raises(peers.PeerError, match="must declare name"):
        peers.Entry("y_peer", Other, "gemm", "a class calling itself otherwise")
    Other.name, Other.__module__ = "vidur_rf", "steptime.fake"  # a product class may not take a lab peer's name
    with pytest.raises(peers.PeerError, match="the lab's"):
        peers.Entry.of(Other, query="gemm", fitted_on="a product forest?")
    with pytest.raises(SteptimeError, match="unknown peer 'nope'"):
        peers.make("nope")
    # extending builds a new registry: the old one is unchanged, and none can be changed in place
    Other.name, Other.__module__ = "x_peer", __name__
    bigger = peers.PRODUCT.with_peers(peers.Entry.of(Other, query="gemm", fitted_on="a test peer only"))
    assert "x_peer" in bigger and "x_peer" not in peers.PRODUCT and len(bigger) == len(peers.PRODUCT) + 1
    with pytest.raises(AttributeError):
        peers.PRODUCT._entries = {}
    with pytest.raises(TypeError):
        peers.PRODUCT._entries["x_peer"] = bigger.entry("x_peer")
    # the same entry twice is one peer (a registry composed from overlapping parts)
    assert LAB.with_peers(*BASELINES._entries.values()).names() == LAB.names()
