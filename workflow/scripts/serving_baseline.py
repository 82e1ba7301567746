import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.config.model import ServingCore
from infbench.serving import calibrate

record = calibrate.baseline(
    ServingCore.model_validate(snakemake.params.serving),
    snakemake.wildcards.engine,
    snakemake.input.sessions,
    snakemake.input.targets,
    snakemake.input.model_dir,
    snakemake.input.gguf,
    snakemake.output.runs,
    snakemake.output.record,
    snakemake.log.server,
)
print(record.model_dump_json(exclude={"provenance"}), file=sys.stderr)
