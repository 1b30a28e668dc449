"""The lab's peer registry: the product's peers (`steptime.peers.PRODUCT`) plus every peer the
lab fits on its tables (the baselines' and E2.1's fair-ground peers), one immutable value.

    from steptime_lab.peer_registry import LAB
    LAB.names(query="gemm")                     # every peer that answers a GEMM cell
    est = LAB.make("ml_loo", "aic_gemm", cells, fast=True)
    LAB.entry("vidur_rf").fitted_on             # the fairness line each score carries

Nothing is registered by importing a module: a registry is composed here, explicitly.
"""

from __future__ import annotations

from steptime_lab.baselines import REGISTRY as BASELINES
from steptime_lab.experiments.transfer import fair_ground

LAB = BASELINES.with_peers(*fair_ground.PEER_ENTRIES)
