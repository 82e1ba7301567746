import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression import held_out, likelihood

params = dict(snakemake.params.items())
secret = held_out.job_secret(snakemake.config["operator_secret"], params.pop("secret"))

likelihood.score_reference(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.continuations,
    snakemake.output.scores,
    snakemake.output.summary,
    threads=snakemake.threads,
    secret=secret,
    **params,
)
