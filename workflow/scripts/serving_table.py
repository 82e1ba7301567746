import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.plots import serving as plot
from infbench.tables import serving

rows = serving.write(
    snakemake.params.serving,
    snakemake.params.uncertainty,
    snakemake.input.targets,
    snakemake.input.sessions,
    snakemake.input.summaries,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
)
plot.plot(rows, snakemake.output.plot)
