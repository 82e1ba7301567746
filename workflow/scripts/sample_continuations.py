import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression import likelihood

likelihood.sample_set(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.contexts,
    snakemake.wildcards.set,
    snakemake.output.continuations,
    snakemake.output.summary,
    threads=snakemake.threads,
    **{k: v for k, v in snakemake.params.items() if k != "code"},  # code: a rerun trigger only
)
