import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines.package import starter

starter(
    Path(snakemake.input.code[0]).parent,
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    snakemake.output[0],
)
