"""`steptime evaluate --family attention_decode|attention_prefill`: E1.24's held-out scores,
recomputed from the AIConfigurator attention tables in raw/ (a minute or two: one
leave-one-GPU-out fit per kernel family) and the GEMM readings of
results/calibration/gemm_constants.json."""

from __future__ import annotations

from steptime.calibration import Constants
from steptime.specs import gpu_key
from steptime_lab.data import load_aic_attention
from steptime_lab.evaluate import load_gemm_calibration
from steptime_lab.experiments import attention as E
from steptime_lab.experiments.attention import tidy_cells


def load_cells():
    return tidy_cells(load_aic_attention("generation"), load_aic_attention("context"))


def evaluate(family: str, gpus=None, seed: int = 0, n_boot: int = 1000, **kw) -> list[dict]:
    cells = load_cells()
    ev = [gpu_key(g) for g in gpus] if gpus else None

    r = E.run(cells, load_gemm_calibration(), seed=seed, n_boot=n_boot, eval_gpus=ev, ship=False,
              constants=Constants.default())  # the command's constants: the shipped ones, passed down
    return [x for x in r["records"] if x["family"] == family]
