import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench import atomic
from infbench.compression.baselines import gguf

record = gguf.quantized_package(
    snakemake.input.gguf,
    snakemake.input.checkpoint,
    snakemake.wildcards.source,
    snakemake.wildcards.qtype,
    snakemake.output.package,
    threads=snakemake.threads,
    imatrix_file=snakemake.input.get("imatrix"),
)
atomic.write_json(snakemake.output.record, record.model_dump(mode="json"))
