import sys

sys.stderr = open(snakemake.log[0], "w")

from pathlib import Path

from infbench.plots import accuracy_vs_bits
from infbench.sources import SourceRecord
from infbench.tables import compression

judged = compression.write(
    snakemake.input.records,
    snakemake.input.sources,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
    config=snakemake.params.config,
    labels=dict(snakemake.params.labels),
)
sources = [SourceRecord.model_validate_json(Path(p).read_text()) for p in snakemake.input.sources]
accuracy_vs_bits.plot(
    accuracy_vs_bits.points(judged, {s.name: s.n_params for s in sources}),
    snakemake.params.config["answers"]["rho"],
    snakemake.output.plot,
    snakemake.output.plot_data,
)
