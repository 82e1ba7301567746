import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import ServingCore, UncertaintySettings
from infbench.plots import serving_value_share
from infbench.tables import serving

table = serving.write(  # the calibration baselines' rows first
    ServingCore.model_validate(snakemake.params.serving),
    UncertaintySettings.model_validate(snakemake.params.uncertainty),
    snakemake.input.targets,
    snakemake.input.sessions,
    snakemake.input.summaries,
    baselines=snakemake.input.baselines,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
)
baseline, systems = table[0], table[1 + len(snakemake.input.baselines) :]
serving_value_share.plot(
    serving_value_share.points(baseline, systems), snakemake.output.plot, snakemake.output.plot_data
)
