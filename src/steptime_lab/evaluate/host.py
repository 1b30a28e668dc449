"""`steptime evaluate --family host`: E1.4's held-out host-time scores (Vidur cpu_overheads).

subset 'all' / 'tp1' / 'tp>1' score the whole host time per step (S(N) + Ray + sampler);
'part:S_core' and 'part:sampler' score the parts."""

from __future__ import annotations

from steptime.specs import gpu_key
from steptime_lab.data import load_vidur_cpu_overheads
from steptime_lab.experiments.host import floor as E


def evaluate(family: str = "host", gpus=None, seed: int = 0, n_boot: int = 1000, **kw) -> list[dict]:
    recs = E.run(E.tidy(load_vidur_cpu_overheads()), seed=seed, n_boot=n_boot)["records"]
    if gpus:
        keep = {gpu_key(g) for g in gpus}
        recs = [r for r in recs if r["gpu"] in keep]
    return recs
