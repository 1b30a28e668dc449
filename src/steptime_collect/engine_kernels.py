"""E1.17: do a serving engine's own kernels obey the standalone L2/DRAM law?

    python -m steptime_collect.engine_kernels --model llama-3.1-8b --gpu h100-sxm \
        --out raw/telemetry/engine_kernels/h100-sxm/ncu.csv

Collector (GPU node): Nsight Compute (`ncu --csv --page raw`) over a short eager decode run of
`steptime_collect.steptrace` (a few requests, random weights), reading per kernel its duration
and DRAM bytes. No GPU setting is touched (`--clock-control none`: ncu's default lock to base
clock would bias the comparison).

Parser: `parse_engine_kernels(path)` (header row, units row, one row per kernel launch).
Reduction: `law_gap(df, gpu)`: per kernel class (gemm, attention, kv_write, norm/elementwise)
the achieved fraction of datasheet DRAM bandwidth against x = bytes / L2, beside steptime's
standalone memory law at the same bytes (`terms.gemm.eta_mem`), and the median gap.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from steptime_collect.cli import output_path, positive_int, run
from steptime.errors import DataError

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
CLASSES = (("kv_write", r"reshape_and_cache|cache|cat_|copy"), ("attention", r"flash|attn|sdpa|fmha|attention"),
           ("gemm", r"gemm|sm\d+_xmma|cutlass|cublas|nvjet"), ("elementwise", r"."))
_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_TIME = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def classify(name: str) -> str:
    for cls, pat in CLASSES:
        if re.search(pat, name, flags=re.IGNORECASE):
            return cls
    return "elementwise"  # pragma: no cover - the last pattern matches anything


def parse_engine_kernels(path):
    """ncu raw CSV -> one row per kernel: name, class, duration_ms, dram_bytes."""
    import pandas as pd

    from steptime_lab.data.checks import read_csv, where

    df = read_csv(path, listed_in=None, dtype=str, keep_default_na=False, index_col=False)
    missing = [c for c in ("Kernel Name",) + METRICS if c not in df.columns]
    if missing:
        raise DataError(f"{where(path, 'all', missing[0], csv=True)}: required column missing")
    if len(df) < 2:
        raise DataError(f"{path}: no kernel rows after the units row")
    units, rows = df.iloc[0], df.iloc[1:]
    scale = {}
    for c, table in ((METRICS[0], _TIME), (METRICS[1], _BYTES), (METRICS[2], _BYTES)):
        u = units[c].strip()
        if u not in table:
            raise DataError(f"{where(path, 0, c, csv=True)}: unknown unit {u!r}")
        scale[c] = table[u]
    out = {"kernel": rows["Kernel Name"].to_numpy()}
    for c in METRICS:
        vals = pd.to_numeric(rows[c].str.replace(",", "", regex=False), errors="coerce")
        bad = vals.isna() | (vals < 0)
        if bad.any():
            r = int(np.flatnonzero(bad.to_numpy())[0]) + 1
            raise DataError(f"{where(path, r, c, csv=True)}: not a non-negative number ({rows[c].iloc[r - 1]!r})")
        out[c] = vals.to_numpy(float) * scale[c]
    res = pd.DataFrame({"kernel": out["kernel"], "duration_ms": out[METRICS[0]],
                        "dram_bytes": out[METRICS[1]] + out[METRICS[2]]})
    if (res["duration_ms"] <= 0).any():
        raise DataError(f"{path}: a kernel with zero duration")
    res["cls"] = [classify(k) for k in res["kernel"]]
    return res


def law_gap(df, gpu) -> dict:
    """Per kernel class: achieved eta vs steptime's standalone law at the same bytes."""
    from steptime.specs import get_gpu
    from steptime.terms.gemm import eta_mem

    g = get_gpu(gpu)
    d = df[df["dram_bytes"] > 0].copy()
    d["eta"] = d["dram_bytes"] / (d["duration_ms"] * 1e-3) / g.mem_bw
    d["x"] = d["dram_bytes"] / g.l2_bytes
    d["eta_law"] = np.asarray(eta_mem(d["dram_bytes"].to_numpy(float), g), dtype=float)
    per = {}
    for cls, grp in d.groupby("cls"):
        gap = (grp["eta"] - grp["eta_law"]) / grp["eta_law"]
        per[cls] = {"kernels": int(len(grp)), "median_eta": float(grp["eta"].median()),
                    "median_eta_law": float(grp["eta_law"].median()), "median_gap": float(gap.median()),
                    "median_abs_gap": float(gap.abs().median()), "median_x": float(grp["x"].median())}
    return {"per_class": per, "kernels": int(len(d)),
            "median_abs_gap_all": float(((d["eta"] - d["eta_law"]) / d["eta_law"]).abs().median())}


def collect(out: Path, model: str, requests: int = 8) -> None:  # pragma: no cover - needs a GPU and ncu
    from steptime_collect.ncu import require_ncu
    from steptime.io import atomic_path

    require_ncu()  # a GPU, and Nsight Compute's `ncu` on PATH: one line naming what is missing, not a traceback
    tmp_trace = out.with_suffix(".steptrace.csv")
    cmd = ["ncu", "--csv", "--page", "raw", "--clock-control", "none", "--metrics", ",".join(METRICS), sys.executable,
           "-m", "steptime_collect.steptrace", "--engine", "eager", "--model", model, "--requests", str(requests),
           "--out", str(tmp_trace)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    text = r.stdout[r.stdout.index('"ID"'):]
    with atomic_path(out) as tmp:
        tmp.write_text(text)
    tmp_trace.unlink(missing_ok=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steptime_collect.engine_kernels", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--out", required=True, type=output_path)
    p.add_argument("--requests", type=positive_int, default=8)
    a = p.parse_args(argv)
    collect(Path(a.out), a.model, a.requests)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.engine_kernels"))
