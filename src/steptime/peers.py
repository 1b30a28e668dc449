"""The peers: the other predictors steptime is scored against, behind one registry.

    from steptime import peers
    peers.names()                                   # every registered peer, product and lab
    est = peers.make("bare_roofline", gpu="h100-sxm")
    est.predict({"m": [4096], "n": [4096], "k": [4096]})     # ms per GEMM cell
    peers.entry("bare_roofline").fitted_on          # what it was fitted on (the fairness line)

A peer (the `Peer` protocol) is a class with
  * `name`: its key in the registry (set by `register`);
  * what it was fitted on: one line in its registry entry (`entry(name).fitted_on`);
  * the query method of its kind (`QUERIES`): a GEMM cell (`gemm`), one profiled operator
    (`op`), a cell on a GPU it never saw (`transfer`), steptime's own constants refitted
    (`constants`), one engine step (`step`), a serving workload (`serving`).

Product peers need no table of the lab (steptime itself, the fixed rooflines, DistServe's
fitted latency model, AIConfigurator's estimator) and are registered below. The lab's
peers fitted on its tables (the Vidur-style forest and polynomial, the in-sample calibrated
roofline, `ml_loo`, `steptime_home_only`) register themselves when their lab module is
imported (`LAB_PEERS` names the module); until then the product refuses the name, and it
never imports the lab to find one.

The registry is the product's one module-level mutable object: names are added, never
replaced or removed, and it maps names to classes; it decides nothing a prediction uses
(constants are always an argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from steptime.errors import SteptimeError
from steptime.rooflines import AICEmpirical, BareRoofline, DatasheetAlpha
from steptime.serve.aic import AICEstimator
from steptime.serve.distserve import DistServeTimer
from steptime.serve.timer import StepTimer

# query kind -> (the method a peer of that kind answers it with, what it takes and returns)
QUERIES = {
    "gemm": ("predict", "predict(cells with columns m, n, k) -> latency ms per cell"),
    "op": ("predict", "fit(X, y) on one GPU's profiled operator table, then predict(X) -> latency ms"),
    "transfer": ("predict", "predict(cells, target) -> latency ms on a GPU the peer never trained on"),
    "constants": ("__call__", "peer(target) -> (Constants, Calibration) for steptime's own terms"),
    "step": ("step_arrays", "step_arrays(new tokens, kv lengths) -> seconds of one engine step"),
    "serving": ("estimate", "estimate(isl, osl, concurrency) -> {'ttft_s', 'tpot_s'}"),
}

# the lab's peers and the lab module whose import registers each (named for the refusal's message only)
LAB_PEERS = {
    "calibrated_roofline": "steptime_lab.baselines",
    "vidur_rf": "steptime_lab.baselines",
    "vidur_poly": "steptime_lab.baselines",
    "ml_loo": "steptime_lab.experiments.transfer",
    "steptime_home_only": "steptime_lab.experiments.transfer",
}


class PeerError(SteptimeError, KeyError, ValueError):
    """An unknown peer, a lab peer the lab has not registered, or a name registered twice."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


@runtime_checkable
class Peer(Protocol):
    name: str


@dataclass(frozen=True)
class Entry:
    name: str
    cls: type
    query: str
    fitted_on: str
    origin: str  # "product" (a steptime module) or "lab" (anything else, registered on import)

    @property
    def method(self) -> str:
        return QUERIES[self.query][0]


class Registry:
    """Name -> `Entry`; append-only."""

    def __init__(self):
        self._entries: dict[str, Entry] = {}

    def add(self, name: str, cls: type, *, query: str, fitted_on: str) -> Entry:
        if query not in QUERIES:
            raise PeerError(f"peer {name!r}: unknown query kind {query!r}; known: {', '.join(QUERIES)}")
        if not callable(getattr(cls, QUERIES[query][0], None)):
            raise PeerError(f"peer {name!r} ({cls.__name__}) has no {QUERIES[query][0]}() for a {query} query")
        if getattr(cls, "name", name) != name:
            raise PeerError(f"peer {name!r}: {cls.__name__} already calls itself {cls.name!r}")
        origin = "product" if cls.__module__.split(".")[0] == "steptime" else "lab"
        if origin == "product" and name in LAB_PEERS:
            raise PeerError(f"peer {name!r} is the lab's ({LAB_PEERS[name]}), not the product's")
        new = Entry(name, cls, query, " ".join(str(fitted_on).split()), origin)
        old = self._entries.get(name)
        if old is not None and old.cls is not cls:
            raise PeerError(f"peer {name!r} registered twice ({old.cls.__module__}.{old.cls.__name__} and "
                            f"{cls.__module__}.{cls.__name__})")
        cls.name = name
        self._entries[name] = new
        return new

    def entry(self, name: str) -> Entry:
        if name in self._entries:
            return self._entries[name]
        if name in LAB_PEERS:
            raise PeerError(f"peer {name!r} is fitted on the lab's tables: import {LAB_PEERS[name]} "
                            "(it registers it) before asking for it")
        raise PeerError(f"unknown peer {name!r}; known: {', '.join(sorted(self._entries))}")

    def names(self, query: str | None = None, origin: str | None = None) -> list[str]:
        return sorted(n for n, e in self._entries.items()
                      if (query is None or e.query == query) and (origin is None or e.origin == origin))


REGISTRY = Registry()


def register(name: str, *, query: str, fitted_on: str):
    """Class decorator: register a peer under `name` (the lab's peers use it on their classes)."""

    def deco(cls):
        REGISTRY.add(name, cls, query=query, fitted_on=fitted_on)
        return cls

    return deco


def entry(name: str) -> Entry:
    """A peer's registry entry (class, query kind, what it was fitted on, product or lab)."""
    return REGISTRY.entry(name)


def names(query: str | None = None, origin: str | None = None) -> list[str]:
    """The registered peers' names, optionally of one query kind and/or origin."""
    return REGISTRY.names(query, origin)


def make(name: str, *args, **kw):
    """A new peer `name`, built with the arguments its class takes."""
    return entry(name).cls(*args, **kw)


STEPTIME_FITTED_ON = ("datasheet + at most nine readings per GPU (three per family: GEMM, NCCL, wall clock; "
                      "no serving run, no silicon row)")

register("steptime", query="step", fitted_on=STEPTIME_FITTED_ON)(StepTimer)
register("bare_roofline", query="gemm", fitted_on="datasheet peaks only (speed of light)")(BareRoofline)
register("datasheet_alpha", query="gemm",
         fitted_on="datasheet peaks with fixed efficiencies (compute 0.5, memory 0.8); nothing measured")(DatasheetAlpha)
register("aic_empirical", query="gemm",
         fitted_on="datasheet peaks with AIConfigurator's empirical SOL factors (memory 0.8, 3 us); "
                   "nothing measured here")(AICEmpirical)
register("distserve", query="step",
         fitted_on="DistServe's latency model fitted on its own profiling runs (OPT on A100)")(DistServeTimer)
register("aiconfigurator", query="serving",
         fitted_on="AIC's per-operator tables measured on that GPU with that engine, interpolated "
                   "(profiled peer); the silicon rows are AIC's own validation sample, shipped with it")(AICEstimator)
