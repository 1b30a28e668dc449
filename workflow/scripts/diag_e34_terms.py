"""Diagnosis (issue 20, E3.4; no rule, nothing shipped): which term of the predicted MoE token time carries E3.4's
silicon / ML.ENERGY token-time misses, and which rows carry each group's error mass.

Rebuilds E3.4's token rows and predictions from this checkout's results/ (diag_moe_engine_kernels.e34_rows /
e34_constants, as workflow/scripts/E3_4_moe_wallclock.py builds them) and prints, per (dataset, GPU, engine) group:
  (a) MAPE, signed mean, and each term group's share of the prediction: 1 - pred(term group set to 0) / pred
      (a knock-out through steptime.step.predict_steps' term breakdown; every other term as shipped);
  (b) per term group, the single scale of that term alone that would minimise the group's MAPE (a probe of where the
      error could sit, FITTED ON THE SCORED ROWS: never a constant to adopt);
  (c) the five (model, dtype, tp, ep, engine release) cells holding the most absolute error, with their share;
  (d) the b200 TensorRT-LLM DeepSeek rows measured at the same labels under two patch releases (tpot ratio);
  (e) the rows whose Little's-law occupancy is under OCCUPANCY_FLOOR, repriced at that in-flight count (a reading
      probe: the count is read from the row's own TPOT, so it is not an input E3.4 may price with);
  (f) the shipped fused-MoE law against vLLM 0.24.0's own fp8_block rows at E3.4's served non-DeepSeek shapes
      (measured / law, fastest source per cell, <= 512 tokens), per GPU, shape and routing.

    PYTHONPATH=src:workflow/scripts python workflow/scripts/diag_e34_terms.py [--out /tmp/e34_terms.parquet]
"""
import argparse

import numpy as np
import pandas as pd

import steptime_lab.experiments.wallclock.steps as S
from diag_moe_engine_kernels import e34_constants, e34_predict_patched, e34_rows
from steptime_lab.experiments import moe_wallclock as X

GROUPS = {  # term groups knocked out together (steptime.moe_step.TERMS)
    "experts": ("moe_experts",), "permute": ("moe_permute_combine",), "attention": ("attn_decode", "attn_prefill"),
    "attn_gemms": ("qkv_proj", "o_proj", "mla_absorb", "mla_kv_up"),
    "other_gemms": ("shared_experts", "dense_mlp", "router", "lm_head"), "comm": ("moe_a2a", "allreduce"),
    "light": ("rmsnorm", "add", "rope", "act", "kv_write", "emb"), "host": ("dispatch_floor", "host", "sampling")}
GROUP_KEYS = ["dataset", "gpu", "engine"]
CELL_KEYS = ["model", "dtype", "tp", "ep", "engine_version"]
SCALES = np.exp(np.linspace(np.log(0.2), np.log(3.0), 141))


