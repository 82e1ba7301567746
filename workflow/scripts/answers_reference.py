import logging
import sys

sys.stderr = open(snakemake.log[0], "w")
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from infbench.compression.answers import reference, settings

reference.compute_reference(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    settings.from_config({"answers": snakemake.params.answers}),
    snakemake.output.reference,
    snakemake.output.item_records,
    threads=snakemake.threads,
)
