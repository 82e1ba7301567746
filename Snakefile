# infbench: CompressionBench and ServerBench evaluation, end to end.
# `snakemake --cores all` runs the embedded default (config/config.yaml);
# `--configfile FILE` runs another profile instead of it (e.g. config/paper/*.yaml).

if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/source.smk"
include: "workflow/rules/likelihood.smk"
include: "workflow/rules/answers.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/compression.smk"


if "serving" in config:

    include: "workflow/rules/serving.smk"


include: "workflow/rules/operator.smk"


rule all:
    input:
        "results/tables/reference.md",
        "results/tables/reference.csv",
        "results/plots/reference_ppl.png",
        expand("results/sources/{source}/f16.gguf", source=SOURCES),
        "results/tables/compression.md",
        expand("results/answers/{source}/reference.json", source=SOURCES),
        serving_targets(),
        "results/tables/runs/status.md",
        "results/operator/secret.json",
    default_target: True
