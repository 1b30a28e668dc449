"""Figure: which measured data covers which GPU and operator family (rows and shape ranges)."""
import logging

import numpy as np
import pandas as pd

from steptime import plotting
from steptime.specs import gpu_keys

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
inp = snakemake.input


def rng(s, fmt="{:,.0f}"):
    return f"{fmt.format(s.min())}–{fmt.format(s.max())}"


def human_bytes(x):
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= f:
            return f"{x / f:.3g} {unit}"
    return f"{x:.0f} B"


# family -> (table, shape description of one GPU's rows)
FAMILIES = {
    "GEMM bf16\n(AIC)": (inp.gemm, lambda d: f"m {rng(d.m)}\n{d[['n', 'k']].drop_duplicates().shape[0]} (n,k)"),
    "prefill attn\n(AIC)": (inp.attention_context, lambda d: f"isl {rng(d.isl)}\nbatch {rng(d.batch_size)}"),
    "decode attn\n(AIC)": (inp.attention_generation, lambda d: f"kv {rng(d.kv_len)}\nbatch {rng(d.batch_size)}"),
    "scale_matrix\n(AIC)": (inp.scale_matrix, lambda d: f"m·k {rng(d.m * d.k, '{:.0e}')}"),
    "all-reduce\n(AIC)": (inp.allreduce, lambda d: f"{human_bytes(d.message_bytes.min())}–"
                                                  f"{human_bytes(d.message_bytes.max())}\n"
                                                  f"{'/'.join(map(str, sorted(d.num_gpus.unique())))} GPUs"),
    "layer ops\n(Vidur)": (inp.vidur_mlp, lambda d: f"tokens {rng(d.num_tokens)}\n{d.model.nunique()} models"),
    "host/step\n(Vidur)": (inp.vidur_cpu_overheads, lambda d: f"batch {rng(d.batch_size)}\n{d.model.nunique()} models"),
    "GEMM fp8\n(AIC)": (inp.gemm_fp8, lambda d: f"m {rng(d.m)}\n{d[['n', 'k']].drop_duplicates().shape[0]} (n,k)"),
    "engine steps\n(AIC FPM)": (inp.fpm_steps, lambda d: f"TP {'/'.join(map(str, sorted(d.tp.unique())))}\n"
                                                        f"{d.model.nunique()} model(s)"),
    "serving runs\n(LLMServingSim)": (inp.servingsim_requests, lambda d: f"{d.run.nunique()} run(s)\n"
                                                                       f"{d.model.nunique()} model(s)"),
    "ITL at batch\n(ML.ENERGY)": (lambda: pd.concat([pd.read_parquet(inp.mlenergy_v2), pd.read_parquet(inp.mlenergy_v3)],
                                                     ignore_index=True),
                                   lambda d: f"{d.model.nunique()} models\n{d.moe.sum()} MoE rows"),
    "TTFT/TPOT\n(AIC silicon)": (inp.aic_silicon, lambda d: f"{d.model.nunique()} models\n{d.moe.sum()} MoE rows"),
}

tables = {fam: src() if callable(src) else pd.read_parquet(src) for fam, (src, _) in FAMILIES.items()}
present = sorted({g for t in tables.values() for g in t["gpu"].unique()}, key=gpu_keys().index)
counts = np.full((len(present), len(FAMILIES)), np.nan)
labels = [["" for _ in FAMILIES] for _ in present]
for j, (fam, (_, describe)) in enumerate(FAMILIES.items()):
    t = tables[fam]
    for i, g in enumerate(present):
        d = t[t["gpu"] == g]
        if len(d):
            counts[i, j] = len(d)
            labels[i][j] = f"{len(d):,} rows\n{describe(d)}"
            logging.info("%-14s %-22s %8d rows", g, fam.replace("\n", " "), len(d))

plt = plotting.setup()
fig, ax = plt.subplots(figsize=(1.55 * len(FAMILIES) + 1.2, 0.62 * len(present) + 1.2))
masked = np.ma.masked_invalid(np.log10(counts))
cmap = plt.get_cmap("Blues").copy()
cmap.set_bad("#eeeeee")
im = ax.imshow(masked, cmap=cmap, vmin=1.5, vmax=5.5, aspect="auto")
for i in range(len(present)):
    for j in range(len(FAMILIES)):
        v = counts[i, j]
        text = labels[i][j] if labels[i][j] else "no data"
        dark = not np.isnan(v) and np.log10(v) > 4.3
        ax.text(j, i, text, ha="center", va="center", fontsize=5.8, color="white" if dark else "#222222")
ax.set_xticks(range(len(FAMILIES)), list(FAMILIES), fontsize=7.5)
ax.set_yticks(range(len(present)), present, fontsize=8)
ax.tick_params(length=0)
ax.grid(False)
ax.xaxis.tick_top()
cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01)
cb.set_label("rows (log10)")
ax.set_title("Measured data in raw/ after ingest: rows and shape range per GPU and operator family or "
             "wall-clock set", pad=28)
caption = ("Coverage of the measured tables vendored in raw/ (AIConfigurator 0.12.0 vLLM tables; Vidur profiles; "
           "the wall-clock sets: AIConfigurator forward-pass metrics, LLMServingSim's vLLM runs, ML.ENERGY v2/v3, "
           "AIConfigurator silicon TTFT/TPOT) "
           "after ingest into results/data/: tidy row count per GPU and operator family, with the shape range "
           "swept (m for GEMMs, isl/kv length and batch for attention, message size and GPU count for "
           "all-reduce, token count for Vidur's layer operators; TP degrees, runs, models and MoE rows for the wall-clock "
           "sets, whose MoE rows steptime does not predict yet). Grey: no data for that GPU.")
plotting.save(fig, snakemake.output.png.removesuffix(".png"), caption=caption)
