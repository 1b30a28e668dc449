"""Baselines share one interface with the predictor, so experiments swap them by name.

    est = make_baseline("bare_roofline", gpu="h100-sxm")
    est.fit(X, y)            # X: pandas DataFrame of cells, y: measured latency_ms
    est.predict(X) -> np.ndarray of latency_ms

scikit-learn style: constructor arguments stored as given, learned state in
attributes ending with '_', no hidden state. Each module registers its classes in
REGISTRY via `register`.
"""

from __future__ import annotations

REGISTRY: dict[str, type] = {}


def register(name: str):
    def deco(cls):
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(f"baseline {name!r} registered twice")
        REGISTRY[name] = cls
        cls.name = name
        return cls

    return deco


def make_baseline(name: str, **kw):
    import importlib

    for mod in ("steptime_lab.baselines.roofline", "steptime_lab.baselines.vidur_rf"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise
    if name not in REGISTRY:
        raise KeyError(f"unknown baseline {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[name](**kw)
