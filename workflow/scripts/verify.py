import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression import held_out, verification

verification.verdict_for_pipeline(
    snakemake.input[0],
    snakemake.params.task,
    snakemake.output[0],
    held_out.job_secret(snakemake.config["operator_secret"], snakemake.params.secret),
)
