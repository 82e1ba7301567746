import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines.package import bf16

bf16(snakemake.input.checkpoint, snakemake.wildcards.source, snakemake.output[0])
