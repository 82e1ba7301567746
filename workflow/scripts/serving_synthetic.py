import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.serving import synthetic

params = dict(snakemake.params.synthetic)
seed = params.pop("seed")
n = synthetic.generate(synthetic.SyntheticParams.model_validate(params), seed, snakemake.output[0])
print(f"{n} synthetic sessions (seed {seed})", file=sys.stderr)
