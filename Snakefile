# infbench: CompressionBench and ServerBench evaluation, end to end.
# `snakemake --cores all` runs the embedded default (config/config.yaml);
# `--configfile FILE` runs another profile instead of it (e.g. config/paper/*.yaml).

if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


# CFG, PLAN and LAYOUT: everything the rules read (the order of the rule files does not matter).
include: "workflow/rules/common.smk"
include: "workflow/rules/source.smk"
include: "workflow/rules/likelihood.smk"
include: "workflow/rules/answers.smk"
include: "workflow/rules/compression.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/operator.smk"


if SERVING is not None:

    include: "workflow/rules/serving.smk"
    include: "workflow/rules/serving_verify.smk"


rule all:
    default_target: True
    input:
        PLAN.targets,
