"""`steptime evaluate --family light`: E1.1c's held-out per-kernel scores on Vidur's tables.

subset 'all' pools every light operator; subset '<kernel>' (rmsnorm, rope, act, add, emb)
and 'op:<vidur op>' score one kernel or one Vidur operator."""

from __future__ import annotations

from steptime.calibration import Constants
from steptime.specs import gpu_key
from steptime_lab.data import load_vidur_mlp
from steptime_lab.evaluate import load_gemm_calibration
from steptime_lab.experiments import light as E


def evaluate(family: str = "light", gpus=None, seed: int = 0, n_boot: int = 1000, **kw) -> list[dict]:
    cells = E.tidy_cells(load_vidur_mlp())
    recs = E.run(cells, seed=seed, n_boot=n_boot, gemm_doc=load_gemm_calibration(),
                 constants=Constants.default())["records"]  # the command's constants: the shipped ones
    if gpus:
        keep = {gpu_key(g) for g in gpus}
        recs = [r for r in recs if r["gpu"] in keep]
    return recs
