"""Measured cells shared by the Part-2 experiments (E2.1 transfer, E2.2 ranking, E2.5 ledger).

Tidy measured tables (steptime_lab.data) -> one row per scored cell, for three datasets:

* ``vidur_step``: Vidur's per-layer non-attention step (sum of the profiled medians of
  Vidur's nine per-layer operators at one num_tokens), per model x TP;
* ``aic_gemm``: AIConfigurator's bf16 GEMM table (m, n, k);
* ``aic_attention``: AIConfigurator's decode (generation) and prefill (context) attention
  tables (bf16 KV cache, head_dim 128, no sliding window).

Also the cell identifiers the calibration records use and the decode/LLM-shaped subsets.
"""

from __future__ import annotations

import numpy as np

from steptime_lab import data
from steptime_lab.regimes import llm_shaped

DATASETS = ("vidur_step", "aic_gemm", "aic_attention")
DECODE_MAX_TOKENS = 256  # a cell is decode-sized when its new tokens (GEMM m, num_tokens) <= this
VIDUR_GPUS = ("a100-sxm", "h100-sxm", "a40")  # the GPUs Vidur profiled

# Vidur's nine per-layer operators: the non-attention per-layer step is their sum.
GEMM_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
            "mlp_down_proj": "down_proj"}
LIGHT_OPS = {"input_layernorm": "rmsnorm", "post_attention_layernorm": "rmsnorm", "attn_rope": "rope",
             "mlp_act": "act", "add": "add"}
STEP_OPS = tuple(GEMM_OPS) + tuple(LIGHT_OPS)


def _major_kernel(df, by):
    """Keep, per group in `by`, the kernel_source with the most rows (the table's main kernel)."""
    if "kernel_source" not in df.columns:
        return df
    counts = df.groupby(list(by) + ["kernel_source"]).size().rename("n").reset_index()
    counts = counts.sort_values(list(by) + ["n", "kernel_source"], ascending=[True] * len(by) + [False, True])
    keep = counts.drop_duplicates(list(by))[list(by) + ["kernel_source"]]
    return df.merge(keep, on=list(by) + ["kernel_source"], how="inner")


def gemm_cells(gemm):
    """bf16 rows of the AIC GEMM table, one kernel source per GPU, duplicates averaged."""
    d = gemm[gemm["dtype"].astype(str).isin(["bfloat16", "bf16"])]
    d = _major_kernel(d, ["gpu"])
    d = d.groupby(["gpu", "m", "n", "k"], as_index=False)["latency_ms"].mean()
    d["tokens"] = d["m"]
    return d.sort_values(["gpu", "m", "n", "k"]).reset_index(drop=True)


def _col(df, *names):
    for n in names:
        if n in df.columns:
            return df[n]
    raise KeyError(f"none of the columns {names} in attention table (have {list(df.columns)})")


def attention_cells(context, generation, head_dim: int = 128):
    """Decode + prefill attention cells (bf16 KV, head_dim 128, no window), Vidur features added.

    Decode (generation table): batch_size requests, KV length isl + step.
    Prefill (context table): batch_size requests of isl new tokens, empty KV cache; Vidur's
    aggregate features: kv_cache_size = 0, prefill_chunk_size_squared = batch x isl^2.
    """
    import pandas as pd

    out = []
    for phase, d in (("decode", generation), ("prefill", context)):
        d = d.copy()
        kvd = _col(d, "kv_cache_dtype", "kv_dtype").astype(str)
        win = _col(d, "window_size") if "window_size" in d.columns else 0
        d = d[(kvd.isin(["bfloat16", "bf16"])) & (_col(d, "head_dim") == head_dim) & (win == 0)]
        d = _major_kernel(d, ["gpu"])
        isl = _col(d, "isl").to_numpy(dtype=float)
        step = _col(d, "step").to_numpy(dtype=float) if "step" in d.columns else np.zeros(len(d))
        b = _col(d, "batch_size").to_numpy(dtype=float)
        f = pd.DataFrame({
            "gpu": d["gpu"].to_numpy(), "phase": phase, "batch_size": b,
            "num_heads": _col(d, "num_heads").to_numpy(dtype=float),
            "num_kv_heads": _col(d, "num_key_value_heads", "num_kv_heads").to_numpy(dtype=float),
            "head_dim": float(head_dim), "latency_ms": d["latency_ms"].to_numpy(dtype=float)})
        if phase == "decode":
            f["new_tokens"] = 1.0
            f["kv_len"] = isl + step
            f["kv_cache_size"] = f["kv_len"]
            f["prefill_chunk_size_squared"] = 0.0
            f["tokens"] = b
        else:
            f["new_tokens"] = isl
            f["kv_len"] = 0.0
            f["kv_cache_size"] = 0.0
            f["prefill_chunk_size_squared"] = b * isl ** 2
            f["tokens"] = b * isl
        out.append(f)
    d = pd.concat(out, ignore_index=True)
    keys = ["gpu", "phase", "batch_size", "new_tokens", "kv_len", "num_heads", "num_kv_heads"]
    rest = [c for c in d.columns if c not in keys + ["latency_ms"]]
    d = d.groupby(keys, as_index=False).agg({"latency_ms": "mean", **{c: "first" for c in rest}})
    return d.sort_values(keys).reset_index(drop=True)


