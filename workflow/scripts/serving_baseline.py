import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.config.model import ServingCore
from infbench.serving import calibrate

record = calibrate.baseline(
    calibrate.CalibrationJob(
        serving=ServingCore.model_validate(snakemake.params.serving),
        engine=snakemake.wildcards.engine,
        sessions=snakemake.input.sessions,
        targets=snakemake.input.targets,
        model_dir=snakemake.input.model_dir,
        gguf=snakemake.input.gguf,
        runs_dir=snakemake.output.runs,
        record=snakemake.output.record,
        server_log=snakemake.log.server,
    )
)
print(record.model_dump_json(exclude={"provenance"}), file=sys.stderr)
