import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret

operator_secret.write_release(
    operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    list(snakemake.input.records),
    snakemake.output[0],
)
