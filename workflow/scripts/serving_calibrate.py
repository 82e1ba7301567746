import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.config.model import ServingCore
from infbench.serving import calibrate

serving = ServingCore.model_validate(snakemake.params.serving)
record = calibrate.calibrate(
    calibrate.CalibrationJob(
        serving=serving,
        engine=serving.calibration.reference,
        sessions=snakemake.input.sessions,
        model_dir=snakemake.input.model_dir,
        gguf=snakemake.input.gguf,
        runs_dir=snakemake.output.runs,
        record=snakemake.output.targets,
        server_log=snakemake.log.server,
    )
)
print(record.model_dump_json(exclude={"provenance"}), file=sys.stderr)
