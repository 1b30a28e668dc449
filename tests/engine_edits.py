"""One way for tests to take facts out of an engine profile: the same profile with some values absent."""
import dataclasses

from steptime.specs.engines import Engine


def without_values(engine: Engine, *keys: str) -> Engine:
    """`engine` with the named values removed (absent = the fact's default: not fused, flat floors, ...)."""
    unknown = [k for k in keys if k not in engine.values]
    if unknown:
        raise KeyError(f"{engine.key} has no values {unknown}")
    return dataclasses.replace(engine, values={k: v for k, v in engine.values.items() if k not in keys})
