import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import ServingCore, UncertaintySettings
from infbench.tables import serving_verified

serving_verified.write(
    ServingCore.model_validate(snakemake.params.serving),
    UncertaintySettings.model_validate(snakemake.params.uncertainty),
    snakemake.input.targets,
    snakemake.input.sessions,
    snakemake.input.records,
    csv_path=snakemake.output.csv,
    md_path=snakemake.output.md,
    provenance_path=snakemake.output.provenance,
)
