# steptime: every experiment from raw telemetry to results/<ID>.json and figures/.
#   snakemake -j8 results/E2_1.json     one experiment
#   snakemake -j8                        every result whose data is present (rule all)
#   steptime status                      what is built, what awaits telemetry
from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/specs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/wallclock_data.smk"
include: "workflow/rules/gemm.smk"
include: "workflow/rules/step.smk"
include: "workflow/rules/utility.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/serve.smk"
include: "workflow/rules/comm.smk"
include: "workflow/rules/wallclock.smk"
include: "workflow/rules/replay.smk"


rule all:
    input:
        all_targets(),
    default_target: True
