"""cuBLASLt dispatch log: which kernel tile, stages, cluster shape and split-K each GEMM shape ran.

    python -m steptime_collect.dispatch --gpu h100-sxm --out raw/telemetry/dispatch/h100-sxm/cublaslt.log

Collector (GPU node): runs `steptime_collect.gemm_bench` for every cell of the dense m ladder
(`gemm_sweep.duty_ladder` x its shapes) with CUBLASLT_LOG_LEVEL=2 (trace: one line per kernel
launch with its parameters) and CUBLASLT_LOG_FILE pointing at the output. No GPU setting is
touched.

Parser: `parse_dispatch_log(path)` reads the trace lines

    [<time>][cublasLt][<pid>][Trace][cublasLt<types>Matmul] A=... Adesc=[type=R_16BF rows=K cols=N ld=K] ...
        Ddesc=[type=R_16BF rows=N cols=M ld=N] computeDesc=[... transa=OP_T ...]
        algo=[algoId=.. tile=MATMUL_TILE_128x128 stages=MATMUL_STAGES_64x4 ... clusterShape=..._2x1x1 ...] ...

(the timestamp is optional) into one row per launch: m, n, k of the row-major y = x W^T that
torch.nn.functional.linear asks for (cuBLAS sees it column-major: D is n x m), the tile, stages,
split-K, cluster shape, algorithm id and the data types.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from steptime_collect.cli import output_path, run
from steptime.errors import DataError

_LINE = re.compile(r"\[cublasLt\]\[\d+\]\[Trace\]\[(cublasLt\w*Matmul)\]\s*(.*)$")
_DESC = re.compile(r"(\w+)=\[([^\]]*)\]")
_KV = re.compile(r"(\w+)=([^\s\]]+)")
_TILE = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")


def _kv(text: str) -> dict:
    return dict(_KV.findall(text))


def parse_dispatch_log(path) -> "pd.DataFrame":  # noqa: F821
    """Trace lines of a cuBLASLt log -> one row per GEMM launch (a DataError names file and line)."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file missing")
    rows = []
    for lineno, line in enumerate(p.read_text(errors="replace").splitlines(), start=1):
        m = _LINE.search(line)
        if not m:
            continue
        fn, rest = m.groups()
        desc = {k: _kv(v) for k, v in _DESC.findall(rest)}
        try:
            a, d, algo = desc["Adesc"], desc["Ddesc"], desc["algo"]
            comp = desc.get("computeDesc", {})
            n_out, m_tok = int(d["rows"]), int(d["cols"])
            k = int(a["rows"]) if comp.get("transa", "OP_N") == "OP_T" else int(a["cols"])
        except (KeyError, ValueError) as exc:
            raise DataError(f"{p}: line {lineno}: trace line without a readable {exc} field") from None
        tile = _TILE.search(algo.get("tile", "")) if "tile" in algo else None
        stages = _TILE.search(algo.get("stages", "")) if "stages" in algo else None
        cluster = _TILE.search(algo.get("clusterShape", "")) if "clusterShape" in algo else None
        rows.append({
            "line": lineno, "function": fn, "m": m_tok, "n": n_out, "k": k,
            "a_type": a.get("type"), "d_type": d.get("type"), "compute_type": comp.get("computeType"),
            "algo_id": int(algo["algoId"]) if "algoId" in algo else None,
            "tile_m": int(tile.group(1)) if tile else None, "tile_n": int(tile.group(2)) if tile else None,
            "stages": algo.get("stages"), "stage_k": int(stages.group(1)) if stages else None,
            "split_k": int(algo.get("splitK", 1) or 1),
            "cluster_m": int(cluster.group(1)) if cluster else 1, "cluster_n": int(cluster.group(2)) if cluster else 1,
        })
    if not rows:
        raise DataError(f"{p}: no cuBLASLt trace lines (was CUBLASLT_LOG_LEVEL >= 2 set when it was written?)")
    return pd.DataFrame(rows)


def tile_agreement(log, gpu) -> dict:
    """Per logged shape the dispatched tile against steptime's modelled launch choice."""
    import numpy as np

    from steptime.specs import get_gpu
    from steptime.terms.gemm import sm_fill

    gpu = get_gpu(gpu)
    d = log.dropna(subset=["tile_m"]).drop_duplicates(["m", "n", "k"], keep="last")
    if d.empty:
        raise DataError("the dispatch log names no tile for any launch")
    fill = sm_fill(d["m"].to_numpy(float), d["n"].to_numpy(float), d["k"].to_numpy(float), gpu)
    # cuBLAS tiles are over D = n x m (column-major); steptime's tile_m runs along tokens (m)
    same = (fill["tile_m"] == d["tile_n"].to_numpy()) & (fill["tile_n"] == d["tile_m"].to_numpy())
    return {"shapes": int(len(d)), "tile_agreement": float(np.mean(same)),
            "split_k_agreement": float(np.mean(fill["split_k"] == d["split_k"].to_numpy())),
            "clusters_seen": sorted({f"{a}x{b}" for a, b in zip(d["cluster_m"], d["cluster_n"])})}


def collect(out: Path, gpu: str) -> None:  # pragma: no cover - needs a GPU
    from steptime_collect.gemm_sweep import DUTY_SHAPES, duty_ladder
    from steptime_collect.safety import progress, require_gpu

    require_gpu()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    tmp.unlink(missing_ok=True)
    env = dict(os.environ, CUBLASLT_LOG_LEVEL="2", CUBLASLT_LOG_FILE=str(tmp))
    ms = ",".join(str(m) for m in duty_ladder())
    for n, k in progress(DUTY_SHAPES, desc="dispatch log"):
        subprocess.run([sys.executable, "-m", "steptime_collect.gemm_bench", "--m", ms, "--n", str(n), "--k", str(k),
                        "--iters", "1", "--warmup", "0"], env=env, check=True, stdout=subprocess.DEVNULL)
    os.replace(tmp, out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steptime_collect.dispatch", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--out", required=True, type=output_path)
    p.add_argument("--parse", metavar="LOG", help="parse an existing log and print its rows (no GPU needed)")
    a = p.parse_args(argv)
    if a.parse:
        print(parse_dispatch_log(a.parse).to_csv(index=False), end="")
        return 0
    collect(Path(a.out), a.gpu)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.dispatch"))
