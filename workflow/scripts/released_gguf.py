import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines import gguf

gguf.released_package(
    snakemake.input.gguf,
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    f"released-{snakemake.wildcards.name}",
    snakemake.output[0],
)
