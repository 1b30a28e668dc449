# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # The predictor, term by term
#
# One model (Llama-3.1-8B) on one GPU (H100 SXM): every term of the step equation across the
# batch size and the KV length, and where each constant it uses comes from. Needs only the
# library (no data, no GPU). The paired `.ipynb` is generated from this file by jupytext.

# %%
import numpy as np
import pandas as pd

import steptime
from steptime.calibration import Constants
from steptime.plotting import subplots
from steptime.step import TERMS, predict_steps

MODEL, GPU = "llama-3.1-8b", "h100-sxm"
r = steptime.predict_step(MODEL, GPU, decode=[(32, 1024)], prefill=[(1, 2048)])
print(f"one mixed step: {r.total_ms:.2f} ms")
pd.Series(r.terms_ms).sort_values(ascending=False).head(10)

# %% [markdown]
# ## Every term against the batch (decode, KV 1024) and against the KV length (32 decodes)
# `predict_steps` is the vectorised core: one row per request, `step_id` saying which step it is in.

# %%
def sweep(batches, kv):
    sid = np.concatenate([np.full(b, i) for i, b in enumerate(batches)])
    kvs = np.concatenate([np.full(b, k) for b, k in zip(batches, kv)])
    out = predict_steps(MODEL, GPU, sid, np.ones_like(sid), kvs, len(batches))
    return pd.DataFrame({t: out["terms_ms"][t] for t in TERMS})


batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
by_batch = sweep(batches, [1024] * len(batches))
kv_lens = [128, 512, 1024, 4096, 16384, 65536]
by_kv = sweep([32] * len(kv_lens), kv_lens)
fig, axes = subplots(1, 2, figsize=(10, 3.5))
for ax, df, x, label in ((axes[0], by_batch, batches, "decode requests (KV 1024)"),
                         (axes[1], by_kv, kv_lens, "KV length (32 decodes)")):
    keep = [t for t in TERMS if df[t].max() > 0]
    ax.stackplot(x, [df[t] for t in keep], labels=keep)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(label)
    ax.set_ylabel("time per step (ms)")
axes[1].legend(fontsize=6, ncol=2, loc="upper left")
by_batch.assign(batch=batches).set_index("batch").round(3)

# %% [markdown]
# ## Where each constant comes from
# Every constant is DERIVED, DATASHEET, MEASURED, FITTED or ASSUMED, with its source; the
# rows below are the ones that apply to this GPU (its own, its family's, the global ones).

# %%
rows = pd.DataFrame(Constants.default().table())
mine = rows[rows["scope"].isin([f"gpu.{GPU}", "family.hopper", "global"])]
mine[["scope", "name", "provenance", "value", "source"]].head(40)
