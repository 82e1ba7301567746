import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret
from infbench.compression import records

records.judge_for_pipeline(
    snakemake.input[0],
    snakemake.params.task,
    snakemake.output[0],
    operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
)
