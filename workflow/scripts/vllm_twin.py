import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.baselines.package import vllm_twin

vllm_twin(snakemake.input.package, snakemake.output[0])
