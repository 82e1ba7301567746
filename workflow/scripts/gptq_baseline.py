import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import atomic
from infbench.compression.baselines import gptq

settings = {k: v for k, v in snakemake.params.gptq.items() if k != "enabled"}
result = gptq.package(
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    float(snakemake.wildcards.limit),
    snakemake.output.package,
    corpus=snakemake.params.corpus,
    contexts_parquet=snakemake.input.contexts,
    **settings,
)
atomic.write_json(snakemake.output.record, result)
