import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import atomic
from infbench.compression.baselines import gptq
from infbench.config.model import CorpusSpec, GptqVariant
from infbench.resources import check_visible_gpus

# compression.gptq.device: cuda asks for a GPU; without one GPTQModel would quantize on the CPU instead.
if snakemake.resources.gpu:
    check_visible_gpus(snakemake.resources.gpu, "compression.gptq.device")

result = gptq.variant_package(
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    snakemake.output.package,
    variant=GptqVariant.model_validate(snakemake.params.variant),
    corpus=CorpusSpec.model_validate(snakemake.params.corpus),
    contexts_parquet=snakemake.input.contexts,
    **snakemake.params.gptq,
)
atomic.write_json(snakemake.output.record, result)
