# One page of every result's claims with its verdict (met / missed), for readers.
#
# Shipping the settled constants (no rule writes into src/): after the final rebuild, run once
#   steptime calibration ship results/calibration/gemm.yaml results/calibration/step.yaml \
#       results/calibration/comm.yaml results/calibration/engine_constants.yaml \
#       results/calibration/greybox.npz
# It writes the three settled files, in that order, into src/steptime/calibration/defaults.yaml
# (what Constants.default() and `steptime predict` read) and copies R2.3's fitted engine constants
# to src/steptime/calibration/engine_constants.yaml (specs.engines.FITTED_FILE, what
# `steptime predict --engine vllm` lays over the profile on the GPUs that hold readings), and copies
# the grey box's per-term corrections (rule settle_greybox_corrections) to
# src/steptime/calibration/greybox.npz (what only `steptime predict --explain` reads). Pipeline
# scripts never read either shipped copy: each builds Constants.load(DEFAULTS_FILE, settled) from its
# declared settled files (no engine fits unless one is named) and passes it down, so a rebuild after
# shipping computes the same numbers (the
# library hash in each result's provenance changes, so the next `snakemake` reruns the rules).


# One page listing every result's claims with its verdict (met / missed), for readers.
rule summary:
    input:
        results=lambda wc: experiment_results(),
        code=code_of("summary"),
    output:
        "results/SUMMARY.md",
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    conda:
        CONDA_ENV
    message:
        "Summarising every result's claims"
    script:
        "../scripts/summary.py"
