"""Walkthrough: every term's share of one model's step on one GPU across batch sizes and KV lengths."""
import logging
from os.path import splitext

from steptime_lab.experiments.step import plot_walkthrough
from steptime.calibration import DEFAULTS_FILE, Constants

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
constants = Constants.load(DEFAULTS_FILE, snakemake.input.settled)  # this run's settled constants (declared inputs), passed down
plot_walkthrough(snakemake.params.model, snakemake.params.gpu, splitext(snakemake.output.fig)[0],
                 f"Walkthrough: predicted step of {snakemake.params.model} on {snakemake.params.gpu}, every term's "
                 "share of the step (decode batches at several KV lengths, and one prefill chunk).", constants=constants)
logging.info("walkthrough of %s on %s written to %s", snakemake.params.model, snakemake.params.gpu, snakemake.output.fig)
