import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret
from infbench.config.model import AnswerSettings, VerifySettings
from infbench.serving.verify import reference

record = reference.compute(
    snakemake.params.source,
    snakemake.input.model_dir,
    AnswerSettings.model_validate(snakemake.params.answers),
    VerifySettings.model_validate(snakemake.params.verification),
    tuple(snakemake.params.token_id_range),
    snakemake.output[0],
    operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    threads=snakemake.threads,
)
print(f"{len(record.eos_probes)} EOS probes, k_ref {record.k_ref}/{len(record.answers)}", file=sys.stderr)
