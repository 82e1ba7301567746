import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.tables import compression

compression.write(
    snakemake.input.records,
    snakemake.input.sources,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
    plot_path=snakemake.output.plot,
    config=snakemake.params.config,
    labels=dict(snakemake.params.labels),
)
