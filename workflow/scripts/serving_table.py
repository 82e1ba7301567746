import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import ServingCore, UncertaintySettings
from infbench.plots import serving_value_share
from infbench.tables import serving

baseline, *systems = serving.write(  # the calibration baseline's row first
    ServingCore.model_validate(snakemake.params.serving),
    UncertaintySettings.model_validate(snakemake.params.uncertainty),
    snakemake.input.targets,
    snakemake.input.sessions,
    snakemake.input.summaries,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
)
serving_value_share.plot(
    serving_value_share.points(baseline, systems), snakemake.output.plot, snakemake.output.plot_data
)
