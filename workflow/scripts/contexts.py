import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression import contexts

contexts.build(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.record,
    snakemake.output.contexts,
    snakemake.output.manifest,
    corpus=snakemake.params.corpus,
    contexts_per_set=snakemake.params.contexts_per_set,
    context_tokens=snakemake.params.context_tokens,
    continuation_tokens=snakemake.params.continuation_tokens,
    seed=snakemake.params.seed,
)
