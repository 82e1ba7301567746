import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.tables import reference

reference.write(
    snakemake.input.records,
    snakemake.input.sampling,
    snakemake.input.reference,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
    config=snakemake.params.config,
)
