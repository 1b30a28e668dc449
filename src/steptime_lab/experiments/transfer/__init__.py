"""E2.1: cross-GPU transfer. I profiled the GPU I own; a new one arrives: whose
prediction do I trust on it?

Three datasets, each a table of measured cells per GPU (tidy frames from steptime_lab.data):

* ``vidur_step``: Vidur's per-layer non-attention step (sum of the profiled medians of
  Vidur's nine per-layer operators at one num_tokens), per model x TP;
* ``aic_gemm``: AIConfigurator's bf16 GEMM table (m, n, k);
* ``aic_attention``: AIConfigurator's decode (generation) and prefill (context) attention
  tables (bf16 KV cache, head_dim 128, no sliding window).

Predictors, per (home GPU, target GPU):

* ``rf_home`` / ``poly_home``: Vidur's random forest / polynomial regression trained on
  the home GPU's table (a seeded 80 % split of its cells) and scored on the held-out 20 %;
* ``rf_verbatim`` / ``poly_verbatim``: the same fitted model used unchanged on the target;
* ``rf_spec_scaled`` / ``poly_spec_scaled``: its prediction multiplied, per cell (per
  operator for the step), by the ratio of datasheet rooflines target / home,
  max(flops / P, bytes / BW) on each GPU: the most charitable transfer;
* ``rf_steptime_scaled`` / ``poly_steptime_scaled``: the home model's prediction multiplied
  per cell (per operator for the step) by steptime's ratio target / home instead of the
  roofline ratio: the profile kept, steptime used only as the transfer function (each
  GPU on its own held-out constants);
* ``steptime_residual`` (`greybox.GreyBox`): steptime's terms on the same held-out
  constants, each times a bounded smooth correction fitted on the other GPUs' tables;
* ``steptime``: the library's prediction from the datasheet and, per target GPU, the
  families' leave-one-GPU-out constants (fitted without the target) plus the target's own
  deploy readings (`steptime_lab.evaluate.held_out.HeldOut`); every cell that set a constant for the target
  is excluded from its scoring and listed in the result's provenance.

Split along its seams: `steptime_lab.experiments.cells` (cell building, shared with
ranking and the cost ledger), `steptime_lab.experiments.ratios` (rooflines, steptime's
prediction and the target/home ratios), and here `profiled` (the home RF/poly),
`scoring` (contract masks and paired-bootstrap scores), `records` (per-target rows),
`fair_ground` (the fair-ground peers) and `document` (result, figure, grid check). Every old
name is re-exported here, so `from steptime_lab.experiments.transfer import X` keeps working.

The home model is fitted once per (dataset, home GPU) by `fit_home` and cached by the
pipeline (results/cache/rf/<dataset>_<gpu>.joblib).
"""

from __future__ import annotations

from steptime_lab.experiments.cells import (CELL_KEYS, DATASETS, DECODE_MAX_TOKENS, GEMM_OPS, LIGHT_OPS,  # noqa: F401
                                        STEP_OPS, VIDUR_GPUS, _col, _major_kernel, attention_cells, cell_ids,
                                        gemm_cells, llm_mask, load_cells, model_tp_groups, models_on_all,
                                        step_cells, step_tps)
from steptime_lab.experiments.ratios import (attention_work, gemm_work, predict_layer_ops, predict_steptime,  # noqa: F401
                                         roofline_s, spec_ratio, step_op_work, steptime_ratio)
from steptime_lab.experiments.transfer.document import (GRID_CHECK_PREDICTORS, transfer_document,  # noqa: F401
                                                    grid_check_document, plot_transfer)
from steptime_lab.experiments.transfer.profiled import (ATTN_FEATURES, FAST_MAX_ROWS, TEST_FRACTION,  # noqa: F401
                                                    _long_step, bundle_summary, fit_home, predict_profiled,
                                                    split_home)
from steptime_lab.experiments.transfer.greybox import GreyBox, term_features  # noqa: F401
from steptime_lab.experiments.transfer.stack import VidurStack  # noqa: F401
from steptime_lab.experiments.transfer.fair_ground import HomeOnly, MLLeaveOneOut, ml_features, reading_scale  # noqa: F401
from steptime_lab.experiments.transfer.records import (HOME_GPUS, PEERS, PREDICTORS, TARGETS, profiler_gap,  # noqa: F401
                                                   ratio_table, transfer_records)
from steptime_lab.experiments.transfer.scoring import (_calibration_mask, _ci, _ci_paired,  # noqa: F401
                                                   calibration_summary, score_cells, score_many)
