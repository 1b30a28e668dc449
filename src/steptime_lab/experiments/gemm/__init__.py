"""The GEMM family, in the family shape (issue 18): fit, score, claims and figures apart.

fit:     `contract` (deploy cells and readings, neutral parameters over the run's constants, predict),
         `folds` (leave-one-GPU-out fits, folds rebuilt from the settled document),
         `settling` (the settle_gemm_constants document and the defaults entries it writes),
         `memory` (the memory-law fits, per GPU, global and held out)
score:   `scoring` (held-out scores against the roofline peers, reading sensitivity),
         `fill` (SM-fill mechanics; wave, cluster-size, grid-cap and paradigm scores),
         `ablation` (factor product vs one scalar, the factor ablation, the implied-alpha ledger)
claims:  `claims` (one function per experiment's claims and decisions, named by what they claim)
figures: `figures` (the panels and drawings; not re-exported here: `from ... gemm import figures`)

Every function that builds GEMM parameters takes the run's `constants=` (issue 18: no hidden read
of the shipped file). Every public name of fit, score and claims is re-exported here, so
`from steptime_lab.experiments import gemm as E; E.settle(...)` works. Patch a function in the
module that calls it, not here.
"""

from __future__ import annotations

from steptime_lab.experiments.gemm.contract import (  # noqa: F401
    AIC_GPUS, DEPLOY_CELLS, STREAM_MIN_MIB, DEPLOY_NOTES, FIT_GLOBALS, FIT_SAMPLE, SUBSETS, subset_masks,
    cell_ids, load_gemm, select_stream_cell, deploy_readings, NEUTRAL_START, base_params, predict,
    apply_readings, calibration_record,
)
from steptime_lab.experiments.gemm.folds import (  # noqa: F401
    _fit_sample, fit_globals, with_globals, gpu_params, loo, _readings_json, folds_from_doc, HOPPER_GLOBALS, FAMILY_GLOBALS,
    _readings_from_json, fold_from_json, with_fold, readings_in_fold,
)
from steptime_lab.experiments.gemm.settling import (  # noqa: F401
    FIT_SETTINGS, settle, defaults_updates, SHIPPED_FIXED, decision_updates, GEMM_GPU_CONSTANTS,
)
from steptime_lab.experiments.gemm.memory import (  # noqa: F401
    memory_cells, fit_mem_law, mem_law_predict, MEM_LAWS, memory_table, _law_fit_global, memory_law_study,
    _law_fit_global_reading, stream_l2_summary, l2_resident_summary,
)
from steptime_lab.experiments.gemm.scoring import (  # noqa: F401
    score_cells, predictions, records, ape_table, BASELINES, load_constants, evaluate_records,
    SENSITIVITY_CELLS, reading_sensitivity,
)
from steptime_lab.experiments.gemm.fill import (  # noqa: F401
    staircase_jumps, no_fill_params, cap_table, peak_fraction, params_no_fill, fill_ablation, jump_stats,
    params_cluster, _shape_cells, VIDUR_GEMM_OPS, vidur_gemm_cells, vidur_readings, WAVE_GPUS, wave_fill_scores,
    HOPPER, CLUSTER_SIZES, cluster_comparison, cluster_cap_scores, BLACKWELL, paradigm_scores,
)
from steptime_lab.experiments.gemm.ablation import (  # noqa: F401
    implied_alpha, cv, scalar_vs_factors, implied_alpha_ledger, ABLATIONS, without_tile, factor_ablation,
)
from steptime_lab.experiments.gemm.claims import (  # noqa: F401
    head_to_head_claims, wave_fill_claims, cluster_size_decision, cluster_cap_claims, paradigm_claims,
    memory_law_claims, scalar_claims, ablation_claims, implied_alpha_claims,
)
