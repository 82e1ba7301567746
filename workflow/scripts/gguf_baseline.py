import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines import gguf

gguf.quantized_package(
    snakemake.input.gguf,
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    snakemake.wildcards.qtype,
    snakemake.output[0],
    threads=snakemake.threads,
)
