import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import operator_secret
from infbench.compression import contexts
from infbench.config.model import CorpusSpec

contexts.build(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.record,
    snakemake.output.contexts,
    snakemake.output.manifest,
    set_name=snakemake.wildcards.set,
    corpus=CorpusSpec.model_validate(snakemake.params.corpus),
    contexts_per_set=snakemake.params.contexts_per_set,
    context_tokens=snakemake.params.context_tokens,
    continuation_tokens=snakemake.params.continuation_tokens,
    seed=snakemake.params.seed,
    secret=operator_secret.for_job(snakemake.config["operator_secret"], snakemake.params.secret),
    search_contexts=snakemake.input.drawn_before[0] if snakemake.input.drawn_before else None,
)
