"""E1.10: sustained SM clock under GEMM load vs m, from collected clock sweeps (thin)."""
from pathlib import Path

from steptime.collect.clock import parse_clock_sweep, reduce_clock_sweep
from steptime.plotting import save, setup
from steptime.results import provenance, write_result

per_gpu = {}
for path in snakemake.input.sweeps:
    gpu = Path(path).parent.name
    per_gpu[gpu] = reduce_clock_sweep(parse_clock_sweep(path), gpu, seed=snakemake.config["seed"])
plt = setup()
fig, ax = plt.subplots(figsize=(5, 3.2))
for gpu, rows in per_gpu.items():
    ax.plot([r["m"] for r in rows], [r["f_clk"] for r in rows], marker="o", label=gpu)
ax.set_xscale("log", base=2)
ax.set_xlabel("m (tokens)")
ax.set_ylabel("f_clk = sustained / boost clock")
ax.legend()
save(fig, Path(snakemake.output.fig).with_suffix(""),
     caption="E1.10: median sustained SM clock under GEMM load against m, as a fraction of boost.")
write_result(snakemake.output.result, id="E1.10",
             question="Sustained SM clock under GEMM load versus m, per GPU.",
             metrics={"per_gpu": per_gpu}, claims=[],
             provenance=provenance(snakemake.input.sweeps, config=dict(snakemake.config), rule="E1_10",
                                   script="workflow/scripts/E1_10.py"))
