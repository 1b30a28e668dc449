# steptime: every experiment from raw telemetry to results/<ID>.json and figures/.
#   snakemake -j8 results/E2_1.json     one experiment
#   snakemake -j8                        every result whose data is present (rule all)
#   steptime status                      what is built, what awaits telemetry
# Rule priorities (`priority:`) put the main job's critical path first: tidy tables -> GEMM settle ->
# E1.24 -> step settle -> R2.3/E2.11 -> E2.11b, and the grey-box/RF fits -> E2.1, with the settles
# those wait on (E1.11 and E1.3 too, which the GEMM settle waits on: Snakemake does not pass a priority on to a
# job's inputs), and E1.13 -> R2.1 (the longest chain after the GEMM settle). Without them a 2-core `snakemake -j2 --forceall` left one core idle for minutes
# at its end (the longest jobs started last, one at a time). Among the jobs left for the end, the longest start first
# (priorities 3-10: E2.13, E2.2, E3.4, E1.1, E2.9, E1.23, E1.26), so the two cores finish together. The RF fits and the planner take two threads
# only where the run has more than two cores (common.smk two_threads_if_room): on 2 cores a 2-thread job waited
# for both cores at once and ran last. Priorities and thread counts change the order only, never a number.
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
include: "workflow/rules/moe_wallclock.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/design.smk"
include: "workflow/rules/telemetry.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/serve.smk"
include: "workflow/rules/peers.smk"
include: "workflow/rules/summary.smk"


# Every wildcard matches only a name the registry knows (wildcards reach file names, logs and the
# collectors' shell: commands, so a target such as `x$(touch PWNED).csv` must match no rule); a rule
# may narrow one further (the collectors: config/collect.yaml's GPUs). Set after the includes so the
# names are defined; it applies to every rule above.
wildcard_constraints:
    gpu=one_of(SPEC_GPUS),
    model=one_of(SPEC_MODELS),
    table=one_of(TABLES),
    dataset=one_of(RF_DATASETS),
    plan=one_of(["duty", "l2"]),
    name=one_of(Path(p).stem for p in NOTEBOOKS),


check_wildcards_constrained(workflow.rules, workflow.wildcard_constraints)
check_registered_raw(workflow.rules)


rule all:
    input:
        lambda wc: all_targets() + DOC_TARGETS,
    default_target: True
