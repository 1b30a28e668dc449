"""The fast paths of the GEMM term, the decode attention term and `predict_steps` give the
plain paths' numbers to the last bit (issue 21, speed).

- `gemm_time` over many cells (passes of `CHUNK` cells, distinct token counts timed once, the
  option scan with shared per-tile-shape terms) equals `gemm_time` over slices of at most
  `SMALL_BATCH` cells (every option scored in one broadcast by `_option_terms`), every output;
- `attention_time` of decode rows (`_decode_time`) equals the general per-request composition
  (`attention_request_terms`, summed per step, `combine`);
- `predict_steps` over thousands of steps equals `predict_step` called once per step, every term.
"""
from __future__ import annotations

import numpy as np
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.step import predict_step, predict_steps
from steptime.terms import attention, gemm

# Wave (Ampere, Ada, sm120, CDNA) and persistent (Hopper, sm100) launch paradigms.
GPUS = ("a100-sxm", "l40s", "rtx-pro-6000", "mi300x", "h100-sxm", "b200")


def _equal(a: dict, b: dict, where: str) -> None:
    assert set(a) == set(b), where
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray):
            assert x.shape == np.shape(y) and x.dtype == np.asarray(y).dtype, (where, key)
            assert np.array_equal(x, y, equal_nan=True), (where, key, np.flatnonzero(x != y)[:5])
        else:
            assert x == y, (where, key)


def _reference_gemm(m, n, k, gpu, **kw) -> dict:
    """gemm_time in slices of SMALL_BATCH cells: the broadcast scorer, no passes, no de-duplication."""
    parts = [gemm.gemm_time(m[i:i + gemm.SMALL_BATCH], n[i:i + gemm.SMALL_BATCH], k[i:i + gemm.SMALL_BATCH],
                            gpu, **kw) for i in range(0, m.size, gemm.SMALL_BATCH)]
    return {key: (np.concatenate([p[key] for p in parts]) if isinstance(parts[0][key], np.ndarray)
                  else parts[0][key]) for key in parts[0]}


def _cells(seed: int, size: int):
    rng = np.random.default_rng(seed)
    m = np.concatenate([np.arange(1, 600), rng.integers(1, 65536, size - 599)]).astype(float)
    n = rng.choice([64, 128, 200, 1024, 2560, 4096, 6144, 14336, 28672, 128256], size).astype(float)
    k = rng.choice([16, 128, 512, 1000, 1024, 4096, 8192, 14336, 53248], size).astype(float)
    return m, n, k


@pytest.mark.parametrize("gpu", GPUS)
def test_gemm_fast_path_equals_broadcast_path(gpu):
    m, n, k = _cells(1, gemm.CHUNK + 5_000)  # more than one pass
    g = get_gpu(gpu)
    _equal(gemm.gemm_time(m, n, k, g), _reference_gemm(m, n, k, g), gpu)
    f = gemm.gemm_time(m, n, k, g, f_clk=0.9, dtype="fp8")
    _equal(f, _reference_gemm(m, n, k, g, f_clk=0.9, dtype="fp8"), f"{gpu} fp8")


@pytest.mark.parametrize("gpu", ("a100-sxm", "h100-sxm"))
def test_gemm_repeated_token_counts_equal_each_cell(gpu):
    """One weight over many repeated token counts (a step table's lm_head, a layer's projections)."""
    rng = np.random.default_rng(2)
    m = rng.integers(1, 300, 20_000).astype(float)
    g = get_gpu(gpu)
    ref = _reference_gemm(m, np.full(m.size, 4096.0), np.full(m.size, 14336.0), g)
    _equal(gemm.gemm_time(m, 4096, 14336, g), ref, gpu)
    shapes = {"a": (6144, 4096), "b": (4096, 14336)}
    fast = gemm.gemm_time_shapes(m, shapes, g)
    for name, (n, k) in shapes.items():
        _equal(fast[name], _reference_gemm(m, np.full(m.size, float(n)), np.full(m.size, float(k)), g), name)


