"""Wall clock: the engine step inside a real serving engine, scored on real step and token times.

One step table (``steps``: one row per measured engine step) and one token table
(``tpot``: one row per served configuration) feed every experiment here:

* E1.26  every forward-pass-metrics (FPM) step predicted vs measured, per phase (prefill
         sweep / decode / mixed) x TP, for three predictors on the same steps: ``kernels``
         (the per-operator model: GPU kernel time only), the engine profile (``vllm``), and
         a bare roofline (datasheet peaks, no host, no floors);
* R2.3   the engine constants read from at most three wall-clock steps per (GPU, engine),
         chosen by `reading_rule` (batch composition only, never scores), the rest held out;
* E1.18  exposed host time per engine: measured minus the GPU-work part of the engine's own
         predicted step (`gpu_part`, steptime.step's split) on the smallest steps, where the host
         dominates, beside the host part the same prediction prices;
* E1.21  prefill on wall clock across GPUs where the sets hold isolated prefills;
* E2.11  token time (TPOT) predicted as ONE decode step at the measured mean running batch
         with a stated mean context, plus the amortised prefill of arriving requests for
         aggregated serving: an approximation of a schedule, not a replay.

Step columns (`STEP_COLUMNS`): ``gpu, model, engine, tp, phase`` ('prefill' | 'decode' |
'mixed'), ``segment``, ``step`` (an id unique within (gpu, model, engine, tp)),
``ctx_tokens, ctx_requests, ctx_kv_tokens`` (new prefill tokens, requests, prefix already
cached), ``decode_requests, mean_decode_kv_tokens``, ``latency_ms``.

Predictors are callables ``f(steps_of_one_tp, tp, overrides) -> dict`` of per-step
arrays (ms): ``total`` and one entry per term kind (host, launch, gemm, attention, comm,
light). `make_predictor` builds them on `steptime.step.predict_steps`.

The code lives in three modules along its seams: `steps` (step table, predictors, readings,
scores, step-level scales), `fpm` (the FPM step tables: E1.26/R2.3/E1.18 and the fitted
constants) and `tokens` (token times: E2.11, E1.21, evaluate records); every name is
re-exported here, so `from steptime_lab.experiments import wallclock as W` keeps working.
"""

from __future__ import annotations

from steptime_lab.experiments.wallclock.steps import (  # noqa: F401
    PHASES, STEP_COLUMNS, KINDS, WallclockError, check_steps, expand_requests, term_kinds, make_predictor,
    split_fitted, roofline_steps, predict_table, READING_RULE, REPEAT_PICKS, Readings, composition_key, reading_rule,
    pick_repeat,
    fit_engine_constants, score_steps, tp_scaling, shares, signed_error_bins, residual_terms, TERM_GROUPS, exposed_host, records, GPU_KINDS,
    HOST_KINDS, gpu_part, host_part,
    BLOCK_SCALE, COMM_SCALE, COMM_OFFSET, SCALES, STEP_ADJUSTMENTS, with_scales, with_block_scale, kind_scale,
    per_op_cost, per_op_tables, ROW_READING_NOTE, row_reading_fpm, INLINE_ROW_NOTE, inline_row_ms, COLLECTION_UNIT_NOTE, collection_units, merged_units, PREFILL_RESIDUAL_NOTE, prefill_residual,
    SPLIT_SIGNAL_NOTE, split_kv_signal, without_split_cost,
    EARLY_LAUNCH_NOTE, launched_early, loop_rows_ms,
)
from steptime_lab.experiments.wallclock.fpm import (  # noqa: F401
    FpmSpec, run_fpm, exposed_host_fpm, repeat_spread, _start_value, engine_constants_doc, fitted_values, engine_profile, fpm_steps,
    write_fitted_constants,
)
from steptime_lab.experiments.wallclock.tokens import (  # noqa: F401
    TPOT_COLUMNS, TPOT_NOTE, mean_context, _decode_frame, _prefill_frame, predict_tpot, DTYPES, tpot_table,
    V3_MEASURES, V3_STEADY_MEAN_NOTE, v3_median_scores, V2_MEASURES, V2_STEADY_MEAN_NOTE, v2_mean_tpot_scores,
    measure_scores,
    _known_model, run_tpot, isolated_prefills, prefill_coverage, score_isolated_prefills, prompt_sensitivity,
    evaluate_records, smallest_batch_rows, VARIANTS, MIXED_NOTE, WAVE_NOTE, wave_wait_ms, CONCURRENCY_DATASETS, mixed_schedule, tpot_fitted_on,
    TTFT_VARIANTS, TTFT_NOTE, predict_ttft, run_ttft, HARNESS, HARNESS_TTFT_NOTE, harness_step_budget,
    harness_burst_ttft, harness_schedule, SERVER_FIELDS, SERVER_NOTE, SERVER_TP_NOTE,
    fit_server_host, fit_server_hosts, server_engines, server_fitted, KV_CAP_NOTE, kv_running, kv_capacity,
    SILICON_CONSISTENCY_NOTE, silicon_consistency, LEADERBOARD_CONSISTENCY_NOTE, DISPERSION_BINS,
    leaderboard_consistency, SERVER_OWN_ROWS_NOTE, KV_BOUND_NOTE, KV_WEIGHT_BOUND_NOTE, KV_BOUND_DTYPE,
    KV_BOUND_COLUMNS, kv_read_bound_ms, kv_bound_check, token_kv_bound,
)
