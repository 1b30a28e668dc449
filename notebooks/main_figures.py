# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # The main figures, rebuilt from `results/`
#
# Reads only the committed result files (no raw data, no refit): every accuracy record the
# results carry (family, GPU, predictor, subset, MAPE), drawn as an error atlas, and every claim
# with a target as met / missed per experiment.

# %%
import json
from pathlib import Path

import pandas as pd
import seaborn as sns

from steptime_lab.data.manifest import find_root
from steptime.plotting import PALETTE, subplots

root = find_root()
docs = {p.stem: json.loads(p.read_text()) for p in sorted((root / "results").glob("[EL]*.json"))
        if "timing" not in p.stem and "grid" not in p.stem}
records = pd.DataFrame([dict(r, result=k) for k, d in docs.items() for r in (d.get("metrics") or {}).get("records", [])
                        if isinstance(r, dict) and {"gpu", "predictor", "mape"} <= set(r)])
print(f"{len(docs)} results, {len(records)} accuracy records")

# %% [markdown]
# ## Error atlas: steptime's held-out MAPE per family and GPU
# One number per cell, on the cells the experiment's claims score: LLM-shaped cells for GEMM (E1.23) and
# attention (E1.24), decode-sized cells for the per-layer step (E1.1, its per-model and per-TP rows pooled),
# every cell for the light kernels (E1.1c) and the host time (E1.4). Never the best of a family's subsets,
# models or kernels.

# %%
SCORED = {"gemm": "llm", "attention_decode": "llm", "attention_prefill": "llm", "step": "decode", "light": "all",
          "host": "all"}
ours = records[(records["predictor"] == "steptime") & records["mape"].notna()
               & (records["subset"] == records["family"].map(SCORED))]
ours = ours[ours[[c for c in ("model", "scope", "tp") if c in ours]].isna().all(axis=1)]  # the pooled records
assert not ours.duplicated(["family", "gpu"]).any(), "more than one pooled record for a (family, GPU)"
atlas = ours.set_index(["family", "gpu"])["mape"].unstack("gpu")
fig, ax = subplots(figsize=(9, 0.5 * len(atlas) + 1.5))
sns.heatmap(atlas * 100, annot=True, fmt=".1f", cmap="crest", cbar_kws={"label": "held-out MAPE (%)"}, ax=ax)
ax.set_xlabel("")
ax.set_ylabel("")
atlas.round(3)

# %% [markdown]
# ## Per GPU: steptime against the baselines on the same cells (GEMM, LLM-shaped cells)

# %%
gemm = records[(records["family"] == "gemm") & (records["subset"] == "llm")]
if len(gemm):
    g = sns.catplot(data=gemm, x="gpu", y="mape", hue="predictor", kind="bar", height=3.2, aspect=2.6,
                    palette={p: PALETTE.get(p, "0.5") for p in gemm["predictor"].unique()})
    g.set_axis_labels("", "MAPE (fraction)")
    g.tick_params(axis="x", rotation=45)

# %% [markdown]
# ## Every claim with a target: met or missed, per experiment

# %%
claims = pd.DataFrame([{"result": k, "met": c["met"]} for k, d in docs.items() for c in d.get("claims") or []
                       if c.get("met") is not None])
claims.groupby("result")["met"].agg(met="sum", total="count").assign(missed=lambda t: t.total - t.met)
