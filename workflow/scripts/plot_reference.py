import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.plots import reference_ppl

reference_ppl.plot(
    list(zip(snakemake.params.labels, snakemake.input.sampling, snakemake.input.reference)),
    snakemake.output[0],
)
