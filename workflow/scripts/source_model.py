import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import sources
from infbench.config.model import SourceOrigin

origin = SourceOrigin.model_validate(snakemake.params.origin)
# the F16 GGUF twin's converter, checked before the download (src/infbench/sources.py); read from the config,
# not a param, so that a converter moved elsewhere does not rerun the download
converter = snakemake.config.get("llama_cpp", {}).get("convert_hf_to_gguf")
sources.gguf_converter(converter, snakemake.wildcards.source, origin)
sources.materialize(
    snakemake.wildcards.source,
    origin,
    snakemake.output.checkpoint,
    snakemake.output.record,
    dtype=snakemake.params.dtype,
)
