# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Audit one claim end to end
#
# A reviewer points at a number. Here: claim E1.4:2, the held-out MAPE of the whole host time
# per step on A100 (E1.4:1 is the host floor fitted there). We follow E1.4 from the result file
# back to the raw bytes (through the settled GEMM constants and the results they were settled from,
# as `steptime audit` does), check that nothing changed since it was built, and recompute every
# claim from the tidy table and the library.

# %%
import json

from steptime_lab.audit import audit
from steptime_lab.data.manifest import find_root

root = find_root()
(a,) = audit(root, "E1.4")
print(f"{a.id}: state {a.state}; rule {a.rule} <- script {a.script}; steptime {a.steptime_version}")
for c in a.claims:
    print(f"  {c.id} holds:{c.holds} check:{c.check} value={c.value} :: {c.claim[:90]}")
pointed = next(c for c in a.claims if c.id == "E1.4:2")  # the number the reviewer points at
assert "held-out MAPE" in pointed.claim and pointed.claim.startswith("a100-sxm"), pointed.claim
print(f"the number: {pointed.id} = {pointed.value} ({pointed.claim})")

# %% [markdown]
# ## The chain: result -> settled files and other results -> tidy tables -> raw files
#
# `steptime audit E1.4 --verbose` follows the result's recorded inputs down to the raw bytes (a settled
# constants file leads to the results it was settled from, a tidy table to the raw files its manifest tables
# list), checks each recorded sha256 against the file now and each raw file against raw/MANIFEST.yaml, and
# compares what it reached with what the registry declares. The same library report, printed here:

# %%
from steptime_lab.audit import report  # noqa: E402

print(report([a], verbose=True))
routes = sorted({" -> ".join(rw["via"][:-1]) for rw in a.chain if len(rw["via"]) > 1})
print(f"\n{len(routes)} routes from {a.result} to raw files:")
for route in routes:
    print("  ", route)
assert not a.chain_breaks, a.chain_breaks  # no recorded input changed or missing between the result and raw/
assert all(rw["sha256_now"] == rw["sha256_manifest"] for rw in a.chain if rw["sha256_manifest"]), "raw bytes moved"

# %% [markdown]
# ## Recompute the number from the tidy table and the library

# %%
from steptime_lab.experiments.host import floor as E  # noqa: E402
import pandas as pd  # noqa: E402

doc = json.loads((root / "results" / "E1_4.json").read_text())
x = E.tidy(pd.read_parquet(root / "results" / "data" / "vidur_cpu_overheads.parquet"))
cfg = doc["provenance"]["config"]
r = E.run(x, seed=cfg["seed"], n_boot=cfg["n_boot"])  # the params the rule ran with
again = E.document(r, x)
for old, new in zip(doc["claims"], again["claims"]):
    same = json.dumps(old["value"], sort_keys=True) == json.dumps(new["value"], sort_keys=True, default=float)
    print(("same " if same else "DIFF ") + str(new["value"])[:60], "::", new["claim"][:70])
