"""E1.10: sustained SM clock under GEMM load vs m, from collected clock sweeps (thin)."""
from steptime.collect import report
from steptime.collect.clock import clock_figure, parse_clock_sweep, reduce_clock_sweep

seed = snakemake.params.seed
report(snakemake, snakemake.input.sweeps,
       lambda path, gpu: reduce_clock_sweep(parse_clock_sweep(path), gpu, seed=seed), clock_figure,
       id="E1.10", question=snakemake.params.question,
       script="workflow/scripts/E1_10.py")
