"""The peers: the other predictors steptime is scored against, behind one registry value.

    from steptime import peers
    peers.PRODUCT.names()                           # the product's peers
    est = peers.make("bare_roofline", gpu="h100-sxm")          # = peers.PRODUCT.make(...)
    est.predict({"m": [4096], "n": [4096], "k": [4096]})     # ms per GEMM cell
    peers.entry("bare_roofline").fitted_on          # what it was fitted on (the fairness line)

A peer (the `Peer` protocol) is a class with
  * `name`: its key in a registry, declared in the class body;
  * what it was fitted on: one line in its registry entry (`entry(name).fitted_on`);
  * the query method of its kind (`QUERIES`): a GEMM cell (`gemm`), one profiled operator
    (`op`), a cell on a GPU it never saw (`transfer`), steptime's own constants refitted
    (`constants`), one engine step (`step`), a serving workload (`serving`).

A `Registry` is an immutable value (names -> `Entry`): `PRODUCT` holds the product's peers
(steptime itself, the fixed rooflines, DistServe's fitted latency model, AIConfigurator's
estimator), which need no table of the lab. The lab's peers, fitted on its tables (the
Vidur-style forest and polynomial, the in-sample calibrated roofline, `ml_loo`,
`steptime_home_only`), are entries the lab composes into registries of its own
(`PRODUCT.with_peers(...)`: `steptime_lab.baselines.REGISTRY`, `steptime_lab.peer_registry.LAB`);
importing a lab module changes nothing here. The product refuses a lab peer's name with one
line that names the lab registry holding it (`LAB_PEERS`), and never imports the lab.

Nothing in this module is mutable: a registry is built once and extended by building another.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping, Protocol, runtime_checkable

from steptime.errors import SteptimeError
from steptime.rooflines import AICEmpirical, BareRoofline, DatasheetAlpha
from steptime.serve.aic import AICEstimator
from steptime.serve.distserve import DistServeTimer
from steptime.serve.timer import StepTimer

# query kind -> (the method a peer of that kind answers it with, what it takes and returns)
QUERIES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "gemm": ("predict", "predict(cells with columns m, n, k) -> latency ms per cell"),
    "op": ("predict", "fit(X, y) on one GPU's profiled operator table, then predict(X) -> latency ms"),
    "transfer": ("predict", "predict(cells, target) -> latency ms on a GPU the peer never trained on"),
    "constants": ("__call__", "peer(target) -> (Constants, Calibration) for steptime's own terms"),
    "step": ("step_arrays", "step_arrays(new tokens, kv lengths) -> seconds of one engine step"),
    "serving": ("estimate", "estimate(isl, osl, concurrency) -> {'ttft_s', 'tpot_s'}"),
})

# the lab's peers and the lab registry that holds each (named for the refusal's message only)
LAB_PEERS: Mapping[str, str] = MappingProxyType({
    "calibrated_roofline": "steptime_lab.baselines.REGISTRY",
    "vidur_rf": "steptime_lab.baselines.REGISTRY",
    "vidur_poly": "steptime_lab.baselines.REGISTRY",
    "ml_loo": "steptime_lab.peer_registry.LAB (steptime_lab.experiments.transfer's peers)",
    "steptime_home_only": "steptime_lab.peer_registry.LAB (steptime_lab.experiments.transfer's peers)",
})


class PeerError(SteptimeError, KeyError, ValueError):
    """An unknown peer, a lab peer asked of a registry without it, a malformed entry or a name taken twice."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


@runtime_checkable
class Peer(Protocol):
    name: str


