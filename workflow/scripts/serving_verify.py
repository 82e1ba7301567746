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

record = verdict.run_job(
    snakemake.params.directory,
    ServingCore.model_validate(snakemake.params.serving),
    VerifySettings.model_validate(snakemake.params.verification),
    AnswerSettings.model_validate(snakemake.params.answers),
    snakemake.input.model_dir,
    snakemake.input.gguf,
    snakemake.input.reference,
    snakemake.input.sessions,
    snakemake.output.runs,
    snakemake.output.record,
    snakemake.log.server,
    sandbox=SandboxSettings.model_validate(snakemake.params.sandbox),
    secret=operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    threads=snakemake.threads,
)
print(
    f"{record.submission}: verified={record.verified} failed_check={record.failed_check} failure={record.failure}",
    file=sys.stderr,
)
