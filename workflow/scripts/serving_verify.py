import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.compression.answers.settings import AnswerSettings
from infbench.serving.verify import verdict
from infbench import operator_secret

record = verdict.run_job(
    snakemake.params.directory,
    snakemake.params.serving,
    AnswerSettings.model_validate(snakemake.params.answers),
    snakemake.input.model_dir,
    snakemake.input.gguf,
    snakemake.input.reference,
    snakemake.input.sessions,
    snakemake.output.runs,
    snakemake.output.record,
    snakemake.log.server,
    sandbox=dict(snakemake.params.sandbox),
    secret=operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    threads=snakemake.threads,
)
print(f"{record.submission}: verified={record.verified} failing={record.failing_check} cause={record.cause}",
      file=sys.stderr)
