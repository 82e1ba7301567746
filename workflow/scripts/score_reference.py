import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret
from infbench.compression import likelihood

params = dict(snakemake.params.items())
secret = operator_secret.for_job(snakemake.config["operator_secret"], params.pop("secret"))
params.pop("code")  # a rerun trigger only

likelihood.score_reference(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.continuations,
    snakemake.output.scores,
    snakemake.output.summary,
    snakemake.output.top,
    threads=snakemake.threads,
    secret=secret,
    **params,
)