@dataclass(frozen=True)
class Entry:
    """One peer: its name, class, query kind and what it was fitted on (checked when built)."""

    name: str
    cls: type
    query: str
    fitted_on: str

    def __post_init__(self):
        name, cls, query = self.name, self.cls, self.query
        if query not in QUERIES:
            raise PeerError(f"peer {name!r}: unknown query kind {query!r}; known: {', '.join(QUERIES)}")
        if not callable(getattr(cls, QUERIES[query][0], None)):
            raise PeerError(f"peer {name!r} ({cls.__name__}) has no {QUERIES[query][0]}() for a {query} query")
        if getattr(cls, "name", None) != name:
            raise PeerError(f"peer {name!r}: {cls.__name__} must declare name = {name!r} in its class body "
                            f"(it says {getattr(cls, 'name', None)!r})")
        if self.origin == "product" and name in LAB_PEERS:
            raise PeerError(f"peer {name!r} is the lab's ({LAB_PEERS[name]}), not the product's")
        object.__setattr__(self, "fitted_on", " ".join(str(self.fitted_on).split()))

    @classmethod
    def of(cls, peer_cls: type, *, query: str, fitted_on: str) -> "Entry":
        """The entry of a class that declares its `name`."""
        return cls(getattr(peer_cls, "name", None), peer_cls, query, fitted_on)

    @property
    def origin(self) -> str:
        """"product" (a steptime class) or "lab" (anything else)."""
        return "product" if self.cls.__module__.split(".")[0] == "steptime" else "lab"

    @property
    def method(self) -> str:
        return QUERIES[self.query][0]


class Registry:
    """An immutable name -> `Entry` mapping; `with_peers` returns a new, larger registry."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Entry] = ()):
        d: dict[str, Entry] = {}
        for e in entries:
            if not isinstance(e, Entry):
                raise PeerError(f"a registry holds peers.Entry values, not {type(e).__name__}")
            old = d.get(e.name)
            if old is not None and old.cls is not e.cls:
                raise PeerError(f"peer {e.name!r} registered twice ({old.cls.__module__}.{old.cls.__name__} and "
                                f"{e.cls.__module__}.{e.cls.__name__})")
            d[e.name] = e
        object.__setattr__(self, "_entries", MappingProxyType(d))

    def __setattr__(self, key, value):
        raise AttributeError("a peers.Registry is immutable: build a new one with with_peers()")

    def with_peers(self, *entries: Entry) -> "Registry":
        """This registry plus `entries` (a name may repeat only with the same class)."""
        return Registry((*self._entries.values(), *entries))

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, name: str) -> Entry:
        if name in self._entries:
            return self._entries[name]
        if name in LAB_PEERS:
            raise PeerError(f"peer {name!r} is fitted on the lab's tables: ask {LAB_PEERS[name]} for it "
                            "(this registry does not hold it)")
        raise PeerError(f"unknown peer {name!r}; known: {', '.join(sorted(self._entries))}")

    def names(self, query: str | None = None, origin: str | None = None) -> list[str]:
        return sorted(n for n, e in self._entries.items()
                      if (query is None or e.query == query) and (origin is None or e.origin == origin))

    def make(self, name: str, *args, **kw):
        """A new peer `name`, built with the arguments its class takes."""
        return self.entry(name).cls(*args, **kw)


STEPTIME_FITTED_ON = ("datasheet + at most nine readings per GPU (three per family: GEMM, NCCL, wall clock; "
                      "no serving run, no silicon row)")

# the product's peers: a value built once; the lab extends it by building its own (with_peers)
PRODUCT = Registry((
    Entry.of(StepTimer, query="step", fitted_on=STEPTIME_FITTED_ON),
    Entry.of(BareRoofline, query="gemm", fitted_on="datasheet peaks only (speed of light)"),
    Entry.of(DatasheetAlpha, query="gemm",
             fitted_on="datasheet peaks with fixed efficiencies (compute 0.5, memory 0.8); nothing measured"),
    Entry.of(AICEmpirical, query="gemm",
             fitted_on="datasheet peaks with AIConfigurator's empirical SOL factors (memory 0.8, 3 us); "
                       "nothing measured here"),
    Entry.of(DistServeTimer, query="step",
             fitted_on="DistServe's latency model fitted on its own profiling runs (OPT on A100)"),
    Entry.of(AICEstimator, query="serving",
             fitted_on="AIC's per-operator tables measured on that GPU with that engine, interpolated "
                       "(profiled peer); the silicon rows are AIC's own validation sample, shipped with it"),
))


def entry(name: str) -> Entry:
    """A product peer's registry entry (class, query kind, what it was fitted on)."""
    return PRODUCT.entry(name)


def names(query: str | None = None, origin: str | None = None) -> list[str]:
    """The product's peers' names, optionally of one query kind."""
    return PRODUCT.names(query, origin)


def make(name: str, *args, **kw):
    """A new product peer `name`, built with the arguments its class takes."""
    return PRODUCT.make(name, *args, **kw)
