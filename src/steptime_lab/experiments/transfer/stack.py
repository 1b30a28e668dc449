"""Vidur's measurement-stack factor on E2.1's Vidur step (issue 24, wave 33, helper `grey4`; DESIGN.md).

E1.1 (wave 32, `e11h`) runs each Vidur GPU's GEMM compute branch at eta_active / a factor fitted on the OTHER Vidur
GPUs' projection rows at m >= regimes.VIDUR_STACK_MIN_M (`step.stack_factor`, `steptime_lab.vidur_stack`). E2.1
applies the same factor, held out the same way, to every arm built on steptime's physics:

* steptime: the target's factor fitted on the other Vidur GPUs (E1.1's factor; the tables ml_loo trains on);
* the grey box: the target's physics as steptime's; each training GPU's physics with its factor fitted on the Vidur
  GPUs other than itself AND the target (`factor(gpu, target)`), so no target cell shapes a label, and each inner
  held-out GPU of the nested CV is predicted as the target is;
* steptime_home_only: the factor fitted on the home GPU's Vidur rows alone, predicted with the arm's own (home-only)
  constants on the home GPU (`home_only_factor`).

steptime's ratio target / home behind the steptime-scaled profile rows stays without a factor (the home's factor
would be fitted on the target's rows).
"""

from __future__ import annotations

from steptime_lab import vidur_stack as VS
from steptime_lab.experiments import step as SX
from steptime_lab.regimes import VIDUR_STACK_MIN_M

NOTE = ("Vidur measurement-stack factor (E1.1's, wave 32 e11h): the GEMM compute branch runs at eta_active / factor, "
        "factor = median measured / held-out prediction of Vidur projection rows at m >= VIDUR_STACK_MIN_M of GPUs "
        "other than the scored one")


class VidurStack:
    """Vidur stack factors for E2.1's Vidur step over the Vidur GPUs `gpus` (`vidur`: the tidy Vidur table;
    `gemm_doc`: the GEMM folds each fitting GPU is predicted on; `constants`: the run's base constants)."""

    def __init__(self, vidur, gpus, gemm_doc: dict | None, constants, min_m: int = VIDUR_STACK_MIN_M):
        self.w = SX.wide_cells(vidur)
        self.gpus = sorted(gpus)
        self.gemm_doc, self.base, self.min_m = gemm_doc, constants, int(min_m)
        self._memo: dict = {}

    def factor(self, gpu: str, target: str | None = None) -> dict:
        """`gpu`'s factor fitted on the Vidur GPUs other than `gpu` and `target` (target None or `gpu`: E1.1's,
        fitted on the GPUs other than `gpu`)."""
        key = (gpu, None if target in (None, gpu) else target)
        if key not in self._memo:
            fit_on = [g for g in self.gpus if g != key[1]]
            self._memo[key] = SX.stack_factor(self.w, gpu, fit_on, self.gemm_doc, self.base, self.min_m)
        return self._memo[key]

    def constants(self, constants, gpu: str, target: str | None = None):
        """`constants` with `gpu`'s compute branch under its factor (`factor(gpu, target)`)."""
        return SX.with_stack(constants, gpu, self.factor(gpu, target)["factor"])

    def home_only_factor(self, home_only) -> dict:
        """The factor the home-only arm may see: fitted on its home GPU's Vidur projection rows alone, predicted with
        the arm's constants for the home GPU (`home_only(home)`); the target reads nothing."""
        home = home_only.home
        key = ("home_only", home_only)  # the arm itself (identity): the memo holds it, so no other arm shares the key
        if key not in self._memo:
            rows = SX.stack_rows(self.w, home, home_only(home)[0], self.min_m)
            self._memo[key] = VS.fit_stack_factor(rows, "", self.min_m)  # every row is the home's: none is left out
        return self._memo[key]

    def home_only_constants(self, home_only, constants, target: str):
        """The home-only arm's `constants` for `target` under the home's factor (`home_only_factor`)."""
        return SX.with_stack(constants, target, self.home_only_factor(home_only)["factor"])

    def record(self, target: str) -> dict:
        """The steptime row's factor for `target` as a `fitted_on` entry: {"factor", "gpus" (the GPUs whose rows
        set it), "cells", "min_m", "note"}."""
        return _entry(self.factor(target), NOTE)

    def home_only_record(self, home_only) -> dict:
        """The home-only row's factor as a `fitted_on` entry (`record`'s form)."""
        return _entry(self.home_only_factor(home_only), "fitted on the home GPU's Vidur rows alone, predicted with "
                                                        "the arm's own constants for the home GPU")


def _entry(f: dict, note: str) -> dict:
    return {"factor": f["factor"], "gpus": list(f["fitted_on"]), "cells": f["cells"], "min_m": f["min_m"],
            "note": note}


DISCLOSED = ("Vidur's measurement-stack factor on the Vidur step (issue 24, wave 33, helper grey4; DESIGN.md, "
             "'E2.1's Vidur step under Vidur's measurement-stack factor'): applying E1.1's factor (wave 32, chosen "
             "after seeing E1.1's scores; its form and the m >= VIDUR_STACK_MIN_M threshold from wave 31, after "
             "seeing Vidur's GEMM rows) to steptime, the grey box's physics and steptime_home_only here was chosen "
             "after seeing this experiment's held-out scores, where steptime lost to ml_loo on a40 and h100-sxm; "
             "nothing was tuned on them. Held out per arm: steptime's factor for a target is fitted on the other "
             "Vidur GPUs' projection rows, the same tables ml_loo trains on (no data ml_loo does not see); the grey "
             "box's training GPUs each on the Vidur GPUs other than themselves and the target; steptime_home_only's "
             "on the home GPU's rows alone; no target cell sets any factor")


def summary(records) -> dict:
    """The factors each arm of the Vidur step ran under, from the records' `fitted_on` ({} without a stack):
    {"steptime": {target: factor}, "steptime_home_only": {home: factor}, "steptime_residual": {target: {gpu:
    factor}}}."""
    out: dict = {}
    for r in records:
        if r["dataset"] != "vidur_step":
            continue
        st = (r.get("fitted_on") or {})
        if r["predictor"] == "steptime" and "vidur_stack" in st:
            out.setdefault("steptime", {})[r["target_gpu"]] = st["vidur_stack"]["factor"]
        elif r["predictor"] == "steptime_home_only" and "vidur_stack" in st:
            out.setdefault("steptime_home_only", {})[r["home_gpu"]] = st["vidur_stack"]["factor"]
        elif r["predictor"] == "steptime_residual" and "vidur_stack" in st:
            out.setdefault("steptime_residual", {})[r["target_gpu"]] = {
                g: v["factor"] for g, v in sorted(st["vidur_stack"].items())}
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}
