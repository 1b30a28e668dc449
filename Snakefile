# steptime: every experiment from raw telemetry to results/<ID>.json and figures/.
#   snakemake -j8 results/E2_1.json     one experiment
#   snakemake -j8                        every result whose data is present (rule all)
#   steptime status                      what is built, what awaits telemetry
from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/specs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/gemm.smk"
include: "workflow/rules/attention.smk"
include: "workflow/rules/light.smk"
include: "workflow/rules/host.smk"
include: "workflow/rules/step.smk"
include: "workflow/rules/literature.smk"
include: "workflow/rules/transfer.smk"
include: "workflow/rules/ranking.smk"
include: "workflow/rules/cost.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/comm.smk"
include: "workflow/rules/moe.smk"
include: "workflow/rules/wallclock.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/design.smk"
include: "workflow/rules/telemetry.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/serve.smk"
include: "workflow/rules/peers.smk"
include: "workflow/rules/summary.smk"


rule all:
    input:
        lambda wc: all_targets() + DOC_TARGETS,
    default_target: True
