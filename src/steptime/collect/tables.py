"""Checked CSV reading shared by the telemetry parsers."""

from __future__ import annotations

from pathlib import Path

from steptime.errors import DataError


def read_checked_csv(path, columns: dict, positive=(), nonnegative=(), **read_kw):
    """Read a CSV, check required columns, types and ranges; DataError names file/row/column."""
    import pandas as pd

    path = Path(path)
    try:
        df = pd.read_csv(path, **read_kw)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot parse CSV: {exc}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
    for col, typ in columns.items():
        if typ in (int, float):
            vals = pd.to_numeric(df[col], errors="coerce")
            bad = vals.isna()
            if bad.any():
                row = int(bad.idxmax())
                raise DataError(f"{path}: row {row + 2}, column {col!r}: not a number ({df[col].iloc[row]!r})")
            df[col] = vals.astype(typ)
    for col in positive:
        bad = df[col] <= 0
        if bad.any():
            row = int(bad.idxmax())
            raise DataError(f"{path}: row {row + 2}, column {col!r}: must be > 0 (got {df[col].iloc[row]})")
    for col in nonnegative:
        bad = df[col] < 0
        if bad.any():
            row = int(bad.idxmax())
            raise DataError(f"{path}: row {row + 2}, column {col!r}: must be >= 0 (got {df[col].iloc[row]})")
    return df
