"""Loaders for DistServe's fitted step-latency coefficients and KV-capacity table (Apache-2.0).

DistServe's simdistserve/estimators/time_estimator.py evaluates, in milliseconds:
    prefill = a + b * sum(prompt_len) + c * sum(prompt_len ** 2)
    decode  = a + b * sum(context_len) + c * batch_size
with the decode coefficients of `decoding_smallbs` when batch_size < bs_threshold, else
`decoding_largebs`. These are fitted numbers (a peer baseline), not timings.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from steptime_lab.data import schemas
from steptime_lab.data.aic import _concat
from steptime_lab.data.checks import read_csv, run_schema, time_factor
from steptime_lab.data.manifest import Entry, load_manifest
from steptime_lab.data.vidur import model_key
from steptime.errors import DataError

PHASES = {"prefill": ("prefill", "sum_prompt_tokens", "sum_prompt_tokens_squared"),
          "decoding_smallbs": ("decode_small_bs", "sum_context_tokens", "batch_size"),
          "decoding_largebs": ("decode_large_bs", "sum_context_tokens", "batch_size")}
THRESHOLD = "decoding_large_small_bs_threshold"


def read_coefficients_file(entry: Entry) -> pd.DataFrame:
    path = entry.checked_path
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{entry.rel}: unreadable JSON (truncated or corrupt): {exc}") from None
    f = time_factor(entry, "result")
    engine = entry.get("engine") or entry.path.name.split(".")[-2]
    if not isinstance(doc, dict) or not doc:
        raise DataError(f"{entry.rel}: row all, column all: expected {{model: {{tp: {{...}}}}}}")
    rows = []
    for model, per_tp in doc.items():
        if not isinstance(per_tp, dict):
            raise DataError(f"{entry.rel}: row {model!r}, column all: expected a mapping of tp -> coefficients")
        for tp, p in per_tp.items():
            where = f"{entry.rel}: row {model}/tp={tp}"
            if not str(tp).isdigit() or int(tp) < 1:
                raise DataError(f"{where}, column 'tp': not a positive integer")
            if not isinstance(p, dict):
                raise DataError(f"{where}, column all: expected a mapping")
            thr = p.get(THRESHOLD)
            if not isinstance(thr, int) or thr < 1:
                raise DataError(f"{where}, column {THRESHOLD!r}: missing or not a positive integer ({thr!r})")
            for key, (phase, b_term, c_term) in PHASES.items():
                v = p.get(key)
                if (not isinstance(v, list) or len(v) != 3
                        or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)):
                    raise DataError(f"{where}, column {key!r}: expected three finite numbers [a, b, c], got {v!r}")
                rows.append({"gpu": entry.gpu, "engine": engine, "model": model_key(model), "model_source": model,
                             "tp": int(tp), "phase": phase, "a_ms": v[0] * f, "b_ms": v[1] * f, "c_ms": v[2] * f,
                             "b_per": b_term, "c_per": c_term, "bs_threshold": thr})
    return pd.DataFrame(rows)


def load_distserve(*, root=None) -> pd.DataFrame:
    """DistServe's latency-model coefficients: gpu, engine ('distserve' | 'vllm'), model, model_source, tp,
    phase ('prefill' | 'decode_small_bs' | 'decode_large_bs'), a_ms, b_ms, c_ms, b_per, c_per (what b and c
    multiply), bs_threshold (decode uses the small-batch row when batch_size < bs_threshold)."""
    ents = load_manifest(root).entries("distserve_coefficients")
    df = _concat([read_coefficients_file(e) for e in ents], "distserve_coefficients", None)
    return df.sort_values(["engine", "model", "tp", "phase"], kind="stable").reset_index(drop=True)


def read_max_tokens_file(entry: Entry) -> pd.DataFrame:
    raw = read_csv(entry.checked_path)
    run_schema(raw, schemas.raw("distserve_max_num_tokens"), entry.rel, csv=True)
    return pd.DataFrame({"gpu": entry.gpu, "model": raw["model"].map(model_key), "model_source": raw["model"],
                         "tp": raw["tp"], "pp": raw["pp"], "max_num_tokens": raw["max_num_tokens"]})


def load_distserve_max_tokens(*, root=None) -> pd.DataFrame:
    """DistServe's KV-cache capacity estimate: gpu, model, model_source, tp, pp, max_num_tokens (tokens)."""
    ents = load_manifest(root).entries("distserve_max_num_tokens")
    return _concat([read_max_tokens_file(e) for e in ents], "distserve_max_num_tokens", None)
