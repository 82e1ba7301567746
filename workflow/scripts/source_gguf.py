import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import gguf_twin
from infbench.sources import read_record

gguf_twin.build_twin(
    read_record(snakemake.input.record).origin_gguf,
    snakemake.input.checkpoint,
    snakemake.output[0],
    snakemake.params.convert_script,
)
