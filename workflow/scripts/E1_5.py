"""E1.5: five-factor efficiency waterfall from collected Nsight Compute counters (thin)."""
from steptime.collect import report
from steptime.collect.ncu import parse_ncu_csv, reduce_factors, waterfall_figure

report(snakemake, snakemake.input.counters, lambda path, gpu: reduce_factors(parse_ncu_csv(path), gpu),
       waterfall_figure, id="E1.5", question=snakemake.params.question,
       script="workflow/scripts/E1_5.py")
