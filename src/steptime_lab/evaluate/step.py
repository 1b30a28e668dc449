"""`steptime evaluate --family step`: E1.1's held-out per-layer step scores on Vidur's tables
(one layer's non-attention operators; subsets decode <= 64 tokens, prefill >= 512, all)."""

from __future__ import annotations

from steptime.calibration import Constants
from steptime.specs import gpu_key
from steptime_lab.data import load_vidur_mlp
from steptime_lab.evaluate import load_gemm_calibration
from steptime_lab.experiments import light as LX, step as E


def evaluate(family: str = "step", gpus=None, seed: int = 0, n_boot: int = 1000, **kw) -> list[dict]:
    v = load_vidur_mlp()
    # GEMM leave-one-GPU-out folds as the pipeline settled them from raw/ (rule settle_gemm_constants)
    recs = E.run(v, LX.tidy_cells(v), seed=seed, n_boot=n_boot, gemm_doc=load_gemm_calibration(),
                 constants=Constants.default())["records"]  # the command's constants: the shipped ones, passed down
    recs = [r for r in recs if r.get("scope") != "cell_group"]
    if gpus:
        keep = {gpu_key(g) for g in gpus}
        recs = [r for r in recs if r["gpu"] in keep]
    return recs
