import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.serving import coverage

coverage.scan(snakemake.input.sessions, snakemake.params.serving, snakemake.output.csv, snakemake.output.json)
