"""`steptime evaluate --family F`: accuracy per GPU and predictor, recomputed from raw/.

Each family module registers a function returning a list of records
    {family, gpu, predictor, subset, cells, mape, median_ape, mape_ci}
with `subset` in {llm, all, decode, prefill} (wallclock: decode, mixed, prefill, tpot, and
`dataset`, `engine`, `tp` added), `predictor` 'steptime' for ours and a
stable baseline name otherwise, `gpu` a library key, errors as fractions.
Family modules are imported lazily (they need pandas).
"""

from __future__ import annotations

import importlib

from steptime.errors import InputError, SteptimeError
from steptime.io import dumps
from steptime.specs import gpu_key
from steptime_lab.data.manifest import find_root

FAMILIES = {
    "gemm": "steptime_lab.evaluate.gemm",
    "attention_decode": "steptime_lab.evaluate.attention",
    "attention_prefill": "steptime_lab.evaluate.attention",
    "light": "steptime_lab.evaluate.light",
    "host": "steptime_lab.evaluate.host",
    "step": "steptime_lab.evaluate.step",
    "wallclock": "steptime_lab.evaluate.wallclock",
}
RECORD_KEYS = ("family", "gpu", "predictor", "subset", "cells", "mape", "median_ape", "mape_ci")


def load_gemm_calibration() -> dict:
    """The GEMM calibration other families carry their per-GPU constants from (the pipeline's
    results/calibration/gemm_constants.json: leave-one-GPU-out folds and deploy readings)."""
    import json

    path = find_root() / "results" / "calibration" / "gemm_constants.json"
    if not path.exists():
        raise SteptimeError(f"{path} missing: build it with `snakemake -j2 results/calibration/gemm_constants.json`")
    return json.loads(path.read_text())


def evaluate(family: str, gpus: list[str] | None = None, **kw) -> list[dict]:
    """Records of `family` (one of FAMILIES), restricted to `gpus` (keys or aliases) if given.
    An unknown family or GPU raises a SteptimeError that lists the known ones."""
    if family not in FAMILIES:
        raise InputError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    if gpus is not None:
        if isinstance(gpus, str):
            gpus = [gpus]
        gpus = list(dict.fromkeys(gpu_key(g) for g in gpus)) or None  # aliases as in predict; unknown: error
    try:
        mod = importlib.import_module(FAMILIES[family])
    except ModuleNotFoundError as exc:
        if exc.name == FAMILIES[family]:
            raise SteptimeError(f"family {family!r} has no evaluation yet") from None
        raise
    records = mod.evaluate(family=family, gpus=gpus, **kw)
    for r in records:
        missing = [k for k in RECORD_KEYS if k not in r]
        if missing:
            raise RuntimeError(f"evaluate {family}: record lacks {missing}")
    return records


def evaluate_cli(args) -> int:
    records = evaluate(args.family, args.gpu)
    if not records:
        which = f" for {', '.join(args.gpu)}" if args.gpu else ""
        raise SteptimeError(f"evaluate {args.family}: no cells{which} in raw/ (see `steptime status`)")
    if args.json:
        print(dumps(records), end="")
        return 0
    wc = any("dataset" in r for r in records)  # wall-clock records also name dataset, engine and TP
    if wc:
        print(f"{'dataset':<13}{'engine':<9}{'tp':>4} {'variant':<8}", end="")
    print(f"{'gpu':<14}{'predictor':<24}{'subset':<9}{'cells':>7}{'MAPE':>9}{'median':>9}  95% CI")
    for r in records:
        if wc:
            tp = "all" if r.get("tp") is None else r["tp"]
            print(f"{r.get('dataset', '-'):<13}{r.get('engine', '-'):<9}{tp:>4} {r.get('variant', '-'):<8}", end="")
        m = "-" if r["mape"] is None else f"{r['mape']:.1%}"
        md = "-" if r["median_ape"] is None else f"{r['median_ape']:.1%}"
        ci = r["mape_ci"]
        cis = "-" if ci[0] is None else f"[{ci[0]:.1%}, {ci[1]:.1%}]"
        print(f"{r['gpu']:<14}{r['predictor']:<24}{r['subset']:<9}{r['cells']:>7}{m:>9}{md:>9}  {cis}")
    return 0
