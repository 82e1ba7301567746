import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.plots import reference_ppl

reference_ppl.plot(
    reference_ppl.points(list(zip(snakemake.params.labels, snakemake.input.sampling, snakemake.input.reference))),
    snakemake.output.plot,
    snakemake.output.plot_data,
)
