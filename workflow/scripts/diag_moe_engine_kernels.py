"""Diagnosis (issue 20 / 19 item 5; no rule, nothing shipped): are E3.4's too-slow TensorRT-LLM and SGLang token times
the fused-MoE kernel term? The MoE law (steptime.terms.moe.routed_experts_time, E3.1) is fitted on vLLM's tables only.

Reads AIConfigurator's fused-MoE tables straight from the unpacked aiconfigurator-core 0.12.0 wheel (TensorRT-LLM
1.3.0rc20, SGLang 0.5.14, vLLM 0.24.0: the versions query_versions.yaml names current) at E3.4's MoE shapes
(DeepSeek-V3 7168/2048 256 top-8, gpt-oss-120b 2880/2880 128 top-4, Qwen3-235B-A22B 4096/1536 128 top-8), balanced
routing, the fastest kernel source per cell, and prints:
  (a) engine / vLLM measured at the same cell; (b) engine measured / the shipped law (collector regime: resident,
  balanced), per GPU x dtype x token band; (c) a per-(engine, dtype) scalar factor fitted leave-one-GPU-out on the
  engine's table (median measured / law over the other GPUs of the architecture) and its held-out MAPE;
  (d) E3.4's rows of the engine (rebuilt as workflow/scripts/E3_4_moe_wallclock.py builds them, from this checkout's
  results/) predicted with the expert kernel's time x f: f = 0 (the term's share), the factor of (c), and the
  engine's own table at the row's layout (median over <= 1024 tokens: an oracle).

    python workflow/scripts/diag_moe_engine_kernels.py --aic /tmp/aic_whl/x/aiconfigurator_core [--engine trtllm]
"""
import argparse

import numpy as np
import pandas as pd

from steptime.io import read_yaml
from steptime.specs import get_gpu
from steptime.terms import moe as MT