def _general_attention(new, kv, hq, hkv, d, gpu, kv_dtype, group, n_groups):
    """attention_time's general path, composed from its parts."""
    fc = attention.attention_constants(gpu, Constants.default())
    r = attention.attention_request_terms(new, kv, hq, hkv, d, gpu, None, kv_dtype, None, fc)
    sums = [np.bincount(group, weights=r[x], minlength=n_groups) for x in ("t_compute", "bytes", "units", "tiles")]
    nreq = np.bincount(group, minlength=n_groups).astype(float)
    pre = np.bincount(group, weights=(new > 1).astype(float), minlength=n_groups) > 0
    copy = attention.swap_copy(nreq, hq, hkv)  # FA2's GQA query-transposition copy per step (decode floor)
    # the split-KV combine per step: fewer (request, KV head) streams than SMs, mean KV past one tile
    mean_kv = np.divide(np.bincount(group, weights=kv, minlength=n_groups), nreq, out=np.zeros(n_groups),
                        where=nreq > 0)
    split = (nreq >= 1) & (nreq * hkv < gpu.sms) & (mean_kv > attention.split_tile(d, fc))
    # an fp8 cache's decode-only batch: the stream is also bounded by the SM-side fp8 read rate (attn_fp8_bpc)
    fp8_read = ~pre & (nreq > 0) & (kv_dtype == "fp8")
    # FlashAttention-2's unswapped (MHA) decode: no split, each (request, KV head) stream bounded by attn_stream_gbs
    unsw = ~pre & (nreq > 0) & bool(attention.unswapped(hq, hkv, fc))
    # FA2's per-split cost (attn_split_us x num_splits_heuristic at the step's mean KV); an unswapped decode: one split
    splits = np.where(unsw, 1.0, attention.split_count(nreq, hq, hkv, mean_kv, d, gpu, fc))
    out = attention.combine(sums[0], sums[1], sums[2], nreq, gpu, fc, False, tiles=sums[3], prefill=pre,
                            decode_floor_rel=attention._decode_floor_rel(copy, fc, split, unsw), fp8_read=fp8_read,
                            splits=splits, unsplit_streams=np.where(unsw, nreq * hkv, 0.0))
    out["requests"] = nreq
    return out


@pytest.mark.parametrize("gpu,kv_dtype,heads", [("h100-sxm", "bf16", (32, 8, 128)), ("h100-sxm", "fp8", (32, 8, 128)),
                                                ("a100-sxm", "bf16", (40, 40, 128)), ("l40s", "fp8", (14, 2, 64))])
def test_decode_attention_fast_path_equals_general(gpu, kv_dtype, heads):
    rng = np.random.default_rng(3)
    n_groups = 500
    group = np.sort(rng.integers(0, n_groups - 3, 20_000))  # the last groups stay empty
    kv = rng.integers(0, 131072, group.size).astype(float)
    new = np.ones(group.size)
    g = get_gpu(gpu)
    fast = attention.attention_time(new, kv, *heads, g, kv_dtype=kv_dtype, group=group, n_groups=n_groups)
    _equal(fast, _general_attention(new, kv, *heads, g, kv_dtype, group, n_groups), gpu)
    # small steps (few streams) with short and long KV: the split-KV combine's rule on both paths
    few = np.repeat(np.arange(200), 2)
    kv2 = np.where(np.arange(few.size) % 4 < 2, 60.0, 3000.0) + rng.integers(0, 50, few.size)
    fast2 = attention.attention_time(np.ones(few.size), kv2, *heads, g, kv_dtype=kv_dtype, group=few, n_groups=200)
    _equal(fast2, _general_attention(np.ones(few.size), kv2, *heads, g, kv_dtype, few, 200), gpu)


def _steps(seed: int, n_steps: int, prefill: bool):
    rng = np.random.default_rng(seed)
    reqs = rng.integers(1, 64, n_steps)
    sid = np.repeat(np.arange(n_steps), reqs)
    new = np.ones(sid.size, dtype=np.int64)
    kv = rng.integers(0, 2000, sid.size)  # within every model's context (phi-2: 2,048)
    if prefill:
        chunk = rng.random(sid.size) < 0.02
        new[chunk] = rng.integers(2, 4096, int(chunk.sum()))
    return sid, new, kv


@pytest.mark.parametrize("model,gpu,kw,prefill", [
    ("llama-3.1-8b", "h100-sxm", {}, False),
    ("llama-3.1-8b", "h100-sxm", {"tp": 2, "kv_dtype": "fp8"}, True),
    ("llama-3.1-8b", "h100-sxm", {"dtype": "fp8"}, False),
    ("qwen3-8b", "a100-sxm", {}, False),
    ("llama-3.1-70b", "b200", {"tp": 4}, True),
    ("phi-2", "l40s", {}, False),
])
def test_predict_steps_equals_predict_step_per_step(model, gpu, kw, prefill):
    n_steps = 400
    sid, new, kv = _steps(4, n_steps, prefill)
    many = predict_steps(model, gpu, sid, new, kv, n_steps, **kw)
    starts = np.concatenate([[0], np.cumsum(np.bincount(sid, minlength=n_steps))])
    for i in range(0, n_steps, 7):  # a spread of steps, each with its own one-step call
        rows = slice(starts[i], starts[i + 1])
        one = predict_step(model, gpu, requests=list(zip(new[rows].tolist(), kv[rows].tolist())), check_memory=False,
                           **kw)
        assert one.total_ms == many["total_ms"][i], (i, one.total_ms, many["total_ms"][i])
        for term, v in one.terms_ms.items():
            assert v == many["terms_ms"][term][i], (i, term)
        for term, v in one.hidden_ms.items():
            assert v == many["hidden_ms"][term][i], (i, term)
