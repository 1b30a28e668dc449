"""Read-only containers for the tables a prediction reads (issue 18: no module-level mutable state).

`ReadOnlyDict` is a dict that refuses every change once built: code that reads a dict (json,
`dataclasses.asdict`, pickle, `dict(x)`, `{**x}`) sees one, and a caller that tries to change a
shipped table (a GPU's cluster limits, an engine's fitted values) gets a TypeError instead of
silently changing every later prediction in the process. `read_only(x)` converts nested dicts;
`copy.copy` / `copy.deepcopy` of one give plain dicts, the caller's to change.
"""

from __future__ import annotations

import copy
from typing import Any


class ReadOnlyDict(dict):
    """A dict that cannot be changed after it is built."""

    __slots__ = ()

    def _refuse(self, *args, **kw):
        raise TypeError(f"this {type(self).__name__} is read-only: build a new one (dict(x) for a copy)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (type(self), (dict(self),))

    def __copy__(self):
        return dict(self)  # a copy is the caller's to change: a plain dict

    def __deepcopy__(self, memo):
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}


def read_only(x: Any) -> Any:
    """`x` with every dict in it (nested ones included) a ReadOnlyDict; other values as they are."""
    if isinstance(x, ReadOnlyDict):
        return x
    if isinstance(x, dict):
        return ReadOnlyDict({k: read_only(v) for k, v in x.items()})
    return x