GPUS = {"b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm"}
VER = {"trtllm": "1.3.0rc20", "vllm": "0.24.0", "sglang": "0.5.14"}
SHAPES = {(7168, 2048, 8, 256): "deepseek-v3", (2880, 2880, 4, 128): "gpt-oss-120b", (4096, 1536, 8, 128): "qwen3-235b"}
DT = {"bfloat16": "bf16", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "w4a16_mxfp4": "mxfp4", "fp8": "fp8"}
KEY = ["gpu", "dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "num_tokens"]
BANDS, LAB = [0, 16, 128, 1024, 8192, 1e9], ["1-16", "17-128", "129-1k", "1k-8k", ">8k"]


def load(aic, fw, dtypes=DT):
    out = []
    for a, g in GPUS.items():
        try:
            d = pd.read_parquet(f"{aic}/systems/data/{a}/moe/{fw}/{VER[fw]}/moe_perf.parquet")
        except FileNotFoundError:
            continue
        d = d[(d.distribution == "balanced") & d.moe_dtype.isin(list(dtypes))]
        d = d[[s in SHAPES for s in zip(d.hidden_size, d.inter_size, d.topk, d.num_experts)]].copy()
        d["gpu"], d["dtype"] = g, d.moe_dtype.map(dtypes)
        out.append(d)
    d = pd.concat(out)
    d["model"] = [SHAPES[s] for s in zip(d.hidden_size, d.inter_size, d.topk, d.num_experts)]
    return d.loc[d.groupby(KEY)["latency"].idxmin()].reset_index(drop=True)   # the fastest kernel source per cell


def law(d, mc, regime="resident"):
    pred = np.full(len(d), np.nan)
    for (g, dt), pos in d.groupby(["gpu", "dtype"]).indices.items():
        if mc.has_dtype(dt):
            s = d.iloc[pos]
            pred[pos] = 1e3 * MT.routed_experts_time(s.num_tokens.values, s.hidden_size.values, s.inter_size.values,
                                                     s.topk.values, s.num_experts.values, get_gpu(g), mc,
                                                     tp=s.moe_tp_size.values, ep=s.moe_ep_size.values, dtype=dt,
                                                     routing="balanced", regime=regime)["t"]
    return pred


def summ(x, col, by):
    g = x.groupby(by, observed=True)[col]
    return pd.DataFrame({"n": g.size(), "median": g.median(), "p10": g.quantile(.1), "p90": g.quantile(.9)}).round(3)


def e34_rows(engine=None):
    """E3.4's token rows as workflow/scripts/E3_4_moe_wallclock.py builds them (of one engine profile; None: all)."""
    from steptime_lab.experiments import moe_wallclock as X

    s = read_yaml("config/experiments.yaml")["experiments"]["E3.4"]["settings"]
    mcfg = "raw/aiconfigurator/model_configs"
    rows, _ = X.token_rows(pd.read_parquet("results/data/aic_silicon.parquet"),
                           pd.read_parquet("results/data/mlenergy_v3.parquet"),
                           prompt_tokens={(d, t): v for d, per in s["prompt_tokens"].items() for t, v in per.items()},
                           model_map={e["source"]: e["model"] for e in s["model_map"]}, dtype_map=s["dtype_map"],
                           configs={e["source"]: f"{mcfg}/{e['config']}" for e in s["model_configs"]},
                           checkpoints={e["source"]: f"{mcfg}/{e['config']}" for e in s["checkpoint_configs"]})
    return (rows if engine is None else rows[rows.engine == engine]), s


def e34_constants():
    """(Constants, MoEConstants) E3.4 prices with, read from this checkout's settled results/calibration files."""
    from steptime.calibration import DEFAULTS_FILE, Constants

    return (Constants.load(DEFAULTS_FILE, [f"results/calibration/{n}.yaml" for n in ("gemm", "step", "comm")]),
            MT.MoEConstants.from_doc(read_yaml("results/calibration/moe.yaml")["constants"]))


def e34_predict_patched(rows, s, module, name: str, wrap):
    """E3.4's predicted token rows with `module.<name>` replaced by wrap(original) for the call (restored after)."""
    from steptime_lab.experiments import moe_wallclock as X

    constants, mc = e34_constants()
    orig = getattr(module, name)
    setattr(module, name, wrap(orig))
    try:
        return X.predict_tokens(rows, mixed=s["mixed"], fitted="results/calibration/engine_constants.yaml",
                                constants=constants, moe_constants=mc, n_boot=10, seed=0)["pred"]
    finally:
        setattr(module, name, orig)


def e34_predict(rows, s, factor):
    """E3.4's prediction of `rows` with the expert kernel's time (not its token passes) x factor(gpu, dtype, h, tp, ep)."""
    def wrap(orig):
        def patched(tokens, hidden, inter, topk, num_experts, gpu, mc_, *, tp=1, ep=1, dtype="bf16", **k):
            r = orig(tokens, hidden, inter, topk, num_experts, gpu, mc_, tp=tp, ep=ep, dtype=dtype, **k)
            f = factor(gpu.key, MT.canonical_dtype(dtype), int(hidden), int(tp), int(ep))
            return r if f is None else {**r, "t": r["t_tokens"] + f * (r["t"] - r["t_tokens"])}
        return patched

    return e34_predict_patched(rows, s, MT, "routed_experts_time", wrap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="unpacked aiconfigurator_core dir")
    ap.add_argument("--engine", default="trtllm", choices=["trtllm", "sglang"])
    a = ap.parse_args()
    pd.set_option("display.width", 250), pd.set_option("display.max_rows", 500)
    mc = MT.MoEConstants.default()
    en, vl = load(a.aic, a.engine), load(a.aic, "vllm")
    m = en.merge(vl[KEY + ["latency"]], on=KEY, suffixes=("", "_vllm"))
    m["r"], m["band"] = m.latency / m.latency_vllm, pd.cut(m.num_tokens, BANDS, labels=LAB)
    print(f"(a) {a.engine} / vLLM measured, same cell"), print(summ(m, "r", ["gpu", "dtype", "band"]).to_string())
    en["law"] = law(en, mc)
    en["r"], en["band"] = en.latency / en.law, pd.cut(en.num_tokens, BANDS, labels=LAB)
    en = en.dropna(subset=["r"])
    print(f"\n(b) {a.engine} measured / shipped law"), print(summ(en, "r", ["gpu", "dtype", "band"]).to_string())
    print(summ(en, "r", ["gpu", "dtype"]).to_string())
    arch = {g: get_gpu(g).architecture for g in en.gpu.unique()}
    en["arch"] = en.gpu.map(arch)
    logo = {}
    print(f"\n(c) a scalar factor per ({a.engine}, dtype), fitted on the other GPUs of the architecture")
    for (g, dt), te in en.groupby(["gpu", "dtype"]):
        tr = en[(en.gpu != g) & (en.arch == arch[g]) & (en.dtype == dt)]
        if len(tr):
            f = logo[(g, dt)] = float(tr.r.median())
            print(f"  {g:9s} {dt:10s} factor {f:.3f}: law MAPE on its {a.engine} cells "
                  f"{100 * np.mean(np.abs(1 / te.r - 1)):.1f}% -> {100 * np.mean(np.abs(f / te.r - 1)):.1f}%")
    en["law_ev"] = law(en, mc, "evicted")
    t = en[en.num_tokens <= 1024]
    ora = (t.latency / t.law_ev).groupby([t.gpu, t.dtype, t.hidden_size, t.moe_tp_size, t.moe_ep_size]).median().to_dict()
    rows, s = e34_rows(a.engine)
    variants = {"shipped": lambda *k: None, "no_expert_kernel": lambda *k: 0.0,
                "logo_factor": lambda g, dt, h, tp, ep: logo.get((g, dt)),
                "own_table_at_layout": lambda g, dt, h, tp, ep: ora.get((g, dt, h, tp, ep))}
    p = None
    for name, f in variants.items():
        q = e34_predict(rows, s, f)
        p = q.rename(columns={"pred_ms": name}) if p is None else p.assign(**{name: q["pred_ms"].to_numpy()})
    print(f"\n(d) E3.4 {a.engine} rows: signed mean error per group, and the expert kernel's share of the prediction")
    for name in variants:
        p[f"err_{name}"] = p[name] / p.tpot_ms - 1
    p["moe_share"] = 1 - p.no_expert_kernel / p.shipped
    keys = ["gpu", "engine_version", "model", "dtype", "tp", "ep"]
    cols = ["moe_share"] + [f"err_{n}" for n in variants]
    print(p.groupby(keys)[cols].mean().round(3).assign(n=p.groupby(keys).size()).to_string())
    print(p.groupby("gpu")[[f"err_{n}" for n in variants]].agg(lambda e: e.abs().mean()).round(3)
          .rename(columns=lambda c: "MAPE_" + c[4:]).to_string())


if __name__ == "__main__":
    main()
