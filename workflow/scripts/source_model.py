import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import preflight, sources
from infbench.config.model import SourceOrigin

origin = SourceOrigin.model_validate(snakemake.params.origin)
# the F16 GGUF twin's converter, checked before the download (src/infbench/preflight.py)
preflight.gguf_converter(snakemake.params.convert_script, snakemake.wildcards.source, origin)
sources.materialize(
    snakemake.wildcards.source,
    origin,
    snakemake.output.checkpoint,
    snakemake.output.record,
    dtype=snakemake.params.dtype,
)
