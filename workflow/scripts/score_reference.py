import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression import likelihood

likelihood.score_reference(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.continuations,
    snakemake.output.scores,
    snakemake.output.summary,
    threads=snakemake.threads,
    **{k: v for k, v in snakemake.params.items() if k != "code"},  # code: a rerun trigger only
)
