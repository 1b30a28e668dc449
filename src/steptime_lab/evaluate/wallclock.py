"""`steptime evaluate --family wallclock`: real engine steps (AIConfigurator forward-pass metrics,
subsets decode / mixed / prefill per TP) and token times (ML.ENERGY v2/v3, AIConfigurator silicon,
subset tpot; TTFT where the rows measure it, subset ttft), recomputed from raw/ through the checked loaders; records carry dataset, engine, tp (and
tps, the TP degrees pooled), variant (step; for token times naive / mixed; for TTFT wave / steady, E2.11) and fitted_on.
The engine constants are refitted here by R2.3's rule (three steps per GPU and engine); the fit
and prompt-length settings come from the registry (config/experiments.yaml, R2.3 and E2.11)."""

from __future__ import annotations

from steptime.calibration import Constants
from steptime.io import read_yaml
from steptime.specs import gpu_key
from steptime_lab import data
from steptime_lab.data.manifest import find_root
from steptime_lab.experiments import wallclock as W


def settings() -> tuple:
    reg = read_yaml(find_root() / "config" / "experiments.yaml")["experiments"]
    fit = reg["R2.3"]["settings"]["fit"]
    prompts = {(d, t): v for d, per in reg["E2.11"]["settings"]["prompt_tokens"].items() for t, v in per.items()}
    return fit, prompts, reg["E2.11"]["settings"].get("mixed"), reg["E2.11"]["settings"].get("ttft")


def evaluate(family: str = "wallclock", gpus=None, seed: int = 0, n_boot: int = 1000, **kw) -> list[dict]:
    fit, prompts, mixed, ttft = settings()
    recs = W.evaluate_records(data.load_fpm_steps(), data.load_mlenergy("v2"), data.load_mlenergy("v3"),
                              data.load_aic_silicon(), fit=fit, prompt_tokens=prompts, n_boot=n_boot, seed=seed,
                              mixed=mixed, ttft=ttft,
                              constants=Constants.default())  # the command's constants: the shipped ones, passed down
    if gpus:
        keep = {gpu_key(g) for g in gpus}
        recs = [r for r in recs if r["gpu"] in keep]
    return recs
