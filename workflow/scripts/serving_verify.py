import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench import operator_secret
from infbench.config.model import (
    AnswerSettings,
    SandboxSettings,
    ServingCore,
    VerifySettings,
)
from infbench.serving.verify import verdict
from infbench.serving.verify.verification import VerifyJob

job = VerifyJob(
    directory=snakemake.params.directory,
    serving=ServingCore.model_validate(snakemake.params.serving),
    verification=VerifySettings.model_validate(snakemake.params.verification),
    answers=AnswerSettings.model_validate(snakemake.params.answers),
    sandbox=SandboxSettings.model_validate(snakemake.params.sandbox),
    secret=operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    model_dir=snakemake.input.model_dir,
    gguf=snakemake.input.gguf,
    reference=snakemake.input.reference,
    sessions=snakemake.input.sessions,
    replays_dir=snakemake.output.runs,
    record=snakemake.output.record,
    server_log=snakemake.log.server,
)
record = verdict.run_job(job, threads=snakemake.threads)
print(
    f"{record.submission}: verified={record.verified} failed_check={record.failed_check} failure={record.failure}",
    file=sys.stderr,
)
