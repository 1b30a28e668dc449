"""Column helpers shared by the schema modules (schemas, wallclock_schemas): one place, no circle."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa

Check = pa.Check
FINITE = Check(lambda s: np.isfinite(s.astype("float64")), element_wise=False, name="finite")


def _pos_int(**kw):
    return pa.Column("int64", Check.ge(1), **kw)


def _nonneg_int(**kw):
    return pa.Column("int64", Check.ge(0), **kw)


def _latency(**kw):
    return pa.Column("float64", [Check.gt(0), FINITE], **kw)


def _str(**kw):
    return pa.Column(str, Check.str_length(min_value=1), **kw)
