"""Datasheet rooflines and steptime's per-cell predictions and ratios target / home.

The spec-scaled transfer multiplies a home profile by `spec_ratio` (datasheet roofline
target / home); the steptime-scaled one by `steptime_ratio`. Shared by E2.1 (transfer),
E2.2 (ranking) and E2.5 (the ledger's prediction speed).
"""

from __future__ import annotations

import numpy as np

from steptime_lab.experiments.cells import GEMM_OPS, LIGHT_OPS, STEP_OPS, model_tp_groups
from steptime.ops import predict_ops
from steptime.specs import get_gpu, get_model
from steptime.step import layer_shapes, vidur_layer_ops
from steptime.terms import light
from steptime.terms.attention import attention_cells

def roofline_s(flops, nbytes, gpu):
    """Branch-aware datasheet roofline: max(flops / P_bf16, bytes / BW), seconds per cell."""
    g = get_gpu(gpu)
    return np.maximum(np.asarray(flops, dtype=float) / g.peak_flops, np.asarray(nbytes, dtype=float) / g.mem_bw)


def gemm_work(m, n, k):
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    return 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)


def attention_work(cells):
    """FLOPs and bytes of an attention cell (bf16): causal prefill, KV-read decode."""
    b = cells["batch_size"].to_numpy(dtype=float)
    s = cells["new_tokens"].to_numpy(dtype=float)
    kv = cells["kv_len"].to_numpy(dtype=float)
    h = cells["num_heads"].to_numpy(dtype=float)
    hk = cells["num_kv_heads"].to_numpy(dtype=float)
    d = cells["head_dim"].to_numpy(dtype=float)
    # scores + values: 2 matmuls x 2 flops; causal: each new token sees kv + its prefix
    ctx = kv + (s + 1.0) / 2.0
    flops = b * 4.0 * h * d * s * ctx
    nbytes = b * 2.0 * (2.0 * h * d * s + 2.0 * hk * d * (kv + s))
    return flops, nbytes


def step_op_work(cells):
    """{op: (flops, bytes)} for Vidur's per-layer operators of each step cell."""
    out = {op: (np.zeros(len(cells)), np.zeros(len(cells))) for op in STEP_OPS}
    for (model, tp), idx in model_tp_groups(cells).items():
        mdl = get_model(model)
        T = cells["num_tokens"].to_numpy(dtype=float)[idx]
        shapes = layer_shapes(mdl, int(tp))
        for op, term in GEMM_OPS.items():
            n, k = shapes[term]
            f, b = gemm_work(T, n, k)
            out[op][0][idx], out[op][1][idx] = f, b
        for op, kern in LIGHT_OPS.items():
            out[op][1][idx] = light.light_bytes(kern, T, mdl, int(tp))
    return out


def spec_ratio(dataset: str, cells, home_gpu: str, target_gpu: str):
    """Per-cell roofline ratio target / home (per operator for the step: {op: ratio})."""
    if dataset == "aic_gemm":
        f, b = gemm_work(cells["m"], cells["n"], cells["k"])
        return roofline_s(f, b, target_gpu) / roofline_s(f, b, home_gpu)
    if dataset == "aic_attention":
        f, b = attention_work(cells)
        return roofline_s(f, b, target_gpu) / roofline_s(f, b, home_gpu)
    work = step_op_work(cells)
    return {op: roofline_s(f, b, target_gpu) / roofline_s(f, b, home_gpu) for op, (f, b) in work.items()}


def predict_steptime(dataset: str, cells, gpu: str, constants=None):
    """steptime's prediction (ms) for each cell on `gpu`, from the datasheet and defaults.yaml."""
    if dataset == "aic_gemm":
        return np.asarray(predict_ops("gemm", gpu, constants=constants, m=cells["m"].to_numpy(),
                                      n=cells["n"].to_numpy(), k=cells["k"].to_numpy())["t_ms"], dtype=float)
    if dataset == "aic_attention":
        # the attention term's operator-table cell function (as E1.24 scores it): a cell is
        # `batch` alike requests of `new_tokens` over `kv_len - new_tokens` cached tokens;
        # AIConfigurator replays its kernels in CUDA graphs, so the L2 is warm

        cached = cells["kv_len"].to_numpy(dtype=float) - np.where(cells["phase"] == "decode", 1.0, 0.0)
        r = attention_cells(cells["batch_size"].to_numpy(dtype=float), cells["new_tokens"].to_numpy(dtype=float),
                            cached, cells["num_heads"].to_numpy(dtype=float),
                            cells["num_kv_heads"].to_numpy(dtype=float), cells["head_dim"].to_numpy(dtype=float),
                            get_gpu(gpu), constants, kv_dtype="bf16", warm_l2=True)
        return np.asarray(r["t"], dtype=float) * 1e3
    return predict_layer_ops(cells, gpu, constants)


def predict_layer_ops(cells, gpu, constants=None, per_op: bool = False):
    """Per-layer non-attention step (Vidur's nine operators, each once), ms per cell; with
    `per_op` a dict {op: ms} (an operator a model's block lacks is 0)."""
    ops = {op: np.zeros(len(cells)) for op in STEP_OPS}
    T = cells["num_tokens"].to_numpy(dtype=float)
    for (model, tp), idx in model_tp_groups(cells).items():
        r = vidur_layer_ops(model, gpu, T[idx], tp=int(tp), constants=constants)
        for op in STEP_OPS:
            if op in r:
                ops[op][idx] = np.asarray(r[op], dtype=float)
    return ops if per_op else sum(ops.values())


def steptime_ratio(dataset: str, cells, home_gpu: str, target_gpu: str, home_constants=None,
                   target_constants=None, target_pred=None):
    """steptime's per-cell ratio target / home (per operator for the step: {op: ratio}; an
    operator steptime does not time on the home GPU keeps ratio 1). `target_pred`, the
    target's prediction already made (per operator for the step), is reused when given."""
    if dataset == "vidur_step":
        a = target_pred if target_pred is not None else predict_layer_ops(cells, target_gpu, target_constants,
                                                                           per_op=True)
        h = predict_layer_ops(cells, home_gpu, home_constants, per_op=True)
        return {op: np.divide(a[op], h[op], out=np.ones(len(cells)), where=h[op] > 0) for op in STEP_OPS}
    a = target_pred if target_pred is not None else predict_steptime(dataset, cells, target_gpu, target_constants)
    return a / predict_steptime(dataset, cells, home_gpu, home_constants)
