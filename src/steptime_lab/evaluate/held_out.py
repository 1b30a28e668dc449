"""A GPU's held-out constants across every family: the calibration contract in one call.

Scoring GPU X, steptime may use constants fitted on the OTHER GPUs plus at most a few
named deploy readings on X, never cells it is then scored on. Each family settles its
held-out fold in its own experiment; this module composes them for one target:

* ``gemm``: the target's leave-one-GPU-out fold of ``results/calibration/gemm_constants.json``
  (globals fitted without X, then X's three deploy readings; `steptime_lab.experiments.gemm`);
* ``attention``: the target's held-out factors in ``results/E1_24.json``
  (``metrics.per_gpu[X]``: shape factors fitted on the other GPUs of its lane; X's three
  per-GPU constants carried from its GEMM readings by ratios fitted on those GPUs; the
  shipped per-lane factors, fitted with X, are switched off);
* ``light``: light-kernel constants refitted on the other Vidur GPUs; X's
  ``light_bw_scale`` carried from its GEMM streaming reading (or, without GEMM readings,
  one light deploy reading) (`steptime_lab.experiments.step.held_out_constants`).

A family whose fold is not given, or has no fold for X, keeps defaults.yaml and the
returned Calibration says so in its notes. Every cell that set a constant is recorded in
the Calibration, so the scorer can `check_disjoint` / exclude them.

    heldout = HeldOut(families=("gemm", "attention"), gemm_doc=..., attn_doc=...)
    constants, calibration = heldout("h100-sxm")
"""

from __future__ import annotations

from steptime.calibration import Calibration, Constants
from steptime.specs import get_gpu
from steptime_lab.experiments import attention as AX, gemm as GX, light as LX, step as SX
from steptime_lab.run_constants import require_constants

FAMILIES = ("gemm", "attention", "light")
# Which families each scored dataset exercises (E2.x experiments use these names).
DATASET_FAMILIES = {"aic_gemm": ("gemm",), "aic_attention": ("attention",), "vidur_step": ("light", "gemm"),
                    "ranking": ("gemm", "attention")}


def held_out_constants(target: str, families=FAMILIES, *, gemm_doc: dict | None = None,
                       attn_doc: dict | None = None, light_cells=None, light_gpus=None,
                       base: Constants | None = None) -> tuple[Constants, Calibration]:
    """Constants for scoring `target` held out, and the Calibration listing every cell that
    set one (defaults.yaml's own cells included, `Calibration.from_constants`)."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown constant families {unknown} (known: {', '.join(FAMILIES)})")
    key = get_gpu(target).key
    c = require_constants(base, "held_out_constants")
    notes: dict[str, tuple] = {}
    if "light" in families and light_cells is not None:
        c, info = SX.held_out_constants(light_cells, target, list(light_gpus or sorted(set(light_cells["gpu"]))),
                                        gemm_doc, c)
        notes["light"] = (f"light_bw_scale@{key}", [tuple(info["reading_cell"])],
                          f"light constants (eta, floor, knee p) fitted on {info['fit_on']}; light_bw_scale: {info['light_bw_scale_from']}; "
                          f"SM-rate law fitted on {info['fit_on']}, light_dram_eta: {info['light_dram_eta_from']}")
    if "gemm" in families:
        c, gemm_cells = GX.with_fold(c, key, gemm_doc)
        if gemm_cells:
            notes["gemm"] = (f"gemm_fold@{key}", gemm_cells,
                             "GEMM globals fitted on the other GPUs; the target's three deploy readings")
    per_gpu = (attn_doc or {}).get("metrics", {}).get("per_gpu", {})
    if "attention" in families and key in per_gpu:
        pg = per_gpu[key]
        c = c.with_overrides({**pg["factors"], "attn_lane_factors": {}}, scope=f"gpu.{key}",
                             provenance="FITTED", source=f"E1.24 held-out fold (fit on {pg.get('fit_on')})")
        notes["attention"] = (f"attention_fold@{key}", [tuple(v) for v in pg["deploy_cells"].values()],
                              f"attention factors fitted on {pg.get('fit_on')}; the target's deploy readings")
    cal = Calibration.from_constants(c)
    for fam in families:
        if fam in notes:
            name, cells, note = notes[fam]
            cal.record(name, cells, note=note)
        else:
            cal.notes[f"{fam}_constants"] = "defaults.yaml as shipped (no held-out fold for this GPU)"
    return c, cal


class HeldOut:
    """`held_out_constants` for one set of folds, memoised per target: call it with a GPU."""

    def __init__(self, families=FAMILIES, *, gemm_doc: dict | None = None, attn_doc: dict | None = None,
                 light_cells=None, light_gpus=None, base: Constants | None = None):
        self.families = tuple(families)
        self._kw = dict(gemm_doc=gemm_doc, attn_doc=attn_doc, light_cells=light_cells, light_gpus=light_gpus,
                        base=base)
        self._memo: dict = {}

    @classmethod
    def for_dataset(cls, dataset: str, *, vidur=None, light_gpus=None, gemm_doc: dict | None = None,
                    attn_doc: dict | None = None, base: Constants | None = None) -> "HeldOut":
        """The families `dataset` exercises; `vidur` is the tidy Vidur table the light fit reads; `base`
        the rule's constants the folds are laid over (None: the shipped ones)."""
        if dataset not in DATASET_FAMILIES:
            raise ValueError(f"unknown dataset {dataset!r} (known: {', '.join(DATASET_FAMILIES)})")
        fams = DATASET_FAMILIES[dataset]
        light_cells = None
        if "light" in fams and vidur is not None:
            light_cells = LX.tidy_cells(vidur)
        return cls(fams, gemm_doc=gemm_doc, attn_doc=attn_doc, light_cells=light_cells, light_gpus=light_gpus,
                   base=base)

    def __call__(self, target: str) -> tuple[Constants, Calibration]:
        if target not in self._memo:
            self._memo[target] = held_out_constants(target, self.families, **self._kw)
        return self._memo[target]


