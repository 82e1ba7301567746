import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import ServingCore
from infbench.serving import coverage

coverage.scan(
    snakemake.input.sessions,
    ServingCore.model_validate(snakemake.params.serving),
    snakemake.output.csv,
    snakemake.output.json,
)
