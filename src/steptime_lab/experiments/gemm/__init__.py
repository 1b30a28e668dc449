"""GEMM-term experiments, one module per seam:

- `contract`: the calibration contract (deploy cells and readings, neutral parameters, predict)
- `folds`: leave-one-GPU-out fits of the global constants and folds rebuilt from a settled document
- `settling`: the settle_gemm_constants document and the defaults.yaml entries it writes
- `scoring`: held-out scores against the baselines, E1.23, deploy-reading sensitivity
- `fill`: SM-fill mechanics (staircases, fill/cluster switched, grid caps)
- `wave` (E1.2), `cluster` (E1.11, E1.2b), `paradigm` (E1.12): the SM-fill experiments
- `memory`: the memory law (E1.3)
- `ablation`: factor product vs one scalar, factor ablation (E1.13) and implied alpha (L0.2)

Every public name is re-exported here, so `from steptime_lab.experiments import gemm as E;
E.settle(...)` keeps working. Patch a function in the module that calls it, not here.
"""

from __future__ import annotations

from steptime_lab.experiments.gemm.contract import (  # noqa: F401
    AIC_GPUS, DEPLOY_CELLS, STREAM_MIN_MIB, DEPLOY_NOTES, FIT_GLOBALS, FIT_SAMPLE, SUBSETS, subset_masks,
    cell_ids, load_gemm, select_stream_cell, deploy_readings, NEUTRAL_START, base_params, predict,
    apply_readings, calibration_record,
)
from steptime_lab.experiments.gemm.folds import (  # noqa: F401
    _fit_sample, fit_globals, with_globals, gpu_params, loo, _readings_json, folds_from_doc,
    _readings_from_json, fold_from_json, with_fold, readings_in_fold,
)
from steptime_lab.experiments.gemm.settling import (  # noqa: F401
    FIT_SETTINGS, settle, defaults_updates, SHIPPED_FIXED, decision_updates,
    GEMM_GPU_CONSTANTS,
)
from steptime_lab.experiments.gemm.scoring import (  # noqa: F401
    score_cells, predictions, records, ape_table, BASELINES, load_constants, evaluate_records,
    e1_23_document, SENSITIVITY_CELLS, reading_sensitivity,
)
from steptime_lab.experiments.gemm.fill import (  # noqa: F401
    staircase_jumps, no_fill_params, params_no_fill, params_cluster, fill_ablation, jump_stats, cap_table,
    peak_fraction, _shape_cells,
)
from steptime_lab.experiments.gemm.wave import (  # noqa: F401
    VIDUR_GEMM_OPS, vidur_gemm_cells, vidur_readings, WAVE_GPUS, e1_2_analysis, e1_2_document, e1_2_panels,
)
from steptime_lab.experiments.gemm.cluster import (  # noqa: F401
    HOPPER, CLUSTER_SIZES, cluster_comparison, e1_11_document, e1_2b_analysis, e1_2b_document,
    e1_2b_panels,
)
from steptime_lab.experiments.gemm.paradigm import (  # noqa: F401
    paradigm_scores, BLACKWELL, e1_12_document, e1_12_panels,
)
from steptime_lab.experiments.gemm.memory import (  # noqa: F401
    memory_cells, fit_mem_law, mem_law_predict, MEM_LAWS, memory_table, _law_fit_global, memory_law_study,
    _law_fit_global_reading, stream_l2_summary, l2_resident_summary, e1_3_document,
)
from steptime_lab.experiments.gemm.ablation import (  # noqa: F401
    implied_alpha, cv, e1_13_analysis, e1_13_document, l0_2_analysis, l0_2_document, ABLATIONS,
    factor_ablation, ablation_claims,
)
