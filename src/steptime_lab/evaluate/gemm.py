"""`steptime evaluate --family gemm`: held-out GEMM accuracy per GPU, steptime vs the roofline baselines.

Recomputed from the measured tables: the tidy table results/data/gemm.parquet when present
(else the raw loaders), the held-out constants of results/calibration/gemm_constants.json
when present (else the leave-one-GPU-out fits are rerun here, ~1 min).
"""

from __future__ import annotations

from steptime.calibration import Constants
from steptime_lab.data.manifest import find_root
from steptime_lab.experiments import gemm as E


def evaluate(family: str = "gemm", gpus=None, *, refit: bool = False, n_boot: int = 1000, seed: int = 0,
             **kw) -> list[dict]:
    root = find_root()
    constants = Constants.default()  # the command's constants: the shipped ones, passed down
    table = root / "results" / "data" / "gemm.parquet"
    df = E.load_gemm(table if table.exists() else None)
    const = root / "results" / "calibration" / "gemm_constants.json"
    if const.exists() and not refit:
        doc = E.load_constants(const)
    else:
        cluster = None
        e111 = root / "results" / "E1_11.json"
        if e111.exists():
            cluster = E.load_constants(e111)["decision"]["cluster_size"]
        fixed = {"hopper_cluster_size": cluster} if cluster else {}
        doc = E.settle(df, seed=seed, fixed={**fixed, **E.SHIPPED_FIXED}, constants=constants)
    recs, _ = E.evaluate_records(df, doc, gpus=gpus, n_boot=n_boot, seed=seed, constants=constants)
    return recs
