"""Reading raw files and checking them: every failure is a DataError naming file, row, column.

Rows are numbered as in the file: 0-based data rows (a CSV row r sits on line r + 2, after
the header).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from steptime.errors import DataError

MAX_LISTED = 5

# time units a manifest may state, as factors to milliseconds
TIME_UNITS_TO_MS = {"ms": 1.0, "us": 1e-3, "µs": 1e-3, "s": 1e3, "ns": 1e-6}


def where(file, row=None, column=None, csv: bool = False) -> str:
    parts = [str(file)]
    if row is not None:
        parts.append(f"row {row}" + (f" (line {int(row) + 2})" if csv and _is_int(row) else ""))
    if column is not None:
        parts.append(f"column {column!r}")
    return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]


def _is_int(x) -> bool:
    try:
        int(x)
        return True
    except (TypeError, ValueError):
        return False


def read_parquet(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(f"{path}: file missing (listed in raw/MANIFEST.yaml)")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as exc:  # pyarrow raises several types for truncated/corrupt files
        raise DataError(f"{path}: unreadable parquet (truncated or corrupt; no row or column can be "
                        f"trusted): {type(exc).__name__}: {exc}") from None


def read_csv(path: Path | str, listed_in: str | None = "raw/MANIFEST.yaml", **kw) -> pd.DataFrame:
    """pandas.read_csv with failures as DataError naming the file; `listed_in` says where a missing
    file was expected from (None: files found otherwise, e.g. telemetry a collector writes)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file missing" + (f" (listed in {listed_in})" if listed_in else ""))
    try:
        return pd.read_csv(path, **kw)
    except Exception as exc:
        raise DataError(f"{path}: unreadable CSV: {type(exc).__name__}: {exc}") from None


def run_schema(df: pd.DataFrame, schema, file, csv: bool = False) -> pd.DataFrame:
    """Validate with a pandera schema; turn its failure cases into one readable DataError."""
    from pandera.errors import SchemaError, SchemaErrors

    try:
        return schema.validate(df, lazy=True)
    except SchemaErrors as exc:
        fc = exc.failure_cases
    except SchemaError as exc:  # pragma: no cover - lazy=True collects, but be safe
        raise DataError(f"{file}: {exc}") from None
    lines = []
    # missing columns first (the cause of any failure that follows), then row-level problems (by row:
    # they say where to look), then column-level ones
    fc = fc.copy()
    fc["_missing"] = fc["check"].astype(str) != "column_in_dataframe"
    fc["_rowkey"] = pd.to_numeric(fc["index"], errors="coerce")
    fc = fc.sort_values(["_missing", "_rowkey"], na_position="last", kind="stable")
    # a column that failed coercion (coerce=True schemas) also fails its value checks as a whole,
    # a consequence that names no row: list only the rows that would not coerce
    uncoerced = set(fc.loc[fc["check"].astype(str).str.startswith("coerce_dtype"), "column"])
    seen = set()
    for _, f in fc.iterrows():
        col = f["column"] if f["column"] is not None and f["column"] == f["column"] else None
        check = str(f["check"])
        no_row = f["index"] is None or (isinstance(f["index"], float) and np.isnan(f["index"]))
        if no_row and col in uncoerced and not check.startswith("coerce_dtype"):
            continue
        if check == "column_in_dataframe":
            col = f["failure_case"]
            key = ("missing", col)
            msg = f"{where(file, 'all', col)}: required column missing"
        elif no_row:
            key = ("col", col, check)
            msg = f"{where(file, 'all', col)}: failed {check} (found {f['failure_case']})"
        else:
            key = ("row", f["index"], col)
            msg = f"{where(file, f['index'], col, csv)}: failed {check} (value {f['failure_case']!r})"
        if key in seen:
            continue
        seen.add(key)
        lines.append(msg)
    n = len(lines)
    head = lines[:MAX_LISTED]
    more = f"\n  ... and {n - MAX_LISTED} more" if n > MAX_LISTED else ""
    raise DataError(head[0] + ("\n  " + "\n  ".join(head[1:]) if len(head) > 1 else "") + more)


def fail_rows(df: pd.DataFrame, bad: np.ndarray | pd.Series, file, column: str, problem: str,
              values: Iterable | None = None, csv: bool = False) -> None:
    """Raise a DataError listing the rows where `bad` is true (no-op if none)."""
    bad = np.asarray(bad, dtype=bool)
    if not bad.any():
        return
    idx = df.index[bad]
    vals = np.asarray(values)[bad] if values is not None else df.loc[bad, column].to_numpy()
    lines = [f"{where(file, i, column, csv)}: {problem} (value {v:.6g})" if isinstance(v, (float, np.floating))
             else f"{where(file, i, column, csv)}: {problem} (value {v!r})"
             for i, v in zip(idx[:MAX_LISTED], vals[:MAX_LISTED])]
    more = f"\n  ... {len(idx)} rows in all" if len(idx) > MAX_LISTED else ""
    raise DataError(lines[0] + ("\n  " + "\n  ".join(lines[1:]) if len(lines) > 1 else "") + more)


def time_factor(entry, column_key: str) -> float:
    """Factor from the manifest's stated unit of `column_key` to milliseconds."""
    units = entry.get("units") or {}
    unit = units.get(column_key)
    if unit is None:
        raise DataError(f"{entry.rel}: column {column_key!r}: raw/MANIFEST.yaml states no unit for it")
    f = TIME_UNITS_TO_MS.get(str(unit).strip())
    if f is None:
        raise DataError(f"{entry.rel}: column {column_key!r}: unknown time unit {unit!r} in raw/MANIFEST.yaml "
                        f"(known: {', '.join(TIME_UNITS_TO_MS)})")
    return f


def aggregate_duplicates(df: pd.DataFrame, keys: list[str], values: dict[str, str]) -> pd.DataFrame:
    """Collapse rows with identical `keys`: each value column by its named aggregation; add n_dup."""
    g = df.groupby(keys, sort=True, dropna=False, observed=True)
    out = g.agg(**{c: (c, how) for c, how in values.items()}, n_dup=(next(iter(values)), "size"))
    out = out.reset_index()
    out["n_dup"] = out["n_dup"].astype("int64")
    return out
