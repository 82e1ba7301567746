import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines import imatrix
from infbench.config.model import CorpusSpec, ImatrixSettings
from infbench.resources import check_visible_gpus

# likelihood.device: cuda asks for the source's GPUs; without them the statistics would come from the CPU.
if snakemake.resources.gpu:
    check_visible_gpus(snakemake.resources.gpu, "likelihood.device")

imatrix.build(
    snakemake.wildcards.source,
    snakemake.input.checkpoint,
    snakemake.input.gguf,
    snakemake.output.imatrix,
    snakemake.output.record,
    settings=ImatrixSettings.model_validate(snakemake.params.settings),
    likelihood_corpus=CorpusSpec.model_validate(snakemake.params.corpus),
    search_contexts=snakemake.input.contexts,
    device=snakemake.params.device,
    threads=snakemake.threads,
)