def fit_footprint(dataset: str, target: str, *, gemm_doc: dict | None = None, attn_doc: dict | None = None,
                  attn_cells=None, attn_sample: int | None = None, light_cells=None, light_gpus=None,
                  seed: int = 0) -> dict:
    """Every measured cell that shaped a held-out constant steptime uses for `target` on
    `dataset`, shared fits included: {family: {gpus, cells}}, the target's own readings and
    the total. GEMM: the fold's fit sample (settings.n_per_gpu cells of each other GPU);
    attention: E1.24's fit sample on the fold's GPUs (`attention._sample`), its GPUs' deploy
    cells behind the reading ratios, and the GEMM fold its readings are solved under; light:
    the other Vidur GPUs' light tables (and the GEMM fold behind a derived bandwidth scale)."""
    key = get_gpu(target).key
    fams = DATASET_FAMILIES[dataset]
    out: dict = {}
    folds = (gemm_doc or {}).get("folds", {})
    has_gemm_fold = key in folds
    gemm_needed = "gemm" in fams or "attention" in fams or ("light" in fams and has_gemm_fold)
    if gemm_needed and has_gemm_fold:
        others = sorted(g for g in folds if g != key)
        n = int(gemm_doc["settings"]["n_per_gpu"])
        out["gemm"] = {"gpus": others, "cells": n * len(others) + 3 * len(others),
                       "what": f"global fit sample ({n} cells per GPU) plus each GPU's three deploy readings"}
    per_gpu = (attn_doc or {}).get("metrics", {}).get("per_gpu", {})
    if "attention" in fams and key in per_gpu and attn_cells is not None:
        fit_on = list(per_gpu[key]["fit_on"])
        n_fit = len(AX._sample(attn_cells[attn_cells["gpu"].isin(fit_on)], seed,
                               attn_sample or AX.FIT_SAMPLE))
        out["attention"] = {"gpus": fit_on, "cells": int(n_fit + 3 * len(fit_on)),
                            "what": "shape-factor fit sample plus each GPU's three attention deploy cells "
                                    "(reading ratios)"}
    if "light" in fams and light_cells is not None:
        others = [g for g in (light_gpus or sorted(set(light_cells["gpu"]))) if g != key]
        out["light"] = {"gpus": others, "cells": int(light_cells["gpu"].isin(others).sum()),
                        "what": "light-kernel factors (eta, floor, knee p) fitted on these GPUs' tables"}
    out["target_readings"] = 3 if has_gemm_fold else 1
    out["total_cells"] = int(sum(v["cells"] for v in out.values() if isinstance(v, dict)) + out["target_readings"])
    out["gpus"] = sorted({g for v in out.values() if isinstance(v, dict) for g in v["gpus"]})
    return out
