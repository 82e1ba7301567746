import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import sources
from infbench.config.model import SourceOrigin

sources.materialize(
    snakemake.wildcards.source,
    SourceOrigin.model_validate(snakemake.params.origin),
    snakemake.output.checkpoint,
    snakemake.output.record,
    dtype=snakemake.params.dtype,
)
