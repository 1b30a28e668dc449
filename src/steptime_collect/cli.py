"""What every collector's command line shares: argparse types that refuse a bad value with one
clear line (argparse prints it and exits 2), `run`, the `python -m` entry that turns a
SteptimeError (no GPU, a missing file, a setting not allowed) into one line and exit 2, and
`write_csv`, the collectors' one way of writing their rows (atomically: a collection cut short
leaves no half file).
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import sys


def _number(text: str, cast, what: str, minimum: float, whole: str = ""):
    try:
        x = cast(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}{whole} is not {what}") from None
    if not x >= minimum:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r}{whole} must be >= {minimum:g}")
    return x


def positive_int(text: str) -> int:
    """An integer >= 1 (a count, a size)."""
    return _number(text, int, "a whole number", 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (a seed)."""
    return _number(text, int, "a whole number", 0)


def int_list(text: str) -> tuple:
    """Comma-separated integers >= 1, e.g. an m ladder '1,16,256'."""
    return tuple(_number(v, int, "a whole number", 1, f" in {text!r}") for v in str(text).split(","))


def shape_list(text: str) -> tuple:
    """Comma-separated NxK GEMM shapes with N, K >= 1, e.g. '4096x4096,28672x4096'."""
    out = []
    for v in str(text).split(","):
        parts = v.strip().lower().split("x")
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(f"{v!r} in {text!r} is not NxK (e.g. 4096x4096)")
        out.append(tuple(_number(x, int, "a whole number", 1, f" in {text!r}") for x in parts))
    return tuple(out)


def setting_list(text: str) -> tuple:
    """Comma-separated positive numbers where 'none'/'default' (or empty) keeps the GPU's own setting,
    e.g. power caps '575,none,450' (W) or locked clocks 'none,2200' (MHz)."""
    return tuple(None if v.strip().lower() in ("", "none", "default")
                 else _number(v, float, "a number", 1, f" in {text!r}") for v in str(text).split(","))


def output_path(text: str) -> str:
    """A file to write (--out): refused up front if empty, an existing folder or an existing non-regular file (a
    device, FIFO or socket), which the atomic rename at the end would otherwise meet only after the whole collection
    (wave 40: `--out raw/telemetry/clock/h100-sxm/` collected for its hours, then stopped with IsADirectoryError)."""
    import os
    import stat

    if not str(text).strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty file name")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        return text
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give the file to write")
    if not stat.S_ISREG(st.st_mode):
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular file (a device, FIFO or socket)")
    return text


def run(main, prog: str, argv=None) -> int:
    """Call `main(argv)`; a SteptimeError becomes '<prog>: error: <message>' on stderr and exit code 2."""
    from steptime.errors import SteptimeError

    try:
        return main(argv)
    except SteptimeError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


def write_csv(out, header, rows) -> None:
    """Write `rows` (sequences of values) under the `header` names to the CSV `out`, atomically."""
    from steptime.io import atomic_path

    with atomic_path(out) as tmp:
        with open(tmp, "w") as fh:
            fh.write(",".join(header) + "\n")
            for r in rows:
                if len(r) != len(header):
                    raise ValueError(f"{out}: a row of {len(r)} values under {len(header)} columns")
                fh.write(",".join(str(v) for v in r) + "\n")
