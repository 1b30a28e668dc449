"""E1.5: five-factor efficiency waterfall from collected Nsight Compute counters (thin)."""
from pathlib import Path

from steptime.collect.ncu import parse_ncu_csv, reduce_factors
from steptime.plotting import save, setup
from steptime.results import provenance, write_result

per_gpu = {}
for path in snakemake.input.counters:
    gpu = Path(path).parent.name
    per_gpu[gpu] = reduce_factors(parse_ncu_csv(path), gpu)
plt = setup()
fig, axes = plt.subplots(1, max(1, len(per_gpu)), figsize=(4 * max(1, len(per_gpu)), 3), squeeze=False)
for ax, (gpu, rows) in zip(axes[0], per_gpu.items()):
    big = [r for r in rows if r["m"] >= 1024] or rows
    names = ["f_clk", "eta_fill", "eta_active", "eta_duty", "product", "achieved"]
    vals = [sum(r[n] or 0 for r in big) / len(big) for n in names]
    ax.bar(names, vals, color="#1b6ca8")
    ax.set_title(f"{gpu} (m >= 1024, mean)")
    ax.set_ylabel("fraction of datasheet peak")
    ax.tick_params(axis="x", rotation=45)
save(fig, Path(snakemake.output.fig).with_suffix(""),
     caption="E1.5: each factor of eta_c read from Nsight Compute counters, and the achieved fraction of peak.")
write_result(snakemake.output.result, id="E1.5",
             question="Five-factor efficiency waterfall from Nsight Compute counters.",
             metrics={"per_gpu": per_gpu}, claims=[],
             provenance=provenance(snakemake.input.counters, config=dict(snakemake.config), rule="E1_5",
                                   script="workflow/scripts/E1_5.py"))