def step_cells(mlp, tps=(1,)):
    """Vidur's per-layer non-attention step per (gpu, model, tp, num_tokens): the sum of the
    nine operators' profiled medians (wide: one column per operator, plus latency_ms)."""
    d = mlp[mlp["op"].isin(STEP_OPS) & mlp["tp"].isin(list(tps))]
    w = d.pivot_table(index=["gpu", "model", "tp", "num_tokens"], columns="op", values="latency_ms",
                      aggfunc="mean").reset_index()
    w.columns.name = None
    # every operator must be there except the post-attention norm, which a parallel-block
    # model (phi-2) does not have: its layer is the sum of the operators it runs
    for op in STEP_OPS:
        if op not in w.columns:
            w[op] = np.nan
    w = w.dropna(subset=[op for op in STEP_OPS if op != "post_attention_layernorm"])
    w["latency_ms"] = w[list(STEP_OPS)].sum(axis=1, min_count=1)
    w["tokens"] = w["num_tokens"]
    return w.sort_values(["gpu", "model", "tp", "num_tokens"]).reset_index(drop=True)


def models_on_all(cells, gpus):
    """Models present (with at least one cell) on every GPU in `gpus`."""
    sets = [set(cells.loc[cells["gpu"] == g, "model"]) for g in gpus]
    return sorted(set.intersection(*sets)) if sets else []


CELL_KEYS = {
    "vidur_step": ["model", "tp", "num_tokens"],
    "aic_gemm": ["m", "n", "k"],
    "aic_attention": ["phase", "batch_size", "new_tokens", "kv_len", "num_heads", "num_kv_heads"],
}


def model_tp_groups(cells) -> dict:
    """{(model, tp): row positions} of a step-cell frame, in first-seen order (plain Python:
    a scheduler's one-cell call should not pay for a pandas groupby)."""
    groups: dict = {}
    for i, key in enumerate(zip(cells["model"].tolist(), cells["tp"].tolist())):
        groups.setdefault(key, []).append(i)
    return {key: np.asarray(rows, dtype=np.int64) for key, rows in groups.items()}


def cell_ids(dataset: str, cells, gpu: str) -> list:
    """Cell identifiers in the shapes calibration records use: (gpu, kind, *shape)."""
    if dataset not in ID_COLUMNS:
        raise ValueError(f"unknown dataset {dataset!r} (known: {', '.join(ID_COLUMNS)})")
    # Python scalars once per column, not a numpy scalar per cell
    col = {c: (cells[c].tolist() if hasattr(cells[c], "tolist") else list(cells[c])) for c in ID_COLUMNS[dataset]}
    if dataset == "aic_gemm":
        return [(gpu, "gemm", int(m), int(n), int(k)) for m, n, k in zip(col["m"], col["n"], col["k"])]
    if dataset == "aic_attention":
        # as steptime_lab.experiments.attention: (gpu, 'attention', phase, b, s, c, H, Hkv, d, kv dtype),
        # c = KV already cached (kv_len - 1 for a decode, 0 for a prefill)
        return [(gpu, "attention", p, int(b), int(s), int(kv - 1 if p == "decode" else kv), int(h), int(hk),
                 int(d), "bf16") for p, b, s, kv, h, hk, d in
                zip(col["phase"], col["batch_size"], col["new_tokens"], col["kv_len"], col["num_heads"],
                    col["num_kv_heads"], col["head_dim"])]
    return [(gpu, "vidur_step", str(m), int(tp), int(t)) for m, tp, t in
            zip(col["model"], col["tp"], col["num_tokens"])]


# the columns a cell id is built from: CELL_KEYS, and for attention also the head size (the id records it)
ID_COLUMNS = {**CELL_KEYS, "aic_attention": CELL_KEYS["aic_attention"] + ["head_dim"]}


def llm_mask(dataset: str, cells):
    """LLM-shaped GEMM cells (n, k >= 1024, m <= 16384: the GEMM experiments' `llm` subset);
    None for the other datasets (all their cells are LLM-shaped)."""
    if dataset != "aic_gemm":
        return None

    return llm_shaped(*(cells[c].to_numpy() for c in ("m", "n", "k")))


def load_cells(dataset: str, tps=(1,), tables: dict | None = None):
    """The scored cells of one dataset, from the tidy tables: `tables` maps a tidy table name
    (gemm, attention_context, attention_generation, vidur_mlp) to its frame or parquet path
    (the pipeline passes its declared inputs); without it, steptime_lab.data loads them from raw/."""
    import pandas as pd

    def table(name, load):
        if tables is None:
            return load()
        t = tables[name]
        return t if isinstance(t, pd.DataFrame) else pd.read_parquet(t)

    if dataset == "aic_gemm":
        return gemm_cells(table("gemm", data.load_aic_gemm))
    if dataset == "aic_attention":
        return attention_cells(table("attention_context", lambda: data.load_aic_attention(kind="context")),
                               table("attention_generation", lambda: data.load_aic_attention(kind="generation")))
    if dataset == "vidur_step":
        c = step_cells(table("vidur_mlp", data.load_vidur_mlp), tps)
        return c[c["model"].isin(models_on_all(c, VIDUR_GPUS))].reset_index(drop=True)
    raise ValueError(f"unknown dataset {dataset!r} (known: {', '.join(DATASETS)})")


def step_tps(fast: bool, full_grid: bool):
    """TP degrees of the Vidur step dataset: TP 1 in fast mode, 1/2/4/8 otherwise."""
    return (1,) if fast and not full_grid else (1, 2, 4, 8)