def predict(rows, s, drop=()):
    """E3.4's predicted token rows with the terms in `drop` set to zero in every step."""
    def wrap(orig):
        def patched(*a, **k):
            r = orig(*a, **k)
            r["terms_ms"] = {t: (np.zeros_like(v) if t in drop else v) for t, v in r["terms_ms"].items()}
            return r
        return patched

    return e34_predict_patched(rows, s, S, "predict_steps", wrap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the rows with their term shares here (parquet)")
    a = ap.parse_args()
    pd.set_option("display.width", 250), pd.set_option("display.max_rows", 500)
    rows, s = e34_rows()
    p = predict(rows, s)
    for g, terms in GROUPS.items():
        p[g] = 1 - predict(rows, s, terms)["pred_ms"].to_numpy() / p["pred_ms"].to_numpy()
    p["err"] = p["pred_ms"] / p["tpot_ms"] - 1
    p["ape"] = p["err"].abs()
    if a.out:
        p.to_parquet(a.out)
    by = p.groupby(GROUP_KEYS)
    print("(a) per group: rows, MAPE, signed mean, each term group's mean share of the prediction")
    print(by.agg(rows=("err", "size"), mape=("ape", "mean"), signed=("err", "mean")).join(by[list(GROUPS)].mean())
          .round(3).to_string())
    print("\n(b) the MAPE if one term group alone were scaled by k (k on a 0.2-3 grid; a probe fitted on the rows scored)")
    out = {}
    for key, d in by:
        out[key] = {g: min((float(np.mean(np.abs(d.pred_ms * (1 + (k - 1) * d[g]) / d.tpot_ms - 1))), round(k, 2))
                           for k in SCALES) for g in GROUPS}
    print(pd.DataFrame({k: {g: f"{m:.3f}@{k_:.2f}" for g, (m, k_) in v.items()} for k, v in out.items()}).T.to_string())
    print("\n(c) per group, the cells holding the most absolute error (share of the group's sum of APE)")
    for key, d in by:
        c = d.groupby(CELL_KEYS, dropna=False).agg(rows=("err", "size"), signed=("err", "mean"), mass=("ape", "sum"))
        c["share"] = c["mass"] / d["ape"].sum()
        print(key, f"MAPE {d.ape.mean():.3f}")
        print(c.sort_values("mass", ascending=False).head(5).round(3).to_string())
    print("\n(d) b200 TensorRT-LLM DeepSeek: measured TPOT at the same labels, 1.2.0rc6.post2 / 1.2.0rc6.post3")
    d = p[(p.gpu == "b200") & (p.engine == "trtllm") & (p.model == "deepseek-v3")]
    w = d.pivot_table(index=["dtype", "tp", "ep", "batch", "prompt_tokens", "output_tokens"], columns="engine_version",
                      values="tpot_ms", aggfunc="median")
    if {"1.2.0rc6.post2", "1.2.0rc6.post3"} <= set(w.columns):
        r = (w["1.2.0rc6.post2"] / w["1.2.0rc6.post3"]).dropna()
        print(r.round(2).to_string()), print(r.describe().round(3).to_string())
    print(f"\n(e) rows under the occupancy floor {X.OCCUPANCY_FLOOR}, repriced at their Little's-law in-flight count")
    low = p[(p.in_flight_implied / p.batch) < X.OCCUPANCY_FLOOR]
    if len(low):
        q = predict(low[list(rows.columns)].assign(batch=low.in_flight_implied), s)
        print(low[["gpu", "engine", "tp", "prompt_tokens", "output_tokens", "batch", "in_flight_implied", "tpot_ms",
                   "kv_read_bound_ms", "pred_ms"]].assign(pred_at_in_flight=q.pred_ms.to_numpy(),
                                                          host_share=low.host).round(3).to_string())
    print("\n(f) vLLM 0.24.0's fp8_block rows / the shipped law at the served non-DeepSeek shapes (tokens <= 512)")
    print(law_vs_table().round(2).to_string())


SERVED_FP8_BLOCK = {  # (hidden, inter, topk, experts, moe_tp, moe_ep): E3.4's fp8_block layouts of these models
    "minimax-m2.5 tp4": (3072, 1536, 8, 256, 4, 1), "minimax-m2.5 tp8": (3072, 1536, 8, 256, 8, 1),
    "qwen3-235b tp2": (4096, 1536, 8, 128, 2, 1), "qwen3-235b tp4": (4096, 1536, 8, 128, 4, 1),
    "qwen3-235b ep2": (4096, 1536, 8, 128, 1, 2)}


def law_vs_table(gpus=(("h200-sxm", "h200_sxm"), ("h100-sxm", "h100_sxm"), ("b200", "b200_sxm"))):
    """(f): measured / law per (GPU, shape, routing) over the token counts 1-512 (median, min, max)."""
    from steptime.specs import get_gpu
    from steptime.terms import moe as MT

    _, mc = e34_constants()
    out = []
    for gk, folder in gpus:
        d = pd.read_parquet(f"raw/aiconfigurator/{folder}/moe/vllm/0.24.0/moe_perf.parquet")
        d = d[(d.moe_dtype == "fp8_block") & (d.num_tokens <= 512)]
        for name, (h, i, k, e, mtp, mep) in SERVED_FP8_BLOCK.items():
            for dist in ("balanced", "power_law_1.01"):
                x = d[(d.hidden_size == h) & (d.inter_size == i) & (d.topk == k) & (d.num_experts == e)
                      & (d.moe_tp_size == mtp) & (d.moe_ep_size == mep) & (d.distribution == dist)]
                if not len(x):
                    continue
                x = x.loc[x.groupby("num_tokens").latency.idxmin()]
                t = 1e3 * MT.routed_experts_time(x.num_tokens.to_numpy(float), h, i, k, e, get_gpu(gk), mc, tp=mtp,
                                                 ep=mep, dtype="fp8_block", routing=dist, regime="resident")["t"]
                r = x.latency.to_numpy() / t
                out.append({"gpu": gk, "shape": name, "routing": dist, "source": x.kernel_source.mode()[0][:24],
                            "median": np.median(r), "min": r.min(), "max": r.max()})
    return pd.DataFrame(out)


if __name__ == "__main__":
    main()
