import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret
from infbench.compression import likelihood

params = dict(snakemake.params.items())
secret = operator_secret.for_job(snakemake.config["operator_secret"], params.pop("secret"))
params.pop("code")  # a rerun trigger only

likelihood.sample_set(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.contexts,
    snakemake.wildcards.set,
    snakemake.output.continuations,
    snakemake.output.summary,
    threads=snakemake.threads,
    secret=secret,
    **params,
)
