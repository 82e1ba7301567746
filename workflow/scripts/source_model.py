import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import sources

sources.materialize(
    snakemake.wildcards.source,
    snakemake.params.origin,
    snakemake.output.checkpoint,
    snakemake.output.record,
    dtype=snakemake.params.dtype,
)
